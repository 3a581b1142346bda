import json
import subprocess
import sys
from pathlib import Path

import pytest

from echo2_sdk.runtime.cli import main


def test_help_lists_subcommands(capsys):
    with pytest.raises(SystemExit):
        main(["--help"])
    out = capsys.readouterr().out
    for sub in ("train", "config", "tasks", "plan", "simulate", "bench"):
        assert sub in out


def test_train_help_documents_every_flag(capsys):
    with pytest.raises(SystemExit):
        main(["train", "--help"])
    out = capsys.readouterr().out
    for flag in ("--config", "--task", "--set", "--run-dir", "--resume", "--ray-address"):
        assert flag in out


def test_config_prints_resolved_values(capsys):
    assert main(["config", "--config", "examples/quickstart.yaml", "--set", "train.steps=3", "--json"]) == 0
    cfg = json.loads(capsys.readouterr().out)
    assert cfg["train"]["steps"] == 3 and cfg["task"]["name"] == "arith"


def test_config_errors_exit_2_with_the_fix(capsys):
    assert main(["config", "--set", "rollout.samples_per_promt=4"]) == 2
    err = capsys.readouterr().err
    assert "Did you mean 'rollout.samples_per_prompt'" in err
    assert main(["config", "--task", "arithh"]) == 2
    assert "Did you mean 'arith'" in capsys.readouterr().err


def test_tasks_lists_builtins(capsys):
    assert main(["tasks"]) == 0
    out = capsys.readouterr().out
    assert "arith" in out and "aime24" in out


def test_aime24_on_cpu_stops_at_once_pointing_to_the_quickstart():
    proc = subprocess.run([sys.executable, "-m", "echo2_sdk.runtime.cli", "train", "--task", "aime24"],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2
    assert "needs 4 GPU" in proc.stderr and "examples/quickstart.yaml" in proc.stderr


@pytest.mark.parametrize("key, value, message", [
    ("algo.loss", "grp", "unknown policy loss 'grp'. Did you mean 'grpo'?"),
    ("algo.advantage", "dr_grp", "Did you mean 'dr_grpo'?"),
])
def test_train_rejects_an_unknown_algorithm_before_the_warm_start(tmp_path, capsys, key, value, message):
    run_dir = tmp_path / "run"
    quickstart = str(Path(__file__).resolve().parent.parent / "examples" / "quickstart.yaml")
    assert main(["train", "--config", quickstart, "--set", f"{key}={value}",
                 "--run-dir", str(run_dir)]) == 2
    assert message in capsys.readouterr().err
    assert not (run_dir / "base_model").exists()  # failed before the warm start wrote anything


def _one_line_exit_2(argv, capsys, message):
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert message in err and "\n" not in err and "Traceback" not in err, err


def test_resume_of_a_missing_run_is_one_line_and_creates_nothing(tmp_path, capsys):
    _one_line_exit_2(["train", "--resume", str(tmp_path / "runs" / "typo")], capsys, "no such run directory")
    assert not (tmp_path / "runs").exists()
    (tmp_path / "not_a_run").mkdir()
    _one_line_exit_2(["train", "--resume", str(tmp_path / "not_a_run")], capsys, "holds no config.yaml")
    assert list((tmp_path / "not_a_run").iterdir()) == []


def test_user_errors_of_train_are_one_line(tmp_path, capsys):
    (tmp_path / "bad.py").write_text("def broken(:\n")
    _one_line_exit_2(["train", "--set", f"task.name={tmp_path / 'bad.py'}:Task"], capsys, "line 1")
    _one_line_exit_2(["train", "--config", str(tmp_path)], capsys, "is a directory")
    (tmp_path / "file").write_text("")
    _one_line_exit_2(["train", "--set", "train.steps=1", "--run-dir", str(tmp_path / "file" / "run")], capsys,
                     "cannot create the run directory")


def test_resume_of_a_run_whose_checkpoints_are_all_damaged_is_one_line(tmp_path, capsys):
    run = tmp_path / "run"
    (run / "checkpoints" / "step_2").mkdir(parents=True)
    (run / "config.yaml").write_text("train:\n  steps: 4\n")
    (run / "checkpoints" / "step_2" / "model.safetensors").write_bytes(b"x")
    _one_line_exit_2(["train", "--resume", str(run)], capsys, "no intact checkpoint under")
