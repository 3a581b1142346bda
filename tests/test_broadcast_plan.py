"""Stripe/chain/chunk-size planning, the live topology (repair, join, holders), link shaping."""

from __future__ import annotations

import asyncio
import time

import pytest

from echo2_sdk.runtime.broadcast.metrics import fraction_time, lower_bound_s
from echo2_sdk.runtime.broadcast.shaping import MBPS, LinkProfile, TokenBucket
from echo2_sdk.runtime.broadcast.topology import (
    MAX_CHUNK, MIN_CHUNK, SOURCE, Topology, choose_chunk_size, choose_stripes, plan_broadcast,
)

G = 64 << 20


def test_stripes_fill_the_uplink_with_full_rate_chains():
    assert choose_stripes(32, 400, 100) == 4
    assert choose_stripes(32, 350, 100) == 3  # floor: three chains at the full 100, not four at 87.5
    assert choose_stripes(2, 400, 100) == 2  # never more chains than workers
    assert choose_stripes(32, 50, 100) == 1  # uplink slower than a worker link: one chain at B0
    assert choose_stripes(5, None, 100) == 5  # unlimited uplink: everyone is a head


def test_chunk_size_keeps_pipeline_fill_small():
    assert choose_chunk_size(G, 1) == MAX_CHUNK
    c = choose_chunk_size(G, 8)
    assert (8 - 1) * c <= 0.04 * G and c & (c - 1) == 0
    assert c == 256 * 1024  # 64 MiB over chains of 8: fill 7 × 256 KiB ≈ 2.7 % of G
    assert choose_chunk_size(1 << 20, 100) == MIN_CHUNK


def test_plan_chain_splits_workers_round_robin():
    workers = [f"w{i}" for i in range(10)]
    plan = plan_broadcast(workers, G, "chain", uplink_mbps=400, worker_mbps=100)
    assert plan.stripes == 4
    assert sorted(len(c) for c in plan.chains) == [2, 2, 3, 3]
    assert sorted(w for c in plan.chains for w in c) == sorted(workers)
    assert plan.stripe_mbps == 100
    star = plan_broadcast(workers, G, "star", uplink_mbps=400, worker_mbps=100)
    assert star.stripes == 10 and star.stripe_mbps == 40
    assert plan_broadcast(workers, G, "star-unlimited", uplink_mbps=400, worker_mbps=100).stripe_mbps == 100
    with pytest.raises(ValueError, match="topology"):
        plan_broadcast(workers, G, "tree", uplink_mbps=400, worker_mbps=100)


def test_topology_repair_holder_and_join():
    plan = plan_broadcast(["a", "b", "c", "d"], G, "chain", uplink_mbps=100, worker_mbps=100)
    topo = Topology(plan)
    assert plan.chains == [["a", "b", "c", "d"]]
    assert topo.parent_of("a") == SOURCE and topo.parent_of("c") == "b"
    assert topo.holder_for("c", exclude="b") == "a"  # b sent c a bad chunk: a had it first
    assert topo.holder_for("b", exclude="a") == SOURCE
    assert topo.repair("c", failed="b") == "a"  # b died: c re-attaches to b's parent
    assert topo.parent_of("d") == "c"
    assert topo.repair("a", failed=SOURCE) == SOURCE  # the learner is never spliced out
    assert topo.join("e") == "d"  # a late worker goes to the tail
    # a forwarder spliced out as stalled, that later needs a parent itself, re-joins at a tail
    assert topo.repair("b", failed="a") == "e" and topo.chains == [["c", "d", "e", "b"]]
    star = Topology(plan_broadcast(["a", "b"], G, "star", uplink_mbps=100, worker_mbps=100))
    assert star.join("e") == SOURCE


def test_token_bucket_rate_and_shared_uplink():
    async def stream(bucket: TokenBucket, nbytes: int, piece: int) -> float:
        for _ in range(nbytes // piece):
            await bucket.take(piece)
        return time.monotonic()

    async def main():
        rate = 80 * MBPS  # 10 MB/s
        t0 = time.monotonic()
        await stream(TokenBucket(rate, 64 * 1024), 2_000_000, 50_000)
        single = time.monotonic() - t0
        shared = TokenBucket(rate, 64 * 1024)
        t0 = time.monotonic()
        ends = await asyncio.gather(*(stream(shared, 1_000_000, 50_000) for _ in range(2)))
        return single, [e - t0 for e in ends]

    single, both = asyncio.run(main())
    assert 0.17 <= single <= 0.3  # 2 MB at 10 MB/s = 0.2 s
    assert all(0.17 <= t <= 0.3 for t in both)  # two streams split the same 10 MB/s fairly


def test_unshaped_link_never_waits():
    bucket = LinkProfile.symmetric(None).uplink_bucket(1024)
    assert not bucket.shaped and bucket.book(10**9) == 0.0


def test_measurement_helpers():
    assert fraction_time([3.0, 1.0, 2.0, 4.0], 4, 1 / 1.1) == 4.0  # ceil(0.909·4) = 4
    assert fraction_time([float(i) for i in range(1, 33)], 32, 1 / 1.1) == 30.0  # ceil(29.09) = 30
    assert fraction_time([1.0], 4, 0.5) is None
    assert lower_bound_s(100 * 10**6 // 8, 400, 100, 20) == pytest.approx(1.02)
    assert lower_bound_s(100 * 10**6 // 8, None, 100, 0) == pytest.approx(1.0)
