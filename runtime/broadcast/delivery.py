"""Snapshot delivery tracking: T_bcast of every published version, measured without blocking the learner.

The learner publishes and goes on training; the driver polls this tracker between steps. A delivery
is finished when every live worker installed the version or gave up. T_bcast is the time from publish
until ⌈q·live⌉ workers installed it, q = 1/γ (ECHO-2 uses γ = 1.1); ``t_all_s`` is the time to the
last live worker. With the P2P transport the install times come from the learner's broadcast control
server (each worker reports its verified install); with a transport that measures nothing, the
driver's own observation of the completion handles is used (coarser: it includes polling delay).
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from typing import Any, Sequence

import ray

from echo2_sdk.runtime.broadcast.metrics import fraction_time

BYTES_KEYS = ("snapshot", "snapshot_reason", "delta_base", "delta_density", "encode_s", "bytes_full", "bytes_sent",
              "delta_fallbacks", "bytes_fallback", "apply_s_max")
"""What each publish put on the wire (``LearnerBroadcaster.bytes_report``): copied into every delivery record."""


LOST = "lost: its worker process went away before it installed this version"
"""The ``failed`` reason of a worker published to that left the broadcast (killed, hung and killed, gone)."""


@dataclass
class _Delivery:
    version: int
    step: int
    names: list[str]
    handles: list[Any]
    t0: float = field(default_factory=time.perf_counter)
    seen_s: dict[str, float] = field(default_factory=dict)
    failed: dict[str, str] = field(default_factory=dict)
    last_report: dict | None = None
    """The transport's latest progress report (kept: the transport forgets old versions, and a delivery
    closed as superseded or at the end of a run is written with what it did — repairs, refetches, bytes)."""


class DeliveryTracker:
    def __init__(self, transport: Any, *, gamma: float = 1.1, timeout_s: float = 600.0) -> None:
        self.transport = transport
        self.q = 1.0 / gamma
        self.timeout_s = timeout_s
        self.pending: list[_Delivery] = []
        self.holds: dict[str, int] = {}
        """Newest version each worker is known to have installed, updated on every poll (before its
        delivery settles: admission control reads it to know which version a worker generates under)."""

    def published(self, version: int, step: int, handles: Sequence[Any], names: Sequence[str]) -> None:
        self.pending.append(_Delivery(version, step, list(names), list(handles)))

    def poll(self) -> list[dict]:
        """Deliveries that finished since the last call, oldest first (never blocks)."""
        done, still = [], []
        for d in self.pending:
            record = self._measure(d)
            (done if record is not None else still).append(record or d)
        # A worker drops a version it has not finished once a newer one reaches it, so a delivery
        # still open when a newer one settled will not progress: close it as superseded.
        newest = max((r["version"] for r in done if r["settled"]), default=None)
        if newest is not None:
            for d in [d for d in still if d.version < newest]:
                still.remove(d)
                done.append(self._closed(d, superseded_by=newest))
        self.pending = still
        return sorted(done, key=lambda r: r["version"])

    def finish_all(self, timeout_s: float = 30.0) -> list[dict]:
        """At the end of a run: wait (bounded) for the deliveries still in flight."""
        deadline = time.perf_counter() + timeout_s
        out = self.poll()
        while self.pending and time.perf_counter() < deadline:
            time.sleep(0.05)
            out += self.poll()
        for d in self.pending:  # report what is known rather than dropping it
            out.append(self._closed(d))
        self.pending = []
        return out

    def open_records(self) -> list[dict]:
        """Records of the deliveries still open, as far as they got, leaving them open (a checkpoint
        keeps them: a run resumed from it never sees them settle)."""
        return [self._closed(d) for d in self.pending]

    def _closed(self, d: _Delivery, superseded_by: int | None = None) -> dict:
        """The record of a delivery closed before it settled, with its latest known progress."""
        report = self.transport.progress(d.version, d.handles) or d.last_report
        if report is None:
            return self._record(d, d.seen_s, d.failed, d.names, False, None, superseded_by)
        return self._record(d, report["installed_s"], report["failed"], report["live"] or d.names, False, report,
                            superseded_by)

    # ------------------------------------------------------------------------------------------
    def _measure(self, d: _Delivery) -> dict | None:
        report = self.transport.progress(d.version, d.handles)
        if report is None:
            self._observe_handles(d)
            installed, failed, live = d.seen_s, d.failed, d.names
            settled = len(installed) + len(failed) >= len(d.names)
        else:
            d.last_report = report
            installed, failed, live = report["installed_s"], report["failed"], report["live"] or d.names
            settled = report["settled"]
        for name in installed:
            self.holds[name] = max(self.holds.get(name, 0), d.version)
        timed_out = time.perf_counter() - d.t0 > self.timeout_s
        if not (settled or timed_out):
            return None
        return self._record(d, installed, failed, live, settled, report)

    def _observe_handles(self, d: _Delivery) -> None:
        owner = {id(h): n for h, n in zip(d.handles, d.names)}
        todo = [h for h in d.handles if owner[id(h)] not in d.seen_s and owner[id(h)] not in d.failed]
        if not todo:
            return
        ready, _ = ray.wait(todo, num_returns=len(todo), timeout=0)
        now = time.perf_counter() - d.t0
        for h in ready:
            name = owner[id(h)]
            try:
                ray.get(h)
                d.seen_s[name] = now
            except Exception as exc:  # a dead worker: its delivery failed, the others count
                first = (str(exc).strip().splitlines() or [""])[0][:200]  # Ray's texts run to many lines
                d.failed[name] = f"{type(exc).__name__}: {first}"

    def _record(self, d: _Delivery, installed: dict, failed: dict, live: list, settled: bool,
                report: dict | None = None, superseded_by: int | None = None) -> dict:
        times = sorted(installed.values())
        live_n = max(len(live), 1)
        all_in = len(times) >= len(live) and len(live) > 0
        # A worker published to that is neither installed, failed nor live any more left mid-broadcast
        # (its process was killed): the transport drops it from the live set, the record names it failed.
        failed = {**{w: LOST for w in d.names if w not in installed and w not in live}, **failed}
        return {
            "version": d.version,
            "step": d.step,
            "t_bcast_s": _round(fraction_time(times, live_n, self.q)),
            "q": round(self.q, 4),
            "workers_needed": max(1, math.ceil(self.q * live_n - 1e-9)),
            "t_all_s": _round(times[-1]) if all_in else None,
            "installed": len(times),
            "live": len(live),
            "installed_s": {w: _round(t) for w, t in sorted(installed.items(), key=lambda kv: kv[1])},
            "failed": dict(failed),
            "repairs": (report or {}).get("repairs", 0),
            "refetches": (report or {}).get("refetches", 0),
            "settled": settled,
            "superseded_by": superseded_by,
            **{key: (report or {}).get(key) for key in BYTES_KEYS},
        }


def _round(x: float | None) -> float | None:
    return None if x is None else round(float(x), 4)


def delivery_summary(records: list[dict]) -> dict:
    """Aggregate of the run's deliveries for ``summary.json``."""
    t_b = [r["t_bcast_s"] for r in records if r["t_bcast_s"] is not None]
    t_a = [r["t_all_s"] for r in records if r["t_all_s"] is not None]

    def stats(xs: list[float]) -> dict | None:
        if not xs:
            return None
        xs = sorted(xs)
        return {"mean": round(sum(xs) / len(xs), 4), "median": xs[len(xs) // 2], "max": xs[-1]}

    return {
        "deliveries": len(records),
        "t_bcast_s": stats(t_b),
        "t_all_s": stats(t_a),
        "incomplete": sum(1 for r in records if r["t_all_s"] is None and r.get("superseded_by") is None),
        "superseded": sum(1 for r in records if r.get("superseded_by") is not None),
        "repairs": sum(r["repairs"] for r in records),
        "refetches": sum(r["refetches"] for r in records),
        "snapshot_bytes": bytes_summary(records),
    }


def bytes_summary(records: list[dict]) -> dict | None:
    """Full vs sent bytes per publish over the run (None when the transport does not say, e.g. object_store).

    >>> bytes_summary([{"bytes_full": 100, "bytes_sent": 100, "snapshot": "full", "delta_fallbacks": 0},
    ...                {"bytes_full": 100, "bytes_sent": 4, "snapshot": "delta", "delta_fallbacks": 1}])["sent_fraction"]
    0.52
    """
    known = [r for r in records if r.get("bytes_full")]
    if not known:
        return None
    full, sent = sum(r["bytes_full"] for r in known), sum(r["bytes_sent"] for r in known)
    per_publish = sorted(r["bytes_sent"] for r in known)
    return {
        "publishes": len(known),
        "deltas": sum(1 for r in known if r["snapshot"] == "delta"),
        "full_bytes_total": full,
        "sent_bytes_total": sent,
        "sent_fraction": round(sent / full, 4),
        "sent_bytes_median": per_publish[len(per_publish) // 2],
        "full_bytes_median": sorted(r["bytes_full"] for r in known)[len(known) // 2],
        "delta_fallbacks": sum(r.get("delta_fallbacks") or 0 for r in known),
    }
