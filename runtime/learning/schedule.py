"""Learning-rate schedules: the learner's lr at each step, as a pure function of the step.

A schedule depends only on the learner's step (its version), so a resumed run continues on the same
curve, and every rank computes the same lr without talking.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

__all__ = ["LrSchedule", "SCHEDULE_KINDS"]

SCHEDULE_KINDS = ("constant", "linear", "cosine")


@dataclass(frozen=True)
class LrSchedule:
    """lr(step) = base_lr × factor(step): a linear warm-up, then ``kind`` from 1 down to ``min_ratio``.

    ``constant`` keeps the factor at 1 after the warm-up; ``linear`` and ``cosine`` decay it towards
    ``min_ratio``, reached at step ``total_steps`` (one past the run's last step, as Hugging Face's
    schedulers count, so no step of the run trains at the floor). The warm-up's first step already
    trains at ``base_lr / warmup_steps`` (Hugging Face's starts at 0).
    """

    base_lr: float
    kind: Literal["constant", "linear", "cosine"] = "constant"
    total_steps: int = 1
    warmup_steps: int = 0
    min_ratio: float = 0.0

    def __post_init__(self) -> None:
        if self.kind not in SCHEDULE_KINDS:
            raise ValueError(f"lr schedule kind={self.kind!r} is not one of {', '.join(SCHEDULE_KINDS)}")
        if self.total_steps < 1 or self.warmup_steps < 0:
            raise ValueError(f"total_steps={self.total_steps} must be >= 1 and warmup_steps={self.warmup_steps} >= 0")
        if not 0.0 <= self.min_ratio <= 1.0:
            raise ValueError(f"min_ratio={self.min_ratio} must be in [0, 1]")

    def factor(self, step: int) -> float:
        """The multiplier of ``base_lr`` at 0-based learner step ``step``.

        >>> s = LrSchedule(1.0, "linear", total_steps=5)
        >>> [s.factor(i) for i in range(5)]
        [1.0, 0.8, 0.6, 0.4, 0.2]
        >>> LrSchedule(1.0, "cosine", total_steps=3, min_ratio=0.1).factor(1)
        0.775
        >>> [LrSchedule(1.0, "constant", total_steps=9, warmup_steps=2).factor(i) for i in (0, 1, 2, 8)]
        [0.5, 1.0, 1.0, 1.0]
        >>> LrSchedule(1.0, "linear", total_steps=4).factor(10)  # past the end: stays at the floor
        0.0
        """
        if step < self.warmup_steps:
            return (step + 1) / self.warmup_steps
        if self.kind == "constant":
            return 1.0
        span = self.total_steps - self.warmup_steps
        progress = 0.0 if span <= 0 else min(1.0, (step - self.warmup_steps) / span)
        if self.kind == "linear":
            shape = 1.0 - progress
        else:
            shape = 0.5 * (1.0 + math.cos(math.pi * progress))
        return round(self.min_ratio + (1.0 - self.min_ratio) * shape, 12)

    def lr_at(self, step: int) -> float:
        """The learning rate at 0-based learner step ``step``."""
        return self.base_lr * self.factor(step)
