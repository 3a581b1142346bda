"""The control channel: the learner's ``ControlServer`` in front of the ``Coordinator``, and the
``TcpControlClient`` that every process hosting nodes runs. JSON lines over TCP, authenticated.

Handshake: server → ``challenge {nonce}``; host → ``register {host, nodes:[{id,host,port}], nonce,
proofs:{id: HMAC}}`` (one proof per node, under that node's key, bound to both nonces and the node's
address). From then on every line is ``MAC SP JSON`` under a session key with a per-direction sequence
number (``credentials.LineSigner``). Host → server: ``find_parent {req,node,version,failed,reason}``,
``find_holder {req,node,version,chunk,exclude}``, ``report {node,version,event,detail}``,
``bye {host, stats}``. Server → host: ``reply {re, peer}``, ``assign {node, version, parent}``,
``crash {node}``, ``stop {}``.

Whatever a connection sends that is not this protocol — no or a wrong proof, a slow or oversized
handshake, a forged or replayed line, a malformed field, a message about a node it did not prove —
is dropped and counted in ``Coordinator.refused``; nothing a host sends can raise in the learner.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
from typing import Any, Awaitable, Callable

from echo2_sdk.runtime.broadcast.base import Peer
from echo2_sdk.runtime.broadcast.control import Coordinator, peer_dict, peer_from_dict
from echo2_sdk.runtime.broadcast.control_wire import (
    BadMessage, Bye, FindHolder, FindParent, Register, Report, decode_object, encode, parse_host_message,
    parse_register, request_id,
)
from echo2_sdk.runtime.broadcast.credentials import LineSigner, macs_equal, nonce, register_proof, session_key
from echo2_sdk.runtime.broadcast.topology import SOURCE

log = logging.getLogger(__name__)
MAX_LINE = 1 << 20
HANDSHAKE_TIMEOUT_S = 10.0
"""A connection that has not proved itself within this long is closed."""
MAX_PENDING_HANDSHAKES = 32
"""Unauthenticated connections held at once; a new one evicts the oldest (memory stays bounded, and an
honest host, which proves itself within a round trip, is not locked out by silent ones)."""


class ControlServer:
    """The authenticated JSON-lines front of a ``Coordinator`` (runs in the learner's event loop)."""

    def __init__(self, coordinator: Coordinator, host: str = "127.0.0.1",
                 handshake_timeout_s: float = HANDSHAKE_TIMEOUT_S) -> None:
        self.coordinator = coordinator
        self.refused = coordinator.refused
        self.host = host
        self.port = 0
        self.handshake_timeout_s = handshake_timeout_s
        self.host_stats: dict[str, dict] = {}
        self.registered = asyncio.Event()
        self._server: asyncio.base_events.Server | None = None
        self._writers: set[asyncio.StreamWriter] = set()
        self._handlers: set[asyncio.Task] = set()
        self._pending: dict[asyncio.Task, asyncio.StreamWriter] = {}
        """Handler tasks still in their handshake (oldest first), with their connection."""
        self._evicted: set[asyncio.Task] = set()

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

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        handler = asyncio.current_task()
        self._handlers.add(handler)
        self._writers.add(writer)
        try:
            session = await self._handshake(reader, writer)
            if session is not None:
                await self._session(reader, writer, *session)
        except (ConnectionError, asyncio.IncompleteReadError) as exc:
            log.warning("control: host connection dropped: %s", exc)
        finally:
            self._handlers.discard(handler)
            self._writers.discard(writer)
            writer.close()

    async def _handshake(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
                         ) -> tuple[Register, LineSigner, LineSigner] | None:
        """The host's proven registration and the session's signers, or None (refused and counted)."""
        if len(self._pending) >= MAX_PENDING_HANDSHAKES:
            oldest = next(iter(self._pending))
            self._evicted.add(oldest)
            self._pending.pop(oldest).transport.abort()  # its handshake read ends at once, uncounted
            self.refused.refuse("too_many_pending", "unauthenticated connections at the limit; closed the oldest")
        me = asyncio.current_task()
        self._pending[me] = writer
        try:
            challenge = nonce()
            writer.write(encode({"op": "challenge", "nonce": challenge}) + b"\n")
            async with asyncio.timeout(self.handshake_timeout_s):
                line = await reader.readline()
            register = parse_register(decode_object(line))
            secret = self.coordinator.secret
            for node in register.nodes:
                if node.id == SOURCE:
                    raise BadMessage("unauthenticated", f"node id {SOURCE!r} is the learner's")
                expected = register_proof(secret.node_key(node.id), challenge, register.nonce, register.node_json[node.id])
                if not macs_equal(register.proofs.get(node.id), expected):
                    raise BadMessage("bad_credential", f"no valid proof for node {node.id}")
        except TimeoutError:
            self.refused.refuse("handshake_timeout", f"no registration within {self.handshake_timeout_s} s")
            return None
        except ValueError as exc:  # BadMessage, or a line longer than MAX_LINE
            if me not in self._evicted:
                self.refused.refuse(getattr(exc, "reason", "oversized"), str(exc))
            return None
        finally:
            self._pending.pop(me, None)
            self._evicted.discard(me)
        key = session_key(secret.node_key(register.nodes[0].id), challenge, register.nonce)
        return register, LineSigner(key, "host"), LineSigner(key, "learner")

    async def _session(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                       register: Register, inbound: LineSigner, outbound: LineSigner) -> None:
        def send(message: dict) -> None:
            if not writer.is_closing():
                writer.write(outbound.sign(encode(message)))

        coordinator = self.coordinator
        for peer in register.nodes:
            coordinator.register(peer, send)
        owned = {peer.id for peer in register.nodes}
        self.registered.set()
        said_bye = False
        try:
            while True:
                try:
                    line = await reader.readline()
                except ValueError:  # over MAX_LINE: asyncio discarded it
                    self.refused.refuse("oversized", f"a line over {MAX_LINE} bytes from {register.host}")
                    continue
                if not line:
                    break
                body = inbound.verify(line)
                if body is None:
                    self.refused.refuse("bad_mac", f"a line from {register.host} that does not verify")
                    continue
                said_bye = self._dispatch(body, owned, send) or said_bye
        finally:
            gone = [n for n in owned if coordinator.sender_of(n) is send]
            if gone and not said_bye:  # the hosting process died: its nodes are gone
                coordinator.lost(gone)

    def _dispatch(self, body: bytes, owned: set[str], send: Callable[[dict], None]) -> bool:
        """Act on one verified line; True if it was the host's ``bye``."""
        raw: dict[str, Any] = {}
        try:
            raw = decode_object(body)
            message = parse_host_message(raw)
            if isinstance(message, Bye):
                self.host_stats[message.host] = message.stats
                return True
            if message.node not in owned:
                raise BadMessage("not_owner", f"a host that proved {sorted(owned)[:4]} spoke for {message.node}")
            self._handle(message, send)
        except BadMessage as exc:
            self.refused.refuse(exc.reason, str(exc))
            req = request_id(raw)
            if req is not None:
                send({"op": "reply", "re": req, "peer": None})
        return False

    def _handle(self, message: FindParent | FindHolder | Report, send: Callable[[dict], None]) -> None:
        coordinator = self.coordinator
        if isinstance(message, FindParent):
            peer = coordinator.find_parent(message.node, message.version, message.failed, message.reason)
            send({"op": "reply", "re": message.req, "peer": peer_dict(peer)})
        elif isinstance(message, FindHolder):
            peer = coordinator.find_holder(message.node, message.version, message.chunk, message.exclude)
            send({"op": "reply", "re": message.req, "peer": peer_dict(peer)})
        else:
            coordinator.on_report(message.node, message.version, message.event, message.detail)


class TcpControlClient:
    """A host process's side of the control channel (implements ``base.ControlClient``)."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                 on_command: Callable[[dict], Awaitable[None] | None], challenge: str) -> None:
        self.reader, self.writer = reader, writer
        self.on_command = on_command
        self.challenge = challenge
        self._pending: dict[int, asyncio.Future] = {}
        self._ids = itertools.count()
        self._out: LineSigner | None = None
        self._in: LineSigner | None = None
        self.closed = asyncio.Event()

    @classmethod
    async def connect(cls, host: str, port: int, on_command, timeout_s: float = 30.0) -> "TcpControlClient":
        reader, writer = await asyncio.wait_for(asyncio.open_connection(host, port, limit=MAX_LINE), timeout_s)
        async with asyncio.timeout(timeout_s):
            first = decode_object(await reader.readline())
        if first.get("op") != "challenge" or not isinstance(first.get("nonce"), str):
            writer.close()
            raise ConnectionError(f"{host}:{port} is not an echo2 broadcast control server")
        return cls(reader, writer, on_command, first["nonce"])

    def register(self, host_id: str, peers: list[Peer], keys: dict[str, bytes]) -> None:
        """Prove the key of every node in ``peers`` and open the authenticated session."""
        mine = nonce()
        entries = [{"id": p.id, "host": p.host, "port": p.port} for p in peers]
        proofs = {e["id"]: register_proof(keys[e["id"]], self.challenge, mine, encode(e).decode()) for e in entries}
        self.writer.write(encode({"op": "register", "host": host_id, "nodes": entries, "nonce": mine,
                                  "proofs": proofs}) + b"\n")
        key = session_key(keys[peers[0].id], self.challenge, mine)
        self._out, self._in = LineSigner(key, "host"), LineSigner(key, "learner")

    def send(self, message: dict) -> None:
        if self._out is None:
            raise RuntimeError("control client: register before sending")
        self.writer.write(self._out.sign(encode(message)))

    async def run(self) -> None:
        """Dispatch replies and commands until the server closes the channel."""
        try:
            while line := await self.reader.readline():
                body = self._in.verify(line) if self._in is not None else None
                if body is None:
                    log.warning("control client: dropped a line from the learner that does not verify")
                    continue
                message = decode_object(body)
                if message.get("op") == "reply":
                    future = self._pending.pop(message.get("re"), None)
                    if future is not None and not future.done():
                        future.set_result(peer_from_dict(message.get("peer")))
                else:
                    result = self.on_command(message)
                    if asyncio.iscoroutine(result):
                        await result
        except (ConnectionError, BadMessage):
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
        return await self._request({"op": "find_parent", "node": node, "version": version, "failed": failed,
                                    "reason": reason[:1000]})

    async def find_holder(self, node: str, version: int, chunk: int, exclude: str) -> Peer | None:
        return await self._request({"op": "find_holder", "node": node, "version": version, "chunk": chunk,
                                    "exclude": exclude})

    async def report(self, node: str, version: int, event: str, detail: dict) -> None:
        self.send({"op": "report", "node": node, "version": version, "event": event, "detail": detail})
        await self.writer.drain()
