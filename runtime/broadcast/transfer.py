"""One node's state for one snapshot version: the receive buffer, which chunks are verified, in
what order they arrived (the order it forwards them in), and its counters.

A chunk enters the buffer only after its SHA-256 matched the signed manifest, so anything a node
forwards has been verified by that node. With ``verify_whole`` the whole-snapshot SHA-256 is also
accumulated over the verified prefix as it grows (no extra pass at the end). It is redundant with
the signed per-chunk hashes — it can only catch a bug in this node's own assembly — and doubles the
hashing CPU, which matters only when dozens of emulated workers share two cores, hence the switch.
"""

from __future__ import annotations

import asyncio
import hashlib
import mmap
import time
from dataclasses import asdict, dataclass

from echo2_sdk.runtime.broadcast.manifest import Manifest, ManifestError


@dataclass
class TransferStats:
    bytes_in: int = 0
    bytes_out: int = 0
    chunks_in: int = 0
    chunks_out: int = 0
    rejected_chunks: int = 0
    """Chunks whose hash did not match the manifest: dropped (never stored or forwarded)."""
    duplicate_chunks: int = 0
    refetched_chunks: int = 0
    repairs: int = 0
    """Times this node re-attached to a new parent (dead, stalled or lying parent)."""
    rejected_manifests: int = 0
    t_first_chunk: float | None = None
    t_complete: float | None = None
    t_installed: float | None = None

    def to_dict(self) -> dict:
        return asdict(self)


class Transfer:
    def __init__(self, version: int, verify_whole: bool = True) -> None:
        self.version = version
        self.verify_whole = verify_whole
        self.manifest: Manifest | None = None
        self.manifest_wire: bytes | None = None
        self.buffer: bytearray | memoryview | None = None
        self.have = bytearray()
        self.log: list[int] = []
        self.stats = TransferStats()
        self.complete = asyncio.Event()
        self.manifest_ready = asyncio.Event()
        self.pending_fetch: set[int] = set()
        self.claims: set[int] = set()
        """Chunks a stream is writing in place right now (a second stream must not write there too)."""
        self.failure: str | None = None
        self._waiters: list[asyncio.Future] = []
        self._prefix = 0
        self._whole = hashlib.sha256()

    # ---- seeding and manifest ---------------------------------------------------------------
    @classmethod
    def seeded(cls, manifest: Manifest, manifest_wire: bytes, data: bytes | bytearray | memoryview) -> "Transfer":
        """A transfer that already holds every chunk (the learner's)."""
        transfer = cls(manifest.version)
        transfer.set_manifest(manifest, manifest_wire)
        transfer.buffer = memoryview(data).cast("B")
        n = manifest.num_chunks
        transfer.have = bytearray(b"\x01" * n)
        transfer.log = list(range(n))
        transfer._prefix = n
        transfer.complete.set()
        return transfer

    def set_manifest(self, manifest: Manifest, wire: bytes, buffer=None) -> None:
        """Adopt a verified manifest; ``buffer`` (≥ total_size bytes, see ``allocate_buffer``) or a new one."""
        if self.manifest is not None:
            if wire != self.manifest_wire:
                raise ManifestError(
                    f"a second, different manifest arrived for version {self.version}; the peer that sent it "
                    "is lying — it has been dropped"
                )
            return
        if manifest.version != self.version:
            raise ManifestError(f"manifest is for version {manifest.version}, this transfer is version {self.version}")
        self.manifest, self.manifest_wire = manifest, wire
        self.buffer = memoryview(buffer if buffer is not None else allocate_buffer(manifest.total_size))[:manifest.total_size]
        self.have = bytearray(manifest.num_chunks)
        self.manifest_ready.set()
        self.notify()

    # ---- chunks ----------------------------------------------------------------------------
    def accept(self, index: int, payload: bytes | bytearray | memoryview, in_place: bool = False) -> str:
        """Verify and store one chunk (``in_place``: it was received straight into the buffer).
        Returns 'ok', 'duplicate' or 'rejected'."""
        if in_place:
            self.claims.discard(index)
        manifest = self.manifest
        if manifest is None or not 0 <= index < len(self.have):
            self.stats.rejected_chunks += 1
            return "rejected"
        if self.have[index]:
            self.stats.duplicate_chunks += 1
            return "duplicate"
        if not manifest.chunk_ok(index, payload):
            self.stats.rejected_chunks += 1
            return "rejected"
        if not in_place:
            start = index * manifest.chunk_size
            self.buffer[start:start + len(payload)] = payload
        self.have[index] = 1
        self.log.append(index)
        self.stats.chunks_in += 1
        if self.stats.t_first_chunk is None:
            self.stats.t_first_chunk = time.monotonic()
        if self.verify_whole:
            self._advance_whole_hash()
        if len(self.log) == len(self.have):
            self._finish()
        self.notify()
        return "ok"

    def _advance_whole_hash(self) -> None:
        layout = self.manifest.layout
        while self._prefix < layout.num_chunks and self.have[self._prefix]:
            start, end = layout.bounds(self._prefix)
            self._whole.update(self.buffer[start:end])
            self._prefix += 1

    def _finish(self) -> None:
        if self.verify_whole and self._whole.hexdigest() != self.manifest.sha256:
            # Every chunk matched its signed hash, so this means the manifest itself is inconsistent.
            raise ManifestError(
                f"version {self.version}: all chunk hashes match but the whole-snapshot SHA-256 "
                f"{self._whole.hexdigest()} is not the signed {self.manifest.sha256}; the learner built a bad manifest"
            )
        self.stats.t_complete = time.monotonic()
        self.complete.set()

    def fail(self, reason: str) -> None:
        """This node gave up on the version; its children are told so and re-attach elsewhere."""
        self.failure = reason
        self.notify()

    def missing(self) -> list[int]:
        return [i for i, flag in enumerate(self.have) if not flag]

    def chunk_view(self, index: int) -> memoryview:
        size = self.manifest.chunk_size
        return self.buffer[index * size:(index + 1) * size]  # slicing clips the last, shorter chunk

    # ---- change notification (forwarders wait on it) ----------------------------------------
    def notify(self) -> None:
        waiters, self._waiters = self._waiters, []
        for future in waiters:
            if not future.done():
                future.set_result(None)

    def changed(self) -> asyncio.Future:
        """A future that resolves at the next new chunk, manifest or failure."""
        future = asyncio.get_running_loop().create_future()
        self._waiters.append(future)
        return future

    async def wait_changed(self, timeout_s: float) -> bool:
        """Wait for a change; False on timeout."""
        try:
            async with asyncio.timeout(timeout_s):
                await self.changed()
            return True
        except TimeoutError:
            return False


