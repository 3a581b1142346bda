"""The control plane: who is whose parent, repair and join decisions, completion records.

``Coordinator`` is the decision logic (no I/O). ``ControlServer`` exposes it over a tiny JSON-lines
TCP protocol and ``TcpControlClient`` is the node side of it; the learner process runs the server,
each process hosting nodes (a benchmark host, a Ray rollout actor) runs one client. Only small
messages travel here; snapshot bytes never do.

Messages (one JSON object per line). Client → server: ``register {host, nodes:[{id,host,port}]}``,
``find_parent {req,node,version,failed,reason}``, ``find_holder {req,node,version,chunk,exclude}``,
``report {node,version,event,detail}``, ``bye {host, stats}``. Server → client: ``reply {re, peer}``,
``assign {node, version, parent}``, ``crash {node}``, ``stop {}``.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import logging
import time
from dataclasses import dataclass, field
from typing import Awaitable, Callable

from echo2_sdk.runtime.broadcast.base import Peer
from echo2_sdk.runtime.broadcast.topology import SOURCE, BroadcastPlan, Topology

log = logging.getLogger(__name__)
MAX_LINE = 1 << 20


def _peer_dict(peer: Peer | None) -> dict | None:
    return None if peer is None else {"id": peer.id, "host": peer.host, "port": peer.port}


def _peer(raw: dict | None) -> Peer | None:
    return None if raw is None else Peer(raw["id"], raw["host"], int(raw["port"]))


@dataclass
class BroadcastRecord:
    version: int
    plan: BroadcastPlan
    topology: Topology
    t_publish: float
    assigned: dict[str, float] = field(default_factory=dict)
    """Worker → monotonic time it was told to receive (publish, or its join)."""
    installed: dict[str, dict] = field(default_factory=dict)
    failed: dict[str, dict] = field(default_factory=dict)
    repairs: list[dict] = field(default_factory=list)
    refetches: list[dict] = field(default_factory=list)


class Coordinator:
    def __init__(self, source: Peer) -> None:
        self.source = source
        self.peers: dict[str, Peer] = {}
        self.dead: set[str] = set()
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

    def lost(self, nodes: list[str]) -> None:
        """The hosting process of ``nodes`` disconnected: they are dead for every broadcast."""
        self.dead.update(nodes)
        for record in self.broadcasts.values():
            for node in nodes:
                if node not in record.installed:
                    record.topology.failed.add(node)
        self._notify()

    def _peer_of(self, node: str) -> Peer:
        return self.source if node == SOURCE else self.peers[node]

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
        parent = self._peer_of(record.topology.parent_of(node))
        record.assigned[node] = time.monotonic()
        self._senders[node]({"op": "assign", "node": node, "version": record.version, "parent": _peer_dict(parent)})
        return parent

    def tell_all_hosts(self, message: dict) -> None:
        """Send ``message`` once to every connected host (e.g. {"op": "stop"})."""
        for send in {id(s): s for s in self._senders.values()}.values():
            send(message)

    def crash(self, node: str) -> None:
        self._senders[node]({"op": "crash", "node": node})

    def find_parent(self, node: str, version: int, failed: str, reason: str) -> Peer | None:
        record = self.broadcasts.get(version)
        if record is None:
            return None
        parent = record.topology.repair(node, failed)
        record.repairs.append(
            {"node": node, "failed": failed, "new_parent": parent, "reason": reason,
             "t": time.monotonic() - record.t_publish}
        )
        return self._peer_of(parent)

    def find_holder(self, node: str, version: int, chunk: int, exclude: str) -> Peer | None:
        record = self.broadcasts.get(version)
        if record is None:
            return None
        holder = record.topology.holder_for(node, exclude)
        record.refetches.append({"node": node, "chunk": chunk, "bad_sender": exclude, "holder": holder})
        return self._peer_of(holder)

    def on_report(self, node: str, version: int, event: str, detail: dict) -> None:
        record = self.broadcasts.get(version)
        if record is None:
            return
        if event == "installed":
            record.installed[node] = detail
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


class ControlServer:
    """JSON-lines TCP front of a ``Coordinator`` (runs in the learner's event loop)."""

    def __init__(self, coordinator: Coordinator, host: str = "127.0.0.1") -> None:
        self.coordinator = coordinator
        self.host = host
        self.port = 0
        self.host_stats: dict[str, dict] = {}
        self.registered = asyncio.Event()
        self._server: asyncio.base_events.Server | None = None
        self._writers: set[asyncio.StreamWriter] = set()
        self._handlers: set[asyncio.Task] = set()

    async def start(self, port: int = 0) -> tuple[str, int]:
        self._server = await asyncio.start_server(self._serve, self.host, port, limit=MAX_LINE)
        self.port = self._server.sockets[0].getsockname()[1]
        return self.host, self.port

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
        for writer in list(self._writers):
            writer.close()
        await asyncio.gather(*self._handlers, return_exceptions=True)

    def _handle(self, message: dict, send: Callable[[dict], None]) -> None:
        op, coordinator = message.get("op"), self.coordinator
        if op == "register":
            for raw in message["nodes"]:
                coordinator.register(_peer(raw), send)
            self.registered.set()
        elif op == "find_parent":
            peer = coordinator.find_parent(message["node"], message["version"], message["failed"], message["reason"])
            send({"op": "reply", "re": message["req"], "peer": _peer_dict(peer)})
        elif op == "find_holder":
            peer = coordinator.find_holder(message["node"], message["version"], message["chunk"], message["exclude"])
            send({"op": "reply", "re": message["req"], "peer": _peer_dict(peer)})
        elif op == "report":
            coordinator.on_report(message["node"], message["version"], message["event"], message["detail"])
        elif op == "bye":
            self.host_stats[message["host"]] = message["stats"]
        else:
            log.warning("control: unknown op %r from a host", op)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        handler = asyncio.current_task()
        self._handlers.add(handler)
        nodes: list[str] = []
        said_bye = False
        self._writers.add(writer)

        def send(message: dict) -> None:
            if not writer.is_closing():
                writer.write(json.dumps(message).encode() + b"\n")

        try:
            while line := await reader.readline():
                message = json.loads(line)
                try:
                    if message.get("op") == "register":
                        nodes.extend(raw["id"] for raw in message["nodes"])
                    elif message.get("op") == "bye":
                        said_bye = True
                    self._handle(message, send)
                except (KeyError, ValueError, TypeError) as exc:
                    # One bad request must not drop the host's channel (that would declare all its nodes dead).
                    log.warning("control: cannot handle %s: %r", message.get("op"), exc)
                    if "req" in message:
                        send({"op": "reply", "re": message["req"], "peer": None})
        except (ConnectionError, json.JSONDecodeError) as exc:
            log.warning("control: host connection dropped: %s", exc)
        finally:
            self._handlers.discard(handler)
            self._writers.discard(writer)
            writer.close()
            if nodes and not said_bye:  # the hosting process died: its nodes are gone
                self.coordinator.lost(nodes)


class TcpControlClient:
    """A host process's side of the control channel (implements ``node.ControlClient``)."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                 on_command: Callable[[dict], Awaitable[None] | None]) -> None:
        self.reader, self.writer = reader, writer
        self.on_command = on_command
        self._pending: dict[int, asyncio.Future] = {}
        self._ids = itertools.count()
        self.closed = asyncio.Event()

    @classmethod
    async def connect(cls, host: str, port: int, on_command) -> "TcpControlClient":
        reader, writer = await asyncio.open_connection(host, port, limit=MAX_LINE)
        return cls(reader, writer, on_command)

    def send(self, message: dict) -> None:
        self.writer.write(json.dumps(message).encode() + b"\n")

    async def run(self) -> None:
        """Dispatch replies and commands until the server closes the channel."""
        try:
            while line := await self.reader.readline():
                message = json.loads(line)
                if message.get("op") == "reply":
                    future = self._pending.pop(message["re"], None)
                    if future is not None and not future.done():
                        future.set_result(_peer(message["peer"]))
                else:
                    result = self.on_command(message)
                    if asyncio.iscoroutine(result):
                        await result
        except ConnectionError:
            pass
        finally:
            for future in self._pending.values():
                if not future.done():
                    future.set_exception(ConnectionError("control channel to the learner closed"))
            self.closed.set()

    async def _request(self, message: dict) -> Peer | None:
        req = next(self._ids)
        future = asyncio.get_running_loop().create_future()
        self._pending[req] = future
        self.send({**message, "req": req})
        return await future

    async def find_parent(self, node: str, version: int, failed: str, reason: str) -> Peer | None:
        return await self._request({"op": "find_parent", "node": node, "version": version, "failed": failed, "reason": reason})

    async def find_holder(self, node: str, version: int, chunk: int, exclude: str) -> Peer | None:
        return await self._request({"op": "find_holder", "node": node, "version": version, "chunk": chunk, "exclude": exclude})

    async def report(self, node: str, version: int, event: str, detail: dict) -> None:
        self.send({"op": "report", "node": node, "version": version, "event": event, "detail": detail})
        await self.writer.drain()
