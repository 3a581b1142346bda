"""Ends every process a run started when its driver ends, even if the driver is SIGKILLed.

Measured without it: SIGKILL of ``echo2 train`` leaves Ray's DashboardAgent and RuntimeEnvAgent alive
with parent PID 1 for minutes (Ray's GCS, raylet and workers exit within ~5 s on their own). Their
command lines are rewritten (``ray::DashboardAgent``) and name no session, so they cannot be found
afterwards: the reaper has to know them beforehand.

:func:`start_reaper` spawns a small watcher in its own session holding the read end of a pipe from the
driver. While the driver lives, the watcher records the driver's descendants that appeared after it
started (PID and start time, so a reused PID is never taken for one of them) twice a second. When the
pipe closes — the driver exited or was killed; the kernel closes it either way — it sends SIGTERM to
the recorded processes still running, then SIGKILL to those left after ``GRACE_S``. Only processes
started after the watcher are recorded, so a long-lived parent (a test runner, a notebook) keeps its
own children.
"""

from __future__ import annotations

import os
import select
import signal
import subprocess
import sys
import time

POLL_S = 0.5
GRACE_S = 2.0


class Reaper:
    """The driver's handle: :meth:`close` ends the watch (the recorded processes that remain are ended)."""

    def __init__(self, proc: subprocess.Popen) -> None:
        self.proc = proc

    def close(self, wait_s: float = 5.0) -> None:
        if self.proc.stdin is not None and not self.proc.stdin.closed:
            self.proc.stdin.close()
        try:
            self.proc.wait(wait_s)
        except subprocess.TimeoutExpired:
            pass


def start_reaper() -> Reaper | None:
    """Start the watcher for this process (None where psutil is missing: nothing is watched)."""
    try:
        import psutil  # noqa: F401  (Ray depends on it; checked here so the watcher cannot fail on import)
    except ImportError:
        return None
    # Its own session: a Ctrl-C to the terminal's process group must not end it before the run's processes.
    proc = subprocess.Popen([sys.executable, "-m", "echo2_sdk.runtime.driver.reaper", str(os.getpid())],
                            stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            start_new_session=True, close_fds=True)
    return Reaper(proc)


def _watch(driver_pid: int) -> None:
    import psutil

    me = os.getpid()
    started = time.time() - 1.0  # a process created in the same instant as this one is the run's too
    try:
        driver = psutil.Process(driver_pid)
    except psutil.NoSuchProcess:
        return
    seen: dict[int, float] = {}
    while True:
        try:
            for child in driver.children(recursive=True):
                if child.pid == me or child.pid in seen:
                    continue
                try:
                    created = child.create_time()
                except psutil.Error:
                    continue
                if created >= started:
                    seen[child.pid] = created
        except psutil.Error:  # the driver is gone: its pipe end is closed too, read below
            pass
        ready, _, _ = select.select([sys.stdin.buffer], [], [], POLL_S)
        if ready and not os.read(sys.stdin.fileno(), 4096):
            break
    _end(seen)


def _end(seen: dict[int, float]) -> None:
    import psutil

    def alive() -> list:
        out = []
        for pid, created in seen.items():
            try:
                p = psutil.Process(pid)
                if p.create_time() == created and p.status() != psutil.STATUS_ZOMBIE:
                    out.append(p)
            except psutil.Error:
                pass
        return out

    left = alive()
    for p in left:
        try:
            p.send_signal(signal.SIGTERM)
        except psutil.Error:
            pass
    deadline = time.time() + GRACE_S
    while left and time.time() < deadline:
        time.sleep(0.1)
        left = alive()
    for p in left:
        try:
            p.kill()
        except psutil.Error:
            pass


if __name__ == "__main__":
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the run's stop signal is not the watcher's
    _watch(int(sys.argv[1]))
