"""The generated multi-turn template trains and learns: one run of the game ``echo2 new-task --kind multi-turn``
writes, as a user would start it (its own YAML, the CLI in a subprocess), shortened to fit the suite.

Its own file so that ``--dist loadfile`` can give this ~2.5-minute run a worker of its own.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from echo2_sdk.scaffold import new_task

ENV = {**os.environ, "OMP_NUM_THREADS": "1", "TRANSFORMERS_VERBOSITY": "error"}


@pytest.mark.slow
def test_the_generated_multi_turn_template_learns_in_a_test_sized_run(tmp_path):
    """The issue's "its return rises in its own test-sized run": the generated game's own config with a
    smaller warm start (512 demonstrations, 5 epochs) and 60 steps (~2.5 min alone). The warm start imitates
    the expert/explorer mixture, so sampled episodes differ; RL moves the policy towards the expert and the
    sampled return rises (measured first 20 -> last 20 steps: 0.045 -> 0.274 and -0.010 -> 0.290; at 384
    demonstrations and 50 steps only +0.045 and +0.029, too little to test)."""
    out = tmp_path / "guess"
    new_task("guess", "multi-turn", out)
    run_dir = tmp_path / "run"
    cmd = [sys.executable, "-m", "echo2_sdk.runtime.cli", "train", "--config", str(out / "guess.yaml"), "--run-dir",
           str(run_dir), "--set", "train.steps=60", "--set", "task.options.num_sft=512",
           "--set", "model.warm_start.epochs=5", "--set", "train.eval_max_examples=4",
           "--set", "train.plots=false", "--set", "train.checkpoint_every=0", "--set", "runtime.ray_num_cpus=2"]
    proc = subprocess.run(cmd, cwd=tmp_path, env=ENV, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["steps"] == 60 and summary["samples_rejected"] == 0
    assert summary["samples_accepted"] >= 60 * 2 * 8  # every step: 2 prompts x 8 episodes
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == list(range(1, 61))
    first, last = (sum(r["reward_mean"] for r in part) / len(part) for part in (rows[:20], rows[-20:]))
    assert last >= first + 0.05, (first, last)  # measured gains: +0.23, +0.30 (docstring)
    assert sum(r["zero_advantage_frac"] for r in rows[:20]) / 20 < 0.5  # the groups have something to compare
