"""Measured throughput per worker and the heartbeat round that feeds the scheduler.

Both the simulator and a Ray driver loop use these: record each finished request
(``meter.record(worker, rollouts, busy_s)``), and every heartbeat interval call
:func:`heartbeat_round` with the workers that are alive; it reports μ_i = rollouts / busy seconds
since the previous round (None when a worker finished nothing in between), ticks the scheduler and
returns its decisions for the driver to apply.
"""

from __future__ import annotations

from typing import Iterable

from echo2_sdk.runtime.planning.scheduler import Decision, PoolScheduler


class ThroughputMeter:
    """Rollouts and busy (generating) seconds per worker since its last heartbeat."""

    def __init__(self) -> None:
        self._rollouts: dict[str, int] = {}
        self._busy_s: dict[str, float] = {}

    def record(self, worker: str, rollouts: int, busy_s: float) -> None:
        """A request of ``worker`` finished: ``rollouts`` generated in ``busy_s`` seconds of generation."""
        if rollouts < 0 or busy_s < 0:
            raise ValueError(f"worker {worker!r}: rollouts={rollouts} and busy_s={busy_s} must be ≥ 0")
        self._rollouts[worker] = self._rollouts.get(worker, 0) + rollouts
        self._busy_s[worker] = self._busy_s.get(worker, 0.0) + busy_s

    def take_rate(self, worker: str) -> float | None:
        """μ_i measured since the last call (rollouts per busy second), or None; resets the worker."""
        busy = self._busy_s.pop(worker, 0.0)
        rollouts = self._rollouts.pop(worker, 0)
        return rollouts / busy if busy > 0 else None


def heartbeat_round(scheduler: PoolScheduler, meter: ThroughputMeter, alive: Iterable[str],
                    now_s: float) -> list[Decision]:
    """Heartbeat every alive worker with its measured rate, then tick; returns all decisions taken."""
    out: list[Decision] = []
    for name in alive:
        out += scheduler.heartbeat(name, now_s, meter.take_rate(name))
    out += scheduler.tick(now_s)
    return out
