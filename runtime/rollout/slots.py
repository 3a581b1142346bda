"""What the pool knows about each worker (``WorkerSlot``), one finished call (``Finished``), and a
worker's line of the run summary."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

from echo2_sdk.config import WorkerSpec
from echo2_sdk.runtime.rollout.base import GenerationResult, SentRequest


@dataclass
class WorkerSlot:
    name: str
    actor: Any
    spec: WorkerSpec
    """What the config says about it (placement, throughput cap, price, endpoint)."""
    inflight: list[Any] = field(default_factory=list)
    samples: int = 0
    tokens: int = 0
    generate_s: float = 0.0
    reward_s: float = 0.0
    throttle_s: float = 0.0
    errors: int = 0
    version: int = 0
    last_progress: float | None = None
    """time.perf_counter() of its last finished request or finished start, or of the work sent to it while it had
    none queued (None: never): a worker idle while the driver evaluates is not quiet."""
    dead: bool = False
    """The actor process is gone (crashed or killed); the pool stops sending it work."""
    index: int = 0
    """Position in the pool (seeds the worker's sampling)."""
    active: bool = True
    """The scheduler rents it: its actor runs (or is starting) and it is fed work and snapshots."""
    ready: bool = True
    """Its actor finished starting and holds the latest snapshot published before its activation."""
    lost: bool = False
    """The scheduler declared it lost (missed heartbeats); it stays out of the pool."""
    starts: int = 0
    """How many times an actor was started for it."""
    active_since: float | None = None
    """time.perf_counter() of the current activation (None while inactive)."""
    active_s: float = 0.0
    """Seconds it was active over finished activations."""
    node: str = ""
    """Ray node id its latest result came from (learned from results; empty before the first)."""
    slowest_request_s: float = 0.0
    """Longest generate + reward + throttle time of a request it finished (how slow "normal" is for it)."""
    overdue: str = ""
    """Why the pool stopped waiting for it (e.g. a sync-mode install long after its peers'); non-empty
    makes it hung (:meth:`RolloutPool.hung`). Cleared when a fresh actor starts."""


@dataclass(frozen=True)
class Finished:
    """One finished call of :meth:`RolloutPool.collect`."""

    slot: WorkerSlot
    result: GenerationResult | Exception
    """The decoded generate reply, or why there is none (a failed request or start, a malformed reply)."""
    request: SentRequest | None
    """What the pool asked the worker for (None for a worker's start): the reply is checked against it."""


def report_row(s: WorkerSlot) -> dict:
    """One worker's line of ``summary.json``'s ``workers``."""
    return {
        "name": s.name,
        "node": s.node,
        "gpu": s.spec.gpu,
        "max_tokens_per_s": s.spec.max_tokens_per_s,
        "usd_per_hour": s.spec.usd_per_hour or 0.0,
        "samples": s.samples,
        "tokens": s.tokens,
        "generate_s": round(s.generate_s, 3),
        "reward_s": round(s.reward_s, 3),
        "throttle_s": round(s.throttle_s, 3),
        # Reward scoring overlaps the next generation, so generation time is the capacity.
        "tokens_per_generate_s": round(s.tokens / s.generate_s, 1) if s.generate_s else None,
        "errors": s.errors,
        "dead": s.dead,
        "last_version": s.version,
        "active": s.active,
        "lost": s.lost,
        "starts": s.starts,
        "active_s": round(s.active_s + (time.perf_counter() - s.active_since if s.active_since else 0.0), 3),
    }
