"""The learner's prompt stream: a seeded, epoch-shuffled walk over the train split.

Its position is a single integer (examples handed out so far) so that checkpoints can resume the
exact data order.
"""

from __future__ import annotations

import random
from typing import Sequence

from echo2_sdk.adapter import Example


class PromptStream:
    def __init__(self, examples: Sequence[Example], seed: int, position: int = 0) -> None:
        if not examples:
            raise ValueError("the task's train split is empty: nothing to train on")
        self._examples = list(examples)
        self.seed = seed
        self.position = position
        self._epoch = -1
        self._order: list[int] = []

    def _order_for(self, epoch: int) -> list[int]:
        if epoch != self._epoch:
            order = list(range(len(self._examples)))
            random.Random(self.seed * 1_000_003 + epoch).shuffle(order)
            self._epoch, self._order = epoch, order
        return self._order

    def take(self, count: int) -> list[Example]:
        """The next ``count`` examples (wrapping into a new shuffled epoch as needed)."""
        out = []
        n = len(self._examples)
        for _ in range(count):
            epoch, idx = divmod(self.position, n)
            out.append(self._examples[self._order_for(epoch)[idx]])
            self.position += 1
        return out

    @property
    def epoch(self) -> float:
        return self.position / len(self._examples)
