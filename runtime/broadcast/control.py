"""The control plane's decision logic: who is whose parent, repair and join decisions, completion records.

``Coordinator`` does no I/O: ``control_channel`` carries its decisions to the hosts over the
authenticated JSON-lines channel (``ControlServer`` in the learner, ``TcpControlClient`` in every
process hosting nodes). Only small messages travel there; snapshot bytes never do.

Every parent the coordinator names comes with a single-use ticket for that parent's chunk port
(``credentials.RunSecret.ticket``), so only the children it sent are served. A node may only speak
for itself (the channel checks that) and may only declare its *own current parent* failed: a worker
cannot splice an honest peer out of a chain.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field
from typing import Callable

from echo2_sdk.runtime.broadcast.base import Peer
from echo2_sdk.runtime.broadcast.credentials import Refusals, RunSecret
from echo2_sdk.runtime.broadcast.topology import SOURCE, BroadcastPlan, Topology

MAX_REPAIRS_PER_NODE = 64
"""Repair or refetch requests one node may make per version (a node gives up after 16); more are refused."""


def peer_dict(peer: Peer | None) -> dict | None:
    return None if peer is None else {"id": peer.id, "host": peer.host, "port": peer.port, "ticket": peer.ticket}


def peer_from_dict(raw: dict | None) -> Peer | None:
    """A peer named by the (authenticated) learner."""
    return None if raw is None else Peer(str(raw["id"]), str(raw["host"]), int(raw["port"]), str(raw.get("ticket", "")))


@dataclass
class BroadcastRecord:
    version: int
    plan: BroadcastPlan
    topology: Topology
    t_publish: float
    assigned: dict[str, float] = field(default_factory=dict)
    """Worker → monotonic time it was told to receive (publish, or its join)."""
    installed: dict[str, dict] = field(default_factory=dict)
    """Worker → its report; ``t_reported`` is the learner's own monotonic time of arrival."""
    failed: dict[str, dict] = field(default_factory=dict)
    repairs: list[dict] = field(default_factory=list)
    refetches: list[dict] = field(default_factory=list)
    requests: dict[str, int] = field(default_factory=dict)
    """Worker → repair/refetch requests it made for this version (bounded by ``MAX_REPAIRS_PER_NODE``)."""


