"""Chaos run: rollout workers SIGKILLed and SIGSTOPped on a schedule, the driver SIGKILLed once and resumed.

    python benchmarks/chaos.py --json                      # 4 workers, one killed every 20 s, 120 steps
    python benchmarks/chaos.py --workers 2 --steps 30 --kill-every-s 8 --stop-at-s 4 --stop-for-s 12

Runs ``echo2 train`` on the CPU quickstart (scheduler off: the worker supervisor restarts dead and hung
workers). Every ``--kill-every-s`` seconds of training one rollout worker process (``ray::RolloutWorker``,
a descendant of the driver) gets SIGKILL; at ``--stop-at-s`` one gets SIGSTOP for ``--stop-for-s`` (SIGCONT
after, if it still exists: the supervisor kills a hung worker once it is silent past
``rollout.worker_stall_timeout_s``). Once a checkpoint exists and the run passed ``--driver-kill-step``
the driver gets SIGKILL; its processes are listed 1 and 5 s later (orphans), then ``--resume`` continues
the run under the same schedule. Reports: steps completed, staleness max, worker outages and the time
to replace a worker (from the drivers' own log lines), samples lost (the summary's accounting),
processes left over after the driver kill and after the end.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import psutil

ROOT = Path(__file__).resolve().parents[1]
WORKER_TITLE = "ray::RolloutWorker"


@dataclass(frozen=True)
class ChaosPlan:
    workers: int = 4
    """Rollout workers of the run."""
    worker_tokens_per_s: float | None = None
    """A simulated throughput cap on every worker (``max_tokens_per_s``): a floor under the step time, so a
    schedule in seconds lands inside the run on a fast machine too (None: uncapped)."""
    steps: int = 120
    """train.steps."""
    kill_every_s: float = 20.0
    """SIGKILL one rollout worker every this many seconds of training (0: never)."""
    max_kills: int | None = None
    """Stop killing workers after this many (None: for the whole run)."""
    stop_at_s: float | None = 30.0
    """SIGSTOP one rollout worker this many seconds into training (None: never)."""
    stop_for_s: float = 25.0
    """SIGCONT it after this long (if it still exists)."""
    driver_kill_step: int | None = 40
    """SIGKILL the driver once a checkpoint exists at or after this step, then resume (None: never)."""
    checkpoint_every: int = 20
    stall_timeout_s: float = 8.0
    """rollout.worker_stall_timeout_s."""
    warm_start_epochs: int = 5
    eval_examples: int = 20
    staleness: int = 3
    timeout_s: float = 600.0
    """Give up (and fail) after this long in all."""
    extra_sets: tuple[str, ...] = ()
    """More ``--set KEY=VALUE`` overrides for ``echo2 train`` (e.g. ``rollout.worker_stall_timeout_s=null``)."""


@dataclass
class ChaosResult:
    plan: ChaosPlan
    steps_completed: int | None = None
    exit_codes: list[int] = field(default_factory=list)
    staleness_max: int | None = None
    worker_kills: int = 0
    worker_stops: int = 0
    outages_died: int = 0
    outages_hung: int = 0
    replace_s: list[float] = field(default_factory=list)
    """Seconds from a worker noticed down to its new actor started with the latest snapshot (all drivers)."""
    replace_s_max: float | None = None
    replace_s_median: float | None = None
    hung_noticed_after_s: list[float] = field(default_factory=list)
    pool_left_hung: int = 0
    """With the pool scheduler: workers it declared hung and took out of the pool (``leave … hung``)."""
    driver_killed_at_step: int | None = None
    resumed_from_step: int | None = None
    orphans_after_driver_kill: dict[str, list[str]] = field(default_factory=dict)
    """Seconds after the driver's SIGKILL → processes of that run still alive."""
    orphans_after_end: list[str] = field(default_factory=list)
    samples_lost_in_flight: int | None = None
    lost_in_flight_by_cause: dict | None = None
    accounting: dict | None = None
    metrics_steps_contiguous: bool | None = None
    failed_line: str | None = None
    """The driver's one-line failure (``echo2 train: failed at step …``), if it failed."""
    tracebacks: int = 0
    """Python tracebacks the drivers printed (a handled fault prints none)."""
    wall_s: float = 0.0
    run_dir: str = ""


