"""Keeps the rollout pool alive when the pool scheduler is off: dead or hung workers are restarted.

A worker is *down* when its actor died (a failed request or start says so) or when it is hung: work
queued and nothing finished for ``rollout.worker_stall_timeout_s`` (a SIGSTOPped process keeps its Ray
actor alive, so only missing progress shows it), not up ``rollout.worker_start_timeout_s`` after its
launch, or (sync mode) no install long after its peers installed; a hung worker's actor is killed first. A down worker
is restarted with :meth:`RolloutPool.restart` — the same path as a scheduler activation: a fresh actor,
the latest snapshot installed before any work is sent — after a backoff that doubles with each restart
in a row. A restart that finishes a request resets the count, so indefinite churn is survived while a
worker that can never start is given up after ``rollout.worker_restarts`` tries. Once no worker is
alive and none may restart, :meth:`check` raises :class:`WorkersExhausted` (the trainer then saves a
checkpoint and the summary).

Hung rather than waited for: a stopped worker may never come back, everything it generates when it
does is stale by then, and while it is stopped it holds up every snapshot delivery it is part of.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass, field
from typing import Callable

from echo2_sdk.runtime.rollout.pool import RolloutPool

MAX_BACKOFF_S = 60.0


class WorkersExhausted(RuntimeError):
    """No rollout worker is alive and none may be restarted: the run cannot go on."""


@dataclass
class Outage:
    """One stretch of a worker being down, from noticed to back at work (times: seconds since the run start)."""

    worker: str
    reason: str
    """``died`` (its actor is gone) or ``hung`` (alive for Ray, no progress)."""
    detail: str
    t_down_s: float
    requests_dropped: int = 0
    """Requests it had in flight when it was noticed hung (a dead one's fail one by one, as worker errors)."""
    restarts: int = 0
    """Actors started for it during this outage (more than one when a restart itself failed)."""
    t_ready_s: float | None = None
    """When its new actor had started and installed the latest snapshot (None: never back)."""
    given_up: bool = False

    @property
    def replace_s(self) -> float | None:
        return None if self.t_ready_s is None else round(self.t_ready_s - self.t_down_s, 3)


@dataclass
class _State:
    in_a_row: int = 0
    """Restarts since the worker last finished a request."""
    samples_at_restart: int = 0
    due: float = 0.0
    """perf_counter time the next restart may happen."""
    open: Outage | None = None


@dataclass
class WorkerSupervisor:
    pool: RolloutPool
    restarts: int
    backoff_s: float
    stall_timeout_s: float | None
    t_start: float = field(default_factory=time.perf_counter)
    """perf_counter time outage times count from (default: when the supervisor was made, at trainer setup)."""
    log: Callable[[str], None] = print
    outages: list[Outage] = field(default_factory=list)
    _state: dict[str, _State] = field(default_factory=dict)

    def check(self, now: float | None = None) -> list[str]:
        """Notice hung and dead workers, restart those due; returns the names restarted now."""
        now = time.perf_counter() if now is None else now
        for slot, detail in self.pool.hung(self.stall_timeout_s, now):
            dropped = self.pool.retire(slot.name)
            self._down(slot.name, "hung", detail, now, dropped)
        started = []
        for slot in self.pool.slots:
            st = self._state.setdefault(slot.name, _State())
            if slot.lost:  # taken out on purpose (e.g. the reward audit): not restarted
                continue
            if st.open is not None and not slot.dead and slot.ready and st.open.t_ready_s is None:
                st.open.t_ready_s = now - self.t_start
                self.log(f"worker {slot.name} back after {st.open.replace_s:.1f} s "
                         f"(restart {st.in_a_row} in a row)")
                st.open = None
            if st.in_a_row and slot.samples > st.samples_at_restart and not slot.dead:
                st.in_a_row = 0  # it delivered work since its restart: the next failure starts afresh
            if not slot.dead:
                continue
            if st.open is None:
                self._down(slot.name, "died", "its actor is gone", now)
            outage = st.open
            if outage.given_up:
                continue
            if st.in_a_row >= self.restarts:
                outage.given_up = True
                self.log(f"worker {slot.name}: not restarted again ({st.in_a_row} restart(s) in a row without a "
                         f"finished request; rollout.worker_restarts={self.restarts})")
                continue
            if now < st.due:
                continue
            try:
                what = self.pool.restart(slot.name)
            except Exception as exc:  # e.g. Ray refuses the actor: counts as a failed try
                what = f"failed: {type(exc).__name__}: {str(exc)[:200]}"
                slot.dead = True
            st.in_a_row += 1
            st.samples_at_restart = slot.samples
            st.due = now + min(MAX_BACKOFF_S, self.backoff_s * 2 ** st.in_a_row)  # if this one fails too
            outage.restarts += 1
            started.append(slot.name)
            self.log(f"worker {slot.name} restarting ({outage.reason}; try {st.in_a_row}/{self.restarts}): {what}")
        if self.pool.exhausted() and not self.recoverable():
            raise WorkersExhausted(
                f"every rollout worker is down and none may be restarted "
                f"({', '.join(f'{o.worker}: {o.reason}' for o in self.outages if o.given_up) or 'all taken out'}); "
                "see the worker errors above (rollout.worker_restarts sets the retries)")
        return started

    def recoverable(self) -> bool:
        """Some worker is down but may still be restarted."""
        return any(st.open is not None and not st.open.given_up for st in self._state.values())

    def _down(self, name: str, reason: str, detail: str, now: float, dropped: int = 0) -> None:
        st = self._state.setdefault(name, _State())
        outage = Outage(name, reason, detail, round(now - self.t_start, 3), requests_dropped=dropped)
        st.open = outage
        if st.in_a_row == 0:  # first failure after good work: the base backoff (repeats double it, see check)
            st.due = now + self.backoff_s
        self.outages.append(outage)
        self.log(f"worker {name} {reason}: {detail}")

    def summary(self) -> dict:
        """The summary's ``worker_restarts`` block: outages by reason, restarts, time to replace."""
        back = sorted(o.replace_s for o in self.outages if o.replace_s is not None)
        return {
            "outages": len(self.outages),
            "died": sum(o.reason == "died" for o in self.outages),
            "hung": sum(o.reason == "hung" for o in self.outages),
            "restarts": sum(o.restarts for o in self.outages),
            "given_up": sorted({o.worker for o in self.outages if o.given_up}),
            "requests_dropped_hung": sum(o.requests_dropped for o in self.outages),
            "replace_s": ({"mean": round(sum(back) / len(back), 3), "median": back[len(back) // 2], "max": back[-1]}
                          if back else None),
            "events": [asdict(o) | {"replace_s": o.replace_s} for o in self.outages],
        }
