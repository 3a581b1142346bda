"""Replay buffer of rollout groups with bounded staleness.

A group generated under version v is admissible while the learner is at version v_t iff
v ≥ v_t − S. The learner takes the oldest admissible groups first (lowest version, then arrival
order), so no admissible group ages out while younger ones are trained on. Groups that fall below
the bound are dropped and counted, never trained on.
"""

from __future__ import annotations

import heapq
import itertools
from dataclasses import dataclass
from typing import Callable

from echo2_sdk.records import RolloutGroup


def is_admissible(version: int, learner_version: int, staleness: int) -> bool:
    """Bounded-staleness admission rule: v ≥ v_t − S."""
    return version >= learner_version - staleness


@dataclass
class BufferStats:
    admitted_groups: int = 0
    dropped_stale_groups: int = 0
    dropped_stale_samples: int = 0
    taken_groups: int = 0


class ReplayBuffer:
    """Groups waiting to be trained on. Not thread-safe: owned by the learner's driver loop."""

    def __init__(self, staleness: int, on_drop: Callable[[RolloutGroup], None] | None = None) -> None:
        """``on_drop`` is called with every group dropped as stale (on arrival or later)."""
        if staleness < 0:
            raise ValueError(f"staleness S must be ≥ 0, got {staleness}")
        self.staleness = staleness
        self.on_drop = on_drop
        self._heap: list[tuple[int, int, RolloutGroup]] = []
        self._arrival = itertools.count()
        self.stats = BufferStats()

    def __len__(self) -> int:
        return len(self._heap)

    def add(self, group: RolloutGroup, learner_version: int) -> bool:
        """Admit ``group`` if it is fresh enough for the learner at ``learner_version``."""
        if not is_admissible(group.version, learner_version, self.staleness):
            self._count_drop(group)
            return False
        heapq.heappush(self._heap, (group.version, next(self._arrival), group))
        self.stats.admitted_groups += 1
        return True

    def evict_stale(self, learner_version: int) -> int:
        """Drop every group that is no longer admissible; return how many were dropped."""
        dropped = 0
        while self._heap and not is_admissible(self._heap[0][0], learner_version, self.staleness):
            _, _, group = heapq.heappop(self._heap)
            self._count_drop(group)
            dropped += 1
        return dropped

    def num_admissible(self, learner_version: int) -> int:
        return sum(is_admissible(v, learner_version, self.staleness) for v, _, _ in self._heap)

    def take(self, count: int, learner_version: int) -> list[RolloutGroup] | None:
        """The ``count`` oldest admissible groups, or None (taking nothing) if fewer are available."""
        self.evict_stale(learner_version)
        if len(self._heap) < count:
            return None
        groups = [heapq.heappop(self._heap)[2] for _ in range(count)]
        self.stats.taken_groups += count
        return groups

    def _count_drop(self, group: RolloutGroup) -> None:
        self.stats.dropped_stale_groups += 1
        self.stats.dropped_stale_samples += len(group.rollouts)
        if self.on_drop is not None:
            self.on_drop(group)
