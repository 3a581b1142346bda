"""Sync mode and resume wait for a snapshot's installs — but not for a worker far behind its peers.

A SIGSTOPped worker keeps its Ray actor, so its install never fails: it just never returns. Waited for,
it would hold every sync step for ``broadcast.receive_timeout_s``; instead, ``laggard_s`` after the
first peer installed, it is marked overdue, which makes it hung (:meth:`RolloutPool.why_hung`) for the
supervisor or the pool scheduler to replace.
"""

from __future__ import annotations

import time
from typing import Callable

import ray

from echo2_sdk.runtime.rollout.pool import RolloutPool


def wait_installed(pool: RolloutPool, handles: list, timeout_s: float, log: Callable[[str], None],
                   laggard_s: float | None = None) -> None:
    """Block until every worker given ``handles`` (those of the last :meth:`RolloutPool.publish`)
    installed, or ``timeout_s``; with ``laggard_s``, no longer than that after the first install."""
    names = pool.last_publish_names if len(pool.last_publish_names) == len(handles) else [""] * len(handles)
    owner = dict(zip(handles, names))
    t0 = time.perf_counter()
    pending, first_done = list(handles), None
    while pending:
        now = time.perf_counter()
        limit = t0 + timeout_s if first_done is None or laggard_s is None else min(t0 + timeout_s, first_done + laggard_s)
        if now >= limit:
            break
        ready, pending = ray.wait(pending, num_returns=1, timeout=min(1.0, limit - now))
        for ref in ready:
            first_done = first_done or time.perf_counter()
            try:
                ray.get(ref)
            except Exception as exc:
                log(f"snapshot install failed on worker {owner[ref] or '?'} ({type(exc).__name__}: {str(exc)[:200]})")
    waited_s = time.perf_counter() - t0
    for ref in pending:
        name = owner[ref]
        log(f"worker {name or '?'} has not installed the snapshot after {waited_s:.0f} s"
            + (f" ({laggard_s:g} s after its first peer): treated as hung" if first_done and laggard_s else ""))
        if name and first_done and laggard_s:
            slot = pool.slot(name)
            if slot.active and not slot.dead:
                slot.overdue = f"had not installed a snapshot {laggard_s:g} s after its peers"

