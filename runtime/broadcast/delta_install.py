"""The worker's side of delta snapshots: keep a few installed snapshots as bases, turn a verified
delta into the full snapshot it promises, and fall back to fetching that snapshot when it cannot.

A delta's chunks were verified against the signed manifest on arrival (and forwarded) like any
snapshot's; what is new here is the second check: the applied result must hash to the signed
target SHA-256 — the full snapshot's own hash — or it is not installed. When the base is missing (a
worker that joined or missed versions), or the result does not match (the base held here differs),
the worker fetches the full snapshot from the learner's full-snapshot node named in the signed
manifest, through an ordinary verified receive, and counts the fallback.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass
from typing import Any

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey
from echo2_sdk.runtime.broadcast.base import BroadcastError, Peer
from echo2_sdk.runtime.broadcast.delta import DeltaError, DeltaSpec, apply_verified
from echo2_sdk.runtime.broadcast.delta_plan import BASES_KEPT
from echo2_sdk.runtime.broadcast.manifest import Manifest
from echo2_sdk.runtime.broadcast.shaping import LinkProfile

FULL_SOURCE = "source-full"
"""Node id of the learner's second node, which serves the full snapshot of a delta publish."""


@dataclass(frozen=True)
class Installed:
    """The full snapshot a worker ends up with for one version, and how it got there."""

    version: int
    buffer: Any
    sha256: str
    delta: bool = False
    """The version arrived as a delta."""
    fallback: str | None = None
    """Why the delta could not be used and the full snapshot was fetched instead (None: it was used)."""
    apply_s: float = 0.0

    def report(self) -> dict:
        """Fields merged into this worker's "installed" report to the control plane."""
        return {"delta": self.delta, "delta_fallback": self.fallback, "apply_s": round(self.apply_s, 4),
                "snapshot_sha256": self.sha256}


class _NoRepair:
    """Control client of a one-off fetch from the learner: no other parent to try, nothing to report."""

    async def find_parent(self, node: str, version: int, failed: str, reason: str) -> Peer | None:
        return None

    async def find_holder(self, node: str, version: int, chunk: int, exclude: str) -> Peer | None:
        return None

    async def report(self, node: str, version: int, event: str, detail: dict) -> None:
        return None


async def fetch_full(node_id: str, version: int, source: Peer, public_key: Ed25519PublicKey,
                     link: LinkProfile, stall_timeout_s: float = 3.0) -> tuple[Any, Manifest]:
    """Receive ``version``'s full snapshot from the learner's full-snapshot node ``source`` (signed and
    verified chunk by chunk, like any receive) with a private node of the same id that serves nobody
    (hence no key of its own: nothing can dial it)."""
    from echo2_sdk.runtime.broadcast.node import (
        BroadcastNode,  # node imports the chain; keep this module light
    )

    got: dict[str, Any] = {}

    def keep(_version: int, buffer, manifest: Manifest) -> None:
        got["buffer"], got["manifest"] = buffer, manifest

    node = BroadcastNode(node_id, link=link, public_key=public_key, node_key=b"", control=_NoRepair(),
                         on_install=keep, stall_timeout_s=stall_timeout_s)
    try:
        await node.receive(version, source)
    finally:
        await node.close()
    return got["buffer"], got["manifest"]


class HeldBases:
    """The bytes of this worker's ``keep`` newest installed versions, by version (with their SHA-256)."""

    def __init__(self, keep: int = BASES_KEPT) -> None:
        self.keep = keep
        self.bases: dict[int, tuple[Any, str]] = {}

    def add(self, version: int, buffer, sha256: str) -> None:
        self.bases[version] = (buffer, sha256)
        for old in sorted(self.bases)[:-self.keep]:
            del self.bases[old]

    def clear(self) -> None:
        self.bases.clear()

    async def resolve(self, version: int, buffer, manifest: Manifest, *, node_id: str,
                      public_key: Ed25519PublicKey, link: LinkProfile, stall_timeout_s: float = 3.0) -> Installed:
        """The full snapshot of ``version`` from what arrived (a full snapshot, or a delta); kept as a base."""
        spec = DeltaSpec.from_metadata(manifest.metadata)
        if spec is None:
            installed = Installed(version, buffer, manifest.sha256)
        else:
            installed = await self._from_delta(version, buffer, spec, node_id, public_key, link, stall_timeout_s)
        self.add(version, installed.buffer, installed.sha256)
        return installed

    async def _from_delta(self, version: int, payload, spec: DeltaSpec, node_id: str,
                          public_key: Ed25519PublicKey, link: LinkProfile, stall_timeout_s: float) -> Installed:
        t0 = time.perf_counter()
        held = self.bases.get(spec.base_version)
        if held is None:
            why = f"base version {spec.base_version} is not held here (holds {sorted(self.bases)})"
        elif held[1] != spec.base_sha256:
            why = f"base version {spec.base_version} held here has another SHA-256 than the delta's base"
        else:
            loop = asyncio.get_running_loop()
            try:  # numpy, zstd and hashlib release the GIL: the loop keeps forwarding meanwhile
                out = await loop.run_in_executor(None, apply_verified, held[0], payload, spec)
                return Installed(version, out, spec.target_sha256, delta=True, apply_s=time.perf_counter() - t0)
            except DeltaError as exc:
                why = str(exc)
        if spec.full_source is None:
            raise BroadcastError(f"{node_id}: cannot use the delta for version {version} ({why}) and the "
                                 "manifest names no full-snapshot source")
        source = Peer(FULL_SOURCE, spec.full_source[0], spec.full_source[1], spec.ticket_for(node_id))
        buffer, full = await fetch_full(node_id, version, source, public_key, link, stall_timeout_s)
        if full.sha256 != spec.target_sha256 or full.version != version:
            raise BroadcastError(f"{node_id}: the full snapshot fetched for version {version} is not the delta's "
                                 f"signed target ({full.sha256[:16]}… vs {spec.target_sha256[:16]}…)")
        return Installed(version, buffer, full.sha256, delta=True, fallback=why, apply_s=time.perf_counter() - t0)
