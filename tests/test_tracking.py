"""train.report_to: TensorBoard event files and W&B offline runs hold what metrics.jsonl and summary.json hold."""

from __future__ import annotations

import glob
import json
import struct
import sys
from pathlib import Path

import pytest

from echo2_sdk.config import ConfigError, load_config
from echo2_sdk.runtime.driver.rundir import RunDir
from echo2_sdk.runtime.driver.tracking import TensorBoardTracker, WandbTracker, numbers

ROWS = [
    {"step": 1, "version": 1, "reward_mean": 0.25, "bubble_ratio": 0.5, "kl": None, "worker": "w0",
     "pool": {"cost_usd": 0.01}},
    {"step": 2, "version": 2, "reward_mean": 0.5, "bubble_ratio": 0.4, "kl": 0.1, "worker": "w0",
     "pool": {"cost_usd": 0.02}},
    {"step": 3, "version": 3, "reward_mean": 0.75, "bubble_ratio": 0.3, "kl": 0.2, "worker": "w1",
     "pool": {"cost_usd": 0.03}},
]
SUMMARY = {
    "task": "arith", "steps": 3, "wall_s": 12.5, "samples_accepted": 96, "workers": [{"name": "w0"}],
    "config": {"train": {"steps": 3}},
    "eval": {"after": {"accuracy": 0.6, "num_examples": 8}, "before": {"accuracy": 0.2, "num_examples": 8},
             "step_2": {"accuracy": 0.4, "num_examples": 8}},
}


