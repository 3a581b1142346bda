"""benchmarks/vs_trl.py: echo2 (async, sync) and TRL's GRPOTrainer from one warm start, reported side by side.

What is checked here is fast: the reach-time arithmetic and the refusals of bad input. The benchmark's own
smoke run (``python benchmarks/vs_trl.py --quick --out DIR``: a half-epoch warm start, then the three systems
for 4 tiny steps each, ~2-3 minutes) is left out of the suite, which has no room for it within its 20 minutes.
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "benchmarks" / "vs_trl.py"


def _run(*args: str, timeout: float = 600) -> subprocess.CompletedProcess:
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    return subprocess.run([sys.executable, str(SCRIPT), *args], check=False, cwd=ROOT, capture_output=True,
                          text=True, timeout=timeout, env=env)


def _module():
    spec = importlib.util.spec_from_file_location("vs_trl", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    sys.modules["vs_trl"] = module  # dataclasses resolve their module's annotations through sys.modules
    spec.loader.exec_module(module)
    return module


def test_time_to_reach_uses_the_trailing_window():
    m = _module()
    curve = tuple(m.Point(i + 1, float(i + 1), r) for i, r in enumerate([0.0] * 10 + [1.0] * 10))
    assert m.window(len(curve)) == 2
    assert m.time_to_reach(curve, 1.0) == 12.0  # steps 11 and 12 both at 1.0
    assert m.time_to_reach(curve, 0.5) == 11.0
    assert m.time_to_reach(curve, 1.5) is None
    result = m.RunResult("x", steps=20, wall_s=20.0, process_s=25.0, curve=curve, heldout_before=None,
                         heldout_after=None)
    assert result.final_reward == 1.0 and result.step_s_median == 1.0


def test_the_seed_reaches_every_rl_run_but_not_the_warm_start():
    from echo2_sdk.config import load_config

    m = _module()
    settings = m.Settings(steps=5, seed=3)
    assert load_config(str(m.QUICKSTART), settings.overrides()).train.seed == 3
    assert load_config(str(m.QUICKSTART), m.replace(settings, seed=0).overrides()).train.seed == 0
    assert m.Settings(steps=5).seed == 0


def test_the_longer_echo2_budget_runs_both_modes_with_more_steps_and_gets_a_ratio():
    m = _module()
    runs = m.echo2_runs(m.Settings(steps=150, echo2_steps_factor=1.5))
    assert runs == [("echo2_async", "async", 150), ("echo2_sync", "sync", 150),
                    ("echo2_async_x1.5", "async", 225), ("echo2_sync_x1.5", "sync", 225)]
    assert m.echo2_runs(m.Settings(steps=150, echo2_steps_factor=1.0)) == runs[:2]

    def result(name, rewards):
        curve = tuple(m.Point(i + 1, float(i + 1), r) for i, r in enumerate(rewards))
        return m.RunResult(name, steps=len(curve), wall_s=float(len(curve)), process_s=0.0, curve=curve,
                           heldout_before=0.1, heldout_after=0.2)

    results = {"echo2_async": result("echo2_async", [0.0] * 10), "echo2_async_x1.5": result("echo2_async_x1.5", [0.0] * 10 + [1.0] * 5),
               "trl": result("trl", [1.0] * 10)}
    doc = m.report(results, m.Settings(steps=10), "base", 0.0, {})
    assert doc["ratio_time_to_trl_final_over_trl_wall"] == {"echo2_async": None, "echo2_async_x1.5": 1.1}


@pytest.mark.parametrize("args, message", [
    (["--steps", "0"], "--steps=0"),
    (["--echo2-steps-factor", "0.5"], "--echo2-steps-factor=0.5"),
    (["--base-model", "/nonexistent/model"], "holds no config.json"),
])
def test_bad_input_fails_with_one_line(tmp_path, args, message):
    proc = _run(*args, "--out", str(tmp_path / "out"), timeout=120)
    assert proc.returncode != 0 and message in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    assert not (tmp_path / "out").exists()  # refused before anything was made


def test_refuses_a_folder_that_holds_files(tmp_path):
    (tmp_path / "old.txt").write_text("x")
    proc = _run("--quick", "--out", str(tmp_path), timeout=120)
    assert proc.returncode != 0 and "not an empty folder" in proc.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["old.txt"]


@pytest.mark.parametrize("sets", [["algo.lr_schedule=constant"], ["algo.lr_schedule=linear"],
                                  ["algo.lr_schedule=cosine", "algo.lr_min_ratio=0.1"]])
def test_trl_gets_the_same_lr_curve_at_each_learner_steps_first_update(sets):
    import torch
    from transformers import get_scheduler

    from echo2_sdk.config import load_config
    from echo2_sdk.runtime.learning.schedule import LrSchedule

    cfg = load_config(str(ROOT / "examples" / "quickstart.yaml"), [*sets, "train.steps=10"])
    a = cfg.algo
    kwargs = _module().trl_schedule(a)
    optimizer = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=a.lr)
    hf = get_scheduler(kwargs["lr_scheduler_type"], optimizer, num_warmup_steps=kwargs["warmup_steps"],
                       num_training_steps=cfg.train.steps * a.num_minibatches,
                       scheduler_specific_kwargs=kwargs.get("lr_scheduler_kwargs"))
    ours = LrSchedule(a.lr, a.lr_schedule, total_steps=cfg.train.steps, min_ratio=a.lr_min_ratio)
    trl_lrs = []
    for _ in range(cfg.train.steps * a.num_minibatches):
        trl_lrs.append(optimizer.param_groups[0]["lr"])
        optimizer.step()
        hf.step()
    assert trl_lrs[::a.num_minibatches] == pytest.approx([ours.lr_at(k) for k in range(cfg.train.steps)])


def test_a_schedule_trl_cannot_follow_is_a_one_line_refusal():
    from echo2_sdk.config import load_config

    cfg = load_config(None, ["algo.lr_schedule=linear", "algo.lr_min_ratio=0.2"])
    with pytest.raises(SystemExit, match="has no TRL equivalent"):
        _module().trl_schedule(cfg.algo)


def test_doctests():
    import doctest

    result = doctest.testmod(_module())
    assert result.attempted > 0 and result.failed == 0
