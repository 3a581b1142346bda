"""The receiving end of a parent stream, as an ``asyncio.BufferedProtocol``.

Why not ``StreamReader``: on the 2-core build machines a StreamReader costs ~1.9 CPU-s per GB (the
kernel copies into its buffer, ``readexactly`` copies out, chunks are joined and copied again into
the snapshot), which would make a 32-worker emulation CPU-bound. Here the kernel writes chunk
payloads straight into their place in the snapshot buffer (``get_buffer`` hands out that region),
~0.6 CPU-s per GB for both ends together, so the measured times stay bandwidth-bound.

The protocol also enforces the downlink bucket (it pauses reading when the link is "busy", which
back-pressures the sender through TCP) and the stall deadline (no byte for ``stall_timeout_s``).
"""

from __future__ import annotations

import asyncio
import inspect
from typing import Protocol

from echo2_sdk.runtime.broadcast.shaping import TokenBucket
from echo2_sdk.runtime.broadcast.wire import (
    CHUNK, DONE, ERROR, HEADER, KEEPALIVE, KIND_NAMES, MANIFEST, MAX_CONTROL_PAYLOAD, ProtocolError,
)


class FrameSink(Protocol):
    def chunk_target(self, index: int, length: int) -> tuple[memoryview, bool]:
        """Where to write chunk ``index``: (view, claimed) — claimed means in place in the snapshot."""

    def on_chunk(self, index: int, view: memoryview, claimed: bool) -> None: ...

    def release(self, index: int) -> None:
        """A claimed chunk's stream broke before the chunk was complete."""

    def on_manifest(self, wire: bytes): ...


class FrameReceiver(asyncio.BufferedProtocol):
    def __init__(self, sink: FrameSink, version: int, bucket: TokenBucket, slice_bytes: int, stall_timeout_s: float) -> None:
        self.sink = sink
        self.version = version
        self.bucket = bucket
        self.slice = slice_bytes
        self.stall_timeout_s = stall_timeout_s
        self.loop = asyncio.get_running_loop()
        self.done: asyncio.Future = self.loop.create_future()
        self.transport: asyncio.Transport | None = None
        self._header = bytearray(HEADER.size)
        self._header_view = memoryview(self._header)
        self._got = 0
        self._in_payload = False
        self._frame: tuple[int, int, int] = (0, 0, 0)
        self._target: memoryview | None = None
        self._claimed = False
        self._pauses: set[str] = set()
        self._last_progress = self.loop.time()
        self._watchdog: asyncio.TimerHandle | None = None

    # ---- asyncio callbacks --------------------------------------------------------------------
    def connection_made(self, transport) -> None:
        self.transport = transport
        self._arm_watchdog()

    def get_buffer(self, sizehint: int) -> memoryview:
        if not self._in_payload:
            return self._header_view[self._got:]
        return self._target[self._got:min(len(self._target), self._got + self.slice)]

    def buffer_updated(self, nbytes: int) -> None:
        if self.done.done():
            return
        self._last_progress = self.loop.time()
        delay = self.bucket.book(nbytes)
        if delay > 0.0005:
            self._pause("shape")
            self.loop.call_later(delay, self._resume_shaped, self.loop.time() + delay)
        self._got += nbytes
        try:
            if not self._in_payload:
                if self._got == HEADER.size:
                    self._header_complete()
            elif self._got == len(self._target):
                self._payload_complete()
        except (ProtocolError, ValueError) as exc:
            self._finish(exc)

    def eof_received(self) -> bool:
        return False

    def connection_lost(self, exc: Exception | None) -> None:
        if self._in_payload and self._claimed:
            self.sink.release(self._frame[1])
            self._claimed = False
        self._finish(exc or ConnectionResetError("the parent closed the stream before DONE"))

    # ---- framing ----------------------------------------------------------------------------
    def _header_complete(self) -> None:
        kind, version, index, length = HEADER.unpack(self._header)
        self._got = 0
        if kind not in KIND_NAMES:
            raise ProtocolError(f"unknown frame kind {kind}; the stream is corrupt or another protocol")
        if version != self.version:
            raise ProtocolError(f"parent sent version {version}, this stream is for version {self.version}")
        if kind == KEEPALIVE:
            return
        if kind == DONE:
            self._finish(None)
            return
        self._frame = (kind, index, length)
        if kind == CHUNK:
            self._target, self._claimed = self.sink.chunk_target(index, length)
        else:
            if length > MAX_CONTROL_PAYLOAD:
                raise ProtocolError(f"a {KIND_NAMES[kind]} frame of {length} bytes exceeds {MAX_CONTROL_PAYLOAD}")
            self._target, self._claimed = memoryview(bytearray(length)), False
        self._in_payload = True
        if length == 0:
            self._payload_complete()

    def _payload_complete(self) -> None:
        kind, index, _ = self._frame
        target, claimed = self._target, self._claimed
        self._in_payload, self._got, self._target, self._claimed = False, 0, None, False
        if kind == CHUNK:
            self.sink.on_chunk(index, target, claimed)
        elif kind == ERROR:
            raise ProtocolError(f"parent refused: {bytes(target).decode(errors='replace')}")
        elif kind == MANIFEST:
            result = self.sink.on_manifest(bytes(target))
            if inspect.isawaitable(result):
                self._pause("manifest")
                task = asyncio.ensure_future(result)
                task.add_done_callback(self._manifest_processed)

    def _manifest_processed(self, task: asyncio.Task) -> None:
        if task.cancelled():
            self._finish(ConnectionAbortedError("manifest processing cancelled"))
        elif task.exception() is not None:
            self._finish(task.exception())
        else:
            self._resume("manifest")

    # ---- flow control, deadline, completion ---------------------------------------------------
    def _pause(self, reason: str) -> None:
        if not self._pauses and self.transport is not None and not self.transport.is_closing():
            self.transport.pause_reading()
        self._pauses.add(reason)

    def _resume(self, reason: str) -> None:
        self._pauses.discard(reason)
        self._last_progress = self.loop.time()
        if not self._pauses and self.transport is not None and not self.transport.is_closing():
            self.transport.resume_reading()

    def _resume_shaped(self, due: float) -> None:
        self.bucket.woke_late(self.loop.time() - due)  # loop.time() is time.monotonic()
        self._resume("shape")

    def _arm_watchdog(self) -> None:
        self._watchdog = self.loop.call_later(self.stall_timeout_s / 4, self._check_stall)

    def _check_stall(self) -> None:
        if self.done.done():
            return
        idle = self.loop.time() - self._last_progress
        if idle > self.stall_timeout_s and "manifest" not in self._pauses:
            self._finish(TimeoutError(f"no byte from the parent for {idle:.1f} s (stall deadline {self.stall_timeout_s} s)"))
        else:
            self._arm_watchdog()

    def _finish(self, exc: BaseException | None) -> None:
        if self.done.done():
            return
        if self._watchdog is not None:
            self._watchdog.cancel()
        if exc is None:
            self.done.set_result(None)
        else:
            self.done.set_exception(exc)
            if self.transport is not None:
                self.transport.abort()
