"""Snapshot format: safetensors bytes ↔ state dict, chunking, and the signed manifest."""

from __future__ import annotations

import hashlib

import pytest
import torch
from safetensors.torch import load as safetensors_load

from echo2_sdk.runtime.broadcast.manifest import (
    ManifestError, build_manifest, new_signing_key, public_key_bytes, public_key_from_bytes, sign_manifest,
    verify_manifest,
)
from echo2_sdk.runtime.broadcast.snapshot import (
    ChunkLayout, SnapshotFormatError, join_chunks, split_chunks, state_dict_from_bytes, state_dict_to_bytes,
)


def _state_dict() -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    return {
        "embed.weight": torch.randn(37, 16, generator=g),
        "layers.0.attn.q.weight": torch.randn(16, 16, generator=g).to(torch.bfloat16),
        "layers.0.norm.weight": torch.randn(16, generator=g).to(torch.float16),
        "step": torch.tensor(12345, dtype=torch.int64),
        "mask": torch.rand(5, 3, generator=g) > 0.5,
        "ids": torch.arange(11, dtype=torch.int32),
        "empty": torch.zeros(0, 4),
    }


def _assert_equal(a: dict, b: dict) -> None:
    assert a.keys() == b.keys()
    for name in a:
        assert a[name].dtype == b[name].dtype, name
        assert a[name].shape == b[name].shape, name
        assert torch.equal(a[name], b[name]), name


def test_round_trip_state_dict_bytes_chunks_state_dict():
    sd = _state_dict()
    data = state_dict_to_bytes(sd)
    chunks = split_chunks(data, 100)  # deliberately not aligned to tensors or to the header
    assert len(chunks) == ChunkLayout(len(data), 100).num_chunks
    rebuilt = join_chunks(chunks)
    assert rebuilt == data
    _assert_equal(state_dict_from_bytes(bytearray(rebuilt)), sd)
    _assert_equal(state_dict_from_bytes(rebuilt), sd)  # read-only bytes: parsed with copies
    _assert_equal(safetensors_load(rebuilt), sd)  # the reference parser agrees


def test_zero_copy_views_share_the_buffer_and_copies_do_not():
    sd = {"w": torch.arange(8, dtype=torch.float32)}
    buf = bytearray(state_dict_to_bytes(sd))
    view = state_dict_from_bytes(buf)["w"]
    copied = state_dict_from_bytes(buf, copy=True)["w"]
    buf[-4:] = torch.tensor([99.0]).numpy().tobytes()
    assert view[-1].item() == 99.0
    assert copied[-1].item() == 7.0


def test_non_tensor_values_and_garbage_are_refused_with_a_reason():
    with pytest.raises(SnapshotFormatError, match="not a torch.Tensor"):
        state_dict_to_bytes({"lr": 0.1})
    with pytest.raises(SnapshotFormatError, match="header length"):
        state_dict_from_bytes(b"\xff" * 64)
    data = bytearray(state_dict_to_bytes({"w": torch.ones(4)}))
    with pytest.raises(SnapshotFormatError):
        state_dict_from_bytes(data[:-3])  # truncated body


def test_chunk_layout_bounds():
    layout = ChunkLayout(10, 4)
    assert layout.num_chunks == 3
    assert [layout.bounds(i) for i in range(3)] == [(0, 4), (4, 8), (8, 10)]
    with pytest.raises(IndexError):
        layout.bounds(3)
    with pytest.raises(ValueError, match="chunk size"):
        ChunkLayout(10, 0)


def _signed(data: bytes, chunk: int = 64):
    key = new_signing_key()
    manifest = build_manifest(data, 7, chunk, {"step": 7}, public_key=key.public_key())
    return key, manifest, sign_manifest(manifest, key)


def test_manifest_carries_sizes_and_hashes_and_verifies():
    data = state_dict_to_bytes(_state_dict())
    key, manifest, wire = _signed(data)
    got = verify_manifest(wire, public_key_from_bytes(public_key_bytes(key.public_key())))
    assert got == manifest
    assert got.version == 7 and got.total_size == len(data) and got.chunk_size == 64
    assert got.sha256 == hashlib.sha256(data).hexdigest()
    assert got.num_chunks == len(split_chunks(data, 64))
    for i, chunk in enumerate(split_chunks(data, 64)):
        assert got.chunk_ok(i, chunk)
    flipped = bytearray(split_chunks(data, 64)[3])
    flipped[0] ^= 1
    assert not got.chunk_ok(3, flipped)
    assert not got.chunk_ok(3, bytes(split_chunks(data, 64)[3])[:-1])


def test_forged_manifests_are_refused():
    data = state_dict_to_bytes(_state_dict())
    key, manifest, wire = _signed(data)
    # signed by someone else
    impostor = new_signing_key()
    with pytest.raises(ManifestError, match="signature does not verify"):
        verify_manifest(sign_manifest(manifest, impostor), key.public_key())
    # a relay swaps one chunk hash (to slip a chunk of its own through) and keeps the signature
    forged = bytearray(wire)
    position = forged.find(manifest.chunk_sha256[2].encode())
    forged[position] = ord("0") if forged[position] != ord("0") else ord("1")
    with pytest.raises(ManifestError, match="signature does not verify"):
        verify_manifest(bytes(forged), key.public_key())
    # truncated
    with pytest.raises(ManifestError, match="truncated or padded|too short"):
        verify_manifest(wire[:-5], key.public_key())
