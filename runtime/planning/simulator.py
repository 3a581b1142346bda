"""Discrete-event simulation of learner, replay buffer, broadcast and a wide-area worker pool.

It runs the runtime's own pieces, not copies: groups are admitted and taken by
:class:`~echo2_sdk.runtime.learning.buffer.ReplayBuffer` (v ≥ v_t − S), κ comes from
:func:`~echo2_sdk.runtime.planning.capacity.choose_kappa`, activation is decided by
:class:`~echo2_sdk.runtime.planning.scheduler.PoolScheduler` fed with heartbeats, and dollars by
:class:`~echo2_sdk.runtime.planning.cost.CostMeter`.

Model. The learner takes P = R/n groups at the start of a step (waiting — the bubble — until the
buffer holds them), trains for T_train (lognormal noise), bumps its version and publishes every κ
steps. A broadcast occupies the channel for T_bcast (the topology model at the current number of
active workers); a publish while one is in flight replaces any queued one (latest wins). Each active
worker generates requests of ``prompts_per_request`` groups, each lasting b·n/μ_i (lognormal noise);
a request is tagged with the version installed when it starts. Unless ``generate_during_broadcast``,
workers generate nothing while a broadcast is in flight (the time is pushed back), which is the
capacity model's assumption; a request starting during a broadcast starts at its end with the new
version. When a worker installs a snapshot it abandons an in-flight request whose groups could not be
admitted any more on arrival (``is_admissible`` against the learner version projected at its end);
otherwise it finishes it under the old version. Preempted workers lose their request and stop heartbeating; workers that (re)join register
with the scheduler; an activated worker spins up, downloads the newest snapshot, then generates.

Fidelity note: the capacity model is fluid. Requests last g_i = b·n/μ_i; when T_bcast + g_i exceeds the
slack (S − κ)·T_train, in-flight work at a publish is lost and the pool needs more than μ_min; keep g_i
well below κ·T_train − T_bcast (small groups per request) for the simulation to match eq. 2.
"""

from __future__ import annotations

import heapq
import math
import random
import time
from collections import Counter
from dataclasses import replace
from typing import Sequence

from echo2_sdk.config import resolve_kappa
from echo2_sdk.records import Omega, Rollout, RolloutGroup
from echo2_sdk.runtime.learning.buffer import ReplayBuffer, is_admissible
from echo2_sdk.runtime.planning import capacity
from echo2_sdk.runtime.planning.bcast_model import single_download_s
from echo2_sdk.runtime.planning.cost import CostMeter, Resource
from echo2_sdk.runtime.planning.heartbeat import ThroughputMeter, heartbeat_round
from echo2_sdk.runtime.planning.poolfile import WorkerOffer
from echo2_sdk.runtime.planning.scheduler import PoolScheduler
from echo2_sdk.runtime.planning.simconfig import SimulateConfig
from echo2_sdk.runtime.planning.simparts import Noise, PauseWindows, SimWorker, bcast_time_s, plan_t_bcast

TRAIN_DONE, REQ_DONE, BCAST_DONE, READY, TICK, PREEMPT, REJOIN, JOIN = range(8)
_PLACEHOLDER = Rollout((0,), (0,), 0.0, 0, Omega((1,), "sim"), (0.0,), "sim")


