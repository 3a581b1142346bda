"""Token-budget micro-batch plans: every row once, the budget held, ranks balanced and in step."""

from __future__ import annotations

import doctest
import random

import pytest

from echo2_sdk.runtime.learning import microbatch
from echo2_sdk.runtime.learning.microbatch import pack, packing_stats, plan_minibatch, split_across_ranks


def test_the_docstring_examples_hold():
    assert doctest.testmod(microbatch).failed == 0


def spans_of(lengths):
    return [(0, n) for n in lengths]


@pytest.mark.parametrize("num_ranks, budget", [(1, None), (1, 64), (2, 64), (3, 100), (4, 2048)])
def test_every_row_is_trained_exactly_once_within_the_budget(num_ranks, budget):
    rng = random.Random(num_ranks)
    lengths = [rng.randint(2, 60) for _ in range(37)]
    rows = list(range(37))
    plan = plan_minibatch(rows, spans_of(lengths), num_ranks, budget)
    real = [m for share in plan.per_rank for m in share if m.weight > 0]
    assert sorted(r for m in real for r in m.rows) == rows
    assert len({len(share) for share in plan.per_rank}) == 1  # the same number of passes on every rank
    for m in real:
        assert m.tokens <= (budget or 10**9) or len(m.rows) == 1
        assert m.stop - m.start == max(lengths[r] for r in m.rows)


def test_a_sequence_longer_than_the_budget_gets_its_own_micro_batch():
    micro = pack([0, 1, 2], [(0, 100), (0, 3), (0, 3)], budget=10)
    assert [m.rows for m in micro] == [(0,), (1, 2)] and micro[0].tokens == 100


def test_fillers_pad_the_ranks_with_fewer_passes_and_weigh_nothing():
    plan = plan_minibatch([0, 1, 2], spans_of([30, 2, 2]), 2, budget=30)
    counts = [sum(m.weight > 0 for m in share) for share in plan.per_rank]
    assert counts == [1, 1] and plan.num_passes == 1
    plan = plan_minibatch([0], spans_of([5]), 2, budget=None)  # one row, two ranks
    assert [m.weight for m in plan.per_rank[1]] == [0.0] and plan.per_rank[1][0].stop - plan.per_rank[1][0].start == 2


def test_ranks_get_balanced_token_loads():
    rng = random.Random(0)
    lengths = [rng.randint(64, 1024) for _ in range(64)]
    shares = split_across_ranks(range(64), lengths, 4)
    loads = [sum(lengths[r] for r in share) for share in shares]
    assert max(loads) - min(loads) <= max(lengths)


def test_sorting_by_length_cuts_padding():
    rng = random.Random(1)
    lengths = [rng.randint(64, 1024) for _ in range(64)]
    spans = spans_of(lengths)
    whole = packing_stats([plan_minibatch(range(64), spans, 1, None)], spans)
    budgeted = packing_stats([plan_minibatch(range(64), spans, 1, 8192)], spans)
    assert whole.micro_batches == 1 and budgeted.micro_batches > 4
    assert budgeted.padding_frac < whole.padding_frac / 3
    assert budgeted.largest_tokens <= 8192


def test_left_padded_rows_are_cut_to_their_span():
    spans = microbatch.token_spans([[0, 0, 1, 1], [0, 1, 1, 1]])
    (m,) = pack([0, 1], spans, budget=None)
    assert (m.start, m.stop) == (1, 4)
