"""Contracts of the broadcast plane: how a snapshot reaches the workers (``SnapshotTransport``) and the
small types shared by the P2P node, its serving side and the control plane."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from abc import ABC, abstractmethod
from typing import TYPE_CHECKING, Any, Protocol, Sequence

from echo2_sdk.runtime.broadcast.wire import ProtocolError

if TYPE_CHECKING:
    from echo2_sdk.runtime.broadcast.credentials import Refusals
    from echo2_sdk.runtime.broadcast.wire import Hello
    from echo2_sdk.runtime.broadcast.shaping import TokenBucket
    from echo2_sdk.runtime.broadcast.transfer import Transfer

CONTROL = "control"
"""The Ray concurrency group of a worker's control methods (snapshot install/receive): they run beside generation."""


class SnapshotTransport(ABC):
    """How a published snapshot reaches the workers. ``publish`` must not block the learner."""

    @abstractmethod
    def publish(self, state_dict: dict, version: int, workers: Sequence[Any],
                names: Sequence[str] | None = None) -> list[Any]:
        """Start delivering ``state_dict`` as ``version``; return handles that complete on install."""

    def progress(self, version: int, handles: Sequence[Any] = ()) -> dict | None:
        """Install times measured by the transport itself, or None: the caller times the handles."""
        return None

    def close(self, workers: Sequence[Any] = ()) -> None:
        """Release sockets and threads (called once, at pool shutdown)."""

    def refusals(self) -> dict[str, int]:
        """Messages and connections refused from strangers or misbehaving peers, by reason (none: {})."""
        return {}

STREAM_ERRORS = (OSError, ConnectionError, asyncio.IncompleteReadError, TimeoutError, ProtocolError)
"""What a broken, stalled or misbehaving peer stream raises: the other side repairs around it."""


@dataclass(frozen=True)
class Peer:
    id: str
    host: str
    port: int
    ticket: str = ""
    """The learner's single-use pass for dialing this peer's chunk port (empty on a registration)."""


@dataclass(frozen=True)
class Faults:
    """Injected misbehaviour, for tests and the repair benchmark."""

    corrupt_chunks: tuple[int, ...] = ()
    """Flip one byte of each of these chunks the first time this node sends it."""
    stall_at_fraction: float | None = None
    """Once this fraction of the snapshot's chunks has been sent (all streams together), go silent:
    no data, no keepalive, sockets left open — a hung forwarder."""
    crash_at_fraction: float | None = None
    """Die abruptly once this fraction of the chunks has been received (0.5: half-way through its stripe)."""
    crash_kills_process: bool = False
    """Crash with SIGKILL of the hosting process instead of aborting only this node's sockets."""
    sigstop_at_fraction: float | None = None
    """Once this fraction of the chunks has been sent, SIGSTOP the hosting process: a hung machine whose
    sockets stay open while nothing on it runs (the kernel still accepts connections for it)."""

    def expects_loss(self) -> bool:
        """This node is not expected to finish the broadcast (it crashes or hangs)."""
        return self.crash_at_fraction is not None or self.sigstop_at_fraction is not None


class ControlClient(Protocol):
    async def find_parent(self, node: str, version: int, failed: str, reason: str) -> Peer | None: ...

    async def find_holder(self, node: str, version: int, chunk: int, exclude: str) -> Peer | None: ...

    async def report(self, node: str, version: int, event: str, detail: dict) -> None: ...


class BroadcastError(RuntimeError):
    """This node could not obtain the snapshot (no honest parent left, or too many repairs)."""


class UpstreamFailed(Exception):
    """Raised in a serving stream when this node itself gave up on the version: tell the child."""

    def __init__(self, version: int, message: str) -> None:
        super().__init__(message)
        self.version = version


class ServingNode(Protocol):
    """What a parent-side stream (``serving.ChildStream``) needs of its node; ``BroadcastNode`` is one."""

    id: str
    stall_timeout_s: float
    latency_s: float
    slice: int
    """Bytes written per uplink-bucket grant."""
    up: "TokenBucket"
    faults: Faults
    sent_chunks: int
    """Chunks sent over all child streams (for the stall fault)."""
    stalled: bool
    corrupted: set[int]
    refused: "Refusals"
    """Child connections refused before any work (bad HELLO, missing, forged or replayed ticket)."""

    def admit(self, hello: "Hello") -> str | None:
        """None if this HELLO's ticket lets its sender be served, else the refusal reason."""

    def transfer_for(self, version: int) -> "Transfer | None":
        """This version's transfer, created on first mention; None if a newer one superseded it."""

    def track_stream(self, task: asyncio.Task, transport: asyncio.BaseTransport) -> None:
        """Register a child stream so that a crash or close of the node ends it."""

    def untrack_stream(self, task: asyncio.Task, transport: asyncio.BaseTransport) -> None: ...
