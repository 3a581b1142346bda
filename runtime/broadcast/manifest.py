"""The signed manifest that lets any worker check a snapshot relayed by untrusted peers.

The learner hashes every chunk and the whole snapshot (SHA-256) and signs the manifest with its
Ed25519 key. Workers know the learner's public key out of band (the control plane hands it to them
when they join), so a relay can neither alter a chunk (its hash is in the signed manifest) nor
substitute a manifest (the signature would not verify).

Wire form: ``u32 body length | body (canonical JSON, UTF-8) | 64-byte Ed25519 signature``. The
signature covers the exact body bytes that travel, so no re-canonicalisation is needed to verify.
"""

from __future__ import annotations

import functools
import hashlib
import json
import struct
import time
from dataclasses import dataclass, field

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

from echo2_sdk.runtime.broadcast.snapshot import ChunkLayout, split_chunks

FORMAT = "echo2-snapshot/1"
SIGNATURE_BYTES = 64
_BODY_LEN = struct.Struct("!I")


class ManifestError(ValueError):
    """A manifest is malformed, forged, or does not describe the bytes it came with."""


@dataclass(frozen=True)
class Manifest:
    version: int
    total_size: int
    chunk_size: int
    chunk_sha256: tuple[str, ...]
    sha256: str
    publisher: str
    """Fingerprint of the signing public key (first 16 hex digits of its SHA-256)."""
    created: float = 0.0
    metadata: dict = field(default_factory=dict)

    @functools.cached_property
    def layout(self) -> ChunkLayout:
        return ChunkLayout(self.total_size, self.chunk_size)

    @property
    def num_chunks(self) -> int:
        return len(self.chunk_sha256)

    def chunk_ok(self, index: int, payload: bytes | bytearray | memoryview) -> bool:
        """True when ``payload`` is exactly chunk ``index`` of this snapshot."""
        expected = min(self.chunk_size, self.total_size - index * self.chunk_size)
        if len(payload) != expected:
            return False
        return hashlib.sha256(payload).hexdigest() == self.chunk_sha256[index]

    def body_bytes(self) -> bytes:
        body = {
            "format": FORMAT,
            "version": self.version,
            "total_size": self.total_size,
            "chunk_size": self.chunk_size,
            "chunk_sha256": list(self.chunk_sha256),
            "sha256": self.sha256,
            "publisher": self.publisher,
            "created": self.created,
            "metadata": self.metadata,
        }
        return json.dumps(body, sort_keys=True, separators=(",", ":")).encode()


def key_fingerprint(public_key: Ed25519PublicKey) -> str:
    raw = public_key.public_bytes(Encoding.Raw, PublicFormat.Raw)
    return hashlib.sha256(raw).hexdigest()[:16]


def public_key_bytes(public_key: Ed25519PublicKey) -> bytes:
    return public_key.public_bytes(Encoding.Raw, PublicFormat.Raw)


def public_key_from_bytes(raw: bytes) -> Ed25519PublicKey:
    if len(raw) != 32:
        raise ManifestError(f"an Ed25519 public key is 32 raw bytes, got {len(raw)}")
    return Ed25519PublicKey.from_public_bytes(raw)


def build_manifest(
    data: bytes | bytearray | memoryview, version: int, chunk_size: int, metadata: dict | None = None,
    *, public_key: Ed25519PublicKey,
) -> Manifest:
    """Hash ``data`` chunk by chunk and as a whole (unsigned; see ``sign_manifest``)."""
    chunks = split_chunks(data, chunk_size)
    whole = hashlib.sha256()
    hashes = []
    for chunk in chunks:
        whole.update(chunk)
        hashes.append(hashlib.sha256(chunk).hexdigest())
    return Manifest(
        version=int(version),
        total_size=len(memoryview(data).cast("B")),
        chunk_size=int(chunk_size),
        chunk_sha256=tuple(hashes),
        sha256=whole.hexdigest(),
        publisher=key_fingerprint(public_key),
        created=time.time(),
        metadata=dict(metadata or {}),
    )


def sign_manifest(manifest: Manifest, private_key: Ed25519PrivateKey) -> bytes:
    """The manifest's wire form, signed by the learner."""
    body = manifest.body_bytes()
    return _BODY_LEN.pack(len(body)) + body + private_key.sign(body)


def verify_manifest(wire: bytes, public_key: Ed25519PublicKey) -> Manifest:
    """Check the signature against the learner's ``public_key`` and parse; raise ManifestError if not genuine."""
    if len(wire) < _BODY_LEN.size + SIGNATURE_BYTES:
        raise ManifestError(f"manifest is {len(wire)} bytes, too short to hold a body and a signature")
    (body_len,) = _BODY_LEN.unpack_from(wire, 0)
    if _BODY_LEN.size + body_len + SIGNATURE_BYTES != len(wire):
        raise ManifestError(
            f"manifest declares a {body_len}-byte body but {len(wire)} bytes arrived; it was truncated or padded"
        )
    body = wire[_BODY_LEN.size:_BODY_LEN.size + body_len]
    signature = wire[_BODY_LEN.size + body_len:]
    try:
        public_key.verify(signature, body)
    except InvalidSignature:
        raise ManifestError(
            f"manifest signature does not verify against the learner key {key_fingerprint(public_key)}; "
            "it was forged or altered in transit — refuse it and ask the control plane for another parent"
        ) from None
    try:
        raw = json.loads(body)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ManifestError(f"signed manifest body is not JSON: {exc}") from exc
    if raw.get("format") != FORMAT:
        raise ManifestError(f"manifest format {raw.get('format')!r} is not {FORMAT!r}; upgrade the worker")
    manifest = Manifest(
        version=int(raw["version"]),
        total_size=int(raw["total_size"]),
        chunk_size=int(raw["chunk_size"]),
        chunk_sha256=tuple(raw["chunk_sha256"]),
        sha256=raw["sha256"],
        publisher=raw["publisher"],
        created=float(raw.get("created", 0.0)),
        metadata=dict(raw.get("metadata", {})),
    )
    if manifest.num_chunks != manifest.layout.num_chunks:
        raise ManifestError(
            f"manifest lists {manifest.num_chunks} chunk hashes but {manifest.total_size} bytes in "
            f"{manifest.chunk_size}-byte chunks make {manifest.layout.num_chunks}"
        )
    return manifest


def new_signing_key() -> Ed25519PrivateKey:
    return Ed25519PrivateKey.generate()
