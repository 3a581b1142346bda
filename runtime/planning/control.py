"""The Ray runtime's side of the cost-aware pool: drives the PoolScheduler and applies its decisions.

:class:`PoolController` owns a :class:`PoolScheduler`, a :class:`ThroughputMeter` and a
:class:`CostMeter`. The trainer calls it at a few points, always passing its own clock ``now``
(seconds, any monotonic clock such as ``time.perf_counter()``; decisions and billing count from ``start``):

* ``start(now)``: the initial plan — the cheapest workers (ρ_i = c_i/μ_i, priors) reaching μ_target;
* ``on_result(worker, rollouts, busy_s)``: a request finished (busy_s = generation + throttle seconds);
* ``on_step(now, t_train_s, accepted_samples, reward_mean)``: a learner step; returns its metric fields;
* ``on_broadcast(t_bcast_s)``: a measured snapshot broadcast time;
* ``tick(now)``: every ``scheduler.heartbeat_interval_s``, a heartbeat round (every alive worker reports
  its measured μ_i) and a scheduler tick, whose decisions are applied to the pool:
  ``activate`` → start the actor with the latest snapshot, ``release`` → stop it, ``lost`` → take it out.

Liveness: a worker heartbeats while the pool does not know it dead (a running actor whose requests
have not failed, or a not-yet-started offer). A killed actor stops heartbeating; after
``heartbeat_timeout_s`` the scheduler declares it ``lost`` and, if it was active, activates a
replacement in the same tick. Every decision is appended to ``decisions.jsonl`` in the run directory
(with what the pool did) and logged.

Units: μ in rollouts (samples) per second; R = prompts_per_step × samples_per_prompt; dollars from
Cost = Σ_g p_g · GPU-hours_g over the learner's GPUs and the rented (active, not dead) workers.
"""

from __future__ import annotations

import json
import time
from collections import Counter
from pathlib import Path
from typing import Any, Callable, Iterable, Sequence

from echo2_sdk.config import WorkerSpec
from echo2_sdk.scheduler_config import PoolSchedulerConfig, resolve_prices
from echo2_sdk.runtime.planning.cost import CostMeter, Resource
from echo2_sdk.runtime.planning.heartbeat import ThroughputMeter, heartbeat_round
from echo2_sdk.runtime.planning.pool_state import PoolState
from echo2_sdk.runtime.planning.poolfile import WorkerOffer
from echo2_sdk.runtime.planning.scheduler import Decision, PoolScheduler, SchedulerConfig

DECISIONS_FILE = "decisions.jsonl"


def offers_from_specs(specs: Sequence[WorkerSpec], prices: dict[str, float], max_new_tokens: int) -> list[WorkerOffer]:
    """Scheduler offers from worker specs: μ_i prior = ``rollouts_per_s``, else ``max_tokens_per_s`` /
    ``max_new_tokens`` (every sample at full length: a low estimate); c_i = ``usd_per_hour``, else ``prices[gpu]``."""
    offers = []
    for spec in specs:
        gpu = spec.gpu or "cpu"
        mu = spec.rollouts_per_s
        if mu is None:
            if spec.max_tokens_per_s is None:
                raise ValueError(f"worker {spec.name!r}: no throughput prior; set rollouts_per_s or max_tokens_per_s")
            mu = spec.max_tokens_per_s / max_new_tokens
        usd = spec.usd_per_hour
        if usd is None:
            if gpu not in prices:
                raise ValueError(f"worker {spec.name!r}: no usd_per_hour and no price for gpu {gpu!r} in scheduler.prices")
            usd = prices[gpu]
        offers.append(WorkerOffer(spec.name, gpu, float(mu), float(usd), spec.uplink_mbps, spec.downlink_mbps))
    return offers


