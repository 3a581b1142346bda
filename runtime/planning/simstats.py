"""The summary of one simulated run: bubble, staleness against the bounds, machines and dollars.

Steady-state figures leave out the first ``warmup_steps`` steps (the initial buffer fill): the
bubble ratio is idle / (idle + train) over the remaining steps, and $/step is the cost accrued after
the warm-up divided by the steps after it.
"""

from __future__ import annotations

import math
from dataclasses import asdict

from echo2_sdk.runtime.planning import capacity


def _mean(xs) -> float | None:
    return sum(xs) / len(xs) if xs else None


def summarize(sim, wall_s: float) -> dict:
    L = sim.cfg.learner
    steps = sim.version
    warm = sim.cost_at_warmup
    learner_usd, pool_usd = sim.learner_meter.cost_usd, sim.pool_meter.cost_usd
    if warm and steps > sim.warmup:
        n = steps - sim.warmup
        learner_step = (learner_usd - warm[0]) / n
        pool_step = (pool_usd - warm[1]) / n
        span = sim.now - warm[2]
        machines = (sim.machine_area - warm[3]) / span if span > 0 else None
    else:
        learner_step = learner_usd / steps if steps else None
        pool_step = pool_usd / steps if steps else None
        machines = sim.machine_area / sim.now if sim.now > 0 else None
    busy = sim.idle_steady + sim.train_steady
    t_bcast = _mean(sim.t_bcast_measured)
    sched = sim.scheduler
    mu_delivered = sim.generated * L.samples_per_group / sim.now if sim.now > 0 else 0.0
    mu_rented = sim.mu_area / sim.now if sim.now > 0 else 0.0
    t_b_plan = t_bcast if t_bcast is not None else sim.t_bcast_plan
    mu_min = capacity.mu_min(sim.kappa, L.t_train_s, t_b_plan, L.rollouts_per_step)
    summary = {
        "steps": steps,
        "stalled": sim.stalled,
        "sim_time_s": sim.now,
        "wall_s": round(wall_s, 3),
        "kappa": sim.kappa,
        "staleness_S": L.staleness,
        "kappa_note": sim.kappa_note or None,
        "workers_in_pool": len(sim.workers),
        "bubble_ratio": sim.idle_steady / busy if busy > 0 else (1.0 if steps == 0 else 0.0),
        "bubble_ratio_with_warmup": sim.idle_total / (sim.idle_total + sim.train_total)
        if sim.idle_total + sim.train_total > 0 else 1.0,
        "learner_wait_s_per_step": sim.idle_steady / max(1, steps - sim.warmup),
        "t_bcast_mean_s": t_bcast,
        "t_bcast_planned_s": sim.t_bcast_plan,
        "broadcasts": len(sim.t_bcast_measured),
        "mu_min": mu_min,
        "mu_rented_mean": mu_rented,
        "mu_delivered": mu_delivered,
        "predicted_bubble_ratio": capacity.predicted_bubble_ratio(
            sim.kappa, L.t_train_s, t_b_plan, L.rollouts_per_step, mu_rented),
        "machines_mean": machines,
        "machines_final": sum(sim.charged.values()),
        "usd_total": learner_usd + pool_usd,
        "usd_learner": learner_usd,
        "usd_pool": pool_usd,
        "usd_per_step": (learner_step + pool_step) if pool_step is not None else None,
        "usd_pool_per_step": pool_step,
        "usd_per_accepted_sample": (learner_usd + pool_usd) / sim.accepted if sim.accepted else None,
        "staleness_max": max(sim.staleness) if sim.staleness else None,
        "staleness_hist": {str(k): v for k, v in sorted(sim.staleness.items())},
        "staleness_bound_tight": capacity.staleness_bound_tight(sim.kappa, L.t_train_s, t_b_plan),
        "staleness_bound_conservative": capacity.staleness_bound_conservative(
            sim.kappa, L.t_train_s, t_b_plan, L.rollouts_per_step, mu_rented),
        "groups_generated": sim.generated,
        "requests_abandoned_on_install": sim.abandoned,
        "groups_admitted": sim.buffer.stats.admitted_groups,
        "groups_dropped_stale": sim.buffer.stats.dropped_stale_groups,
        "groups_trained": sim.buffer.stats.taken_groups,
        "preemptions": sim.preemptions,
        "joins": sim.joins,
        "decisions": dict(sim.decision_count),
        "scheduler": sched.status() if sched else None,
        "gpu_hours": {**{f"learner:{k}": v for k, v in sim.learner_meter.gpu_hours.items()},
                      **{f"pool:{k}": v for k, v in sim.pool_meter.gpu_hours.items()}},
    }
    decisions = [asdict(d) for d in sched.decisions] if sched else []
    return {"summary": _jsonable(summary), "timeline": _jsonable(sim.timeline), "decisions": _jsonable(decisions)}


def _jsonable(x):
    """inf → "inf" so the output is strict JSON."""
    if isinstance(x, float) and math.isinf(x):
        return "inf" if x > 0 else "-inf"
    if isinstance(x, dict):
        return {k: _jsonable(v) for k, v in x.items()}
    if isinstance(x, list):
        return [_jsonable(v) for v in x]
    return x