class Driver:
    """One ``echo2 train`` process and its log, read on a thread."""

    def __init__(self, args: list[str], log_path: Path) -> None:
        env = {**os.environ, "PYTHONUNBUFFERED": "1"}
        self.proc = subprocess.Popen([sys.executable, "-m", "echo2_sdk.runtime.cli", "train", *args], cwd=ROOT,
                                     stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
        self.lines: list[str] = []
        self._log = open(log_path, "a", encoding="utf-8")
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        for line in self.proc.stdout:
            self.lines.append(line.rstrip("\n"))
            self._log.write(line)
            self._log.flush()

    def descendants(self) -> dict[int, tuple[float, str]]:
        try:
            kids = psutil.Process(self.proc.pid).children(recursive=True)
        except psutil.Error:
            return {}
        out = {}
        for k in kids:
            try:
                out[k.pid] = (k.create_time(), " ".join(k.cmdline())[:80] or k.name())
            except psutil.Error:
                pass
        return out

    def workers(self) -> list[psutil.Process]:
        out = []
        for pid in self.descendants():
            try:
                p = psutil.Process(pid)
                cmdline = p.cmdline()  # once: a process exiting between two calls reads [] the second time
                if cmdline and cmdline[0].startswith(WORKER_TITLE) and p.status() != psutil.STATUS_STOPPED:
                    out.append(p)
            except psutil.Error:
                pass
        return sorted(out, key=lambda p: p.pid)


def still_alive(recorded: dict[int, tuple[float, str]]) -> list[str]:
    out = []
    for pid, (created, what) in recorded.items():
        try:
            p = psutil.Process(pid)
            if p.create_time() == created and p.status() != psutil.STATUS_ZOMBIE:
                out.append(f"{pid} {what}")
        except psutil.Error:
            pass
    return out


def last_step(run_dir: Path) -> int:
    path = run_dir / "metrics.jsonl"
    if not path.exists():
        return 0
    lines = [ln for ln in path.read_text().splitlines() if ln.strip()]
    try:
        return int(json.loads(lines[-1])["step"]) if lines else 0
    except (ValueError, KeyError):
        return 0


def train_args(plan: ChaosPlan, run_dir: Path) -> list[str]:
    sets = {
        "rollout.num_workers": plan.workers, "train.steps": plan.steps, "train.checkpoint_every": plan.checkpoint_every,
        "train.eval_max_examples": plan.eval_examples, "train.plots": "false", "runtime.staleness": plan.staleness,
        "model.warm_start.epochs": plan.warm_start_epochs, "rollout.worker_stall_timeout_s": plan.stall_timeout_s,
        "rollout.worker_restart_backoff_s": 0.5,
    }
    out = ["--config", str(ROOT / "examples" / "quickstart.yaml"), "--run-dir", str(run_dir)]
    for key, value in sets.items():
        out += ["--set", f"{key}={value}"]
    if plan.worker_tokens_per_s is not None:
        cap = f"{plan.worker_tokens_per_s:g}"
        specs = ", ".join(f"{{name: worker{i}, max_tokens_per_s: {cap}}}" for i in range(plan.workers))
        out += ["--set", f"rollout.workers=[{specs}]"]
    for extra in plan.extra_sets:
        out += ["--set", extra]
    return out


def run(plan: ChaosPlan, run_dir: Path, log=print) -> ChaosResult:
    result = ChaosResult(plan, run_dir=str(run_dir))
    t_begin = time.monotonic()
    deadline = t_begin + plan.timeout_s
    log_path = run_dir.parent / f"{run_dir.name}.chaos.log"
    driver = Driver(train_args(plan, run_dir), log_path)
    drivers = [driver]
    t_train: float | None = None  # wall time training started (first metrics row)
    next_kill = plan.kill_every_s
    stopped: tuple[psutil.Process, float] | None = None
    stop_done = plan.stop_at_s is None
    driver_killed = plan.driver_kill_step is None
    recorded: dict[int, tuple[float, str]] = {}
    victim, resumed_at = 0, 0
    while time.monotonic() < deadline:
        recorded.update(driver.descendants())
        code = driver.proc.poll()
        if code is not None:
            result.exit_codes.append(code)
            break
        step = last_step(run_dir)
        now = time.monotonic()
        if t_train is None and step > resumed_at:  # training (again): the schedule runs
            t_train = now
        if t_train is not None:
            elapsed = now - t_train
            workers = driver.workers()
            more = plan.max_kills is None or result.worker_kills < plan.max_kills
            if plan.kill_every_s and more and elapsed >= next_kill and workers:
                target = workers[victim % len(workers)]
                victim += 1
                try:
                    target.send_signal(signal.SIGKILL)
                    result.worker_kills += 1
                    log(f"chaos t={elapsed:.0f}s step {step}: SIGKILL worker pid {target.pid}")
                except psutil.Error:
                    pass
                next_kill += plan.kill_every_s
            if not stop_done and elapsed >= plan.stop_at_s and workers:
                target = min(workers, key=lambda p: p.create_time())  # the longest running: at work, not starting
                try:
                    target.send_signal(signal.SIGSTOP)
                    stopped, stop_done = (target, now), True
                    result.worker_stops += 1
                    log(f"chaos t={elapsed:.0f}s step {step}: SIGSTOP worker pid {target.pid} for {plan.stop_for_s:g} s")
                except psutil.Error:
                    pass
            if stopped is not None and now - stopped[1] >= plan.stop_for_s:
                try:
                    stopped[0].send_signal(signal.SIGCONT)
                    log(f"chaos t={elapsed:.0f}s step {step}: SIGCONT worker pid {stopped[0].pid}")
                except psutil.Error:  # the supervisor killed it as hung
                    log(f"chaos: worker pid {stopped[0].pid} is gone (killed as hung)")
                stopped = None
            checkpoints = sorted(run_dir.glob("checkpoints/step_*"))
            if not driver_killed and step >= plan.driver_kill_step and checkpoints:
                if stopped is not None:  # do not leave a stopped process behind for the kill to hide
                    try:
                        stopped[0].send_signal(signal.SIGCONT)
                    except psutil.Error:  # the supervisor already killed it as hung
                        pass
                    stopped = None
                recorded.update(driver.descendants())
                driver.proc.send_signal(signal.SIGKILL)
                t_kill = time.monotonic()
                driver.proc.wait()
                result.driver_killed_at_step, driver_killed = step, True
                log(f"chaos step {step}: SIGKILL driver pid {driver.proc.pid}")
                for at in (1, 5):
                    time.sleep(max(0.0, t_kill + at - time.monotonic()))
                    result.orphans_after_driver_kill[f"{at}s"] = still_alive(recorded)
                recorded = {}
                driver = Driver(["--resume", str(run_dir)], log_path)
                drivers.append(driver)
                t_train, resumed_at = None, step  # the schedule resumes with training
                next_kill = plan.kill_every_s
                continue
        time.sleep(0.2)
    else:
        driver.proc.kill()
        result.exit_codes.append(-9)
        log("chaos: timed out")
    if driver.proc.poll() is None:
        recorded.update(driver.descendants())
    time.sleep(5.0)
    result.orphans_after_end = still_alive(recorded)
    result.wall_s = round(time.monotonic() - t_begin, 1)
    _read_outcome(result, run_dir, drivers)
    return result


def _read_outcome(result: ChaosResult, run_dir: Path, drivers: list[Driver]) -> None:
    lines = [ln for d in drivers for ln in d.lines]
    result.replace_s = [float(m.group(1)) for ln in lines if (m := re.search(r"worker \S+ back after ([0-9.]+) s", ln))]
    result.hung_noticed_after_s = [float(m.group(1)) for ln in lines
                                   if (m := re.search(r"worker \S+ hung: no request finished for ([0-9.]+) s", ln))]
    result.outages_died = sum(1 for ln in lines if re.search(r"^worker \S+ died: its actor is gone", ln))
    result.outages_hung = len(result.hung_noticed_after_s)
    result.pool_left_hung = sum(1 for ln in lines if re.search(r"^pool t=\S+: leave \S+: hung: ", ln))
    if result.replace_s:
        xs = sorted(result.replace_s)
        result.replace_s_max, result.replace_s_median = xs[-1], xs[len(xs) // 2]
    result.tracebacks = sum(1 for ln in lines if ln.startswith("Traceback (most recent call last)"))
    result.failed_line = next((ln for ln in lines if ln.startswith("echo2 train: failed at step")), None)
    for ln in lines:
        m = re.search(r"resumed from .* at step (\d+)", ln)
        if m:
            result.resumed_from_step = int(m.group(1))
    summary_path = run_dir / "summary.json"
    if summary_path.exists():
        s = json.loads(summary_path.read_text())
        result.steps_completed = s.get("steps")
        result.staleness_max = s.get("staleness_max")
        result.samples_lost_in_flight = s.get("samples_lost_in_flight")
        result.accounting = s.get("accounting")
        if isinstance(result.accounting, dict):
            result.lost_in_flight_by_cause = result.accounting.get("lost_in_flight_by_cause")
    metrics = run_dir / "metrics.jsonl"
    if metrics.exists():
        steps = [json.loads(ln)["step"] for ln in metrics.read_text().splitlines() if ln.strip()]
        result.metrics_steps_contiguous = steps == list(range(1, len(steps) + 1))


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    d = ChaosPlan()
    p.add_argument("--workers", type=int, default=d.workers)
    p.add_argument("--steps", type=int, default=d.steps)
    p.add_argument("--worker-tokens-per-s", type=float, default=None, help="cap every worker's throughput")
    p.add_argument("--kill-every-s", type=float, default=d.kill_every_s)
    p.add_argument("--stop-at-s", type=float, default=d.stop_at_s, help="negative: no SIGSTOP")
    p.add_argument("--stop-for-s", type=float, default=d.stop_for_s)
    p.add_argument("--driver-kill-step", type=int, default=d.driver_kill_step, help="negative: no driver kill")
    p.add_argument("--checkpoint-every", type=int, default=d.checkpoint_every)
    p.add_argument("--stall-timeout-s", type=float, default=d.stall_timeout_s)
    p.add_argument("--warm-start-epochs", type=int, default=d.warm_start_epochs)
    p.add_argument("--timeout-s", type=float, default=d.timeout_s)
    p.add_argument("--set", dest="sets", action="append", default=[], metavar="KEY=VALUE",
                   help="more echo2 train overrides (repeatable)")
    p.add_argument("--run-dir", default=None, help="default: a fresh temporary folder")
    p.add_argument("--json", action="store_true", help="print the result as JSON")
    a = p.parse_args(argv)
    plan = ChaosPlan(workers=a.workers, worker_tokens_per_s=a.worker_tokens_per_s, steps=a.steps,
                     kill_every_s=a.kill_every_s,
                     stop_at_s=a.stop_at_s if a.stop_at_s >= 0 else None, stop_for_s=a.stop_for_s,
                     driver_kill_step=a.driver_kill_step if a.driver_kill_step >= 0 else None,
                     checkpoint_every=a.checkpoint_every, stall_timeout_s=a.stall_timeout_s,
                     warm_start_epochs=a.warm_start_epochs, timeout_s=a.timeout_s, extra_sets=tuple(a.sets))
    run_dir = Path(a.run_dir) if a.run_dir else Path(tempfile.mkdtemp(prefix="echo2-chaos-")) / "run"
    result = run(plan, run_dir, log=lambda m: print(m, file=sys.stderr, flush=True))
    out = asdict(result)
    if a.json:
        print(json.dumps(out, indent=1))
    else:
        for key in ("steps_completed", "exit_codes", "staleness_max", "worker_kills", "worker_stops", "outages_died",
                    "outages_hung", "replace_s_median", "replace_s_max", "driver_killed_at_step", "resumed_from_step",
                    "orphans_after_driver_kill", "orphans_after_end", "samples_lost_in_flight", "wall_s"):
            print(f"{key}: {out[key]}")
    ok = result.steps_completed == plan.steps and result.exit_codes[-1:] == [0]
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