def allocate_buffer(size: int, populate: bool = False):
    """A writable receive buffer of ``size`` bytes, as an anonymous private mmap.

    Why not ``bytearray(size)``: it zero-fills every page up front, in one blocking pass (on these
    machines ~0.5 CPU-s/GB, and 30 ms of a stalled event loop per 64 MB node). An anonymous mapping
    is zero-filled by the kernel page by page as the chunks land, spread over the transfer.
    ``populate`` maps every page now instead (``PrefaultedBuffers``).
    """
    flags = getattr(mmap, "MAP_PRIVATE", 0) | (getattr(mmap, "MAP_POPULATE", 0) if populate else 0)
    try:
        return mmap.mmap(-1, max(1, size), flags=flags) if flags else bytearray(size)
    except (OSError, ValueError):
        return bytearray(size)


class PrefaultedBuffers:
    """Receive buffers mapped before the broadcast starts, handed out first-come.

    On a real worker the page faults of a fresh 64 MB buffer cost ~40 ms of its own CPU, spread over
    the transfer (and nothing at all once buffers are recycled across versions). An emulation that
    packs dozens of workers onto two shared cores would pay them all on the same cores — on the
    build VMs faulting is ~0.6 CPU-s per GB, a quarter of a node's whole cost — and measure CPU
    contention instead of bandwidth. Pre-faulting takes that cost out of the timed window.
    """

    def __init__(self, count: int, size: int) -> None:
        self._ready = [allocate_buffer(size, populate=True) for _ in range(count)]
        self.size = size

    def __call__(self, size: int):
        if self._ready and size <= self.size:
            return self._ready.pop()
        return allocate_buffer(size)
