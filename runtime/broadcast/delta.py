"""Delta snapshots: what changed in a safetensors snapshot against a base version, compressed.

With float32 master weights and an RL learning rate around 1e-6, most bfloat16 values of the rollout
snapshot are bit-identical from one publish to the next: the chain is bandwidth-bound, so sending
only the changed bits is the whole win. The format:

* the XOR of the target's raw bytes with the base's, tensor by tensor (the safetensors header is a
  segment of 1-byte elements, every tensor one of its dtype's width);
* each segment's XOR split into byte planes (all first bytes of its elements, then all second
  bytes...): a small bf16 step flips low mantissa bits, so the high-byte plane is almost all zero and
  the low one sparse — the layout zstd compresses best;
* one zstd frame over the planes in segment order, streamed tensor by tensor (no full-size copy).

Applying it needs only the base bytes: the segments come from the base's own header (a delta exists
only between snapshots with byte-identical headers, i.e. the same names, dtypes and shapes). The
result is trusted only if its SHA-256 equals the target hash that the signed manifest names
(``DeltaSpec``, carried in the manifest's ``metadata``); the delta bytes themselves travel and are
verified chunk by chunk like any snapshot, so the chain stays content-agnostic.
"""

from __future__ import annotations

import hashlib
import json
import struct
from dataclasses import asdict, dataclass

import numpy as np
import zstandard

CODEC = "xor-planes-zstd/1"
METADATA_KEY = "delta"
"""Key of the ``DeltaSpec`` inside a signed manifest's ``metadata`` (absent: a full snapshot)."""
_HEADER_LEN = struct.Struct("<Q")
_ITEMSIZE = {"F64": 8, "F32": 4, "F16": 2, "BF16": 2, "I64": 8, "I32": 4, "I16": 2, "I8": 1, "U8": 1, "BOOL": 1}
_UINT = {1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}


class DeltaError(ValueError):
    """A delta cannot be applied: malformed, against other bytes than its base, or the wrong result."""


@dataclass(frozen=True)
class DeltaSpec:
    """What a delta manifest promises (signed with it): apply me to ``base_version`` (whose full
    snapshot hashes to ``base_sha256``) and you get ``target_size`` bytes hashing to ``target_sha256``.
    ``full_source`` is where the learner serves the full target snapshot, for a worker that cannot;
    ``tickets`` the learner's single-use pass for each planned worker to dial it, as (worker, ticket)."""

    base_version: int
    base_sha256: str
    target_sha256: str
    target_size: int
    full_source: tuple[str, int] | None = None
    tickets: tuple[tuple[str, str], ...] = ()
    codec: str = CODEC

    def ticket_for(self, worker: str) -> str:
        return next((t for w, t in self.tickets if w == worker), "")

    def to_metadata(self) -> dict:
        body = asdict(self)
        body["full_source"] = list(self.full_source) if self.full_source else None
        body["tickets"] = dict(self.tickets)
        return {METADATA_KEY: body}

    @classmethod
    def from_metadata(cls, metadata: dict) -> DeltaSpec | None:
        """The spec in a verified manifest's metadata, or None for a full snapshot.

        >>> DeltaSpec.from_metadata({}) is None
        True
        >>> spec = DeltaSpec(3, "ab", "cd", 10, ("10.0.0.1", 4000), (("w0", "t0"),))
        >>> DeltaSpec.from_metadata(spec.to_metadata()) == spec
        True
        """
        raw = metadata.get(METADATA_KEY)
        if raw is None:
            return None
        try:
            source = raw.get("full_source")
            spec = cls(int(raw["base_version"]), str(raw["base_sha256"]), str(raw["target_sha256"]),
                       int(raw["target_size"]), (str(source[0]), int(source[1])) if source else None,
                       tuple((str(w), str(t)) for w, t in dict(raw.get("tickets") or {}).items()),
                       str(raw.get("codec", "")))
        except (AttributeError, KeyError, TypeError, ValueError, IndexError) as exc:
            raise DeltaError(f"manifest metadata 'delta' is malformed ({exc!r}): {str(raw)[:200]}") from None
        if spec.codec != CODEC:
            raise DeltaError(f"delta codec {spec.codec!r} is not {CODEC!r}; upgrade the worker")
        return spec


@dataclass(frozen=True)
class Segment:
    """``length`` bytes at ``offset`` made of ``itemsize``-byte elements."""

    offset: int
    length: int
    itemsize: int


