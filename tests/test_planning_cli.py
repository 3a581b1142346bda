"""``echo2 plan`` and ``echo2 simulate`` through their argparse parsers (as the echo2 CLI wires them)."""

import argparse
import json
from pathlib import Path

import pytest

from echo2_sdk.runtime.planning.cli import add_plan_parser, add_simulate_parser

POOLS = Path(__file__).resolve().parent.parent / "examples" / "pools"
SMALL = str(POOLS / "small.yaml")
PLAN = ["plan", "--t-train", "60", "--t-bcast", "40", "--staleness", "3", "--pool", SMALL]


def main(argv):
    parser = argparse.ArgumentParser(prog="echo2")
    sub = parser.add_subparsers(dest="command")
    add_plan_parser(sub)
    add_simulate_parser(sub)
    args = parser.parse_args(argv)
    return args.func(args)


def test_plan_json_hand_checked(capsys):
    # κ = 2, μ_min = 2·64/(120 − 40) = 1.6, μ_target = 1.76; by ρ: rtx4090-a (1.40), rtx5090-a/b (1.55),
    # then h100-a (3.22, before a100-a at 3.27) reaches 1.99 ≥ 1.76; offline-a (μ = 0) is never chosen
    assert main(PLAN + ["--rollouts-per-step", "64", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["kappa"] == 2 and out["mu_min"] == pytest.approx(1.6) and out["mu_target"] == pytest.approx(1.76)
    assert out["workers"] == ["rtx4090-a", "rtx5090-a", "rtx5090-b", "h100-a"]
    assert out["usd_per_hour"] == pytest.approx(0.35 + 0.65 + 0.65 + 2.9)
    assert out["predicted_bubble_ratio"] == 0.0
    assert out["staleness_bound_conservative"] == 3 and out["staleness_bound_tight"] == 3
    assert out["feasible"] is True


def test_plan_text_and_learner_cost(capsys):
    prices = str(POOLS / "prices.yaml")
    assert main(PLAN + ["--rollouts-per-step", "64", "--prices", prices, "--learner-gpus", "8"]) == 0
    text = capsys.readouterr().out
    assert "κ = 2 (S = 3)" in text and "μ_min = 1.6 rollouts/s" in text and "learner $14.4/h" in text
    assert "predicted bubble ratio = 0.0000" in text and "h100-a" in text and "offline-a" not in text


def test_plan_infeasible_pool_exits_1(capsys):
    assert main(PLAN + ["--rollouts-per-step", "640", "--json"]) == 1
    out = json.loads(capsys.readouterr().out)
    assert not out["feasible"] and out["shortfall_rollouts_per_s"] > 0 and len(out["workers"]) == 5
    assert 0 < out["predicted_bubble_ratio"] < 1


@pytest.mark.parametrize("argv, match", [
    (["plan", "--t-train", "60", "--t-bcast", "200", "--rollouts-per-step", "64", "--staleness", "3",
      "--pool", SMALL], "raise the staleness S to ≥ 4"),
    (["plan", "--t-train", "10", "--t-bcast", "20", "--rollouts-per-step", "64", "--staleness", "10",
      "--kappa", "2", "--pool", SMALL], "μ_min is infinite"),
    (PLAN + ["--rollouts-per-step", "64", "--gamma", "0.5"], "γ=0.5"),
    (["plan", "--t-train", "60", "--t-bcast", "40", "--rollouts-per-step", "64", "--staleness", "3",
      "--pool", "/nonexistent.yaml"], "does not exist"),
    (PLAN + ["--rollouts-per-step", "64", "--learner-gpus", "8"], "needs --prices"),
])
def test_plan_errors_exit_2_with_the_fix(argv, match, capsys):
    assert main(argv) == 2
    assert match in capsys.readouterr().err


def test_empty_pool_is_infeasible(tmp_path, capsys):
    empty = tmp_path / "empty.yaml"
    empty.write_text("[]\n")
    assert main(["plan", "--t-train", "60", "--t-bcast", "40", "--rollouts-per-step", "64", "--staleness", "3",
                 "--pool", str(empty), "--json"]) == 1
    captured = capsys.readouterr()
    assert json.loads(captured.out)["workers"] == [] and "no workers" in captured.err


def _write(tmp_path, text):
    path = tmp_path / "sim.yaml"
    path.write_text(text)
    return str(path)


def test_simulate_run_writes_json_and_png(tmp_path, capsys):
    cfg = _write(tmp_path, f"""
experiment: run
out_dir: {tmp_path / 'out'}
learner: {{t_train_s: 60, rollouts_per_step: 64, samples_per_group: 8, steps: 12}}
pool:
  synthetic: [{{gpu: RTX5090, count: 8, rollouts_per_s: 0.5, usd_per_hour: 0.65}}]
prices: {{A100: 1.8}}
""")
    assert main(["simulate", "--config", cfg, "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["summary"]["steps"] == 12 and "timeline" not in out
    assert all(Path(f).exists() for f in out["files"])
    saved = json.loads(Path(out["files"][0]).read_text())
    assert saved["decisions"] and saved["timeline"]["t_s"]


def test_simulate_knee_and_ablation_small(tmp_path, capsys):
    cfg = _write(tmp_path, f"""
experiment: knee
out_dir: {tmp_path / 'knee'}
learner: {{t_train_s: 60, rollouts_per_step: 256, samples_per_group: 8, steps: 30}}
broadcast: {{t_bcast_s: 40}}
knee: {{staleness: [3], min_workers: 11, max_workers: 15, rollouts_per_s: 0.5}}
prices: {{A100: 1.8}}
""")
    assert main(["simulate", "--config", cfg]) == 0
    text = capsys.readouterr().out
    assert "S=3 κ=2" in text and "knee predicted N=13, measured N=13" in text
    cfg = _write(tmp_path, f"""
experiment: ablation
out_dir: {tmp_path / 'abl'}
learner: {{t_train_s: 120, rollouts_per_step: 512, samples_per_group: 16, staleness: 6, steps: 25}}
broadcast: {{topology: chain}}
pool: {{file: {POOLS / 'mixed.yaml'}}}
ablation: {{seeds: 1}}
prices_file: {POOLS / 'prices.yaml'}
""")
    assert main(["simulate", "--config", cfg, "--json", "--set", "ablation.variants=[full, nocost]"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert set(out["rows"]) == {"full", "nocost"} and out["ratios"]["usd_pool_per_step_full_over_nocost"] < 1


def test_simulate_config_errors_exit_2(tmp_path, capsys):
    cfg = _write(tmp_path, "experiment: knees\n")
    assert main(["simulate", "--config", cfg]) == 2
    assert "Did you mean 'knee'" in capsys.readouterr().err
