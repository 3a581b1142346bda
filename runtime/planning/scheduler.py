"""The closed-loop pool scheduler: keeps μ_pool(t) at μ_target = γ·μ_min at the lowest price.

A pure class: no threads, no clocks, no I/O. The caller passes the time in (``now_s``) and acts on
the returned :class:`Decision` list, so the Ray driver loop and the simulator drive the same code.

State per worker i: the EMA estimate μ̂_i(t) of its measured throughput (the pool file's μ_i until
the first measurement), a_i(t) ∈ {0, 1} (active), and liveness (alive while heartbeats arrive within
``heartbeat_timeout_s``). μ_pool(t) = Σ_i a_i(t)·μ̂_i(t). T_train and T_bcast are EMAs of measured
step and broadcast times, so μ_min = κR/(κ·T_train − T_bcast) (eq. 2) is re-planned as they drift.

Control rule (hysteresis, so no thrashing):
* a worker whose heartbeat is late is lost (a_i = 0); an active worker lost is replaced at once;
* μ_pool < μ_target continuously for ``sustain_s`` → activate inactive capable workers (cheapest
  ρ̂_i = c_i/μ̂_i first under ``policy: cost``; uniformly at random under ``policy: random``, the NoCost
  ablation) until the deficit is covered;
* μ_pool > (1 + m)·μ_target continuously for ``sustain_s`` → release active workers (dearest ρ̂ first,
  or at random) as long as the rest keeps μ_pool ≥ (1 + m/2)·μ_target, which is above the activation
  threshold, so a release never triggers an activation by itself.
Every decision carries its reason and the μ_pool/μ_target it was taken at.
"""

from __future__ import annotations

import dataclasses
import math
import random
from dataclasses import dataclass
from typing import Literal, Sequence

from echo2_sdk.runtime.planning import capacity
from echo2_sdk.runtime.planning.activation import activate_greedy, activate_random, rho
from echo2_sdk.runtime.planning.pool_state import SchedulerEstimates
from echo2_sdk.runtime.planning.poolfile import WorkerOffer

ACTIONS = ("activate", "release", "lost", "leave", "join", "recover", "replan", "shortfall")


@dataclass(frozen=True)
class SchedulerConfig:
    policy: Literal["cost", "random"] = "cost"
    """``cost``: cheapest ρ_i = c_i/μ_i first (ECHO-2); ``random``: uniform choice (the NoCost ablation)."""
    gamma: float = 1.1
    """γ: provisioning headroom, μ_target = γ·μ_min."""
    ema_alpha: float = 0.3
    """Weight of the newest measurement in the EMAs of μ_i and T_bcast (0 < α ≤ 1)."""
    t_train_ema_alpha: float = 0.1
    """Weight of the newest step time in the EMA of T_train (measured every step, so smoothed more)."""
    heartbeat_timeout_s: float = 90.0
    """A worker silent for longer than this is lost: a_i(t) drops to 0."""
    sustain_s: float = 120.0
    """How long μ_pool must stay below μ_target (above (1+m)·μ_target) before activating (releasing)."""
    release_margin: float = 0.2
    """m: release only above (1+m)·μ_target, keeping at least (1+m/2)·μ_target."""
    replan_log_threshold: float = 0.05
    """Log a ``replan`` decision when μ_target moves by more than this fraction since the last one."""
    seed: int = 0
    """Seed of the random policy."""

    def __post_init__(self) -> None:
        capacity.mu_target(1.0, self.gamma)  # validates γ
        checks = [("ema_alpha", 0 < self.ema_alpha <= 1, "in (0, 1]"),
                  ("t_train_ema_alpha", 0 < self.t_train_ema_alpha <= 1, "in (0, 1]"),
                  ("heartbeat_timeout_s", self.heartbeat_timeout_s > 0, "> 0"),
                  ("sustain_s", self.sustain_s >= 0, "≥ 0"),
                  ("release_margin", self.release_margin > 0, "> 0"),
                  ("replan_log_threshold", self.replan_log_threshold >= 0, "≥ 0")]
        for name, ok, rule in checks:
            if not ok:
                raise ValueError(f"scheduler.{name}={getattr(self, name)!r} must be {rule}")


