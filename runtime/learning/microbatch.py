"""Token-budget micro-batches: how one optimizer update's sequences are spread over ranks and passes.

Pure planning, no torch model: every rank computes the same plan from the same batch and the same
shuffle, so no plan travels between ranks. A mini-batch's sequences are first balanced over the ranks
by token count (longest first onto the lightest rank), then each rank's share is packed, longest first,
into micro-batches whose padded size ``rows × width`` stays within ``micro_batch_tokens`` (a sequence
longer than the budget gets a micro-batch of its own). Sorting by length keeps short sequences together,
so padding drops. Ranks with fewer micro-batches get zero-weight fillers: under FSDP every forward and
backward is a collective, so every rank must run the same number of them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence


@dataclass(frozen=True)
class MicroBatch:
    """One forward/backward: batch rows ``rows``, token columns ``[start, stop)``.

    ``weight`` is 1 for real work and 0 for a filler, whose loss is multiplied by 0 and whose metrics are
    ignored (it exists so that every rank issues the same collectives).
    """

    rows: tuple[int, ...]
    start: int
    stop: int
    weight: float = 1.0

    @property
    def tokens(self) -> int:
        """Padded tokens the forward holds: rows × width."""
        return len(self.rows) * (self.stop - self.start)


@dataclass(frozen=True)
class MiniBatchPlan:
    """The micro-batches of one optimizer update, per rank; every rank has the same number."""

    rows: tuple[int, ...]
    per_rank: tuple[tuple[MicroBatch, ...], ...]

    @property
    def num_passes(self) -> int:
        return len(self.per_rank[0])


def token_spans(attention_mask: Sequence[Sequence[int]]) -> list[tuple[int, int]]:
    """``(first, last + 1)`` column of the real tokens of each row (``(0, 0)`` for an empty row).

    >>> token_spans([[1, 1, 0, 0], [0, 1, 1, 1]])
    [(0, 2), (1, 4)]
    """
    spans = []
    for row in attention_mask:
        real = [j for j, m in enumerate(row) if m]
        spans.append((real[0], real[-1] + 1) if real else (0, 0))
    return spans


def split_across_ranks(rows: Sequence[int], lengths: Sequence[int], num_ranks: int) -> list[list[int]]:
    """Rows spread over ranks, longest first onto the rank with the fewest tokens so far (ties: lowest rank).

    >>> split_across_ranks([0, 1, 2, 3], [10, 4, 7, 3], 2)
    [[0, 3], [2, 1]]
    """
    if num_ranks < 1:
        raise ValueError(f"num_ranks={num_ranks} must be >= 1")
    shares: list[list[int]] = [[] for _ in range(num_ranks)]
    load = [0] * num_ranks
    for row in sorted(rows, key=lambda r: (-lengths[r], r)):
        rank = min(range(num_ranks), key=lambda k: (load[k], k))
        shares[rank].append(row)
        load[rank] += lengths[row]
    return shares


def pack(rows: Sequence[int], spans: Sequence[tuple[int, int]], budget: int | None) -> list[MicroBatch]:
    """Rows packed, longest first, into micro-batches of at most ``budget`` padded tokens (None: one).

    >>> [m.rows for m in pack([0, 1, 2], [(0, 6), (0, 2), (0, 3)], budget=8)]
    [(0,), (2, 1)]
    """
    ordered = sorted(rows, key=lambda r: (-(spans[r][1] - spans[r][0]), r))
    out: list[MicroBatch] = []
    current: list[int] = []
    start = stop = 0
    for row in ordered:
        lo, hi = spans[row]
        if current:
            new_start, new_stop = min(start, lo), max(stop, hi)
            if budget is None or (len(current) + 1) * (new_stop - new_start) <= budget:
                current.append(row)
                start, stop = new_start, new_stop
                continue
            out.append(MicroBatch(tuple(current), start, stop))
        current, start, stop = [row], lo, hi
    if current:
        out.append(MicroBatch(tuple(current), start, stop))
    return out


def plan_minibatch(
    rows: Sequence[int], spans: Sequence[tuple[int, int]], num_ranks: int, budget: int | None
) -> MiniBatchPlan:
    """Balance ``rows`` over ranks, pack each share, pad every rank to the same number of passes."""
    lengths = [hi - lo for lo, hi in spans]
    per_rank = [pack(share, spans, budget) for share in split_across_ranks(rows, lengths, num_ranks)]
    passes = max(len(p) for p in per_rank)
    anchor = max(rows, key=lambda r: (lengths[r], -r))  # a filler reuses two real tokens of this row
    lo, hi = spans[anchor]
    filler = MicroBatch((anchor,), lo, min(hi, lo + 2), weight=0.0)
    padded = tuple(tuple(p) + (filler,) * (passes - len(p)) for p in per_rank)
    return MiniBatchPlan(tuple(rows), padded)


@dataclass(frozen=True)
class PackingStats:
    """What the plan costs: padded vs real tokens of the real micro-batches (all ranks)."""

    micro_batches: int
    padded_tokens: int
    real_tokens: int
    largest_tokens: int

    @property
    def padding_frac(self) -> float:
        return 1.0 - self.real_tokens / self.padded_tokens if self.padded_tokens else 0.0


def packing_stats(plans: Sequence[MiniBatchPlan], spans: Sequence[tuple[int, int]]) -> PackingStats:
    real = [m for plan in plans for share in plan.per_rank for m in share if m.weight > 0]
    return PackingStats(
        micro_batches=len(real),
        padded_tokens=sum(m.tokens for m in real),
        real_tokens=sum(spans[r][1] - spans[r][0] for m in real for r in m.rows),
        largest_tokens=max((m.tokens for m in real), default=0),
    )
