"""The generated multi-turn template trains and learns: one run of the game ``echo2 new-task --kind multi-turn``
writes, as a user would start it (its own YAML, the CLI in a subprocess), shortened to fit the suite.

Its own file so that ``--dist loadfile`` can give this ~4-minute run a worker of its own.
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
    """The issue's "its return rises in its own test-sized run": the generated game's own config (its warm
    start of 1,024 demonstrations x 8 epochs) for 150 steps instead of 200, judged on the held-out episodes:
    the return of the *sampled* policy (8 episodes at temperature 1.0 on each of 32 held-out seeds: the
    same 256 episodes before and after, seeded alike), which is what RL trains, with its 95% CI.

    Until 2026-12-06 this test compared the first and last 20 steps' training return of a shorter run
    (512 demonstrations x 5 epochs, 100 steps). That measure was noise: 2 seeds a step swing the return
    by +-0.5, and the runs that "passed" rose out of an early collapse that RL itself caused (lr 3e-4:
    0.43 at step 1, -0.36 by step 11); on 384 held-out episodes that run's policy sampled 0.203 against
    its warm start's 0.309. From 2026-12-06 a rise of < 0.05 was reported as an expected failure with its
    figures, and a loss of > 0.05 (RL harming the policy) failed; since 2026-12-07 a rise of < 0.05 fails.

    On 2026-12-07 the project's CI run failed here: 0.537 -> 0.313. Without a pull to the warm start the tiny
    policy can drift into a bad region and stay there (a by-hand run with ``algo.advantage=dr_grpo``
    fell from 0.94 to -0.57 training return in 10 steps, refusing almost every reply). The template now sets
    ``kl_coef: 0.05`` as the poker and MOBA configs set 0.2."""
    out = tmp_path / "guess"
    new_task("guess", "multi-turn", out)
    run_dir = tmp_path / "run"
    cmd = [sys.executable, "-m", "echo2_sdk.runtime.cli", "train", "--config", str(out / "guess.yaml"), "--run-dir",
           str(run_dir), "--set", "train.steps=150", "--set", "train.eval_samples=8",
           "--set", "train.eval_temperature=1.0", "--set", "train.eval_max_examples=32",
           "--set", "train.plots=false", "--set", "train.checkpoint_every=0", "--set", "runtime.ray_num_cpus=2"]
    proc = subprocess.run(cmd, cwd=tmp_path, env=ENV, capture_output=True, text=True, timeout=1500)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["steps"] == 150 and summary["samples_rejected"] == 0
    assert summary["samples_accepted"] >= 150 * 2 * 8  # every step: 2 prompts x 8 episodes
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == list(range(1, 151))
    assert sum(r["zero_advantage_frac"] for r in rows[:25]) / 25 < 0.5  # the groups have something to compare
    before, after = summary["eval"]["before"], summary["eval"]["after"]
    assert before["episodes"] == after["episodes"] == 256
    assert after["legal_action_rate"] >= 0.95
    shown = (f"held-out sampled return {before['mean_return']:.3f} {before['return_ci95']} -> "
             f"{after['mean_return']:.3f} {after['return_ci95']}")
    # The line: the return rises. Before kl_coef (stops 43-46, seed 0) a rise of < 0.05 was an expected
    # failure here: it rose in 12 of 15 runs, three gave 0.527-0.579, and the project's CI run of 2026-12-07 fell
    # to 0.313 (a failure). With kl_coef 0.05 (stop 47, seed 0): 12 runs of RL alone from this warm start (two or
    # three side by side, two of them beside the chaos and run-safety tests) gave 0.680-0.832, two whole runs of
    # this test 0.689 and 0.661, two clean-clone CI runs 0.717 and 0.702: a rise of 0.12-0.30 in all 16 (seed 1:
    # 0.645 -> 0.818, 0.782; seed 2: 0.505 -> 0.638, 0.587, 0.682, 0.677). Five runs without it: 0.601-0.760.
    assert after["mean_return"] >= before["mean_return"] + 0.05, f"the return did not rise by 0.05: {shown}"
    print(shown)
