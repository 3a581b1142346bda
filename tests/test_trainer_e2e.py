"""End-to-end runs of the trainer on a local Ray cluster with the tiny model (CPU).

One Ray cluster serves the whole module; every run is a few learner steps.
"""

import json
import math

import pytest

from echo2_sdk.config import load_config

pytestmark = pytest.mark.slow

TINY_RUN = [
    "train.steps=4",
    "train.prompts_per_step=4",
    "rollout.samples_per_prompt=4",
    "rollout.prompts_per_request=2",
    "rollout.max_new_tokens=4",
    "train.eval_max_examples=8",
    "rollout.num_workers=2",
]


def run(tmp_path, name, overrides, resume=False):
    from echo2_sdk.runtime.driver.trainer import Trainer

    cfg = load_config(None, TINY_RUN + overrides)
    trainer = Trainer(cfg, str(tmp_path / name), resume=resume, log=lambda m: None)
    summary = trainer.fit()
    rows = [json.loads(line) for line in (tmp_path / name / "metrics.jsonl").read_text().splitlines()]
    return summary, rows


def test_async_run_writes_metrics_summary_plots_and_checkpoints(tmp_path, ray_cluster):
    summary, rows = run(tmp_path, "a", ["train.checkpoint_every=2"])
    assert [r["step"] for r in rows] == [1, 2, 3, 4]
    required = {"step", "version", "reward_mean", "staleness_max", "staleness_mean", "bubble_ratio",
                "t_train_s", "accepted", "dropped_stale", "rejected", "wall_s", "zero_advantage_frac",
                "first_turn_entropy"}
    assert required <= set(rows[0])
    assert all(0.0 <= r["zero_advantage_frac"] <= 1.0 for r in rows)
    assert all(0.0 <= r["first_turn_entropy"] <= math.log(4) + 1e-9 for r in rows)  # 4 samples per group
    assert summary["zero_advantage_frac_last_10pct"] == rows[-1]["zero_advantage_frac"]  # 4 steps: the last row
    assert [r["version"] for r in rows] == [1, 2, 3, 4]
    assert all(r["staleness_max"] <= 3 for r in rows)
    assert all(0.0 <= r["bubble_ratio"] <= 1.0 for r in rows)
    run_dir = tmp_path / "a"
    assert {"reward.png", "staleness.png", "bubble.png"} <= {p.name for p in run_dir.iterdir()}
    assert (run_dir / "checkpoints" / "step_2" / "model.safetensors").exists()
    assert (run_dir / "checkpoints" / "step_4" / "model.safetensors").exists()
    on_disk = json.loads((run_dir / "summary.json").read_text())
    assert on_disk["config"]["train"]["steps"] == 4 and on_disk["mode"] == "async"
    assert "accuracy" in on_disk["eval"]["before"] and "accuracy" in on_disk["eval"]["after"]
    assert summary["samples_accepted"] >= 4 * 4 * 4
    # Every sample the workers were asked for is accounted for, after every step and at the end.
    assert summary["accounting"]["balanced"] and all(r["accounting_balanced"] for r in rows)
    assert summary["accounting"]["trained"] == 4 * 4 * 4
    assert len(summary["workers"]) == 2 and all(w["samples"] > 0 for w in summary["workers"])
    # Snapshots went worker to worker (P2P chain by default), one delivery record per publish.
    bcast = summary["broadcast"]
    assert bcast["transport"] == "p2p" and bcast["topology"] == "chain"
    deliveries = [json.loads(line) for line in (run_dir / "broadcasts.jsonl").read_text().splitlines()]
    assert [d["version"] for d in deliveries] == [2, 4] == [r["version"] for r in bcast["by_version"]]
    done = [d for d in deliveries if d["superseded_by"] is None]
    assert done and all(set(d["installed_s"]) == {"worker0", "worker1"} for d in done)
    assert all(0 < d["t_bcast_s"] <= d["t_all_s"] for d in done)
    # A delivery that completes before a later step is reported on that step's row.
    assert all(r["bcast_version"] in (2, 4) and r["t_bcast_s"] > 0 for r in rows if "t_bcast_s" in r)


def test_slow_worker_groups_are_dropped_never_trained_on(tmp_path, ray_cluster):
    # One fast worker, one throttled to 16 tokens/s: a request of 2 prompts x 4 samples takes
    # ~2 s there, while the fast worker feeds several learner steps per second (S = 2).
    summary, rows = run(tmp_path, "slow", [
        "train.steps=24", "runtime.staleness=2",
        "rollout.workers=[{name: fast}, {name: slow, max_tokens_per_s: 16}]",
    ])
    assert all(r["staleness_max"] <= 2 for r in rows), [r["staleness_max"] for r in rows]
    assert summary["samples_dropped_stale"] > 0
    assert sum(r["dropped_stale"] for r in rows) <= summary["samples_dropped_stale"]
    slow = next(w for w in summary["workers"] if w["name"] == "slow")
    assert slow["samples"] > 0 and slow["throttle_s"] > 0
    assert max(int(k) for k in summary["staleness_histogram"]) <= 2
    assert summary["samples_dropped_stale_by_worker"].get("slow", 0) > 0
    # The slow worker's stale replies raised the admission margin (adapt_margin), and each step logs it.
    assert summary["samples_dropped_stale_on_arrival"] > 0 and summary["dispatch"]["margin_raises"] >= 1
    assert all(0.0 <= r["admission_margin_devs"] <= 3.0 for r in rows)


