"""Run statistics: per-step metric rows (metrics.jsonl), the progress line and the run summary."""

from __future__ import annotations

import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from echo2_sdk.config import to_dict

LEARNER_KEYS = ("pg_loss", "kl", "clip_frac", "tis_mean", "tis_max", "tis_trunc_frac", "grad_norm", "lr")


@dataclass
class RunStats:
    """Cumulative counters of a run (checkpointed with the learner so a resume continues them)."""

    t_idle_s: float = 0.0
    t_train_s: float = 0.0
    accepted: int = 0
    dropped_stale: int = 0
    rejected: int = 0
    tokens: int = 0
    worker_errors: int = 0
    publishes: int = 0
    wall_offset_s: float = 0.0
    t0_wall: float = field(default_factory=time.time)
    reject_reasons: Counter = field(default_factory=Counter)
    dropped_by_worker: Counter = field(default_factory=Counter)
    """Samples dropped as stale, by the worker that generated them (stale on arrival or in the buffer)."""
    reward_status: Counter = field(default_factory=Counter)
    trained_by_node: Counter = field(default_factory=Counter)
    """Samples trained on, by the Ray node that generated them (the rollout's ``meta["node"]``)."""
    staleness_counts: Counter = field(default_factory=Counter)
    first_rollout: dict = field(default_factory=dict)
    """version → seconds since start at which its first group reached the learner."""
    installs: list = field(default_factory=list)
    publish_s: dict = field(default_factory=dict)
    """version → seconds since start at which it was published."""
    publish_wall: dict = field(default_factory=dict)
    """version → wall-clock time (time.time()) of its publish."""
    deliveries: list = field(default_factory=list)
    """One record per published version: T_bcast (q = 1/γ), time to all, per-worker install times."""
    """(worker, version, seconds since start) of every snapshot install."""
    prompts_trained: set = field(default_factory=set)
    evals: dict = field(default_factory=dict)
    _last: dict = field(default_factory=dict)

    @property
    def bubble_ratio(self) -> float:
        total = self.t_idle_s + self.t_train_s
        return self.t_idle_s / total if total > 0 else 0.0

    def count_stale_drop(self, group) -> None:
        self.dropped_stale += len(group.rollouts)
        self.dropped_by_worker[group.worker_id] += len(group.rollouts)

    def _delta(self, name: str) -> int:
        value = getattr(self, name)
        delta = value - self._last.get(name, 0)
        self._last[name] = value
        return delta

    def step_row(self, trainer, records, v_t: int, t_train: float, metrics: dict) -> dict[str, Any]:
        staleness = [v_t - r.version for r in records]
        self.staleness_counts.update(staleness)
        self.prompts_trained.update(r.prompt_key for r in records)
        self.trained_by_node.update(str(r.meta.get("node", "")) for r in records)
        self.t_train_s += t_train
        wall = time.perf_counter() - trainer.t_start
        d_wall = wall - self._last.get("wall", 0.0)
        self._last["wall"] = wall
        d_tokens = self._delta("tokens")
        rewards = [r.reward for r in records]
        row = {
            "step": trainer.step,
            "version": trainer.learner.version,
            "reward_mean": sum(rewards) / len(rewards),
            "staleness_max": max(staleness),
            "staleness_mean": sum(staleness) / len(staleness),
            "bubble_ratio": self.bubble_ratio,
            "t_train_s": t_train,
            "accepted": self._delta("accepted"),
            "dropped_stale": self._delta("dropped_stale"),
            "rejected": self._delta("rejected"),
            "wall_s": wall,
            "samples": len(records),
            "rollout_tokens_per_s": d_tokens / d_wall if d_wall > 0 else 0.0,
            "published_version": trainer.published,
            "buffer_groups": len(trainer.buffer),
        }
        row.update({k: metrics[k] for k in LEARNER_KEYS if k in metrics})
        return row

    def to_dict(self) -> dict[str, Any]:
        d = {k: v for k, v in self.__dict__.items()}
        d["prompts_trained"] = sorted(self.prompts_trained)
        for k in ("reject_reasons", "reward_status", "staleness_counts", "dropped_by_worker", "trained_by_node"):
            d[k] = {str(a): b for a, b in d[k].items()}
        d["first_rollout"] = {str(a): b for a, b in self.first_rollout.items()}
        d["publish_s"] = {str(a): b for a, b in self.publish_s.items()}
        d["publish_wall"] = {str(a): b for a, b in self.publish_wall.items()}
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "RunStats":
        s = cls(**{k: v for k, v in d.items() if k not in (
            "reject_reasons", "reward_status", "staleness_counts", "prompts_trained", "first_rollout", "publish_s", "publish_wall",
            "dropped_by_worker", "trained_by_node")})
        s.dropped_by_worker = Counter(d.get("dropped_by_worker", {}))
        s.trained_by_node = Counter(d.get("trained_by_node", {}))
        s.reject_reasons = Counter(d.get("reject_reasons", {}))
        s.reward_status = Counter(d.get("reward_status", {}))
        s.staleness_counts = Counter({int(k): v for k, v in d.get("staleness_counts", {}).items()})
        s.first_rollout = {int(k): v for k, v in d.get("first_rollout", {}).items()}
        s.publish_s = {int(k): v for k, v in d.get("publish_s", {}).items()}
        s.publish_wall = {int(k): v for k, v in d.get("publish_wall", {}).items()}
        s.prompts_trained = set(d.get("prompts_trained", []))
        s.installs = [tuple(x) for x in s.installs]
        return s