@dataclass(frozen=True)
class EncodedDelta:
    payload: bytes
    changed_elements: int
    """Elements (of their tensor's dtype; header bytes count as 1-byte elements) whose bits differ."""
    elements: int

    @property
    def density(self) -> float:
        return self.changed_elements / max(1, self.elements)


def segments(data: bytes | bytearray | memoryview) -> tuple[Segment, ...]:
    """The header and every tensor of a safetensors snapshot, in byte order.

    >>> import torch; from safetensors.torch import save
    >>> [(s.itemsize, s.length) for s in segments(save({"a": torch.zeros(3, dtype=torch.bfloat16)}))][1:]
    [(2, 6)]
    """
    view = memoryview(data).cast("B")
    if len(view) < _HEADER_LEN.size:
        raise DeltaError(f"a {len(view)}-byte buffer is not a safetensors snapshot")
    (header_len,) = _HEADER_LEN.unpack_from(view, 0)
    start = _HEADER_LEN.size + header_len
    if start > len(view):
        raise DeltaError(f"safetensors header of {header_len} bytes does not fit in {len(view)} bytes")
    try:
        header = json.loads(bytes(view[_HEADER_LEN.size:start]))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise DeltaError(f"safetensors header is not JSON: {exc}") from None
    header.pop("__metadata__", None)
    out = [Segment(0, start, 1)]
    for name, spec in header.items():
        begin, end = (int(x) for x in spec["data_offsets"])
        itemsize = _ITEMSIZE.get(spec.get("dtype"), 1)
        if end - begin and (end - begin) % itemsize:
            itemsize = 1  # cannot happen in valid safetensors; bytes still XOR correctly
        if not 0 <= begin <= end <= len(view) - start:
            raise DeltaError(f"tensor {name!r}: data_offsets [{begin}, {end}) fall outside the snapshot")
        if end > begin:
            out.append(Segment(start + begin, end - begin, itemsize))
    out.sort(key=lambda s: s.offset)
    covered = sum(s.length for s in out)
    if covered != len(view):  # gaps (padding) become 1-byte segments so every byte is covered
        out = _fill_gaps(out, len(view))
    return tuple(out)


def _fill_gaps(segs: list[Segment], size: int) -> list[Segment]:
    filled, at = [], 0
    for s in segs:
        if s.offset < at:
            raise DeltaError(f"safetensors tensors overlap at byte {s.offset}")
        if s.offset > at:
            filled.append(Segment(at, s.offset - at, 1))
        filled.append(s)
        at = s.offset + s.length
    if at < size:
        filled.append(Segment(at, size - at, 1))
    return filled


def same_layout(base: bytes | bytearray | memoryview, target: bytes | bytearray | memoryview) -> bool:
    """True when a delta can exist: equal sizes and byte-identical safetensors headers."""
    b, t = memoryview(base).cast("B"), memoryview(target).cast("B")
    if len(b) != len(t) or len(b) < _HEADER_LEN.size:
        return False
    (header_len,) = _HEADER_LEN.unpack_from(b, 0)
    end = _HEADER_LEN.size + header_len
    return end <= len(b) and b[:end] == t[:end]


_UNCHANGED, _SPARSE, _DENSE = 0, 1, 2
_SEGMENT_HEAD = struct.Struct("<BQ")
"""Per segment in the uncompressed stream: mode, and (sparse) how many elements changed."""


def _planes(words: np.ndarray) -> bytes:
    """n k-byte elements → k planes of n bytes (plane j: every element's byte j), as bytes."""
    if words.itemsize == 1:
        return words.tobytes()
    return np.ascontiguousarray(words.view(np.uint8).reshape(-1, words.itemsize).T).tobytes()


def _unplanes(raw: bytes, dtype) -> np.ndarray:
    k = np.dtype(dtype).itemsize
    planes = np.frombuffer(raw, dtype=np.uint8)
    return planes.view(dtype) if k == 1 else np.ascontiguousarray(planes.reshape(k, -1).T).view(dtype).ravel()


def _gap_dtype(elements: int):
    return np.uint32 if elements < 2**32 else np.uint64