def test_sync_mode_is_on_policy(tmp_path, ray_cluster):
    # The object-store transport (single machine) is timed by the completion handles.
    summary, rows = run(tmp_path, "sync", ["runtime.mode=sync", "broadcast.transport=object_store"])
    assert [r["staleness_max"] for r in rows] == [0, 0, 0, 0]
    assert summary["broadcast"]["transport"] == "object_store"
    assert summary["broadcast"]["deliveries"] == 4 and summary["broadcast"]["incomplete"] == 0
    assert summary["kappa"] == 1 and summary["snapshots_published"] == 4
    assert all(r["tis_mean"] == pytest.approx(1.0, abs=1e-3) for r in rows)


def test_resume_continues_from_the_latest_checkpoint(tmp_path, ray_cluster):
    run(tmp_path, "r", ["train.checkpoint_every=2", "train.steps=2"])
    summary, rows = run(tmp_path, "r", ["train.checkpoint_every=2", "train.steps=4"], resume=True)
    assert [r["step"] for r in rows] == [1, 2, 3, 4]
    assert [r["version"] for r in rows] == [1, 2, 3, 4]
    assert summary["steps"] == 4 and summary["version"] == 4


def test_a_dead_worker_is_counted_and_the_run_goes_on(tmp_path, ray_cluster):
    import ray

    from echo2_sdk.runtime.driver.trainer import Trainer

    logs = []
    cfg = load_config(None, TINY_RUN + ["rollout.worker_restarts=0"])  # never restarted: it stays dead
    trainer = Trainer(cfg, str(tmp_path / "dead"), log=logs.append)
    ray.kill(trainer.pool.slots[0].actor)
    summary = trainer.fit()
    assert summary["steps"] == 4
    dead = {w["name"]: w["dead"] for w in summary["workers"]}
    assert dead == {"worker0": True, "worker1": False}
    assert summary["worker_errors"] >= 1
    assert any("worker0 died" in line for line in logs)
    assert summary["worker_restarts"]["died"] == 1 and summary["worker_restarts"]["restarts"] == 0


def test_a_dead_worker_is_restarted_with_the_latest_snapshot(tmp_path, ray_cluster):
    import ray

    from echo2_sdk.runtime.driver.trainer import Trainer

    logs = []
    # Enough steps that the new actor (seconds to start on a loaded machine) is back before the end.
    cfg = load_config(None, [*TINY_RUN, "train.steps=60", "rollout.worker_restart_backoff_s=0.1"])
    trainer = Trainer(cfg, str(tmp_path / "restart"), log=logs.append)
    ray.kill(trainer.pool.slots[0].actor)
    summary = trainer.fit()
    assert summary["steps"] == 60
    workers = {w["name"]: w for w in summary["workers"]}
    assert workers["worker0"]["starts"] == 2 and not workers["worker0"]["dead"]
    restarts = summary["worker_restarts"]
    assert restarts["died"] == 1 and restarts["restarts"] == 1 and restarts["replace_s"] is not None
    assert workers["worker0"]["last_version"] > 0  # the new actor generated with published weights


def test_two_learner_ranks_train_checkpoint_and_resume_on_one(tmp_path, ray_cluster):
    """learner.num_ranks=2: FSDP2 rank actors on gloo behind the trainer; the checkpoint resumes on one rank."""
    sharded = ["learner.num_ranks=2", "learner.micro_batch_tokens=24", "train.checkpoint_every=2"]
    summary, rows = run(tmp_path, "ranks", sharded)
    assert [r["version"] for r in rows] == [1, 2, 3, 4]
    assert all(r["micro_batches"] >= 2 for r in rows) and all(0 <= r["padding_frac"] < 1 for r in rows)
    meta = json.loads((tmp_path / "ranks" / "checkpoints" / "step_4" / "meta.json").read_text())
    assert meta["num_ranks"] == 2 and meta["version"] == 4
    assert "accuracy" in summary["eval"]["after"]
    assert summary["broadcast"]["by_version"]  # the gathered snapshot reached the workers
    import shutil

    shutil.rmtree(tmp_path / "ranks" / "checkpoints" / "step_4")
    _, resumed = run(tmp_path, "ranks", ["learner.num_ranks=1", "train.checkpoint_every=2"], resume=True)
    assert [r["step"] for r in resumed] == [1, 2, 3, 4] and resumed[2]["version"] == 3
