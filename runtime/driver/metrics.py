"""Run statistics: per-step metric rows (metrics.jsonl), the progress line and the run summary.

The driver feeds :class:`RunStats` through a few methods, one per event of the run (a worker's result,
a publish, a delivery, an idle wait, a learner step, an evaluation, a checkpoint). What reached the
learner from workers (accepted, rejected, stale, tokens, errors) is counted by the admission gate;
step rows and the summary read those counters from it.
"""

from __future__ import annotations

import time
from collections import Counter
from dataclasses import dataclass, field, fields
from typing import Any, Iterable, Mapping, Sequence

from echo2_sdk.config import Echo2Config, to_dict
from echo2_sdk.records import Rollout
from echo2_sdk.signals import (first_turn, first_turn_entropy, grouping_keys, shared_turn_fraction,
                               zero_advantage_fraction)
from echo2_sdk.runtime.admission.base import AdmissionCounters

LEARNER_KEYS = ("pg_loss", "kl", "clip_frac", "tis_mean", "tis_max", "tis_trunc_frac", "is_masked_frac", "grad_norm",
                "lr", "micro_batches", "padding_frac", "micro_batch_tokens_max")


@dataclass
class RunStats:
    """Cumulative learner-side statistics of a run (checkpointed with the learner so a resume continues them)."""

    t_idle_s: float = 0.0
    """Seconds the learner waited for admissible groups (and, in sync mode, for installs): the bubble."""
    t_train_s: float = 0.0
    """Seconds spent in learner steps."""
    publishes: int = 0
    """Snapshots published."""
    wall_offset_s: float = 0.0
    """Training seconds before the latest checkpoint (a resumed run's clock continues from there)."""
    t0_wall: float = field(default_factory=time.time)
    """Wall-clock time (time.time()) at which the run's statistics started."""
    trained_by_node: Counter = field(default_factory=Counter)
    """Samples trained on, by the Ray node that generated them (the rollout's ``meta["node"]``)."""
    staleness_counts: Counter = field(default_factory=Counter)
    """Samples trained on, by staleness v_t − v."""
    first_rollout: dict = field(default_factory=dict)
    """version → seconds since start at which its first group reached the learner."""
    installs: list = field(default_factory=list)
    """(worker, version, seconds since ``t0_wall``) of every snapshot install."""
    publish_s: dict = field(default_factory=dict)
    """version → seconds since start at which it was published."""
    publish_wall: dict = field(default_factory=dict)
    """version → wall-clock time (time.time()) of its publish."""
    deliveries: list = field(default_factory=list)
    """One record per published version: T_bcast (q = 1/γ), time to all, per-worker install times."""
    prompts_trained: set = field(default_factory=set)
    """Prompt keys trained on at least once."""
    evals: dict = field(default_factory=dict)
    """Held-out evaluations by name ("before", "step_N", "after")."""
    _last: dict = field(default_factory=dict)
    """Cumulative values at the previous step row (rows report differences)."""

    @property
    def bubble_ratio(self) -> float:
        total = self.t_idle_s + self.t_train_s
        return self.t_idle_s / total if total > 0 else 0.0

    # ---- events --------------------------------------------------------------------------------
    def on_result(self, worker: str, installed: Mapping[int, float], arrived_versions: Iterable[int], t_s: float) -> None:
        """A worker's result reached the learner at ``t_s`` (seconds since start): the snapshots it
        installed since its previous result, and the versions of the groups that passed admission."""
        for version, wall in installed.items():
            self.installs.append((worker, version, round(wall - self.t0_wall, 3)))
        for version in arrived_versions:
            self.first_rollout.setdefault(version, t_s)

    def on_publish(self, version: int, t_s: float, wall: float) -> None:
        """Snapshot ``version`` was published at ``t_s`` seconds since start (``wall``: time.time())."""
        self.publish_s[version] = t_s
        self.publish_wall[version] = wall
        self.publishes += 1

    def publish_time_s(self, version: int) -> float:
        """Seconds since start at which ``version`` was published (0 if it was not, in this run)."""
        return self.publish_s.get(version, 0.0)

    def on_delivery(self, record: dict) -> None:
        """A snapshot's delivery finished (or was given up); ``record`` as written to broadcasts.jsonl."""
        self.deliveries.append(record)

    def on_idle(self, seconds: float) -> None:
        self.t_idle_s += seconds

    def on_eval(self, name: str, result: dict[str, Any]) -> None:
        self.evals[name] = result

    def on_checkpoint(self, wall_s: float) -> None:
        """A checkpoint is written after ``wall_s`` training seconds."""
        self.wall_offset_s = wall_s

    def on_step(self, *, step: int, version: int, records: Sequence[Rollout], v_t: int, t_train_s: float,
                wall_s: float, published_version: int, buffer_groups: int, learner_metrics: Mapping[str, Any],
                admission: AdmissionCounters) -> dict[str, Any]:
        """Account a learner step on ``records`` (taken at learner version ``v_t``, now at ``version``);
        returns its metrics.jsonl row."""
        staleness = [v_t - r.version for r in records]
        self.staleness_counts.update(staleness)
        self.prompts_trained.update(r.prompt_key for r in records)
        self.trained_by_node.update(str(r.meta.get("node", "")) for r in records)
        self.t_train_s += t_train_s
        d_wall = wall_s - self._last.get("wall", 0.0)
        self._last["wall"] = wall_s
        d_tokens = self._delta("tokens", admission.tokens)
        rewards = [r.reward for r in records]
        row = {
            "step": step,
            "version": version,
            "reward_mean": sum(rewards) / len(rewards),
            "staleness_max": max(staleness),
            "staleness_mean": sum(staleness) / len(staleness),
            "bubble_ratio": self.bubble_ratio,
            "t_train_s": t_train_s,
            "accepted": self._delta("accepted", admission.accepted),
            "dropped_stale": self._delta("dropped_stale", admission.dropped_stale),
            "dropped_stale_on_arrival": self._delta("dropped_on_arrival", admission.dropped_on_arrival),
            "evicted_stale": self._delta("evicted", admission.evicted),
            "lost_in_flight": self._delta("lost_in_flight", admission.lost_in_flight),
            "rejected": self._delta("rejected", admission.rejected),
            "wall_s": wall_s,
            "samples": len(records),
            "rollout_tokens_per_s": d_tokens / d_wall if d_wall > 0 else 0.0,
            "published_version": published_version,
            "buffer_groups": buffer_groups,
        }
        row.update({k: learner_metrics[k] for k in LEARNER_KEYS if k in learner_metrics})
        return row

    def progress_rate(self, tokens: int, wall_s: float) -> float:
        """Rollout tokens per second since the previous progress line (one step's own rate swings between
        0 and twice the mean: replies arrive in bursts, and at most steps none lands)."""
        d_tokens = tokens - self._last.get("progress_tokens", 0)
        d_wall = wall_s - self._last.get("progress_wall", 0.0)
        self._last["progress_tokens"], self._last["progress_wall"] = tokens, wall_s
        return d_tokens / d_wall if d_wall > 0 else 0.0

    def _delta(self, name: str, value: int) -> int:
        delta = value - self._last.get(name, 0)
        self._last[name] = value
        return delta

    # ---- reports -------------------------------------------------------------------------------
    def version_table(self) -> list[dict]:
        """Per version: publish, T_bcast, all installed, and when its first rollout reached the learner."""
        applied = {(w, v): self.t0_wall + t for w, v, t in self.installs}
        table = []
        for rec in self.deliveries:
            v, first = rec["version"], self.first_rollout.get(rec["version"])
            wall = self.publish_wall.get(v)
            # Switch lag: from a worker's verified receipt to its first generation under the version
            # (at most one generation batch already running when the snapshot arrived).
            lags = sorted(applied[(w, v)] - (wall + t) for w, t in rec["installed_s"].items()
                          if wall is not None and (w, v) in applied)
            table.append({
                "version": v, "t_publish_s": rec["t_publish_s"], "t_bcast_s": rec["t_bcast_s"],
                "t_all_s": rec["t_all_s"], "superseded_by": rec.get("superseded_by"),
                "first_rollout_after_publish_s": None if first is None else round(first - rec["t_publish_s"], 3),
                "switch_lag_s_median": round((lags[(len(lags) - 1) // 2] + lags[len(lags) // 2]) / 2, 3) if lags else None,
                "switch_lag_s_max": round(lags[-1], 3) if lags else None,
                "snapshot": rec.get("snapshot"), "bytes_full": rec.get("bytes_full"), "bytes_sent": rec.get("bytes_sent"),
            })
        return table

    # ---- checkpoints ---------------------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        d = {f.name: getattr(self, f.name) for f in fields(self)}
        d["prompts_trained"] = sorted(self.prompts_trained)
        for k in ("staleness_counts", "trained_by_node", "first_rollout", "publish_s", "publish_wall"):
            d[k] = {str(a): b for a, b in d[k].items()}
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "RunStats":
        """Inverse of :meth:`to_dict`. Keys that are no field are ignored: checkpoints written before the
        admission gate counted also held its counters here (``AdmissionCounters.from_dict`` reads them)."""
        plain = {"t_idle_s", "t_train_s", "publishes", "wall_offset_s", "t0_wall", "installs", "deliveries",
                 "evals", "_last"}
        s = cls(**{k: v for k, v in d.items() if k in plain})
        s.trained_by_node = Counter(d.get("trained_by_node", {}))
        s.staleness_counts = Counter({int(k): v for k, v in d.get("staleness_counts", {}).items()})
        s.first_rollout = {int(k): v for k, v in d.get("first_rollout", {}).items()}
        s.publish_s = {int(k): v for k, v in d.get("publish_s", {}).items()}
        s.publish_wall = {int(k): v for k, v in d.get("publish_wall", {}).items()}
        s.prompts_trained = set(d.get("prompts_trained", []))
        s.installs = [tuple(x) for x in s.installs]
        return s


def group_signals(records: Sequence[Rollout], grouping: str,
                  turn_states: Sequence[Sequence[int]]) -> dict[str, float]:
    """What a step's groups give GRPO to learn from: the fraction of groups with zero advantage (every
    sample one reward), the mean entropy of the first assistant turn within a group, and the fraction of
    turns taken from a state another episode of the group also reached (``signals``); ``turn_states``: the
    records' per-turn state keys (``batching.record_turn_states``)."""
    keys = grouping_keys([r.prompt_key for r in records], [r.omega.group for r in records], grouping)
    return {"zero_advantage_frac": zero_advantage_fraction([r.reward for r in records], keys),
            "first_turn_entropy": first_turn_entropy([first_turn(r.completion_ids, r.omega.loss_mask)
                                                      for r in records], keys),
            "shared_turn_frac": shared_turn_fraction(keys, turn_states)}


def progress_line(row: dict[str, Any], total_steps: int, tokens_per_s: float | None = None) -> str:
    """One console line for a step ``row``; ``tokens_per_s``: the rollout rate to show instead of the row's
    own (``RunStats.progress_rate``: over the steps since the previous line)."""
    rate = row["rollout_tokens_per_s"] if tokens_per_s is None else tokens_per_s
    return (
        f"step {row['step']:>4}/{total_steps} | v{row['version']:<4} | reward {row['reward_mean']:.3f} | "
        f"stale max {row['staleness_max']} mean {row['staleness_mean']:.2f} | "
        f"bubble {100 * row['bubble_ratio']:4.1f}% | {rate:7.0f} tok/s | "
        f"train {row['t_train_s']:.2f}s | {row['wall_s']:6.1f}s"
        + (f" | ${row['cost_usd']:.4f} ({row['pool_active_workers']} workers)" if "cost_usd" in row else "")
    )


def _window_mean(rows: list[dict], key: str, first: bool) -> float | None:
    """Mean of ``key`` over the first (or last) 10% of the rows that have it."""
    rows = [r for r in rows if key in r]  # rows written by an older version may lack a newer key
    if not rows:
        return None
    k = max(1, len(rows) // 10)
    part = rows[:k] if first else rows[-k:]
    return sum(r[key] for r in part) / len(part)


def summarize(cfg: Echo2Config, rows: list[dict[str, Any]], *, stats: RunStats, admission: AdmissionCounters,
              staleness: int, kappa: int, steps: int, version: int, base_model: str, workers: list[dict],
              pool: dict | None) -> dict[str, Any]:
    """The run summary (summary.json) before the broadcast, agreement, audit and plot blocks.

    ``workers``: the pool's per-worker report; ``pool``: the cost-aware pool's summary (None when the
    scheduler is off)."""
    s = stats
    first, last = _window_mean(rows, "reward_mean", True), _window_mean(rows, "reward_mean", False)
    return {
        "task": cfg.task.name,
        "mode": cfg.runtime.mode,
        "staleness_S": staleness,
        "kappa": kappa,
        "steps": steps,
        "version": version,
        "wall_s": rows[-1]["wall_s"] if rows else 0.0,
        "reward_first_10pct": first,
        "reward_last_10pct": last,
        # Groups whose samples all got one reward: zero advantage, no gradient (GRPO's dead groups).
        "zero_advantage_frac_first_10pct": _window_mean(rows, "zero_advantage_frac", True),
        "zero_advantage_frac_last_10pct": _window_mean(rows, "zero_advantage_frac", False),
        # Entropy (nats) of the first assistant turn within a group: the exploration GRPO compares.
        "first_turn_entropy_first_10pct": _window_mean(rows, "first_turn_entropy", True),
        "first_turn_entropy_last_10pct": _window_mean(rows, "first_turn_entropy", False),
        "shared_turn_frac_first_10pct": _window_mean(rows, "shared_turn_frac", True),
        "shared_turn_frac_last_10pct": _window_mean(rows, "shared_turn_frac", False),
        "distinct_prompts_trained": len(s.prompts_trained),
        "eval": s.evals,
        "bubble_ratio": s.bubble_ratio,
        "t_train_s": s.t_train_s,
        "t_idle_s": s.t_idle_s,
        "staleness_max": max((r["staleness_max"] for r in rows), default=0),
        "staleness_histogram": {str(k): v for k, v in sorted(s.staleness_counts.items())},
        "samples_accepted": admission.accepted,
        "samples_dropped_stale": admission.dropped_stale,
        "samples_dropped_stale_by_worker": dict(admission.dropped_stale_by_worker),
        "samples_dropped_stale_on_arrival": admission.dropped_on_arrival,
        "samples_evicted_stale": admission.evicted,
        "samples_lost_in_flight": admission.lost_in_flight,
        "samples_trained_by_node": dict(s.trained_by_node),
        "samples_rejected": admission.rejected,
        "reject_reasons": dict(admission.reject_reasons),
        "reward_status": dict(admission.reward_status),
        "worker_errors": admission.worker_errors,
        "rollout_tokens": admission.tokens,
        "snapshots_published": s.publishes,
        "first_rollout_s_by_version": {str(k): round(v, 3) for k, v in sorted(s.first_rollout.items())},
        "workers": workers,
        "base_model": base_model,
        "config": to_dict(cfg),
        # cost-aware pool (scheduler.enabled): dollars, $ per sample / reward point, decisions in brief
        **({"pool": pool} if pool is not None else {}),
    }
