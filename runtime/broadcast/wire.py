"""Framing of the worker-to-worker data stream (plain asyncio TCP, no Ray).

A child opens a connection to its parent and sends HELLO (which version it wants, which chunks it
already holds, or — for a repair fetch — exactly which chunks it wants — and the learner's ticket for
this child, version and parent; ``credentials``). The parent checks the HELLO's size, fields and
ticket before it does any work, then answers with the
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
MAX_HELLO_PAYLOAD = 1024 * 1024
"""A HELLO is read before its sender is known: at most this many bytes (64k ranges) are ever buffered."""
MAX_RANGES = 65536
MAX_CHUNKS = 2**31
MAX_VERSION = 2**53


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
    ticket: str = ""
    """The learner's single-use pass for this child, version and parent (``credentials.ticket_valid``)."""

    def encode(self) -> bytes:
        payload = json.dumps({"node": self.node, "version": self.version, "have": self.have, "want": self.want,
                              "ticket": self.ticket}).encode()
        return pack_header(HELLO, self.version, 0, len(payload)) + payload

    @classmethod
    def decode(cls, payload: bytes, header_version: int) -> "Hello":
        """Parse and bound every field (nothing is allocated from a count the peer chose)."""
        try:
            raw = json.loads(payload)
        except (UnicodeDecodeError, ValueError) as exc:
            raise ProtocolError(f"HELLO payload is not JSON: {exc}") from None
        if not isinstance(raw, dict):
            raise ProtocolError("HELLO payload is not a JSON object")
        node, version, ticket = raw.get("node"), raw.get("version"), raw.get("ticket", "")
        if not isinstance(node, str) or not 0 < len(node) <= 128 or not isinstance(ticket, str) or len(ticket) > 64:
            raise ProtocolError("HELLO names no valid node or ticket")
        if not _bounded_int(version, MAX_VERSION) or version != header_version:
            raise ProtocolError(f"HELLO version {str(version)[:40]} is not the frame's {header_version}")
        have, want = raw.get("have") or [], raw.get("want")
        if not isinstance(have, list) or len(have) > MAX_RANGES or not all(
                isinstance(r, list) and len(r) == 2 and _bounded_int(r[0], MAX_CHUNKS) and _bounded_int(r[1], MAX_CHUNKS + 1)
                and r[0] < r[1] for r in have):
            raise ProtocolError(f"HELLO have-ranges must be at most {MAX_RANGES} pairs [start, end) of chunk indices")
        if want is not None and (not isinstance(want, list) or len(want) > MAX_RANGES
                                 or not all(_bounded_int(i, MAX_CHUNKS) for i in want)):
            raise ProtocolError(f"HELLO want must be at most {MAX_RANGES} chunk indices")
        return cls(node, version, [(r[0], r[1]) for r in have], want, ticket)


def _bounded_int(value: object, limit: int) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and 0 <= value < limit


async def read_hello(reader: asyncio.StreamReader) -> Hello:
    header = await read_header(reader)
    if header.kind != HELLO or header.length > MAX_HELLO_PAYLOAD:
        raise ProtocolError(f"expected HELLO of at most {MAX_HELLO_PAYLOAD} bytes first, got "
                            f"{KIND_NAMES[header.kind]} of {header.length} bytes")
    return Hello.decode(await reader.readexactly(header.length), header.version)


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


def flags_from_ranges(ranges: list[tuple[int, int]], num_chunks: int) -> bytearray:
    """A 0/1 flag per chunk from [start, end) ranges, clipped to ``num_chunks`` (one byte per chunk,
    however large the ranges a peer claims).

    >>> list(flags_from_ranges([(1, 3), (4, 99)], 6))
    [0, 1, 1, 0, 1, 1]
    """
    flags = bytearray(num_chunks)
    for start, end in ranges:
        start, end = min(start, num_chunks), min(end, num_chunks)
        flags[start:end] = b"\x01" * (end - start)
    return flags
