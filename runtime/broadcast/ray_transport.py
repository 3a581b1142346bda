"""Peer-assisted broadcast as a ``SnapshotTransport`` for the Ray rollout pool.

Ray only starts things and carries the completion handles: the snapshot bytes go worker to worker
over the nodes' own TCP sockets, and repair/join decisions go over the broadcast control channel.

Wiring (two small edits, see the report):
  * ``class RolloutWorker(BroadcastReceiverMixin)`` (from ``endpoints``, which does not import the
    pool, so worker.py can use it without a cycle) — gives the actor ``broadcast_start`` /
    ``broadcast_receive`` / ``broadcast_close``;
  * ``RolloutPool(..., transport=P2PSnapshotTransport(topology="chain", uplink_mbps=..., worker_mbps=...))``.
"""

from __future__ import annotations

import time
from typing import Any, Sequence

import ray

from echo2_sdk.runtime.broadcast.endpoints import BroadcastReceiverMixin, LearnerBroadcaster

__all__ = ["BroadcastReceiverMixin", "P2PSnapshotTransport"]
from echo2_sdk.runtime.broadcast.base import CONTROL, SnapshotTransport
from echo2_sdk.runtime.broadcast.delta_plan import DeltaPolicy


class P2PSnapshotTransport(SnapshotTransport):
    """``publish`` serializes the weights, starts the striped-chain broadcast and returns one Ray
    handle per worker that completes when that worker has installed the version."""

    def __init__(self, *, topology: str = "chain", uplink_mbps: float | None = None,
                 worker_mbps: float | None = None, latency_ms: float = 0.0, chunk_kb: int | None = None,
                 bind_host: str = "127.0.0.1", advertise_host: str | None = None,
                 worker_bind_host: str = "127.0.0.1", receive_timeout_s: float = 600.0,
                 emulate_worker_links: bool = False, port_range: tuple[int, int] | None = None,
                 delta: DeltaPolicy | None = None) -> None:
        """``emulate_worker_links`` shapes every worker's node at ``worker_mbps`` (single-machine
        experiments); on real WAN workers leave it off and let the network do the limiting.
        ``port_range``: (first, last) ports the learner's two listeners (three with ``delta``) and each worker's one take
        (None: ephemeral ports). ``delta``: publish deltas where they pay (``delta_plan``; None: full only)."""
        self.broadcaster = LearnerBroadcaster(
            topology=topology, uplink_mbps=uplink_mbps, worker_mbps=worker_mbps, latency_ms=latency_ms,
            chunk_kb=chunk_kb, bind_host=bind_host, advertise_host=advertise_host, port_range=port_range,
            delta=delta,
        )
        self.port_range = port_range
        self.worker_link = (
            {"uplink_mbps": worker_mbps, "downlink_mbps": worker_mbps, "latency_ms": latency_ms}
            if emulate_worker_links else {}
        )
        self.worker_bind_host = worker_bind_host
        self.receive_timeout_s = receive_timeout_s
        self._ids: dict[Any, str] = {}
        self._names: dict[str, str] = {}
        """Broadcast node id → the pool's worker name (for reports)."""
        self.last_publish: dict = {}

    def _node_id(self, actor: Any) -> str:
        key = actor._actor_id.hex() if hasattr(actor, "_actor_id") else id(actor)
        if key not in self._ids:
            self._ids[key] = f"w{len(self._ids)}"
        return self._ids[key]

    def _ensure_started(self, workers: Sequence[Any]) -> tuple[list[str], list[str]]:
        """(node ids of ``workers``, the subset that can receive now). A worker whose actor is gone
        or whose node is lost is left out of the plan; its handle fails, the others proceed."""
        ids = [self._node_id(w) for w in workers]
        new = [(w, i) for w, i in zip(workers, ids) if i not in self.broadcaster.registered()]
        broken: set[str] = set()
        if new:
            extra = {"port_range": tuple(self.port_range)} if self.port_range else {}
            refs = [
                w.broadcast_start.options(concurrency_group=CONTROL).remote(
                    i, self.broadcaster.control_address, self.broadcaster.public_key,
                    self.broadcaster.credential_for(i), self.worker_link,
                    self.worker_bind_host, **extra,
                )
                for w, i in new
            ]
            for (_, i), ref in zip(new, refs):
                try:
                    ray.get(ref, timeout=60)
                except Exception:  # a dead or unreachable worker must not stop the others' broadcast
                    broken.add(i)
            self.broadcaster.wait_registered([i for _, i in new if i not in broken])
        dead = set(self.broadcaster.coordinator.dead)
        return ids, [i for i in ids if i not in broken and i not in dead]

    def publish(self, state_dict: dict, version: int, workers: Sequence[Any],
                names: Sequence[str] | None = None) -> list[Any]:
        t0 = time.monotonic()
        ids, receiving = self._ensure_started(workers)
        if names is not None:
            self._names.update(zip(ids, names))
        self.broadcaster.publish(state_dict, version, receiving)
        self.last_publish = {"version": version, "workers": receiving, "publish_call_s": time.monotonic() - t0}
        return [
            w.broadcast_receive.options(concurrency_group=CONTROL).remote(version, self.receive_timeout_s)
            for w in workers
        ]

    def progress(self, version: int, handles: Sequence[Any] = ()) -> dict | None:
        """Install times (seconds since publish) by worker, measured by the learner's control server
        when each worker reports its verified install; ``settled`` once every live worker is done."""
        report = self.broadcaster.progress(version)
        if report is None:
            return None
        names = {node: name for node, name in self._names.items()}
        report["installed_s"] = {names.get(w, w): t for w, t in report["installed_s"].items()}
        report["failed"] = {names.get(w, w): r for w, r in report["failed"].items()}
        report["live"] = [names.get(w, w) for w in report["live"]]
        return report

    def refusals(self) -> dict[str, int]:
        return self.broadcaster.refusals()

    def wait(self, version: int, timeout_s: float = 600.0) -> dict:
        """Install times, failures and repairs of ``version`` (for logging T_bcast)."""
        return self.broadcaster.wait(version, timeout_s)

    def close(self, workers: Sequence[Any] = ()) -> None:
        try:
            if workers:
                refs = [w.broadcast_close.options(concurrency_group=CONTROL).remote() for w in workers]
                ray.wait(refs, num_returns=len(refs), timeout=10)
        finally:
            self.broadcaster.close()