class PoolController:
    def __init__(self, pool: Any, offers: Sequence[WorkerOffer], *, kappa: int, rollouts_per_step: int,
                 config: PoolSchedulerConfig, prices: dict[str, float], decisions_path: str | Path | None = None,
                 log: Callable[[str], None] = print, seed: int = 0, stall_timeout_s: float | None = None) -> None:
        """``stall_timeout_s``: a worker with work queued that finishes nothing for this long is hung and
        leaves the pool at once (None: ``config.heartbeat_timeout_s``)."""
        self.pool, self.config, self.log = pool, config, log
        self.stall_timeout_s = config.heartbeat_timeout_s if stall_timeout_s is None else stall_timeout_s
        self.offers = {o.name: o for o in offers}
        self.scheduler = PoolScheduler(
            offers, kappa=kappa, rollouts_per_step=rollouts_per_step,
            t_train_s=config.t_train_estimate_s, t_bcast_s=config.t_bcast_estimate_s,
            config=SchedulerConfig(policy=config.policy, gamma=config.gamma, ema_alpha=config.ema_alpha,
                                   heartbeat_timeout_s=config.heartbeat_timeout_s, sustain_s=config.sustain_s,
                                   release_margin=config.release_margin, seed=seed),
        )
        self.meter = ThroughputMeter()
        self.cost = CostMeter(prices)
        self.learner = (Resource(config.learner_gpu, config.learner_gpus),) if config.learner_gpus > 0 else ()
        self.decisions_path = Path(decisions_path) if decisions_path is not None else None
        self.applied: list[dict] = []
        self._last_round: float | None = None
        self._t_train_measured = False
        self._last_step_fields: dict = {}
        self.t0: float | None = None
        """The caller's clock at ``start``: decision times (``t_s``) are seconds since then."""

    def _rel(self, now: float) -> float:
        if self.t0 is None:
            self.t0 = now
        return now - self.t0

    @classmethod
    def from_config(cls, cfg: Any, pool: Any, run_path: str | Path, *, kappa: int,
                    log: Callable[[str], None] = print) -> "PoolController":
        prices = resolve_prices(cfg.scheduler)
        offers = offers_from_specs([s.spec for s in pool.slots], prices, cfg.rollout.max_new_tokens)
        return cls(pool, offers, kappa=kappa,
                   rollouts_per_step=cfg.train.prompts_per_step * cfg.rollout.samples_per_prompt,
                   config=cfg.scheduler, prices=prices, decisions_path=Path(run_path) / DECISIONS_FILE,
                   log=log, seed=cfg.train.seed, stall_timeout_s=cfg.rollout.worker_stall_timeout_s)

    # ------------------------------------------------------------------ what is rented
    def resources(self) -> list[Resource]:
        """The learner's GPUs and every rented worker (active, actor not dead), at its own price c_i."""
        workers = [Resource(self.offers[s.name].gpu, 1, self.offers[s.name].usd_per_hour)
                   for s in self.pool.slots if s.active and not s.dead]
        return [*self.learner, *workers]

    # ------------------------------------------------------------------ trainer hooks
    def start(self, now: float) -> list[Decision]:
        """Initial plan (greedy or random to μ_target from the priors); starts the chosen workers."""
        self.t0 = now
        self.cost.last_s = self._last_round = 0.0
        return self._apply(0.0, self.scheduler.start(0.0))

    def on_result(self, worker: str, rollouts: int, busy_s: float) -> None:
        self.meter.record(worker, rollouts, busy_s)

    def on_step(self, now: float, t_train_s: float, accepted_samples: int, reward_mean: float | None) -> dict:
        """Feed the measured step time; charge the step. Returns the metrics-row fields."""
        now = self._rel(now)
        if not self._t_train_measured:  # the first measurement replaces the configured prior outright
            self.scheduler.t_train_s, self._t_train_measured = float(t_train_s), True
        else:
            self.scheduler.observe(now, t_train_s=t_train_s)
        fields = self.cost.step(now, self.resources(), accepted_samples=accepted_samples, reward_mean=reward_mean)
        status = self.scheduler.status()
        fields.update({
            "pool_active_workers": status["active_workers"],
            "pool_usd_per_hour": sum(r.count * self.cost.price(r) for r in self.resources()),
            "mu_pool": status["mu_pool"],
            "mu_target": status["mu_target"],
        })
        self._last_step_fields = fields
        return fields

    def on_broadcast(self, t_bcast_s: float, now: float | None = None) -> None:
        """A measured broadcast time (seconds from publish until the active workers installed it)."""
        self.scheduler.observe(self._rel(now) if now is not None else 0.0, t_bcast_s=t_bcast_s)

    def tick(self, now: float, alive_names: Iterable[str] | None = None) -> list[Decision]:
        """Every ``heartbeat_interval_s``: a heartbeat round and a scheduler tick; applies the decisions."""
        now = self._rel(now)
        if self._last_round is not None and now - self._last_round < self.config.heartbeat_interval_s:
            return []
        self._last_round = now
        if alive_names is not None:
            return self._apply(now, heartbeat_round(self.scheduler, self.meter, list(alive_names), now))
        # A worker that delivers nothing for the stall timeout while it has work is hung (a stopped
        # process keeps its actor alive, so it would never miss a heartbeat): it leaves the pool now —
        # waiting for a heartbeat deadline on top let a 60 s stop pass unnoticed — and is replaced.
        clock = time.perf_counter()
        hung = {s.name: why for s, why in self.pool.hung(self.stall_timeout_s, clock)}
        alive = [n for n in self.pool.alive_names() if n not in hung]
        left = [d for n, why in hung.items() if self.scheduler.is_alive(n)
                for d in self.scheduler.leave(n, now, f"hung: {why}")]
        return self._apply(now, left + heartbeat_round(self.scheduler, self.meter, alive, now))

    # ------------------------------------------------------------------ applying decisions
    def _apply(self, now: float, decisions: list[Decision]) -> list[Decision]:
        if any(d.action in ("activate", "release", "lost", "leave") for d in decisions):
            self.cost.charge_between_steps(now, self.resources())  # the old set was rented until now
        for d in decisions:
            applied = ""
            try:
                if d.action == "activate":
                    applied = self.pool.activate(d.worker)
                elif d.action == "release":
                    applied = self.pool.release(d.worker)
                elif d.action in ("lost", "leave"):
                    applied = self.pool.mark_lost(d.worker)
            except Exception as exc:  # the decision stands in the log; the pool could not act on it
                applied = f"failed: {type(exc).__name__}: {exc}"
            self._record(d, applied)
        return decisions

    def _record(self, d: Decision, applied: str) -> None:
        entry = {"t_s": round(d.t_s, 3), "action": d.action, "worker": d.worker, "reason": d.reason,
                 "mu_pool": d.mu_pool, "mu_target": d.mu_target, "applied": applied}
        self.applied.append(entry)
        if self.decisions_path is not None:
            with open(self.decisions_path, "a", encoding="utf-8") as fh:
                fh.write(json.dumps(entry, default=str, ensure_ascii=False) + "\n")
        if d.action == "replan":  # frequent while T_train / T_bcast settle: kept in the file only
            return
        who = f" {d.worker}" if d.worker else ""
        done = f" → {applied}" if applied else ""
        self.log(f"pool t={d.t_s:.1f}s: {d.action}{who}: {d.reason} "
                 f"[μ_pool {d.mu_pool:.3g}/s, μ_target {d.mu_target:.3g}/s]{done}")

    # ------------------------------------------------------------------ checkpoints (pool_state.py)
    def state(self) -> PoolState:
        return PoolState(self.cost.totals(), self.scheduler.estimates(), self._t_train_measured, tuple(self.applied))

    def restore(self, state: PoolState) -> None:
        """Continue a checkpoint's cost and estimates; call before :meth:`start`."""
        self.cost.restore(state.cost)
        self.scheduler.restore_estimates(state.estimates)
        self._t_train_measured = state.t_train_measured
        self.applied = list(state.decisions)

    # ------------------------------------------------------------------ report
    def summary(self) -> dict:
        """The run summary's ``pool`` block: cost totals, rates, the decision log in brief."""
        last = self._last_step_fields
        activated = sorted({e["worker"] for e in self.applied if e["action"] == "activate"})
        return {
            "policy": self.config.policy,
            "cost_usd": self.cost.cost_usd,
            "usd_per_accepted_sample": last.get("usd_per_accepted_sample"),
            "usd_per_reward_point": last.get("usd_per_reward_point"),
            "gpu_hours": dict(self.cost.gpu_hours),
            "usd_by_gpu": dict(self.cost.usd_by_gpu),
            "decisions": dict(Counter(e["action"] for e in self.applied)),
            "decisions_file": str(self.decisions_path) if self.decisions_path else None,
            "workers_activated": activated,
            "workers_active_at_end": self.scheduler.active,
            "workers_lost": sorted({e["worker"] for e in self.applied if e["action"] in ("lost", "leave")}),
            "prior_usd_per_hour": {n: o.usd_per_hour for n, o in self.offers.items()},
            "mu_estimate": {n: self.scheduler.estimate(n) for n in self.offers},
            "final": self.scheduler.status(),
        }
