"""Replay buffer of rollout groups with bounded staleness.

A group generated under version v is admissible while the learner is at version v_t iff
v ≥ v_t − S. By default the learner takes the oldest admissible groups first (lowest version, then
arrival order), so no admissible group ages out while younger ones are trained on; ``order`` may take
the freshest first instead (lower staleness, more groups age out) or half of each. Groups that fall below
the bound are dropped and counted, never trained on: on arrival (``ON_ARRIVAL``, never admitted) or
later, once the learner has moved on (``EVICTED``, admitted and then dropped).
"""

from __future__ import annotations

import heapq
import itertools
from dataclasses import dataclass
from typing import Callable, Iterator

from echo2_sdk.records import RolloutGroup

ON_ARRIVAL = "on_arrival"
"""A group too old for the learner when it arrived: never admitted."""
EVICTED = "evicted"
"""An admitted group that fell below the bound in the buffer before it was trained on."""


ORDERS = ("oldest", "freshest", "mixed")
"""Buffer orders (``runtime.buffer_order``): which admissible groups a learner step takes."""


def is_admissible(version: int, learner_version: int, staleness: int) -> bool:
    """Bounded-staleness admission rule: v ≥ v_t − S."""
    return version >= learner_version - staleness


@dataclass
class BufferStats:
    admitted_groups: int = 0
    dropped_stale_groups: int = 0
    """Groups dropped as stale, on arrival and evicted together."""
    dropped_stale_samples: int = 0
    evicted_groups: int = 0
    """Of ``dropped_stale_groups``, those admitted first and evicted later."""
    taken_groups: int = 0


class ReplayBuffer:
    """Groups waiting to be trained on. Not thread-safe: owned by the learner's driver loop."""

    def __init__(self, staleness: int, on_drop: Callable[[RolloutGroup, str], None] | None = None,
                 order: str = "oldest") -> None:
        """``on_drop(group, kind)`` is called with every group dropped as stale, ``kind`` being
        ``ON_ARRIVAL`` or ``EVICTED``. ``order``: one of ``ORDERS`` (which groups :meth:`take` hands out)."""
        if staleness < 0:
            raise ValueError(f"staleness S must be ≥ 0, got {staleness}")
        if order not in ORDERS:
            raise ValueError(f"buffer order {order!r} is not one of {', '.join(ORDERS)}")
        self.staleness = staleness
        self.order = order
        self.on_drop = on_drop
        self._heap: list[tuple[int, int, RolloutGroup]] = []
        self._arrival = itertools.count()
        self.stats = BufferStats()

    def __len__(self) -> int:
        return len(self._heap)

    def add(self, group: RolloutGroup, learner_version: int) -> bool:
        """Admit ``group`` if it is fresh enough for the learner at ``learner_version``."""
        if not is_admissible(group.version, learner_version, self.staleness):
            self._count_drop(group, ON_ARRIVAL)
            return False
        heapq.heappush(self._heap, (group.version, next(self._arrival), group))
        self.stats.admitted_groups += 1
        return True

    def restore(self, group: RolloutGroup) -> None:
        """Put back a group admitted before (a checkpoint's): no staleness check here, since it was counted
        as admitted then; the caller evicts what is stale now (:meth:`evict_stale`, counted ``EVICTED``)."""
        heapq.heappush(self._heap, (group.version, next(self._arrival), group))

    def evict_stale(self, learner_version: int) -> int:
        """Drop every group that is no longer admissible; return how many were dropped."""
        dropped = 0
        while self._heap and not is_admissible(self._heap[0][0], learner_version, self.staleness):
            _, _, group = heapq.heappop(self._heap)
            self._count_drop(group, EVICTED)
            dropped += 1
        return dropped

    def num_admissible(self, learner_version: int) -> int:
        return sum(is_admissible(v, learner_version, self.staleness) for v, _, _ in self._heap)

    def take(self, count: int, learner_version: int) -> list[RolloutGroup] | None:
        """The ``count`` oldest admissible groups, or None (taking nothing) if fewer are available."""
        self.evict_stale(learner_version)
        if len(self._heap) < count:
            return None
        freshest = {"oldest": 0, "freshest": count, "mixed": count // 2}[self.order]
        chosen = heapq.nlargest(freshest, self._heap) if freshest else []
        if chosen:
            taken = {id(entry) for entry in chosen}
            self._heap = [entry for entry in self._heap if id(entry) not in taken]
            heapq.heapify(self._heap)
        groups = [heapq.heappop(self._heap)[2] for _ in range(count - freshest)] + [entry[2] for entry in chosen]
        self.stats.taken_groups += count
        return groups

    def groups(self) -> Iterator[RolloutGroup]:
        """The buffered groups in the order :meth:`take` would hand them out (lowest version, then arrival);
        re-adding them in this order to an empty buffer rebuilds the same order (a checkpoint does)."""
        return (group for _, _, group in sorted(self._heap, key=lambda entry: entry[:2]))

    def _count_drop(self, group: RolloutGroup, kind: str) -> None:
        self.stats.dropped_stale_groups += 1
        self.stats.dropped_stale_samples += len(group.rollouts)
        self.stats.evicted_groups += kind == EVICTED
        if self.on_drop is not None:
            self.on_drop(group, kind)
