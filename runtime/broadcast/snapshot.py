"""Policy snapshots as safetensors bytes, and the fixed-size chunks they travel in.

Weights cross the wire only as safetensors (a JSON header plus raw little-endian tensor data), never
as pickle: a worker must be able to load a snapshot relayed by an untrusted peer without running
code from it. ``state_dict_from_bytes`` parses that format itself so that a worker can build its
state dict as zero-copy views over the receive buffer (no second 100 MB-class copy per install);
``safetensors.torch.load`` is the reference it is tested against.
"""

from __future__ import annotations

import json
import struct
from dataclasses import dataclass

import torch
from safetensors.torch import save as _safetensors_save

# safetensors dtype codes → torch dtypes (the subset torch can view without conversion).
_DTYPES: dict[str, torch.dtype] = {
    "F64": torch.float64,
    "F32": torch.float32,
    "F16": torch.float16,
    "BF16": torch.bfloat16,
    "I64": torch.int64,
    "I32": torch.int32,
    "I16": torch.int16,
    "I8": torch.int8,
    "U8": torch.uint8,
    "BOOL": torch.bool,
}
_HEADER_LEN = struct.Struct("<Q")
_MAX_HEADER_BYTES = 100 * 1024 * 1024  # the safetensors spec's own limit


class SnapshotFormatError(ValueError):
    """The bytes are not a well-formed safetensors snapshot."""


def state_dict_to_bytes(state_dict: dict[str, torch.Tensor]) -> bytes:
    """Serialize ``state_dict`` to safetensors bytes (tensors moved to CPU and made contiguous).

    Tied entries (several names for the same tensor, e.g. embeddings and lm_head) travel once,
    under the first name, as ``save_pretrained`` does; the rollout backend fills the alias on load.
    """
    if not state_dict:
        raise SnapshotFormatError("state_dict is empty; publish at least one tensor")
    tensors = {}
    seen: set[tuple] = set()
    for name, tensor in state_dict.items():
        if isinstance(tensor, torch.Tensor):
            key = (tensor.data_ptr(), tensor.dtype, tuple(tensor.shape), tensor.stride(), tensor.device)
            if tensor.numel() and key in seen:
                continue
            seen.add(key)
        if not isinstance(tensor, torch.Tensor):
            raise SnapshotFormatError(
                f"state_dict[{name!r}] is a {type(tensor).__name__}, not a torch.Tensor; "
                "snapshots carry tensors only (put other values in the manifest's metadata)"
            )
        tensors[name] = tensor.detach().to("cpu").contiguous()
    return _safetensors_save(tensors)


def state_dict_from_bytes(data: bytes | bytearray | memoryview, *, copy: bool = False) -> dict[str, torch.Tensor]:
    """Parse safetensors ``data`` into tensors.

    With ``copy=False`` (and a writable buffer such as a bytearray) the tensors are views over
    ``data``; the caller must then keep ``data`` alive and unmodified while they are in use.
    """
    view = memoryview(data).cast("B")
    if len(view) < _HEADER_LEN.size:
        raise SnapshotFormatError(f"snapshot is {len(view)} bytes, shorter than the 8-byte safetensors header length")
    (header_len,) = _HEADER_LEN.unpack_from(view, 0)
    data_start = _HEADER_LEN.size + header_len
    if header_len > _MAX_HEADER_BYTES or data_start > len(view):
        raise SnapshotFormatError(
            f"safetensors header length {header_len} does not fit a {len(view)}-byte snapshot; the bytes are "
            "truncated or not safetensors"
        )
    try:
        header = json.loads(bytes(view[_HEADER_LEN.size:data_start]))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise SnapshotFormatError(f"safetensors header is not valid JSON: {exc}") from exc
    header.pop("__metadata__", None)
    body_len = len(view) - data_start
    readonly = view.readonly
    out: dict[str, torch.Tensor] = {}
    for name, spec in header.items():
        dtype = _DTYPES.get(spec.get("dtype"))
        if dtype is None:
            raise SnapshotFormatError(f"tensor {name!r} has dtype {spec.get('dtype')!r}; supported: {sorted(_DTYPES)}")
        shape = [int(d) for d in spec["shape"]]
        begin, end = (int(x) for x in spec["data_offsets"])
        numel = 1
        for d in shape:
            numel *= d
        itemsize = torch.empty((), dtype=dtype).element_size()
        if not 0 <= begin <= end <= body_len or end - begin != numel * itemsize:
            raise SnapshotFormatError(
                f"tensor {name!r}: data_offsets [{begin}, {end}) do not hold shape {shape} of {spec['dtype']} "
                f"inside a {body_len}-byte body"
            )
        if numel == 0:
            out[name] = torch.empty(shape, dtype=dtype)
            continue
        if readonly or copy:
            raw = bytearray(view[data_start + begin:data_start + end])
            tensor = torch.frombuffer(raw, dtype=dtype, count=numel)
        else:
            tensor = torch.frombuffer(view, dtype=dtype, count=numel, offset=data_start + begin)
        out[name] = tensor.view(shape)
    return out


@dataclass(frozen=True)
class ChunkLayout:
    """How ``total_size`` bytes are cut into ``chunk_size`` pieces (the last one may be shorter)."""

    total_size: int
    chunk_size: int

    def __post_init__(self) -> None:
        if self.total_size <= 0:
            raise ValueError(f"snapshot size {self.total_size} must be > 0")
        if self.chunk_size <= 0:
            raise ValueError(f"chunk size {self.chunk_size} must be > 0 bytes")

    @property
    def num_chunks(self) -> int:
        return -(-self.total_size // self.chunk_size)

    def bounds(self, index: int) -> tuple[int, int]:
        if not 0 <= index < self.num_chunks:
            raise IndexError(f"chunk {index} is outside 0..{self.num_chunks - 1}")
        start = index * self.chunk_size
        return start, min(start + self.chunk_size, self.total_size)

    def length(self, index: int) -> int:
        start, end = self.bounds(index)
        return end - start


def split_chunks(data: bytes | bytearray | memoryview, chunk_size: int) -> list[memoryview]:
    """Zero-copy chunk views of ``data``."""
    view = memoryview(data).cast("B")
    layout = ChunkLayout(len(view), chunk_size)
    return [view[slice(*layout.bounds(i))] for i in range(layout.num_chunks)]


def join_chunks(chunks: list[bytes | memoryview]) -> bytes:
    return b"".join(chunks)