def scalars(log_dir: Path) -> dict[str, list[tuple[int, float]]]:
    """Every scalar series in ``log_dir``, read back with TensorBoard's own reader."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(str(log_dir), size_guidance={"scalars": 0})
    acc.Reload()
    return {tag: [(e.step, round(e.value, 6)) for e in acc.Scalars(tag)] for tag in acc.Tags()["scalars"]}


def test_numbers_flattens_mappings_and_keeps_only_finite_numbers():
    row = {"a": 1, "b": 0.5, "c": None, "d": "text", "e": float("nan"), "f": {"g": 2, "h": [1]}, "ok": True}
    assert dict(numbers(row)) == {"a": 1.0, "b": 0.5, "f/g": 2.0, "ok": 1.0}


def test_tensorboard_logs_every_row_evaluations_and_summary(tmp_path):
    tracker = TensorBoardTracker(tmp_path / "tb")
    for row in ROWS:
        tracker.log_step(row)
    tracker.log_summary(SUMMARY)
    tracker.close()
    series = scalars(tmp_path / "tb")
    assert series["train/reward_mean"] == [(1, 0.25), (2, 0.5), (3, 0.75)]
    assert series["train/kl"] == [(2, 0.1), (3, 0.2)]  # a null is not a point
    assert series["train/pool/cost_usd"] == [(1, 0.01), (2, 0.02), (3, 0.03)]
    assert series["eval/accuracy"] == [(0, 0.2), (2, 0.4), (3, 0.6)]
    assert series["summary/wall_s"] == [(3, 12.5)] and series["summary/samples_accepted"] == [(3, 96.0)]
    assert not {"train/step", "train/worker", "summary/task", "summary/workers"} & set(series)
    assert not any(tag.startswith("summary/config") or tag.startswith("summary/eval") for tag in series)


def test_tensorboard_resume_replaces_the_steps_after_the_checkpoint(tmp_path):
    first = TensorBoardTracker(tmp_path / "tb")
    for row in ROWS:
        first.log_step(row)
    first.close()
    resumed = TensorBoardTracker(tmp_path / "tb")  # resumed from the step-2 checkpoint
    for step, reward in ((3, 0.9), (4, 1.0)):
        resumed.log_step({"step": step, "reward_mean": reward})
    resumed.close()
    assert scalars(tmp_path / "tb")["train/reward_mean"] == [(1, 0.25), (2, 0.5), (3, 0.9), (4, 1.0)]


def test_rundir_sends_rows_and_summary_to_its_trackers(tmp_path):
    cfg = load_config(None, ["train.report_to=[tensorboard]"])
    run = RunDir(tmp_path / "run", cfg)
    for row in ROWS:
        run.append_metrics(row)
    run.write_summary(SUMMARY)
    run.close()
    assert len(run.read_metrics()) == 3 and json.loads(run.summary_path.read_text())["steps"] == 3
    series = scalars(tmp_path / "run" / "tensorboard")
    assert [s for s, _ in series["train/reward_mean"]] == [1, 2, 3] and "eval/accuracy" in series


@pytest.mark.parametrize("tracker, module", [("tensorboard", "torch.utils.tensorboard"), ("wandb", "wandb")])
def test_a_missing_package_fails_when_the_run_directory_opens(tmp_path, monkeypatch, tracker, module):
    monkeypatch.setitem(sys.modules, module, None)  # makes `import module` raise ImportError
    cfg = load_config(None, [f"train.report_to=[{tracker}]"])
    with pytest.raises(ConfigError, match=rf"pip install 'echo2\[{tracker}\]'"):
        RunDir(tmp_path / "run", cfg)


def test_a_wandb_run_that_cannot_start_names_the_offline_mode(tmp_path, monkeypatch):
    import wandb

    def refuse(**kwargs):
        raise wandb.errors.UsageError("api_key not configured (no-tty)")

    monkeypatch.setattr(wandb, "init", refuse)
    with pytest.raises(ConfigError, match="api_key not configured.*WANDB_MODE=offline"):
        WandbTracker(tmp_path, "echo2", {})


def wandb_records(run_file: Path) -> list:
    """The protobuf records of a W&B run file (LevelDB-log framing: 32 KiB blocks of checksum, length, type)."""
    from wandb.proto import wandb_internal_pb2

    data = run_file.read_bytes()
    assert data[:4] == b":W&B", data[:16]
    pos, block, pending, records = 7, 32768, b"", []
    while pos + 7 <= len(data):
        if block - pos % block < 7:  # a block's tail too short for a header is padding
            pos += block - pos % block
            continue
        _, length, kind = struct.unpack("<IHB", data[pos:pos + 7])
        pending += data[pos + 7:pos + 7 + length]
        pos += 7 + length
        if kind in (1, 4):  # a full record, or the last fragment of one
            record = wandb_internal_pb2.Record()
            record.ParseFromString(pending)
            records.append(record)
            pending = b""
    return records


def items(entries) -> dict:
    return {(e.key or "/".join(e.nested_key)): json.loads(e.value_json) for e in entries}


def test_wandb_offline_run_holds_history_config_and_summary(tmp_path, monkeypatch):
    for var, value in {"WANDB_MODE": "offline", "WANDB_SILENT": "true", "WANDB_DIR": str(tmp_path / "wandb-dir"),
                       "WANDB_CONFIG_DIR": str(tmp_path / "wandb-config"),
                       "WANDB_CACHE_DIR": str(tmp_path / "wandb-cache"),
                       "WANDB_DATA_DIR": str(tmp_path / "wandb-data")}.items():
        monkeypatch.setenv(var, value)
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    tracker = WandbTracker(run_dir, "echo2-test", {"train": {"steps": 3}})
    for row in ROWS:
        tracker.log_step(row)
    tracker.log_summary(SUMMARY)
    tracker.close()

    run_files = glob.glob(str(run_dir / "wandb" / "offline-run-*" / "run-*.wandb"))
    assert len(run_files) == 1, sorted(p.name for p in run_dir.rglob("*"))
    records = wandb_records(Path(run_files[0]))
    kinds = [r.WhichOneof("record_type") for r in records]
    history = [items(r.history.item) for r, k in zip(records, kinds) if k == "history"]
    train = [(h["_step"], h["train/reward_mean"]) for h in history if "train/reward_mean" in h]
    assert train == [(1, 0.25), (2, 0.5), (3, 0.75)]
    assert all("train/worker" not in h and "train/step" not in h for h in history)
    assert [(h["eval/step"], h["eval/accuracy"]) for h in history if "eval/step" in h] == [(0, 0.2), (2, 0.4), (3, 0.6)]
    run = next(r.run for r, k in zip(records, kinds) if k == "run")
    assert run.project == "echo2-test" and run.display_name == "run"
    assert items(run.config.update)["train"] == {"steps": 3}
    summary = {}
    for r, k in zip(records, kinds):
        if k == "summary":
            summary.update(items(r.summary.update))
    assert summary["summary/wall_s"] == 12.5 and summary["summary/samples_accepted"] == 96


@pytest.mark.slow
def test_training_run_reports_each_step_to_tensorboard(tmp_path, ray_cluster):
    from echo2_sdk.runtime.driver.trainer import Trainer

    cfg = load_config(None, ["train.steps=3", "train.prompts_per_step=4", "rollout.samples_per_prompt=4",
                             "rollout.prompts_per_request=2", "rollout.max_new_tokens=4", "train.eval_max_examples=8",
                             "rollout.num_workers=2", "train.plots=false", "train.report_to=[tensorboard]"])
    summary = Trainer(cfg, str(tmp_path / "run"), log=lambda m: None).fit()
    assert list((tmp_path / "run" / "tensorboard").glob("events.out.tfevents.*"))
    series = scalars(tmp_path / "run" / "tensorboard")
    rows = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert [s for s, _ in series["train/reward_mean"]] == [1, 2, 3]
    assert [v for _, v in series["train/reward_mean"]] == pytest.approx([r["reward_mean"] for r in rows], abs=1e-6)
    assert [s for s, _ in series["train/bubble_ratio"]] == [1, 2, 3]
    evals = summary["eval"]
    assert [s for s, _ in series["eval/accuracy"]] == [0, 3]
    assert [v for _, v in series["eval/accuracy"]] == pytest.approx(
        [evals["before"]["accuracy"], evals["after"]["accuracy"]], abs=1e-6)