def encode_delta(base: bytes | bytearray | memoryview, target: bytes | bytearray | memoryview,
                 level: int = 3) -> EncodedDelta | None:
    """The delta turning ``base`` into ``target``, or None when their layouts differ (send full).

    Per segment: nothing if it is bit-identical; else the changed elements' positions (gaps between
    them) and XOR values when that is smaller than the XOR of the whole segment, which is sent
    otherwise. Both as byte planes, in one zstd stream.
    """
    if not same_layout(base, target):
        return None
    b = np.frombuffer(base, dtype=np.uint8)
    t = np.frombuffer(target, dtype=np.uint8)
    compressor = zstandard.ZstdCompressor(level=level).compressobj()
    parts, changed, elements = [], 0, 0
    for seg in segments(target):
        dtype = _UINT[seg.itemsize]
        xor = np.bitwise_xor(b[seg.offset:seg.offset + seg.length].view(dtype),
                             t[seg.offset:seg.offset + seg.length].view(dtype))
        where = np.flatnonzero(xor)
        changed += where.size
        elements += xor.size
        gap = _gap_dtype(xor.size)
        if where.size == 0:
            parts.append(compressor.compress(_SEGMENT_HEAD.pack(_UNCHANGED, 0)))
        elif where.size * (np.dtype(gap).itemsize + seg.itemsize) < seg.length:
            gaps = np.diff(where, prepend=0).astype(gap)
            parts.append(compressor.compress(_SEGMENT_HEAD.pack(_SPARSE, where.size)))
            parts.append(compressor.compress(_planes(gaps)))
            parts.append(compressor.compress(_planes(xor[where])))
        else:
            parts.append(compressor.compress(_SEGMENT_HEAD.pack(_DENSE, 0)))
            parts.append(compressor.compress(_planes(xor)))
    parts.append(compressor.flush())
    return EncodedDelta(b"".join(parts), changed, elements)


def apply_delta(base: bytes | bytearray | memoryview, payload: bytes | bytearray | memoryview) -> bytearray:
    """``base`` with the delta applied (a new buffer; ``base`` is not modified)."""
    out = bytearray(base)
    view = np.frombuffer(out, dtype=np.uint8)
    reader = zstandard.ZstdDecompressor().stream_reader(bytes(payload))
    try:
        for seg in segments(out):
            mode, count = _SEGMENT_HEAD.unpack(_read_exact(reader, _SEGMENT_HEAD.size))
            if mode == _UNCHANGED:
                continue
            dtype = _UINT[seg.itemsize]
            words = view[seg.offset:seg.offset + seg.length].view(dtype)
            if mode == _SPARSE:
                gap = _gap_dtype(words.size)
                if count > words.size:
                    raise DeltaError(f"delta lists {count} changes in a segment of {words.size} elements")
                where = np.cumsum(_unplanes(_read_exact(reader, count * np.dtype(gap).itemsize), gap), dtype=np.uint64)
                values = _unplanes(_read_exact(reader, count * seg.itemsize), dtype)
                if count and where[-1] >= words.size:
                    raise DeltaError(f"delta changes element {int(where[-1])} of a {words.size}-element segment")
                words[where.astype(np.intp)] ^= values
            elif mode == _DENSE:
                np.bitwise_xor(words, _unplanes(_read_exact(reader, seg.length), dtype), out=words)
            else:
                raise DeltaError(f"delta segment mode {mode} is not 0, 1 or 2; the payload is for another codec")
        if reader.read(1):
            raise DeltaError("delta payload holds more bytes than its base's tensors; it is for another base")
    except zstandard.ZstdError as exc:
        raise DeltaError(f"delta payload is not a valid zstd frame: {exc}") from None
    finally:
        reader.close()
    return out


def _read_exact(reader, size: int) -> bytes:
    pieces, left = [], size
    while left:
        piece = reader.read(left)
        if not piece:
            raise DeltaError(f"delta payload ended {left} bytes early; it is for another base or truncated")
        pieces.append(piece)
        left -= len(piece)
    return pieces[0] if len(pieces) == 1 else b"".join(pieces)


def apply_verified(base: bytes | bytearray | memoryview, payload: bytes | bytearray | memoryview,
                   spec: DeltaSpec) -> bytearray:
    """Apply and check the result against the signed target hash; DeltaError if it is not that snapshot."""
    if len(memoryview(base).cast("B")) != spec.target_size:
        raise DeltaError(f"base is {len(memoryview(base).cast('B'))} bytes, the delta's target {spec.target_size}")
    out = apply_delta(base, payload)
    digest = hashlib.sha256(out).hexdigest()
    if digest != spec.target_sha256:
        raise DeltaError(f"delta applied to version {spec.base_version} gives SHA-256 {digest[:16]}…, not the "
                         f"signed target {spec.target_sha256[:16]}…; the base held here differs")
    return out
