"""Prioritized opponent sampling in the driver: running returns per line-up in, opponent draws out.

The task's examples drew their line-ups once, at the pool's shares (``task.options.opponent``). With
``train.opponent_sampling: prioritized`` every example the dispatcher sends out is re-drawn here
(``adapter.against``) at the shares of :func:`echo2_sdk.opponent_sampling.prioritized_shares`, from the
mean training return against each line-up over its recent groups. The n episodes of a deal still meet
one line-up, and Ω.group still names it, so advantages keep comparing like with like. The statistics
come from the groups the learner trains on; they travel in checkpoints.
"""

from __future__ import annotations

import math
import random
from collections import deque
from dataclasses import dataclass, field
from typing import Sequence

from echo2_sdk.adapter import BaseTaskAdapter, Example
from echo2_sdk.config import ConfigError, TrainConfig
from echo2_sdk.opponent_sampling import prioritized_shares
from echo2_sdk.records import RolloutGroup

WINDOW_GROUPS = 16
"""Groups per line-up in its running mean (about 12 steps of the game examples' 4 deals a step)."""
WINDOW_RETURNS = 512
"""Episode returns, all line-ups together, behind the running spread."""


@dataclass
class OpponentSampler:
    """Draws the line-up of each dispatched example; ``observe`` feeds it the trained groups."""

    adapter: BaseTaskAdapter
    strength: float
    floor: float
    seed: int
    means: dict[str, deque] = field(default_factory=dict)
    returns: deque = field(default_factory=lambda: deque(maxlen=WINDOW_RETURNS))
    draws: int = 0

    @classmethod
    def from_config(cls, train: TrainConfig, adapter: BaseTaskAdapter) -> "OpponentSampler | None":
        """None for ``fixed``; a one-line error when ``prioritized`` has no pool to tilt."""
        if train.opponent_sampling == "fixed":
            return None
        if len(adapter.opponents) < 2:
            have = ", ".join(lineup for lineup, _ in adapter.opponents) or "no opponent option"
            raise ConfigError("train.opponent_sampling=prioritized needs two or more line-ups in task.options.opponent "
                              f"(task {adapter.name!r} has: {have}); give a pool, e.g. "
                              "\"rule:calling, rule:tag, rule:lag\", or set train.opponent_sampling=fixed")
        return cls(adapter, train.opponent_priority, train.opponent_floor, train.seed)

    @property
    def lineups(self) -> list[str]:
        return [lineup for lineup, _ in self.adapter.opponents]

    def mean_return(self, lineup: str) -> float | None:
        window = self.means.get(lineup)
        return sum(window) / len(window) if window else None

    def spread(self) -> float:
        if len(self.returns) < 2:
            return 0.0
        mean = sum(self.returns) / len(self.returns)
        return math.sqrt(sum((r - mean) ** 2 for r in self.returns) / (len(self.returns) - 1))

    def shares(self) -> tuple[float, ...]:
        return prioritized_shares([share for _, share in self.adapter.opponents],
                                  [self.mean_return(lineup) for lineup in self.lineups],
                                  spread=self.spread(), strength=self.strength, floor=self.floor)

    def observe(self, groups: Sequence[RolloutGroup]) -> None:
        """Fold trained groups into the running statistics (a group's line-up is its records' meta)."""
        known = set(self.lineups)
        for group in groups:
            lineup = group.rollouts[0].meta.get("opponent") if group.rollouts else None
            rewards = [float(r.reward) for r in group.rollouts
                       if isinstance(r.reward, (int, float)) and math.isfinite(r.reward)]
            if not isinstance(lineup, str) or lineup not in known or not rewards:  # a worker's meta is untrusted
                continue
            self.means.setdefault(lineup, deque(maxlen=WINDOW_GROUPS)).append(sum(rewards) / len(rewards))
            self.returns.extend(rewards)

    def assign(self, examples: Sequence[Example]) -> list[Example]:
        """``examples`` with re-drawn line-ups (seeded by the run's seed and the draw's position)."""
        shares = self.shares()
        out = []
        for example in examples:
            lineup = random.Random(f"opponents:{self.seed}:{self.draws}").choices(self.lineups, weights=shares)[0]
            self.draws += 1
            out.append(self.adapter.against(example, lineup))
        return out

    def row(self) -> dict[str, float]:
        """The step's metrics: each line-up's current share and running mean training return."""
        row: dict[str, float] = {}
        for lineup, share in zip(self.lineups, self.shares()):
            row[f"opponent_share/{lineup}"] = round(share, 4)
            mean = self.mean_return(lineup)
            if mean is not None:
                row[f"opponent_return/{lineup}"] = round(mean, 4)
        return row

    def state(self) -> dict:
        """What a checkpoint keeps (``restore`` takes it back)."""
        return {"means": {k: list(v) for k, v in self.means.items()}, "returns": list(self.returns),
                "draws": self.draws}

    def restore(self, state: dict) -> None:
        known = set(self.lineups)
        self.means = {k: deque(v, maxlen=WINDOW_GROUPS) for k, v in state.get("means", {}).items() if k in known}
        self.returns = deque(state.get("returns", []), maxlen=WINDOW_RETURNS)
        self.draws = int(state.get("draws", 0))