@dataclass(frozen=True)
class Decision:
    t_s: float
    """When it was taken (the caller's clock)."""
    action: str
    """One of ``ACTIONS``; the driver acts on ``activate`` (start feeding the worker) and ``release`` (stop)."""
    worker: str | None
    """The worker concerned (None for pool-wide decisions such as ``replan``)."""
    reason: str
    """Why, in words, with the numbers that triggered it."""
    mu_pool: float
    """μ_pool (rollouts/s) right after the decision."""
    mu_target: float
    """μ_target (rollouts/s) when it was taken."""


@dataclass
class _Worker:
    offer: WorkerOffer
    mu_est: float
    last_seen_s: float
    measured: bool = False
    alive: bool = True
    active: bool = False


class PoolScheduler:
    """Closed-loop activation of a heterogeneous worker pool (see the module docstring)."""

    def __init__(self, offers: Sequence[WorkerOffer], *, kappa: int, rollouts_per_step: float,
                 t_train_s: float, t_bcast_s: float, config: SchedulerConfig | None = None,
                 now_s: float = 0.0) -> None:
        self.config = config or SchedulerConfig()
        capacity.mu_min(kappa, t_train_s, t_bcast_s, rollouts_per_step)  # validates the inputs
        self.kappa, self.rollouts_per_step = kappa, rollouts_per_step
        self.t_train_s, self.t_bcast_s = float(t_train_s), float(t_bcast_s)
        self._rng = random.Random(self.config.seed)
        self._workers: dict[str, _Worker] = {}
        for offer in offers:
            if offer.name in self._workers:
                raise ValueError(f"worker name {offer.name!r} appears twice in the pool; names must be unique")
            self._workers[offer.name] = _Worker(offer, offer.rollouts_per_s, now_s)
        self.decisions: list[Decision] = []
        self._below_since: float | None = None
        self._above_since: float | None = None
        self._shortfall_logged = False
        self._urgent = False
        self._mu_pool = 0.0
        self._logged = (self.mu_target, self.t_train_s, self.t_bcast_s)

    # ---------------------------------------------------------------- estimates
    @property
    def mu_min(self) -> float:
        return capacity.mu_min(self.kappa, self.t_train_s, self.t_bcast_s, self.rollouts_per_step)

    @property
    def mu_target(self) -> float:
        return capacity.mu_target(self.mu_min, self.config.gamma)

    @property
    def mu_pool(self) -> float:
        """Σ_i a_i(t)·μ̂_i(t), kept incrementally (recomputed exactly at every tick)."""
        return max(0.0, self._mu_pool)

    def _set_active(self, w: _Worker, active: bool) -> None:
        if w.active != active:
            w.active = active
            self._mu_pool += w.mu_est if active else -w.mu_est

    @property
    def active(self) -> list[str]:
        return sorted(n for n, w in self._workers.items() if w.active)

    @property
    def usd_per_hour(self) -> float:
        return sum(w.offer.usd_per_hour for w in self._workers.values() if w.active)

    def is_active(self, name: str) -> bool:
        return self._get(name).active

    def is_alive(self, name: str) -> bool:
        """Worker ``name`` counts as alive (heartbeats within the deadline, not left)."""
        return self._get(name).alive

    def estimate(self, name: str) -> float:
        """μ̂_i: the current throughput estimate of worker ``name`` (rollouts/s)."""
        return self._get(name).mu_est

    def estimates(self) -> SchedulerEstimates:
        """What it measured, for a checkpoint (``pool_state``)."""
        return SchedulerEstimates(self.t_train_s, self.t_bcast_s,
                                  {n: w.mu_est for n, w in self._workers.items() if w.measured}, self._rng.getstate())

    def restore_estimates(self, e: SchedulerEstimates) -> None:
        """Take a checkpoint's measurements (before :meth:`start`); workers no longer in the pool are ignored."""
        self.t_train_s, self.t_bcast_s = e.t_train_s, e.t_bcast_s
        for name, mu in e.mu_measured.items():
            w = self._workers.get(name)
            if w is not None:
                self._set_active(w, False)
                w.mu_est, w.measured = float(mu), True
        self._rng.setstate(e.rng_state)

    def status(self) -> dict:
        mu_pool = self.mu_pool
        return {
            "mu_pool": mu_pool, "mu_min": self.mu_min, "mu_target": self.mu_target,
            "active_workers": sum(w.active for w in self._workers.values()),
            "alive_workers": sum(w.alive for w in self._workers.values()),
            "usd_per_hour": self.usd_per_hour, "t_train_s": self.t_train_s, "t_bcast_s": self.t_bcast_s,
            "predicted_bubble_ratio": capacity.predicted_bubble_ratio(
                self.kappa, self.t_train_s, self.t_bcast_s, self.rollouts_per_step, mu_pool),
        }

    # ---------------------------------------------------------------- inputs
    def start(self, now_s: float) -> list[Decision]:
        """Initial plan: activate up to μ_target at once (no sustain window)."""
        return self._activate(now_s, "initial plan")

    def heartbeat(self, name: str, now_s: float, rollouts_per_s: float | None = None) -> list[Decision]:
        """Worker ``name`` is alive; ``rollouts_per_s`` is its measured throughput since its last heartbeat."""
        w = self._get(name)
        w.last_seen_s = now_s
        out = []
        if not w.alive:
            w.alive = True
            out.append(self._log(now_s, "recover", name, "heartbeat after being lost; available again"))
        if rollouts_per_s is not None:
            if not (rollouts_per_s >= 0 and math.isfinite(rollouts_per_s)):
                raise ValueError(f"worker {name!r}: measured rollouts_per_s={rollouts_per_s!r} must be finite and ≥ 0")
            a = self.config.ema_alpha
            new = rollouts_per_s if not w.measured else (1 - a) * w.mu_est + a * rollouts_per_s
            if w.active:
                self._mu_pool += new - w.mu_est
            w.mu_est, w.measured = new, True
        return out

    def join(self, offer: WorkerOffer, now_s: float) -> list[Decision]:
        """A worker registers (new, or a known one restarting: it comes back inactive, state reset)."""
        out = []
        old = self._workers.get(offer.name)
        if old is not None and old.active:
            self._set_active(old, False)
            out.append(self._log(now_s, "lost", offer.name, "re-registered while active (restarted)"))
        self._workers[offer.name] = _Worker(offer, offer.rollouts_per_s, now_s)
        out.append(self._log(now_s, "join", offer.name,
                             f"{offer.gpu}, μ={offer.rollouts_per_s:g}/s, c=${offer.usd_per_hour:g}/h"))
        return out

    def leave(self, name: str, now_s: float, reason: str = "left the pool") -> list[Decision]:
        """A worker is known to be gone (e.g. its actor died): a_i = 0 now, replaced at the next tick."""
        w = self._get(name)
        was_active, w.alive = w.active, False
        self._set_active(w, False)
        self._urgent = self._urgent or was_active
        return [self._log(now_s, "leave", name, reason + (" (was active)" if was_active else ""))]

    def observe(self, now_s: float, *, t_train_s: float | None = None, t_bcast_s: float | None = None) -> None:
        """Measured learner step time and/or broadcast time (EMA-smoothed; μ_min follows)."""
        a = self.config.ema_alpha
        if t_train_s is not None:
            capacity.mu_min(self.kappa, t_train_s, 0.0, self.rollouts_per_step)  # validates
            b = self.config.t_train_ema_alpha
            self.t_train_s = (1 - b) * self.t_train_s + b * t_train_s
        if t_bcast_s is not None:
            capacity.mu_min(self.kappa, self.t_train_s, t_bcast_s, self.rollouts_per_step)  # validates
            self.t_bcast_s = (1 - a) * self.t_bcast_s + a * t_bcast_s

    # ---------------------------------------------------------------- control
    def tick(self, now_s: float) -> list[Decision]:
        """Apply heartbeat deadlines, log re-plans, and activate/release with hysteresis."""
        cfg, out = self.config, []
        urgent, self._urgent = self._urgent, False
        self._mu_pool = sum(w.mu_est for w in self._workers.values() if w.active)  # no drift
        for name, w in self._workers.items():
            if w.alive and now_s - w.last_seen_s > cfg.heartbeat_timeout_s:
                was_active, w.alive = w.active, False
                self._set_active(w, False)
                urgent = urgent or was_active
                out.append(self._log(now_s, "lost", name,
                                     f"no heartbeat for {now_s - w.last_seen_s:.0f} s "
                                     f"(deadline {cfg.heartbeat_timeout_s:g} s)"
                                     + ("; was active" if was_active else "; was inactive")))
        out += self._maybe_log_replan(now_s)
        target, pool = self.mu_target, self.mu_pool
        if pool < target:
            self._above_since = None
            if self._below_since is None:
                self._below_since = now_s
            if urgent:
                out += self._activate(now_s, "replacing lost capacity")
            elif now_s - self._below_since >= cfg.sustain_s:
                out += self._activate(now_s, f"μ_pool below μ_target for {now_s - self._below_since:.0f} s")
            if self.mu_pool >= target:
                self._below_since = None
        else:
            self._below_since, self._shortfall_logged = None, False
            if pool > (1 + cfg.release_margin) * target:
                if self._above_since is None:
                    self._above_since = now_s
                if now_s - self._above_since >= cfg.sustain_s:
                    out += self._release(now_s)
                    self._above_since = None
            else:
                self._above_since = None
        return out

    # ---------------------------------------------------------------- internals
    def _get(self, name: str) -> _Worker:
        try:
            return self._workers[name]
        except KeyError:
            raise KeyError(f"unknown worker {name!r}: register it with join() first "
                           f"({len(self._workers)} workers known)") from None

    def _log(self, now_s: float, action: str, worker: str | None, reason: str) -> Decision:
        d = Decision(now_s, action, worker, reason, self.mu_pool, self.mu_target)
        self.decisions.append(d)
        return d

    def _maybe_log_replan(self, now_s: float) -> list[Decision]:
        target, (old_target, old_tt, old_tb) = self.mu_target, self._logged
        if math.isinf(target) and math.isinf(old_target):
            return []
        moved = math.isinf(target) != math.isinf(old_target) or \
            abs(target - old_target) > self.config.replan_log_threshold * old_target
        if not moved:
            return []
        self._logged = (target, self.t_train_s, self.t_bcast_s)
        return [self._log(now_s, "replan", None,
                          f"T_train {old_tt:.1f}→{self.t_train_s:.1f} s, T_bcast {old_tb:.1f}→{self.t_bcast_s:.1f} s: "
                          f"μ_target {old_target:.3g}→{target:.3g}/s")]

    def _candidates(self) -> list[WorkerOffer]:
        return [dataclasses.replace(w.offer, rollouts_per_s=w.mu_est)
                for w in self._workers.values() if w.alive and not w.active and w.mu_est > 0]

    def _activate(self, now_s: float, why: str) -> list[Decision]:
        target = self.mu_target
        deficit = target - self.mu_pool
        if deficit <= 0:
            return []
        cands = self._candidates()
        if self.config.policy == "cost":
            pick = activate_greedy(cands, deficit)
        else:
            pick = activate_random(cands, deficit, self._rng)
        if math.isinf(target):
            why += (f"; μ_min is infinite (κ·T_train = {self.kappa * self.t_train_s:.1f} s ≤ "
                    f"T_bcast = {self.t_bcast_s:.1f} s): activating every capable worker")
        out = []
        for offer in pick.chosen:
            self._set_active(self._workers[offer.name], True)
            out.append(self._log(now_s, "activate", offer.name,
                                 f"{why}; {self.config.policy}: ρ={rho(offer.usd_per_hour, offer.rollouts_per_s):.3g} "
                                 f"$/h per rollout/s (μ̂={offer.rollouts_per_s:.3g}/s, c=${offer.usd_per_hour:g}/h)"))
        if self.mu_pool < target and not self._shortfall_logged:
            self._shortfall_logged = True
            out.append(self._log(now_s, "shortfall", None,
                                 f"no inactive capable worker left: μ_pool {self.mu_pool:.3g} < μ_target "
                                 f"{target:.3g}/s; add workers to the pool or lower R, T_bcast"))
        return out

    def _release(self, now_s: float) -> list[Decision]:
        target, m = self.mu_target, self.config.release_margin
        keep = (1 + m / 2) * target
        active = [w for w in self._workers.values() if w.active]
        if self.config.policy == "cost":
            active.sort(key=lambda w: (-rho(w.offer.usd_per_hour, w.mu_est), w.offer.name))
        else:
            active.sort(key=lambda w: w.offer.name)
            self._rng.shuffle(active)
        out, pool = [], self.mu_pool
        for w in active:
            if pool - w.mu_est >= keep:
                self._set_active(w, False)
                pool -= w.mu_est
                out.append(self._log(now_s, "release", w.offer.name,
                                     f"μ_pool above {(1 + m):.2g}·μ_target for {self.config.sustain_s:g} s; "
                                     f"{self.config.policy}: ρ̂={rho(w.offer.usd_per_hour, w.mu_est):.3g}, "
                                     f"rest keeps ≥ {keep:.3g}/s"))
        return out