def progress_line(row: dict[str, Any], total_steps: int) -> str:
    return (
        f"step {row['step']:>4}/{total_steps} | v{row['version']:<4} | reward {row['reward_mean']:.3f} | "
        f"stale max {row['staleness_max']} mean {row['staleness_mean']:.2f} | "
        f"bubble {100 * row['bubble_ratio']:4.1f}% | {row['rollout_tokens_per_s']:7.0f} tok/s | "
        f"train {row['t_train_s']:.2f}s | {row['wall_s']:6.1f}s"
        + (f" | ${row['cost_usd']:.4f} ({row['pool_active_workers']} workers)" if "cost_usd" in row else "")
    )


def _window_mean(rows: list[dict], key: str, first: bool) -> float | None:
    if not rows:
        return None
    k = max(1, len(rows) // 10)
    part = rows[:k] if first else rows[-k:]
    return sum(r[key] for r in part) / len(part)


def summarize(trainer, rows: list[dict[str, Any]]) -> dict[str, Any]:
    s = trainer.stats
    first, last = _window_mean(rows, "reward_mean", True), _window_mean(rows, "reward_mean", False)
    return {
        "task": trainer.cfg.task.name,
        "mode": trainer.cfg.runtime.mode,
        "staleness_S": trainer.staleness,
        "kappa": trainer.kappa,
        "steps": trainer.step,
        "version": trainer.learner.version,
        "wall_s": rows[-1]["wall_s"] if rows else 0.0,
        "reward_first_10pct": first,
        "reward_last_10pct": last,
        "distinct_prompts_trained": len(s.prompts_trained),
        "eval": s.evals,
        "bubble_ratio": s.bubble_ratio,
        "t_train_s": s.t_train_s,
        "t_idle_s": s.t_idle_s,
        "staleness_max": max((r["staleness_max"] for r in rows), default=0),
        "staleness_histogram": {str(k): v for k, v in sorted(s.staleness_counts.items())},
        "samples_accepted": s.accepted,
        "samples_dropped_stale": s.dropped_stale,
        "samples_dropped_stale_by_worker": dict(s.dropped_by_worker),
        "samples_trained_by_node": dict(s.trained_by_node),
        "samples_rejected": s.rejected,
        "reject_reasons": dict(s.reject_reasons),
        "reward_status": dict(s.reward_status),
        "worker_errors": s.worker_errors,
        "rollout_tokens": s.tokens,
        "snapshots_published": s.publishes,
        "first_rollout_s_by_version": {str(k): round(v, 3) for k, v in sorted(s.first_rollout.items())},
        "workers": trainer._worker_report,
        "base_model": trainer.base_path,
        "config": to_dict(trainer.cfg),
        # cost-aware pool (scheduler.enabled): dollars, $ per sample / reward point, decisions in brief
        **({"pool": trainer.controller.summary()} if getattr(trainer, "controller", None) is not None else {}),
    }
