"""A broadcast node: receives a snapshot from one parent, verifies every chunk, forwards each verified
chunk to its children the moment it has it, repairs its upstream, and installs.

The node is plain asyncio and knows nothing of Ray or of processes: it needs a ``ControlClient`` (who
is my parent now, who else holds chunk i, report what happened) and an ``on_install`` callback. The
learner runs one as the source (``seed``) and every worker runs one; a benchmark process can host
dozens, each with its own listening socket and its own token buckets.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import os
import signal
import time
from typing import Any, Callable

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

from echo2_sdk.runtime.broadcast.base import STREAM_ERRORS, BroadcastError, ControlClient, Faults, Peer
from echo2_sdk.runtime.broadcast.credentials import Refusals, ticket_valid
from echo2_sdk.runtime.broadcast.manifest import Manifest, ManifestError, verify_manifest
from echo2_sdk.runtime.broadcast.receiver import FrameReceiver
from echo2_sdk.runtime.broadcast.serving import ChildStream
from echo2_sdk.runtime.broadcast.shaping import LinkProfile
from echo2_sdk.runtime.broadcast.topology import SOURCE
from echo2_sdk.runtime.broadcast.transfer import Transfer, TransferStats, allocate_buffer
from echo2_sdk.runtime.broadcast.wire import MAX_RANGES, Hello, ProtocolError, ranges_from_flags

__all__ = ["BroadcastError", "BroadcastNode", "ControlClient", "Faults", "Peer"]
log = logging.getLogger(__name__)

InstallFn = Callable[[int, Any, Manifest], Any]
"""(version, buffer, manifest) → optional dict of scalars merged into the "installed" report; may be async."""
MAX_USED_TICKETS = 1 << 16


class BroadcastNode:
    def __init__(
        self,
        node_id: str,
        *,
        link: LinkProfile,
        public_key: Ed25519PublicKey,
        node_key: bytes,
        control: ControlClient | None,
        on_install: InstallFn | None = None,
        host: str = "127.0.0.1",
        advertise_host: str | None = None,
        slice_bytes: int = 128 * 1024,
        stall_timeout_s: float = 3.0,
        max_repairs: int = 16,
        faults: Faults | None = None,
        verify_whole: bool = True,
        allocate: Callable[[int], Any] = allocate_buffer,
    ) -> None:
        self.id = node_id
        self.link = link
        self.public_key = public_key
        self.node_key = node_key
        """This node's own key (``RunSecret.node_key``): checks the tickets of children that dial it."""
        self.refused = Refusals(f"broadcast node {node_id}")
        self._used_tickets: dict[str, None] = {}
        self.control = control
        self.on_install = on_install
        self.host = host
        self.advertise_host = advertise_host or host
        """The address peers dial (bind 0.0.0.0 on a real node and advertise its routable address)."""
        self.slice = slice_bytes
        self.stall_timeout_s = stall_timeout_s
        self.max_repairs = max_repairs
        self.faults = faults or Faults()
        self.verify_whole = verify_whole
        self.allocate = allocate
        self.up = link.uplink_bucket(slice_bytes)
        self.down = link.downlink_bucket(slice_bytes)
        self.latency_s = link.latency_ms / 1000.0
        self.transfers: dict[int, Transfer] = {}
        self.crashed = False
        self._server: asyncio.base_events.Server | None = None
        self._tasks: set[asyncio.Task] = set()
        self._transports: set[asyncio.BaseTransport] = set()
        self.sent_chunks = 0  # over all child streams (for the stall fault)
        self.corrupted: set[int] = set()
        self.stalled = False
        self._receiving: dict[int, asyncio.Task] = {}
        self.port = 0

    # ---- lifecycle ---------------------------------------------------------------------------
    async def start(self, port: int = 0) -> Peer:
        self._server = await asyncio.start_server(self._serve_child, self.host, port)
        self.port = self._server.sockets[0].getsockname()[1]
        return self.peer

    @property
    def peer(self) -> Peer:
        return Peer(self.id, self.advertise_host, self.port)

    def seed(self, manifest: Manifest, manifest_wire: bytes, data: bytes | bytearray | memoryview) -> Transfer:
        """Hold a complete snapshot (the learner's node) and serve it."""
        self._drop_older(manifest.version)
        transfer = Transfer.seeded(manifest, manifest_wire, data)
        self.transfers[manifest.version] = transfer
        return transfer

    def crash(self) -> None:
        """Die abruptly: sockets reset, tasks cancelled, nothing flushed (emulates a killed worker)."""
        if self.faults.crash_kills_process:
            os.kill(os.getpid(), signal.SIGKILL)
        self.crashed = True
        if self._server is not None:
            self._server.close()
        for transport in list(self._transports):
            transport.abort()
        for task in list(self._tasks):
            task.cancel()

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
        for task in list(self._tasks):
            task.cancel()
        for transport in list(self._transports):
            transport.close()
        await asyncio.gather(*self._tasks, return_exceptions=True)

    def _spawn(self, coro) -> asyncio.Task:
        task = asyncio.ensure_future(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    async def _serve_child(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await ChildStream(self, reader, writer).run()

    def admit(self, hello: Hello) -> str | None:
        if not ticket_valid(self.node_key, hello.version, hello.node, self.id, hello.ticket):
            return "bad_ticket"
        if hello.ticket in self._used_tickets:
            return "replayed_ticket"
        self._used_tickets[hello.ticket] = None
        if len(self._used_tickets) > MAX_USED_TICKETS:  # oldest first: long since used or expired with its version
            del self._used_tickets[next(iter(self._used_tickets))]
        return None

    def _drop_older(self, version: int) -> None:
        newest = max(self.transfers, default=-1)
        if version < newest:
            raise BroadcastError(f"{self.id}: version {version} is older than version {newest} it already has")
        for old in [v for v in self.transfers if v < version]:
            del self.transfers[old]

    def track_stream(self, task: asyncio.Task, transport: asyncio.BaseTransport) -> None:
        self._tasks.add(task)
        self._transports.add(transport)

    def untrack_stream(self, task: asyncio.Task, transport: asyncio.BaseTransport) -> None:
        self._transports.discard(transport)
        self._tasks.discard(task)

    def transfer_for(self, version: int) -> Transfer | None:
        """This version's transfer, created on first mention; None if a newer one superseded it."""
        if version in self.transfers:
            return self.transfers[version]
        if version < max(self.transfers, default=-1):
            return None
        self._drop_older(version)
        self.transfers[version] = Transfer(version, self.verify_whole)
        return self.transfers[version]

    # ---- receiving -----------------------------------------------------------------------------
    async def receive(self, version: int, parent: Peer) -> TransferStats:
        """Obtain ``version`` starting from ``parent``; repair through the control plane; install."""
        transfer = self.transfer_for(version)
        if transfer is None:
            raise BroadcastError(f"{self.id}: asked to receive version {version} after a newer one")
        task = self._receiving.get(version)
        if task is None or task.done():  # a repeated assignment joins the running receive
            task = self._receiving[version] = self._spawn(self._receive(transfer, parent))
            for old in [v for v in self._receiving if v < version]:
                self._receiving.pop(old).cancel()  # superseded by a newer snapshot
        return await asyncio.shield(task)

    async def _receive(self, transfer: Transfer, parent: Peer) -> TransferStats:
        version = transfer.version
        try:
            while not transfer.complete.is_set():
                try:
                    await self._pull(transfer, parent)
                    if await self._complete_missing(transfer, exclude=parent.id):
                        break
                    reason = f"{parent.id} finished its stream but chunks {transfer.missing()[:8]} never verified"
                except ManifestError as exc:
                    transfer.stats.rejected_manifests += 1
                    reason = f"manifest refused: {exc}"
                    if parent.id == SOURCE:
                        raise BroadcastError(f"{self.id}: the learner's own manifest was refused: {exc}") from exc
                except STREAM_ERRORS as exc:
                    reason = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
                if transfer.complete.is_set():
                    break
                transfer.stats.repairs += 1
                if transfer.stats.repairs > self.max_repairs:
                    raise BroadcastError(
                        f"{self.id}: gave up on version {version} after {self.max_repairs} repairs (last: {reason}); "
                        "raise max_repairs or check the pool's health"
                    )
                log.info("%s: re-attaching after %s failed: %s", self.id, parent.id, reason)
                new_parent = await self.control.find_parent(self.id, version, parent.id, reason)
                if new_parent is None:
                    raise BroadcastError(f"{self.id}: control plane has no parent left for version {version}")
                parent = new_parent
            await self._install(transfer)
            return transfer.stats
        except BroadcastError as exc:
            transfer.fail(str(exc))
            await self.control.report(self.id, version, "failed", {"reason": str(exc), **transfer.stats.to_dict()})
            raise

    async def _complete_missing(self, transfer: Transfer, exclude: str) -> bool:
        """After a parent's DONE: fetch whatever failed verification elsewhere, then wait for it."""
        if transfer.manifest is None:
            return False
        for index in transfer.missing():
            if index not in transfer.pending_fetch:
                self._start_refetch(transfer, index, exclude)
        deadline = time.monotonic() + self.stall_timeout_s * 4 + self.latency_s * 2
        while not transfer.complete.is_set() and time.monotonic() < deadline:
            await transfer.wait_changed(self.stall_timeout_s / 4)
        return transfer.complete.is_set()

    async def _pull(self, transfer: Transfer, parent: Peer, want: list[int] | None = None) -> None:
        """One stream from ``parent`` until its DONE; raises on a broken, stalled or lying parent."""
        loop = asyncio.get_running_loop()
        sink = _StreamSink(self, transfer, parent.id)
        transport, receiver = await asyncio.wait_for(
            loop.create_connection(
                lambda: FrameReceiver(sink, transfer.version, self.down, self.slice, self.stall_timeout_s),
                parent.host, parent.port,
            ),
            self.stall_timeout_s,
        )
        self._transports.add(transport)
        try:
            # Claiming fewer held chunks than we have only costs duplicates, which are dropped on arrival.
            have = [] if want is not None else ranges_from_flags(transfer.have)[:MAX_RANGES]
            transport.write(Hello(self.id, transfer.version, have, want, parent.ticket).encode())
            await receiver.done
            if self.latency_s:  # let chunks still "on the wire" land before judging completeness
                await asyncio.sleep(self.latency_s)
        finally:
            self._transports.discard(transport)
            transport.abort()

    def _deliver(self, transfer: Transfer, index: int, payload: memoryview, sender: str, in_place: bool) -> None:
        transfer.stats.bytes_in += len(payload)
        if self.latency_s:  # one-way propagation after the bottleneck link
            asyncio.get_running_loop().call_later(
                self.latency_s, self._accept, transfer, index, payload, sender, in_place
            )
        else:
            self._accept(transfer, index, payload, sender, in_place)

    def _accept(self, transfer: Transfer, index: int, payload: memoryview, sender: str, in_place: bool) -> None:
        if self.crashed or self.transfers.get(transfer.version) is not transfer:
            transfer.claims.discard(index)
            return
        outcome = transfer.accept(index, payload, in_place)
        if outcome == "rejected":
            log.warning("%s: chunk %d from %s failed its hash; dropped, re-requesting elsewhere", self.id, index, sender)
            if index not in transfer.pending_fetch:
                self._start_refetch(transfer, index, sender)
        elif outcome == "ok" and self.faults.crash_at_fraction is not None:
            if transfer.stats.chunks_in >= self.faults.crash_at_fraction * transfer.manifest.num_chunks:
                self.crash()

    def _start_refetch(self, transfer: Transfer, index: int, exclude: str) -> None:
        transfer.pending_fetch.add(index)
        self._spawn(self._refetch(transfer, index, exclude))

    async def _refetch(self, transfer: Transfer, index: int, exclude: str) -> None:
        """Get chunk ``index`` from another holder than ``exclude`` (the one that sent a bad copy)."""
        try:
            for _ in range(self.max_repairs):
                if transfer.have[index]:
                    return
                holder = await self.control.find_holder(self.id, transfer.version, index, exclude)
                if holder is None:
                    return
                try:
                    await self._pull(transfer, holder, want=[index])
                except (ManifestError, *STREAM_ERRORS):
                    pass
                if transfer.have[index]:
                    transfer.stats.refetched_chunks += 1
                    return
                exclude = holder.id
        finally:
            transfer.pending_fetch.discard(index)
            transfer.notify()

    async def _install(self, transfer: Transfer) -> None:
        extra = None
        if self.on_install is not None:
            extra = self.on_install(transfer.version, transfer.buffer, transfer.manifest)
            if inspect.isawaitable(extra):
                extra = await extra
        transfer.stats.t_installed = time.monotonic()
        detail = {**transfer.stats.to_dict(), **(extra if isinstance(extra, dict) else {}),
                  "late_s": round(self.up.late_s_total + self.down.late_s_total, 4)}
        await self.control.report(self.id, transfer.version, "installed", detail)


class _StreamSink:
    """Where one parent stream's frames go: chunk payloads in place in the snapshot buffer."""

    def __init__(self, node: BroadcastNode, transfer: Transfer, sender: str) -> None:
        self.node, self.transfer, self.sender = node, transfer, sender

    def chunk_target(self, index: int, length: int) -> tuple[memoryview, bool]:
        manifest = self.transfer.manifest
        if manifest is None:
            raise ProtocolError(f"{self.sender} sent chunk {index} before the manifest")
        if not 0 <= index < manifest.num_chunks or length != manifest.layout.length(index):
            raise ProtocolError(
                f"{self.sender} sent chunk {index} of {length} bytes; the manifest has {manifest.num_chunks} "
                f"chunks of {manifest.chunk_size} bytes"
            )
        if self.transfer.have[index] or index in self.transfer.claims:
            return memoryview(bytearray(length)), False  # verified or being written: don't touch it
        self.transfer.claims.add(index)
        return self.transfer.chunk_view(index), True

    def on_chunk(self, index: int, view: memoryview, claimed: bool) -> None:
        self.node._deliver(self.transfer, index, view, self.sender, claimed)

    def release(self, index: int) -> None:
        self.transfer.claims.discard(index)

    def on_manifest(self, wire: bytes) -> None:
        manifest = verify_manifest(wire, self.node.public_key)
        buffer = self.node.allocate(manifest.total_size) if self.transfer.manifest is None else None
        self.transfer.set_manifest(manifest, wire, buffer)
