"""Chaos: a 2-worker run whose workers are SIGKILLed and SIGSTOPped on a schedule and whose driver is
SIGKILLed once and resumed finishes every step, within the staleness bound, with no process left over;
with the pool scheduler on, a SIGSTOPped worker is declared lost and the run goes on.

Runs ``benchmarks/chaos.py`` (``echo2 train`` in subprocesses; 2-4 min on two shared cores).
"""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
pytestmark = pytest.mark.slow


def _chaos():
    spec = importlib.util.spec_from_file_location("chaos_bench", ROOT / "benchmarks" / "chaos.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses resolve their annotations through it
    spec.loader.exec_module(module)
    return module


def test_a_run_survives_worker_kills_a_hung_worker_and_a_driver_kill(tmp_path):
    chaos = _chaos()
    # Capped workers: at least ~1 s a step, so the schedule (in seconds) falls inside the run
    # on a fast day too (uncapped, one fast day ran 20 steps in 5 s and the first kill never came).
    plan = chaos.ChaosPlan(workers=2, worker_tokens_per_s=200, steps=45, kill_every_s=6.0, max_kills=3, stop_at_s=3.0,
                           stop_for_s=25.0, driver_kill_step=20, checkpoint_every=10, stall_timeout_s=4.0,
                           warm_start_epochs=1, eval_examples=10, staleness=3, timeout_s=420.0)
    r = chaos.run(plan, tmp_path / "run", log=print)
    assert r.exit_codes[-1:] == [0], f"exit codes {r.exit_codes}; see {tmp_path / 'run.chaos.log'}"
    assert r.steps_completed == plan.steps and r.metrics_steps_contiguous
    assert r.driver_killed_at_step is not None and r.resumed_from_step is not None
    assert r.staleness_max is not None and r.staleness_max <= plan.staleness
    assert r.worker_kills >= 2 and r.worker_stops == 1
    # The stopped worker was noticed hung (a live actor, no progress) and restarted, as were the killed ones.
    assert r.outages_hung >= 1 and r.replace_s, "no worker came back after an outage"
    # Nothing of the killed driver's run outlives it for long, nor anything of the finished run.
    assert r.orphans_after_driver_kill["5s"] == [], r.orphans_after_driver_kill
    assert r.orphans_after_end == []
    # Every sample generated is trained, dropped, rejected, buffered, or counted lost in flight, per worker.
    assert r.accounting is not None and r.accounting["balanced"], r.accounting


def test_a_run_that_cannot_keep_any_worker_fails_with_one_line_and_a_summary(tmp_path):
    chaos = _chaos()
    plan = chaos.ChaosPlan(workers=1, steps=200, kill_every_s=3.0, max_kills=1, stop_at_s=None, driver_kill_step=None,
                           checkpoint_every=0, warm_start_epochs=1, eval_examples=5, timeout_s=300.0,
                           extra_sets=("rollout.worker_restarts=0",))
    r = chaos.run(plan, tmp_path / "run", log=print)
    assert r.exit_codes == [1] and r.worker_kills == 1
    assert r.failed_line is not None and "worker_restarts" in r.failed_line and r.tracebacks == 0
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary["failed"]["step"] == r.steps_completed < plan.steps
    assert summary["failed"]["checkpoint"] is not None  # what it trained is saved: --resume continues it
    assert r.orphans_after_end == []


def test_with_the_pool_scheduler_a_stopped_worker_leaves_the_pool_and_the_run_goes_on(tmp_path):
    chaos = _chaos()
    # The stop outlasts the run: the hang verdict waits max(stall_timeout_s, 5x the slowest request), which on a
    # loaded machine (a slow first request) can exceed a short stop, so a stop that ends would race the verdict.
    plan = chaos.ChaosPlan(workers=3, steps=40, kill_every_s=0.0, stop_at_s=2.0, stop_for_s=280.0, driver_kill_step=None,
                           checkpoint_every=0, stall_timeout_s=4.0, warm_start_epochs=1, eval_examples=5,
                           staleness=3, timeout_s=300.0, extra_sets=(
        # The priors make the initial plan rent one worker (μ_target 14/s < 20/s): it is always busy, so its stop
        # shows as missing progress (an idle worker held back by admission control has nothing to finish).
        "scheduler.enabled=true", "scheduler.learner_gpus=0",
        "rollout.workers=[{name: a, rollouts_per_s: 20, usd_per_hour: 0.1}, {name: b, rollouts_per_s: 20, "
        "usd_per_hour: 0.2}, {name: c, rollouts_per_s: 20, usd_per_hour: 0.3}]"))
    r = chaos.run(plan, tmp_path / "run", log=print)
    assert r.exit_codes == [0], f"exit codes {r.exit_codes}; see {tmp_path / 'run.chaos.log'}"
    assert r.worker_stops == 1 and r.steps_completed == plan.steps
    # Declared hung by the scheduler (a live actor that finishes nothing) and killed, not waited for: the run
    # ends long before the stopped worker would be continued.
    assert r.pool_left_hung == 1, "the stopped worker was never declared hung"
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert len(summary["pool"]["workers_lost"]) == 1
    assert r.staleness_max is not None and r.staleness_max <= plan.staleness
    assert r.accounting is not None and r.accounting["balanced"], r.accounting
    assert r.orphans_after_end == []
