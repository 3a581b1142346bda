"""The run's process watcher: a driver SIGKILLed leaves no descendant behind (Ray's agents did, for minutes)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time

import psutil

DRIVER = textwrap.dedent("""
    import subprocess, sys, time
    from echo2_sdk.runtime.driver.reaper import start_reaper
    {start}
    # A child that starts a grandchild and exits, as Ray's raylet does with its agents: the grandchild is
    # re-parented to PID 1 once its parents are gone, where nothing else would ever end it.
    mid = subprocess.Popen([sys.executable, "-c",
        "import subprocess, sys, time; p = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(120)']); "
        "print(p.pid, flush=True); time.sleep(120)"], stdout=subprocess.PIPE, text=True)
    print(mid.stdout.readline().strip(), flush=True)
    time.sleep(120)
""")


def _run_driver(watched: bool) -> int:
    code = DRIVER.format(start="reaper = start_reaper()" if watched else "")
    driver = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    grandchild = int(driver.stdout.readline())
    time.sleep(1.5)  # the watcher records descendants twice a second
    os.kill(driver.pid, signal.SIGKILL)
    driver.wait()
    return grandchild


def _alive_after(pid: int, seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if not psutil.pid_exists(pid) or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE:
            return False
        time.sleep(0.1)
    return True


def test_a_sigkilled_drivers_descendants_end_with_it():
    grandchild = _run_driver(watched=True)
    assert not _alive_after(grandchild, 6.0), "the grandchild outlived its SIGKILLed driver"


def test_without_the_watcher_they_would_live_on():  # the test above can fail: this is what it guards against
    grandchild = _run_driver(watched=False)
    try:
        assert _alive_after(grandchild, 3.0)
    finally:
        for p in psutil.Process(grandchild).parents()[:1] + [psutil.Process(grandchild)]:
            if p.pid != 1 and p.pid != os.getpid():
                p.kill()
