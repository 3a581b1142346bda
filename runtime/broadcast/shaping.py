"""Userspace link emulation: token buckets for bandwidth, a fixed delay for one-way latency.

There is no netem on the build machines, so WAN links are emulated on loopback in the data path
itself: every byte a node sends passes its uplink bucket and every byte it receives passes its
downlink bucket, so a stream runs at min(sender uplink, receiver downlink) and the many streams
that share one uplink (the learner's, in a star) split it. With shaping off (rate ``None``) the same
code runs at full loopback speed.

The bucket is a reservation clock rather than a polled token counter: each caller books
``nbytes / rate`` seconds after the previous booking and sleeps until its booking ends. Bookings are
served in call order (fair across the streams of one uplink when they send equal slices), rounding
never accumulates, and a caller may run at most ``burst_bytes`` ahead of the link.

Where the bytes are in between matters. On a real host the sender's kernel buffers what the process
wrote (Linux autotunes TCP send buffers up to 4 MB, ~0.3 s at 100 Mb/s) and the link drains it even
while the process waits for a CPU; the receiver's kernel buffers arrivals likewise. So the uplink
bucket lets a sender run ``SEND_BUFFER_S`` of link time ahead (its "socket buffer"), while the
downlink bucket — which decides when bytes *arrive* — allows one slice only: a stream still never
arrives faster than min(uplink, downlink), but a forwarder descheduled for less than the send
buffer's worth no longer starves its child, as it would not on a real machine.

Late wake-ups are not link time. On a real host the kernel keeps a link busy from the socket
buffers while the sending process waits for a CPU; here the "wire" is in user space, so a sleeper
the scheduler wakes up d seconds late would otherwise lose d seconds of link time (on the shared
2-core build machines, with load 6–8, d of 20–100 ms is common). A late sleeper therefore reports its
lateness (``woke_late``) and its next booking may start that much in the past (capped at
``MAX_CATCH_UP_S``) but never before the end of the previous one: the stream catches up at full
loopback speed, yet since the stream's start it has never been more than one slice ahead of
``rate`` (in any window W: at most rate·(W + cap) + one slice). A stream that was idle because it had
nothing to send never sleeps in the bucket, so it earns no catch-up.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass

MBPS = 1_000_000 / 8  # bytes per second in one megabit per second
MAX_CATCH_UP_S = 0.25
SEND_BUFFER_S = 0.25


class TokenBucket:
    """Limits an asyncio byte stream (or several sharing it) to ``rate_bytes_per_s``."""

    def __init__(self, rate_bytes_per_s: float | None, burst_bytes: int = 64 * 1024) -> None:
        if rate_bytes_per_s is not None and rate_bytes_per_s <= 0:
            raise ValueError(f"bucket rate {rate_bytes_per_s} B/s must be > 0, or None for an unshaped link")
        self.rate = rate_bytes_per_s
        self.burst_s = 0.0 if rate_bytes_per_s is None else burst_bytes / rate_bytes_per_s
        self._booked_until = 0.0
        self._late = 0.0
        self.bytes_total = 0
        self.late_s_total = 0.0
        """Sum of reported wake-up lateness (how much the host's CPU contention disturbed the link)."""

    @property
    def shaped(self) -> bool:
        return self.rate is not None

    def book(self, nbytes: int) -> float:
        """Book ``nbytes`` on the link; returns how long the caller must wait before sending more."""
        self.bytes_total += nbytes
        if self.rate is None:
            return 0.0
        now = time.monotonic()
        floor, self._late = now - self._late, 0.0
        self._booked_until = max(self._booked_until, floor) + nbytes / self.rate
        return self._booked_until - now - self.burst_s

    def woke_late(self, lateness_s: float) -> None:
        """A caller that waited on this bucket was resumed ``lateness_s`` after its booking allowed."""
        if lateness_s > 0:
            self.late_s_total += lateness_s
            self._late = min(MAX_CATCH_UP_S, self._late + lateness_s)

    async def take(self, nbytes: int) -> None:
        """Wait until ``nbytes`` may pass the link."""
        delay = self.book(nbytes)
        if delay > 0:
            due = time.monotonic() + delay
            await asyncio.sleep(delay)
            self.woke_late(time.monotonic() - due)


@dataclass(frozen=True)
class LinkProfile:
    """One node's access link. ``None`` rates mean unshaped; latency is one-way, per hop, on receive."""

    uplink_mbps: float | None = None
    downlink_mbps: float | None = None
    latency_ms: float = 0.0

    def __post_init__(self) -> None:
        for name in ("uplink_mbps", "downlink_mbps"):
            value = getattr(self, name)
            if value is not None and value <= 0:
                raise ValueError(f"{name}={value} must be > 0 Mb/s, or None for an unshaped link")
        if self.latency_ms < 0:
            raise ValueError(f"latency_ms={self.latency_ms} must be ≥ 0")

    @classmethod
    def symmetric(cls, mbps: float | None, latency_ms: float = 0.0) -> "LinkProfile":
        return cls(mbps, mbps, latency_ms)

    def uplink_bucket(self, slice_bytes: int) -> TokenBucket:
        if self.uplink_mbps is None:
            return TokenBucket(None)
        rate = self.uplink_mbps * MBPS
        return TokenBucket(rate, burst_bytes=max(slice_bytes, int(rate * SEND_BUFFER_S)))

    def downlink_bucket(self, slice_bytes: int) -> TokenBucket:
        if self.downlink_mbps is None:
            return TokenBucket(None)
        return TokenBucket(self.downlink_mbps * MBPS, burst_bytes=slice_bytes)

    def to_dict(self) -> dict:
        return {"uplink_mbps": self.uplink_mbps, "downlink_mbps": self.downlink_mbps, "latency_ms": self.latency_ms}