class Coordinator:
    def __init__(self, source: Peer, secret: RunSecret) -> None:
        self.source = source
        self.secret = secret
        self.refused = Refusals("broadcast control")
        """Everything refused on the control plane (the channel counts there too), by reason."""
        self.peers: dict[str, Peer] = {}
        self.dead: set[str] = set()
        self.demoted: set[str] = set()
        """Workers a child had to re-attach around (dead or stalled parents) that have not installed a
        version since: later plans put them at the tails of the chains, where a hung one delays no one."""
        self.broadcasts: dict[int, BroadcastRecord] = {}
        self._senders: dict[str, Callable[[dict], None]] = {}
        self._changed = asyncio.Event()

    # ---- membership -------------------------------------------------------------------------
    def register(self, peer: Peer, send: Callable[[dict], None]) -> None:
        if peer.id == SOURCE:
            raise ValueError(f"worker id {SOURCE!r} is reserved for the learner")
        self.peers[peer.id] = peer
        self._senders[peer.id] = send
        self.dead.discard(peer.id)
        self._notify()

    def sender_of(self, node: str) -> Callable[[dict], None] | None:
        """The channel that currently speaks for ``node`` (a restarted host takes its nodes over)."""
        return self._senders.get(node)

    def lost(self, nodes: list[str]) -> None:
        """The hosting process of ``nodes`` disconnected: they are dead for every broadcast."""
        self.dead.update(nodes)
        for record in self.broadcasts.values():
            for node in nodes:
                if node not in record.installed:
                    record.topology.failed.add(node)
        self._notify()

    def plan_order(self, workers: list[str]) -> list[str]:
        """``workers`` with the demoted ones last (a chain plan cuts stripes ``workers[j::k]``, so they end
        up at the chains' tails).

        >>> c = Coordinator(Peer("source", "127.0.0.1", 1), RunSecret.generate()); c.demoted.add("a")
        >>> c.plan_order(["a", "b", "c"])
        ['b', 'c', 'a']
        """
        return [w for w in workers if w not in self.demoted] + [w for w in workers if w in self.demoted]

    def _ticketed(self, version: int, child: str, parent: str) -> Peer:
        """``parent``'s address with a fresh single-use ticket for ``child`` to fetch ``version`` there."""
        peer = self.source if parent == SOURCE else self.peers[parent]
        return Peer(peer.id, peer.host, peer.port, self.secret.ticket(version, child, parent))

    # ---- broadcasts -------------------------------------------------------------------------
    def start(self, version: int, plan: BroadcastPlan, t_publish: float | None = None) -> BroadcastRecord:
        """Record the plan and tell every planned worker its parent."""
        unknown = [w for c in plan.chains for w in c if w not in self.peers]
        if unknown:
            raise KeyError(f"plan names workers that never registered: {unknown}")
        record = BroadcastRecord(version, plan, Topology(plan), time.monotonic() if t_publish is None else t_publish)
        self.broadcasts[version] = record
        for node in record.topology.members():
            self._assign(record, node)
        return record

    def join(self, version: int, node: str) -> Peer:
        """A worker that registered mid-broadcast: append it to a chain and start it."""
        record = self.broadcasts[version]
        record.topology.join(node)
        return self._assign(record, node)

    def _assign(self, record: BroadcastRecord, node: str) -> Peer:
        parent = self._ticketed(record.version, node, record.topology.parent_of(node))
        record.assigned[node] = time.monotonic()
        self._senders[node]({"op": "assign", "node": node, "version": record.version, "parent": peer_dict(parent)})
        return parent

    def tell_all_hosts(self, message: dict) -> None:
        """Send ``message`` once to every connected host (e.g. {"op": "stop"})."""
        for send in {id(s): s for s in self._senders.values()}.values():
            send(message)

    def crash(self, node: str) -> None:
        self._senders[node]({"op": "crash", "node": node})

    def _record_for_request(self, node: str, version: int) -> BroadcastRecord | None:
        """The broadcast a repair/refetch request is about, if it may be answered (counted otherwise)."""
        record = self.broadcasts.get(version)
        if record is None or node not in record.assigned:
            self.refused.refuse("not_assigned", f"{node} asked about version {version} it was never sent")
            return None
        record.requests[node] = record.requests.get(node, 0) + 1
        if record.requests[node] > MAX_REPAIRS_PER_NODE:
            self.refused.refuse("too_many_repairs", f"{node} on version {version}")
            return None
        return record

    def find_parent(self, node: str, version: int, failed: str, reason: str) -> Peer | None:
        record = self._record_for_request(node, version)
        if record is None:
            return None
        topology = record.topology
        current = topology.parent_of(node) if any(node in c for c in topology.chains) else None
        if current is not None and failed != current:
            # Only a node's own parent is its to declare failed: name its current parent, splice no one.
            # (An honest node lands here too when the topology moved it, e.g. a spliced-out forwarder.)
            record.repairs.append({"node": node, "failed": failed, "new_parent": current, "reason": reason,
                                   "spliced": False, "t": time.monotonic() - record.t_publish})
            return self._ticketed(version, node, current)
        parent = topology.repair(node, failed)
        if failed != SOURCE:
            self.demoted.add(failed)
        record.repairs.append(
            {"node": node, "failed": failed, "new_parent": parent, "reason": reason,
             "t": time.monotonic() - record.t_publish}
        )
        return self._ticketed(version, node, parent)

    def find_holder(self, node: str, version: int, chunk: int, exclude: str) -> Peer | None:
        record = self._record_for_request(node, version)
        if record is None:
            return None
        holder = record.topology.holder_for(node, exclude)
        record.refetches.append({"node": node, "chunk": chunk, "bad_sender": exclude, "holder": holder})
        return self._ticketed(version, node, holder)

    def on_report(self, node: str, version: int, event: str, detail: dict) -> None:
        record = self.broadcasts.get(version)
        if record is None or node not in record.assigned:
            self.refused.refuse("not_assigned", f"{node} reported {event} for version {version} it was never sent")
            return
        now = time.monotonic()
        detail = {**detail, "t_reported": now}
        if not isinstance(detail.get("t_installed"), (int, float)):
            detail["t_installed"] = now
        if event == "installed":
            record.installed[node] = detail
            self.demoted.discard(node)
        elif event == "failed":
            record.failed[node] = detail
        self._notify()

    def live_workers(self, version: int) -> list[str]:
        record = self.broadcasts[version]
        return [w for w in record.assigned if w not in self.dead]

    def settled(self, version: int, expected_dead: set[str] = frozenset()) -> bool:
        """Every live worker has installed or given up."""
        record = self.broadcasts[version]
        return all(
            w in record.installed or w in record.failed
            for w in self.live_workers(version) if w not in expected_dead
        )

    async def wait_settled(self, version: int, timeout_s: float, expected_dead: set[str] = frozenset()) -> bool:
        deadline = time.monotonic() + timeout_s
        while not self.settled(version, expected_dead):
            event, remaining = self._changed, deadline - time.monotonic()
            if remaining <= 0:
                return False
            try:
                async with asyncio.timeout(min(remaining, 0.5)):
                    await event.wait()
            except TimeoutError:
                pass
        return True

    def _notify(self) -> None:
        self._changed.set()
        self._changed = asyncio.Event()
