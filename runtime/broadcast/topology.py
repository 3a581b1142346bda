"""Who feeds whom: stripe/chain/chunk-size planning and the live parent relation (repair, join).

Design (why chains of the WHOLE snapshot, not one slice per stripe)
-------------------------------------------------------------------
Every worker must receive all G bytes through its own downlink Bw, so no scheme beats G/Bw; the
learner must send G bytes at least once, so none beats G/B0 either: T ≥ max(G/B0, G/Bw).

* ``chain``: the learner opens k parallel streams ("stripes") on its uplink and each stripe feeds the
  head of one chain carrying the *whole* snapshot; every worker verifies each chunk and forwards it
  to its single child the moment it has it (fan-out 1, so each worker uploads exactly what it
  downloads and its uplink Bw never limits the chain below Bw). With k = min(N, max(1, floor(B0/Bw)))
  each stripe gets B0/k ≥ Bw of the uplink, so every chain streams at min(Bw, B0) and
      T ≈ G / min(Bw, B0) + (L - 1)·c / min(Bw, B0) + L·latency,   L = ceil(N / k),
  which is the bound max(G/B0, G/Bw) plus a pipeline fill that the chunk size c keeps small and that
  does not grow with G. floor, not ceil: with ceil(B0/Bw) stripes each would get B0/k < Bw (e.g. B0
  350, Bw 100 → four stripes at 87.5 Mb/s, T = 1.14·G/Bw) while floor gives three at the full Bw.
  The alternative — one slice of G/k per stripe, each worker in all k chains (SplitStream-style) —
  reaches the same G/Bw but needs k parents and k children per worker, so one slow or dead worker
  stalls every stripe; with whole-snapshot chains it only delays the workers behind it in one chain.
* ``star``: the learner streams to every worker itself; N·Bw > B0 splits B0 N ways, T ≈ N·G/B0
  (the NoP2P ablation).
* ``star-unlimited``: the same with an unshaped learner uplink: T ≈ G/Bw, the physical floor.

Chunk size: a store-and-forward hop holds a chunk until it has all of it and verified its hash, so
the chain tail lags the head by (L-1)·c/Bw: small chunks keep that fill short. But every chunk also
costs each hop a fixed amount of work (a frame, a hash call, several event-loop turns: ~0.1–0.2 ms of
Python), which at 128 KiB is about as much CPU as hashing the chunk itself. c is therefore the
largest power of two with (L-1)·c ≤ 4 % of G, clamped to [128 KiB, 1 MiB]: for G = 64 MiB and
L = 8 that is 256 KiB, a fill of 7 × 21 ms ≈ 0.15 s (2.7 % of G/Bw at 100 Mb/s).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

SOURCE = "source"
TOPOLOGIES = ("chain", "star", "star-unlimited")
MIN_CHUNK = 128 * 1024
MAX_CHUNK = 1024 * 1024
FILL_FRACTION = 0.04


def choose_stripes(num_workers: int, uplink_mbps: float | None, worker_mbps: float | None) -> int:
    """Number of chains k: as many full-rate stripes as the learner uplink carries, at most N."""
    if num_workers <= 0:
        raise ValueError(f"num_workers={num_workers}; a broadcast needs at least one worker")
    if uplink_mbps is None or worker_mbps is None:
        return num_workers if uplink_mbps is None else 1
    return max(1, min(num_workers, math.floor(uplink_mbps / worker_mbps)))


def choose_chunk_size(size_bytes: int, chain_length: int, fill_fraction: float = FILL_FRACTION) -> int:
    """Largest power of two c with (L-1)·c ≤ fill_fraction·G, within [MIN_CHUNK, MAX_CHUNK]."""
    if chain_length <= 1:
        target = MAX_CHUNK
    else:
        target = fill_fraction * size_bytes / (chain_length - 1)
    chunk = 1 << max(0, int(math.floor(math.log2(max(1.0, target)))))
    return max(MIN_CHUNK, min(MAX_CHUNK, chunk))


@dataclass
class BroadcastPlan:
    topology: str
    chains: list[list[str]]
    chunk_size: int
    stripe_mbps: float | None
    """Rate each stripe is expected to stream at (min of its share of B0 and Bw)."""
    notes: dict = field(default_factory=dict)

    @property
    def stripes(self) -> int:
        return len(self.chains)

    def to_dict(self) -> dict:
        return {
            "topology": self.topology,
            "stripes": self.stripes,
            "chain_lengths": [len(c) for c in self.chains],
            "chunk_size": self.chunk_size,
            "stripe_mbps": self.stripe_mbps,
            **self.notes,
        }


def plan_broadcast(
    workers: list[str],
    size_bytes: int,
    topology: str,
    *,
    uplink_mbps: float | None,
    worker_mbps: float | None,
    chunk_size: int | None = None,
    stripes: int | None = None,
) -> BroadcastPlan:
    """Chains for ``workers`` (chain j gets workers j, j+k, j+2k, … so lengths differ by ≤ 1)."""
    if topology not in TOPOLOGIES:
        raise ValueError(f"topology={topology!r}; choose one of {', '.join(TOPOLOGIES)}")
    if len(set(workers)) != len(workers) or SOURCE in workers:
        raise ValueError(f"worker ids must be unique and not {SOURCE!r}: {workers}")
    n = len(workers)
    if topology == "chain":
        k = stripes or choose_stripes(n, uplink_mbps, worker_mbps)
        if not 1 <= k <= n:
            raise ValueError(f"stripes={k} must be between 1 and the number of workers ({n})")
    else:
        k = n
    chains = [workers[j::k] for j in range(k)]
    length = max(len(c) for c in chains)
    chunk = chunk_size or choose_chunk_size(size_bytes, length)
    uplink_share = None if uplink_mbps is None or topology == "star-unlimited" else uplink_mbps / k
    rates = [r for r in (uplink_share, worker_mbps) if r is not None]
    return BroadcastPlan(
        topology, chains, chunk, min(rates) if rates else None,
        notes={"chain_length": length, "rule": "k=min(N,floor(B0/Bw)); c=pow2((L-1)c<=4%G) in [128KiB,1MiB]"},
    )


class Topology:
    """The live parent relation of one broadcast: chains minus failed workers, plus joiners."""

    def __init__(self, plan: BroadcastPlan) -> None:
        self.kind = plan.topology
        self.chains = [list(c) for c in plan.chains]
        self.failed: set[str] = set()

    def _locate(self, node: str) -> tuple[list[str], int]:
        for chain in self.chains:
            if node in chain:
                return chain, chain.index(node)
        raise KeyError(f"worker {node!r} is in no chain of this broadcast; it must join first")

    def parent_of(self, node: str) -> str:
        chain, pos = self._locate(node)
        return SOURCE if pos == 0 else chain[pos - 1]

    def _ensure_member(self, node: str) -> None:
        """A worker spliced out earlier (e.g. as a stalled forwarder) that still needs a parent joins again."""
        if not any(node in c for c in self.chains):
            self.join(node)

    def repair(self, node: str, failed: str) -> str:
        """``node`` lost ``failed`` (dead or stalled): splice it out and return node's new parent."""
        if failed != SOURCE and failed != node:
            self.failed.add(failed)
            for chain in self.chains:
                if failed in chain:
                    chain.remove(failed)
        self._ensure_member(node)
        return self.parent_of(node)

    def holder_for(self, node: str, exclude: str) -> str:
        """Another worker that must already hold any chunk ``exclude`` sent ``node``: the nearest live
        ancestor above ``exclude`` (it passed through there first), else the learner."""
        self._ensure_member(node)
        chain, pos = self._locate(node)
        upstream = chain[:pos]
        if exclude in upstream:
            upstream = upstream[:upstream.index(exclude)]
        live = [w for w in upstream if w not in self.failed]
        return live[-1] if live else SOURCE

    def join(self, node: str) -> str:
        """Add a worker mid-broadcast: tail of the shortest chain (a new stripe in the star topologies)."""
        if any(node in c for c in self.chains):
            return self.parent_of(node)
        self.failed.discard(node)
        if self.kind != "chain" or not self.chains:
            self.chains.append([node])
        else:
            min(self.chains, key=len).append(node)
        return self.parent_of(node)

    def members(self) -> list[str]:
        return [w for c in self.chains for w in c]
