"""Framing of the worker-to-worker data stream (plain asyncio TCP, no Ray).

A child opens a connection to its parent and sends HELLO (which version it wants, which chunks it
already holds, or — for a repair fetch — exactly which chunks it wants). The parent answers with the
signed MANIFEST, then CHUNK frames in the order it verified them itself, KEEPALIVE while it waits on
its own parent (so silence means a stalled parent, not a slow chain), and DONE once it has sent all
it will. ERROR carries a reason and ends the stream.

Every frame: ``kind u8 | version u64 | index u32 | payload length u32 | payload``.
"""

from __future__ import annotations

import asyncio
import json
import struct
from dataclasses import dataclass, field

HEADER = struct.Struct("!BQII")
HELLO, MANIFEST, CHUNK, KEEPALIVE, DONE, ERROR = 1, 2, 3, 4, 5, 6
KIND_NAMES = {HELLO: "HELLO", MANIFEST: "MANIFEST", CHUNK: "CHUNK", KEEPALIVE: "KEEPALIVE", DONE: "DONE", ERROR: "ERROR"}
MAX_CONTROL_PAYLOAD = 64 * 1024 * 1024  # a manifest of ~1M chunk hashes; anything larger is garbage


class ProtocolError(ConnectionError):
    """The peer sent something that is not this protocol (treated like a broken link)."""


@dataclass(frozen=True)
class FrameHeader:
    kind: int
    version: int
    index: int
    length: int


def pack_header(kind: int, version: int, index: int, length: int) -> bytes:
    return HEADER.pack(kind, version, index, length)


async def read_header(reader: asyncio.StreamReader) -> FrameHeader:
    raw = await reader.readexactly(HEADER.size)
    header = FrameHeader(*HEADER.unpack(raw))
    if header.kind not in KIND_NAMES:
        raise ProtocolError(f"unknown frame kind {header.kind}; the peer speaks another protocol or the stream is corrupt")
    return header


@dataclass
class Hello:
    node: str
    version: int
    have: list[tuple[int, int]] = field(default_factory=list)
    """Chunk index ranges [start, end) the child already holds; the parent skips them."""
    want: list[int] | None = None
    """Fetch mode: send exactly these chunks (then DONE), e.g. to replace a chunk that failed its hash."""

    def encode(self) -> bytes:
        payload = json.dumps({"node": self.node, "version": self.version, "have": self.have, "want": self.want}).encode()
        return pack_header(HELLO, self.version, 0, len(payload)) + payload

    @classmethod
    def decode(cls, payload: bytes) -> "Hello":
        try:
            raw = json.loads(payload)
            return cls(str(raw["node"]), int(raw["version"]), [tuple(r) for r in raw.get("have") or []], raw.get("want"))
        except (ValueError, KeyError, TypeError) as exc:
            raise ProtocolError(f"HELLO payload is not valid: {exc}") from exc


async def read_hello(reader: asyncio.StreamReader) -> Hello:
    header = await read_header(reader)
    if header.kind != HELLO or header.length > MAX_CONTROL_PAYLOAD:
        raise ProtocolError(f"expected HELLO first, got {KIND_NAMES[header.kind]} of {header.length} bytes")
    return Hello.decode(await reader.readexactly(header.length))


def ranges_from_flags(flags: bytearray | bytes) -> list[tuple[int, int]]:
    """Compress a 0/1 flag per chunk into [start, end) ranges of ones."""
    ranges, start = [], None
    for i, flag in enumerate(flags):
        if flag and start is None:
            start = i
        elif not flag and start is not None:
            ranges.append((start, i))
            start = None
    if start is not None:
        ranges.append((start, len(flags)))
    return ranges


def indices_in(ranges: list[tuple[int, int]]) -> set[int]:
    return {i for start, end in ranges for i in range(start, end)}
