"""What the cost-aware pool carries through a checkpoint: the dollars spent so far and what the scheduler
has learned (μ̂_i of the workers it measured, the T_train / T_bcast EMAs, the random policy's RNG, the
decision log), so that a resumed run bills on from the same total and plans its first pool from
measurements rather than from the pool file's priors.

Not carried: which workers were active or alive. Their actors ended with the stopped run; the resumed one
plans afresh (``PoolScheduler.start``) from the carried estimates. A checkpoint without this state (written
without the scheduler, or before it was saved) resumes with the priors and the cost at zero.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Mapping


@dataclass(frozen=True)
class CostTotals:
    """:class:`~echo2_sdk.runtime.planning.cost.CostMeter`'s cumulative figures."""

    cost_usd: float = 0.0
    gpu_hours: Mapping[str, float] = field(default_factory=dict)
    usd_by_gpu: Mapping[str, float] = field(default_factory=dict)
    accepted_samples: int = 0
    first_reward: float | None = None
    """The first reward reported: the baseline of ``usd_per_reward_point``."""


@dataclass(frozen=True)
class SchedulerEstimates:
    """What :class:`~echo2_sdk.runtime.planning.scheduler.PoolScheduler` measured."""

    t_train_s: float
    t_bcast_s: float
    mu_measured: Mapping[str, float]
    """μ̂_i (rollouts/s) of the workers measured at least once; the others keep their priors."""
    rng_state: tuple
    """``random.Random.getstate()`` of the random policy."""


@dataclass(frozen=True)
class PoolState:
    cost: CostTotals
    estimates: SchedulerEstimates
    t_train_measured: bool
    """A step time was measured (the first one replaces the configured prior outright)."""
    decisions: tuple[dict, ...]
    """The decision log entries applied so far (``decisions.jsonl`` keeps them too)."""

    def to_dict(self) -> dict[str, Any]:
        c, e = self.cost, self.estimates
        version, internal, gauss = e.rng_state
        return {
            "format": "echo2-pool-state/1",
            "cost": {"cost_usd": c.cost_usd, "gpu_hours": dict(c.gpu_hours), "usd_by_gpu": dict(c.usd_by_gpu),
                     "accepted_samples": c.accepted_samples, "first_reward": c.first_reward},
            "estimates": {"t_train_s": e.t_train_s, "t_bcast_s": e.t_bcast_s, "mu_measured": dict(e.mu_measured),
                          "rng_state": [version, list(internal), gauss]},
            "t_train_measured": self.t_train_measured,
            # One string: entries hold free text (reasons) and are only read back whole.
            "decisions": json.dumps(list(self.decisions), default=str),
        }

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "PoolState":
        c, e = d["cost"], d["estimates"]
        version, internal, gauss = e["rng_state"]
        return cls(
            cost=CostTotals(float(c["cost_usd"]), dict(c["gpu_hours"]), dict(c["usd_by_gpu"]),
                            int(c["accepted_samples"]), c["first_reward"]),
            estimates=SchedulerEstimates(float(e["t_train_s"]), float(e["t_bcast_s"]), dict(e["mu_measured"]),
                                         (version, tuple(internal), gauss)),
            t_train_measured=bool(d["t_train_measured"]),
            decisions=tuple(json.loads(d["decisions"])),
        )