class Simulation:
    """One simulated run. ``run()`` returns ``{"summary": ..., "timeline": ..., "decisions": [...]}``."""

    def __init__(self, cfg: SimulateConfig, offers: Sequence[WorkerOffer], prices: dict[str, float],
                 kappa: int | None = None) -> None:
        self.cfg, L, B = cfg, cfg.learner, cfg.broadcast
        self.base_offers = tuple(offers)
        self.workers = [SimWorker(i, o, B.worker_link_mbps) for i, o in enumerate(offers)]
        self.by_name = {w.offer.name: w for w in self.workers}
        self.P = L.rollouts_per_step // L.samples_per_group
        self.t_bcast_plan = plan_t_bcast(cfg, offers, [w.link for w in self.workers])
        self.kappa_note = ""
        if kappa is not None:
            self.kappa = kappa
        elif L.kappa is not None:
            self.kappa = resolve_kappa(L.staleness, L.kappa)
        else:
            try:
                self.kappa = capacity.choose_kappa(L.staleness, L.t_train_s, self.t_bcast_plan)
            except capacity.PlanningError as exc:
                self.kappa = resolve_kappa(L.staleness, None)
                self.kappa_note = f"planner could not fit the bound, using κ={self.kappa}: {exc}"
        self.warmup = L.warmup_steps if L.warmup_steps is not None else 2 * self.kappa
        self.buffer = ReplayBuffer(L.staleness)
        self.pause = not B.generate_during_broadcast
        self.learner_res = [Resource(L.gpu, L.num_gpus)] if L.num_gpus else []
        self.learner_meter, self.pool_meter = CostMeter(prices), CostMeter(prices)
        self.charged: Counter = Counter()  # (gpu, $/h) → workers being paid for
        self.scheduler: PoolScheduler | None = None
        self._ran = False
        self.rollouts = (_PLACEHOLDER,) * L.samples_per_group
        self.req_rollouts = cfg.pool.prompts_per_request * L.samples_per_group

    # ------------------------------------------------------------------ main loop
    def run(self) -> dict:
        """Simulate ``learner.steps`` steps; returns summary, per-step timeline and the decision log."""
        from echo2_sdk.runtime.planning.simstats import summarize

        if self._ran:
            raise RuntimeError("a Simulation runs once; build a new one for another run")
        self._ran = True
        t0 = time.perf_counter()
        self._reset()
        if self.scheduler:
            self._apply(self.scheduler.start(0.0))
            self._push(self.cfg.pool.heartbeat_interval_s, TICK)
        else:
            for w in list(self.workers):
                self._activate(w)
        for w in list(self.workers):
            self._schedule_preempt(w)
        if self.cfg.pool.join_per_hour > 0:
            self._push(self.rng.expovariate(self.cfg.pool.join_per_hour / 3600.0), JOIN)
        self._try_step()
        horizon = 100.0 * self.cfg.learner.steps * self.cfg.learner.t_train_s + 10 * self.t_bcast_plan
        heap, pop, W = self.heap, heapq.heappop, self.workers
        while heap and not self.finished:
            t, _, kind, a, b = pop(heap)
            if t > horizon:
                self.stalled = True
                break
            self.now = t
            if kind == REQ_DONE:
                w = W[a]
                if w.token == b and w.busy:
                    self._request_done(w)
            elif kind == TRAIN_DONE:
                self._train_done()
            elif kind == TICK:
                self._tick()
            elif kind == BCAST_DONE:
                self._bcast_done(a)
            elif kind == READY:
                w = W[a]
                if w.token == b and w.active and w.alive:
                    w.ready = True
                    self._start_request(w)
            elif kind == PREEMPT:
                self._preempt(W[a])
            elif kind == REJOIN:
                self._rejoin(W[a])
            elif kind == JOIN:
                self._join()
        if not heap and not self.finished:
            self.stalled = True
        self._charge_now()
        self.learner_meter.charge_between_steps(self.now, self.learner_res)  # a stalled learner still costs
        return summarize(self, time.perf_counter() - t0)

    def _reset(self) -> None:
        L = self.cfg.learner
        if self.cfg.pool.activate == "scheduler":
            self.scheduler = PoolScheduler(self.base_offers, kappa=self.kappa, rollouts_per_step=L.rollouts_per_step,
                                           t_train_s=L.t_train_s, t_bcast_s=self.t_bcast_plan, config=self.cfg.scheduler)
        self.heap, self._seq, self.now = [], 0, 0.0
        self.version = self.published = self.steps_started = 0
        self.training = self.finished = self.stalled = False
        self.wait_since = self.step_dur = 0.0
        self.idle_total = self.idle_steady = self.train_total = self.train_steady = 0.0
        self.staleness: Counter = Counter()
        self.generated = self.accepted = self.preemptions = self.joins = self.abandoned = 0
        self.bcast_busy, self.bcast_version, self.bcast_end, self.bcast_pending = False, 0, 0.0, None
        self.publish_t: dict[int, float] = {}
        self.windows = PauseWindows()
        self.rng = random.Random(self.cfg.seed)
        self.req_noise = Noise(self.cfg.pool.throughput_cv, self.cfg.seed)
        self.step_noise = Noise(self.cfg.learner.t_train_cv, self.cfg.seed + 1)
        self.t_bcast_measured: list[float] = []
        self.decision_count: Counter = Counter()
        self.meter = ThroughputMeter()
        self.machine_area = self.machine_t = self.mu_area = self.charged_mu = 0.0
        self.cost_at_warmup = None
        self.timeline = {k: [] for k in ("t_s", "bubble_ratio", "active_workers", "cost_usd", "mu_pool_est",
                                         "mu_target")}

    # ------------------------------------------------------------------ event plumbing
    def _push(self, t: float, kind: int, a: int = 0, b: int = 0) -> None:
        self._seq += 1
        heapq.heappush(self.heap, (t, self._seq, kind, a, b))

    # ------------------------------------------------------------------ cost
    def _charge_now(self) -> None:
        now = self.now
        self.machine_area += sum(self.charged.values()) * (now - self.machine_t)
        self.mu_area += self.charged_mu * (now - self.machine_t)
        self.machine_t = now
        self.pool_meter.charge_between_steps(now, [Resource(g, n, p) for (g, p), n in self.charged.items() if n])

    def _set_charged(self, w: SimWorker, on: bool) -> None:
        if w.charged == on:
            return
        self._charge_now()
        w.charged = on
        self.charged[(w.offer.gpu, w.offer.usd_per_hour)] += 1 if on else -1
        self.charged_mu += w.mu if on else -w.mu

    # ------------------------------------------------------------------ workers
    def _activate(self, w: SimWorker) -> None:
        if not w.alive or w.active:
            return
        w.active, w.draining = True, False
        if w.busy:  # was draining a request: keep going
            return
        self._set_charged(w, True)
        w.token += 1
        B = self.cfg.broadcast
        delay = self.cfg.pool.activation_delay_s
        if w.version != self.published:
            delay += B.t_bcast_s if B.topology == "fixed" else single_download_s(
                B.snapshot_gb, B.learner_uplink_mbps, w.down)
            w.version = self.published
        w.ready = False
        self._push(self.now + delay, READY, w._idx, w.token)

    def _release(self, w: SimWorker) -> None:
        if not w.active:
            return
        w.active = False
        if w.busy:
            w.draining = True
        else:
            w.token += 1
            w.ready = False
            self._set_charged(w, False)

    def _start_request(self, w: SimWorker) -> None:
        now = self.now
        start, version = now, w.version
        if self.pause and self.bcast_busy and now < self.bcast_end:
            start, version = self.bcast_end, self.bcast_version
        w.start, w.req_version, w.busy = start, version, True
        w.work = self.req_rollouts / w.mu * self.req_noise()
        self._seq += 1
        heapq.heappush(self.heap, (start + w.work, self._seq, REQ_DONE, w._idx, w.token))

    def _request_done(self, w: SimWorker) -> None:
        now = self.now
        if self.pause and self.windows.last_end > w.start:
            end = self.windows.finish_time(w.start, w.work)
            if end > now + 1e-9:  # a broadcast paused it: reschedule once per window
                self._push(end, REQ_DONE, w._idx, w.token)
                return
        w.busy = False
        self.meter.record(w.offer.name, self.req_rollouts, w.work)
        name, add, version, rollouts = w.offer.name, self.buffer.add, self.version, self.rollouts
        n = len(rollouts)
        for _ in range(self.cfg.pool.prompts_per_request):
            self.generated += 1
            if add(RolloutGroup(name, w.req_version, rollouts, name, now), version):
                self.accepted += n
        if w.draining:
            w.draining, w.ready = False, False
            w.token += 1
            self._set_charged(w, False)
        elif w.active:
            self._start_request(w)
        if not self.training:
            self._try_step()

    def _apply(self, decisions) -> None:
        for d in decisions:
            if d.action == "activate":
                self._activate(self.by_name[d.worker])
            elif d.action == "release":
                self._release(self.by_name[d.worker])
        self.decision_count.update(d.action for d in decisions)

    # ------------------------------------------------------------------ learner and broadcast
    def _try_step(self) -> None:
        if self.training or self.steps_started >= self.cfg.learner.steps or len(self.buffer) < self.P:
            return
        groups = self.buffer.take(self.P, self.version)
        if groups is None:
            return
        wait = self.now - self.wait_since
        self.idle_total += wait
        if self.steps_started >= self.warmup:
            self.idle_steady += wait
        self.steps_started += 1
        self.staleness.update(self.version - g.version for g in groups)
        self.training = True
        self.step_dur = self.cfg.learner.t_train_s * self.step_noise()
        self._push(self.now + self.step_dur, TRAIN_DONE)

    def _train_done(self) -> None:
        now = self.now
        self.training, self.wait_since = False, now
        self.version += 1
        self.train_total += self.step_dur
        if self.version > self.warmup:
            self.train_steady += self.step_dur
        if self.scheduler:
            self.scheduler.observe(now, t_train_s=self.step_dur)
        self._charge_now()
        row = self.learner_meter.step(now, self.learner_res)
        pool_row = self.pool_meter.step(now, [])
        if self.version == self.warmup:
            self.cost_at_warmup = (self.learner_meter.cost_usd, self.pool_meter.cost_usd, now, self.machine_area)
        if self.version % self.kappa == 0:
            self._publish(self.version)
        tl = self.timeline
        tl["t_s"].append(now)
        tl["bubble_ratio"].append(self.idle_total / (self.idle_total + self.train_total))
        tl["active_workers"].append(sum(self.charged.values()))
        tl["cost_usd"].append(row["cost_usd"] + pool_row["cost_usd"])
        if self.scheduler:
            tl["mu_pool_est"].append(self.scheduler.mu_pool)
            tl["mu_target"].append(self.scheduler.mu_target)
        if self.version >= self.cfg.learner.steps:
            self.finished = True
            return
        self._try_step()

    def _publish(self, v: int) -> None:
        self.published = v
        self.publish_t[v] = self.now
        if self.bcast_busy:
            self.bcast_pending = v
        else:
            self._start_bcast(v)

    def _start_bcast(self, v: int) -> None:
        receivers = [w for w in self.workers if w.alive and w.active]
        link = min((w.link for w in receivers), default=self.cfg.broadcast.worker_link_mbps)
        dur = bcast_time_s(self.cfg.broadcast, len(receivers), link)
        self.bcast_busy, self.bcast_version, self.bcast_end = True, v, self.now + dur
        if self.pause and dur > 0:
            self.windows.add(self.now, self.now + dur)
        self._push(self.now + dur, BCAST_DONE, v)

    def _bcast_done(self, v: int) -> None:
        now, S, T = self.now, self.cfg.learner.staleness, self.cfg.learner.t_train_s
        for w in self.workers:
            if w.alive and w.active and w.version < v:
                w.version = v
                if w.busy and w.req_version < v and w.start <= now:
                    # install: abandon a request whose groups would no longer be admissible on arrival
                    done = (now - w.start) - (self.windows.paused(w.start, now) if self.pause else 0.0)
                    arrival_version = self.version + math.ceil(max(0.0, w.work - done) / T)
                    if not is_admissible(w.req_version, arrival_version, S):
                        self.abandoned += 1
                        w.token += 1
                        w.busy = False
                        self._start_request(w)
        measured = self.now - self.publish_t.pop(v)
        self.t_bcast_measured.append(measured)
        if self.scheduler:
            self.scheduler.observe(self.now, t_bcast_s=measured)
        self.bcast_busy = False
        if self.bcast_pending is not None:
            pending, self.bcast_pending = self.bcast_pending, None
            for old in [k for k in self.publish_t if k < pending]:
                self.publish_t.pop(old)
            self._start_bcast(pending)

    # ------------------------------------------------------------------ pool dynamics
    def _tick(self) -> None:
        now = self.now
        self._apply(heartbeat_round(self.scheduler, self.meter, [w.offer.name for w in self.workers if w.alive], now))
        self._push(now + self.cfg.pool.heartbeat_interval_s, TICK)

    def _schedule_preempt(self, w: SimWorker) -> None:
        rate = self.cfg.pool.preempt_per_hour
        if rate > 0:
            self._push(self.now + self.rng.expovariate(rate / 3600.0), PREEMPT, w._idx)

    def _preempt(self, w: SimWorker) -> None:
        if not w.alive:
            return
        self.preemptions += 1
        w.alive = w.active = w.ready = w.busy = w.draining = False
        w.token += 1
        self._set_charged(w, False)
        self.meter.take_rate(w.offer.name)  # what it measured dies with it
        if self.cfg.pool.rejoin_after_s is not None:
            self._push(self.now + self.cfg.pool.rejoin_after_s, REJOIN, w._idx)

    def _rejoin(self, w: SimWorker) -> None:
        w.alive, w.version = True, -1  # a restarted worker must fetch the current snapshot
        if self.scheduler:
            self._apply(self.scheduler.join(w.offer, self.now))
        else:
            self._activate(w)
        self._schedule_preempt(w)

    def _add_worker(self, offer: WorkerOffer) -> SimWorker:
        w = SimWorker(len(self.workers), offer, self.cfg.broadcast.worker_link_mbps)
        self.workers.append(w)
        self.by_name[offer.name] = w
        return w

    def _join(self) -> None:
        base = self.rng.choice(self.base_offers)
        self.joins += 1
        w = self._add_worker(replace(base, name=f"join-{self.joins:05d}"))
        w.version = -1
        if self.scheduler:
            self._apply(self.scheduler.join(w.offer, self.now))
        else:
            self._activate(w)
        self._schedule_preempt(w)
        self._push(self.now + self.rng.expovariate(self.cfg.pool.join_per_hour / 3600.0), JOIN)
