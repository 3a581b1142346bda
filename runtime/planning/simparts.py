"""Building blocks of the pool simulator: noise, worker state, broadcast pause windows, planned T_bcast."""

from __future__ import annotations

import bisect
import math
from typing import Sequence

import numpy as np

from echo2_sdk.config import resolve_kappa
from echo2_sdk.runtime.planning import capacity
from echo2_sdk.runtime.planning.activation import activate_greedy
from echo2_sdk.runtime.planning.bcast_model import broadcast_time_s
from echo2_sdk.runtime.planning.poolfile import WorkerOffer


class Noise:
    """Lognormal multipliers with mean 1 and coefficient of variation ``cv`` (drawn in numpy batches)."""

    def __init__(self, cv: float, seed: int) -> None:
        if cv < 0:
            raise ValueError(f"noise coefficient of variation {cv!r} must be ≥ 0")
        self.sigma2 = math.log1p(cv * cv)
        self.rng = np.random.default_rng(seed)
        self.buf: list[float] = []
        self.i = 0

    def __call__(self) -> float:
        if self.sigma2 == 0:
            return 1.0
        if self.i >= len(self.buf):
            self.buf = self.rng.lognormal(-self.sigma2 / 2, math.sqrt(self.sigma2), 1 << 16).tolist()
            self.i = 0
        self.i += 1
        return self.buf[self.i - 1]


class SimWorker:
    """A simulated worker's state (rented/active, generating, installed version, links)."""

    __slots__ = ("_idx", "offer", "mu", "alive", "active", "ready", "draining", "busy", "token", "version",
                 "start", "work", "req_version", "charged", "link", "down")

    def __init__(self, idx: int, offer: WorkerOffer, default_link_mbps: float) -> None:
        self._idx, self.offer, self.mu = idx, offer, offer.rollouts_per_s
        self.alive, self.active, self.ready, self.draining, self.busy, self.charged = True, False, False, False, False, False
        self.token, self.version = 0, 0
        """token invalidates scheduled events of an abandoned request/activation; version is v̂ installed."""
        self.start = self.work = 0.0
        self.req_version = 0
        self.down = offer.downlink_mbps or default_link_mbps
        self.link = min(offer.uplink_mbps or default_link_mbps, self.down)


class PauseWindows:
    """Disjoint, time-ordered broadcast windows during which workers do not generate."""

    def __init__(self) -> None:
        self.start: list[float] = []
        self.end: list[float] = []
        self._cum: list[float] = []  # pause time before window i

    @property
    def last_end(self) -> float:
        return self.end[-1] if self.end else -math.inf

    def add(self, start: float, end: float) -> None:
        if self.end and start < self.end[-1]:
            raise ValueError(f"pause window [{start}, {end}] overlaps the previous one ending at {self.end[-1]}")
        self._cum.append(self._cum[-1] + self.end[-1] - self.start[-1] if self.start else 0.0)
        self.start.append(start)
        self.end.append(end)

    def _until(self, t: float) -> float:
        i = bisect.bisect_right(self.start, t) - 1
        return 0.0 if i < 0 else self._cum[i] + min(t, self.end[i]) - self.start[i]

    def paused(self, t0: float, t1: float) -> float:
        """Pause time inside [t0, t1]."""
        return self._until(t1) - self._until(t0)

    def finish_time(self, start: float, work: float) -> float:
        """When ``work`` seconds of generation begun at ``start`` end, the known windows skipped."""
        ws, we = self.start, self.end
        i = bisect.bisect_right(ws, start) - 1
        t = we[i] if i >= 0 and start < we[i] else start
        i += 1
        while i < len(ws) and ws[i] < t + work:
            work -= ws[i] - t
            t = we[i]
            i += 1
        return t + work


def bcast_time_s(spec, num_workers: int, link_mbps: float) -> float:
    """T_bcast of ``spec`` (a ``BroadcastSpec``) to ``num_workers`` receivers whose slowest link is ``link_mbps``."""
    return broadcast_time_s(spec.topology, num_workers, snapshot_gb=spec.snapshot_gb,
                            learner_uplink_mbps=spec.learner_uplink_mbps, worker_mbps=link_mbps,
                            hop_latency_s=spec.hop_latency_s, fixed_t_bcast_s=spec.t_bcast_s)


def plan_t_bcast(cfg, offers: Sequence[WorkerOffer], links_mbps: Sequence[float]) -> float:
    """T_bcast assumed before any is measured: the topology model at the planned pool size.

    For ``chain``/``star`` the pool size depends on T_bcast (μ_min grows with it) and T_bcast on the pool
    size, so iterate N → T_bcast(N) → μ_target → N (greedy activation) to a fixed point (≤ 10 rounds).
    """
    L, B = cfg.learner, cfg.broadcast
    if B.topology == "fixed" or not offers:
        return B.t_bcast_s
    slowest = min(links_mbps)
    kappa = L.kappa or resolve_kappa(L.staleness, None)
    n, t_b = 1, 0.0
    for _ in range(10):
        t_b = bcast_time_s(B, n, slowest)
        if cfg.pool.activate != "scheduler":
            return bcast_time_s(B, len(offers), slowest)
        target = capacity.mu_target(capacity.mu_min(kappa, L.t_train_s, t_b, L.rollouts_per_step),
                                    cfg.scheduler.gamma)
        n_new = max(1, len(activate_greedy(offers, target).chosen))
        if n_new == n:
            break
        n = n_new
    return t_b
