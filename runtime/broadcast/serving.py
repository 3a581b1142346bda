"""The parent side of a node: answer a child's HELLO with the manifest, then every verified chunk
the moment this node has it (in the order it verified them), through the node's uplink bucket.

A KEEPALIVE goes out whenever the stream has been idle for a quarter of the stall deadline (this
node is waiting on its own parent), so a child can tell a slow chain from a hung parent. The
keepalive timer also notices a child that hung up while this side was only waiting.
"""

from __future__ import annotations

import asyncio
import os
import signal
from typing import Callable

from echo2_sdk.runtime.broadcast.base import STREAM_ERRORS, ServingNode, UpstreamFailed
from echo2_sdk.runtime.broadcast.transfer import Transfer
from echo2_sdk.runtime.broadcast.wire import (
    CHUNK, DONE, ERROR, KEEPALIVE, MANIFEST, ProtocolError, flags_from_ranges, pack_header, read_hello,
)


class ChildStream:
    """One connected child."""

    def __init__(self, node: ServingNode, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.node = node
        self.reader, self.writer = reader, writer
        self.loop = asyncio.get_running_loop()
        self.task = asyncio.current_task()
        self._sending = False
        self._last_send = self.loop.time()
        self._period = node.stall_timeout_s / 4
        self._timer: asyncio.TimerHandle | None = None
        self.version = 0

    async def run(self) -> None:
        node = self.node
        node.track_stream(self.task, self.writer.transport)
        try:
            try:
                async with asyncio.timeout(node.stall_timeout_s):
                    hello = await read_hello(self.reader)
            except (TimeoutError, ProtocolError, asyncio.IncompleteReadError) as exc:
                node.refused.refuse("bad_hello", f"{type(exc).__name__}: {exc}")
                return
            refusal = node.admit(hello)
            if refusal is not None:  # a stranger, a replay or a forged ticket: no answer, no work
                node.refused.refuse(refusal, f"HELLO from {hello.node[:40]} for version {hello.version}")
                return
            if node.latency_s:
                await asyncio.sleep(node.latency_s)  # the request's one-way trip to us
            transfer = node.transfer_for(hello.version)
            if transfer is None:
                reason = f"{node.id} has moved past version {hello.version}; ask the control plane for the current one"
                await self._send(ERROR, hello.version, 0, reason.encode())
                return
            self.version = transfer.version
            self._timer = self.loop.call_later(self._period, self._tick)
            await self._wait_until(transfer, transfer.manifest_ready.is_set)
            await self._send(MANIFEST, transfer.version, 0, transfer.manifest_wire)
            if hello.want is not None:
                await self._send_wanted(transfer, [int(i) for i in hello.want])
            else:
                await self._send_all(transfer, flags_from_ranges(hello.have, transfer.manifest.num_chunks))
            await self._send(DONE, transfer.version, 0)
        except UpstreamFailed as exc:
            try:
                await self._send(ERROR, exc.version, 0, str(exc).encode())
            except STREAM_ERRORS:
                pass
        except STREAM_ERRORS:
            pass  # the child went away or broke the protocol; it repairs from its side
        except asyncio.CancelledError:
            pass  # this node crashed or closed, or the child hung up; the child side repairs
        finally:
            if self._timer is not None:
                self._timer.cancel()
            node.untrack_stream(self.task, self.writer.transport)
            self.writer.close()

    # ---- what to send ------------------------------------------------------------------------
    async def _send_all(self, transfer: Transfer, skip: bytearray) -> None:
        """Forward chunks in the order this node verified them, as they arrive."""
        position = 0
        while True:
            log = transfer.log
            while position < len(log):
                index = log[position]
                position += 1
                if not skip[index]:
                    await self._send_chunk(transfer, index)
            if transfer.complete.is_set() and position == len(transfer.log):
                return
            self._raise_if_failed(transfer)
            await transfer.changed()

    async def _send_wanted(self, transfer: Transfer, wanted: list[int]) -> None:
        for index in wanted:
            if not 0 <= index < transfer.manifest.num_chunks:
                raise ProtocolError(f"child asked for chunk {index} of {transfer.manifest.num_chunks}")
            await self._wait_until(transfer, lambda: transfer.have[index])
            await self._send_chunk(transfer, index)

    async def _wait_until(self, transfer: Transfer, ready: Callable[[], object]) -> None:
        while not ready():
            self._raise_if_failed(transfer)
            await transfer.changed()

    def _raise_if_failed(self, transfer: Transfer) -> None:
        if transfer.failure is not None and not transfer.complete.is_set():
            raise UpstreamFailed(transfer.version, f"{self.node.id} cannot serve version {transfer.version}: {transfer.failure}")

    # ---- how to send -------------------------------------------------------------------------
    async def _send_chunk(self, transfer: Transfer, index: int) -> None:
        node = self.node
        faults = node.faults
        if faults.stall_at_fraction is not None and node.sent_chunks >= faults.stall_at_fraction * transfer.manifest.num_chunks:
            node.stalled = True
            await asyncio.Event().wait()  # hung: silent until cancelled
        if faults.sigstop_at_fraction is not None and node.sent_chunks >= faults.sigstop_at_fraction * transfer.manifest.num_chunks:
            os.kill(os.getpid(), signal.SIGSTOP)  # the whole process freezes here (until SIGCONT or SIGKILL)
        payload = transfer.chunk_view(index)
        if index in faults.corrupt_chunks and index not in node.corrupted:
            node.corrupted.add(index)
            payload = bytearray(payload)
            payload[len(payload) // 2] ^= 0xFF
        await self._send(CHUNK, transfer.version, index, payload)
        node.sent_chunks += 1
        transfer.stats.chunks_out += 1
        transfer.stats.bytes_out += len(payload)

    async def _send(self, kind: int, version: int, index: int, payload=b"") -> None:
        view = memoryview(payload).cast("B")
        header = pack_header(kind, version, index, len(view))
        step = self.node.slice
        bucket, transport = self.node.up, self.writer.transport
        self._sending = True
        try:
            await bucket.take(len(header) + min(len(view), step))
            transport.write(header)
            for offset in range(0, len(view), step):
                piece = view[offset:offset + step]
                if offset:
                    await bucket.take(len(piece))
                transport.write(piece)
                await self.writer.drain()
            if not len(view):
                await self.writer.drain()
        finally:
            self._sending = False
            self._last_send = self.loop.time()

    def _tick(self) -> None:
        """Keepalive when idle; end this stream if the child hung up while we only waited."""
        transport = self.writer.transport
        if transport.is_closing() or self.reader.at_eof():
            self.task.cancel()
            return
        if not self._sending and not self.node.stalled and self.loop.time() - self._last_send >= self._period:
            self.node.up.book(HEADER_SIZE)
            transport.write(pack_header(KEEPALIVE, self.version, 0, 0))
            self._last_send = self.loop.time()
        self._timer = self.loop.call_later(self._period, self._tick)


HEADER_SIZE = len(pack_header(KEEPALIVE, 0, 0, 0))
