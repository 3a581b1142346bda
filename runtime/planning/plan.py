"""A capacity plan: κ from S, μ_min and μ_target, the cheapest workers, their price, bubble and Δ_max.

``make_plan`` is what ``echo2 plan`` prints. It raises :class:`PlanningError` when the capacity model
has no answer (no κ ≥ 2 fits the staleness bound, or μ_min is infinite); a pool too small for
μ_target is not an error here: the plan takes every capable worker, says ``feasible: false`` and how
much throughput is missing.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Sequence

from echo2_sdk.runtime.planning import capacity
from echo2_sdk.runtime.planning.activation import activate_greedy, rho
from echo2_sdk.runtime.planning.poolfile import WorkerOffer


@dataclass(frozen=True)
class Plan:
    kappa: int
    """κ: snapshot period in learner steps."""
    mu_min: float
    """μ_min(κ) = κR/(κ·T_train − T_bcast), rollouts/s (eq. 2)."""
    mu_target: float
    """γ·μ_min, rollouts/s."""
    workers: tuple[str, ...]
    """Names of the chosen workers (cheapest ρ_i = c_i/μ_i first)."""
    mu_pool: float
    """Σ μ_i of the chosen workers, rollouts/s."""
    usd_per_hour: float
    """Σ c_i of the chosen workers, $/h."""
    learner_usd_per_hour: float
    """Price of the learner's GPUs, $/h (0 when not given)."""
    usd_per_step: float
    """(pool + learner) $/h × cycle time / κ: dollars per learner step."""
    predicted_bubble_ratio: float
    """max(0, T_bcast + κR/μ_pool − κT_train) / (κT_train + that): learner idle fraction per cycle."""
    staleness_bound_conservative: float
    """κ + ⌈(T_bcast + R/μ_pool)/T_train⌉ − 1."""
    staleness_bound_tight: int
    """κ + ⌈(1 − 1/κ)·T_bcast/T_train⌉."""
    feasible: bool
    """Whether the chosen workers reach μ_target."""
    shortfall_rollouts_per_s: float
    """μ_target − μ_pool when infeasible, else 0."""
    staleness: int
    t_train_s: float
    t_bcast_s: float
    rollouts_per_step: int
    gamma: float

    def to_dict(self) -> dict:
        d = asdict(self)
        d["workers"] = list(self.workers)
        return {k: ("inf" if isinstance(v, float) and math.isinf(v) else v) for k, v in d.items()}


def make_plan(offers: Sequence[WorkerOffer], *, t_train_s: float, t_bcast_s: float, rollouts_per_step: int,
              staleness: int, kappa: int | None = None, gamma: float = 1.1,
              learner_usd_per_hour: float = 0.0) -> Plan:
    k = capacity.choose_kappa(staleness, t_train_s, t_bcast_s, kappa)
    mu_min = capacity.mu_min(k, t_train_s, t_bcast_s, rollouts_per_step)
    if math.isinf(mu_min):
        raise capacity.PlanningError(
            f"μ_min is infinite: κ·T_train = {k}·{t_train_s:g} = {k * t_train_s:g} s ≤ T_bcast = {t_bcast_s:g} s, "
            f"so no pool hides the broadcast; shorten T_bcast below {k * t_train_s:g} s (e.g. peer-assisted "
            f"broadcast) or raise κ (needs a larger staleness S)"
        )
    target = capacity.mu_target(mu_min, gamma)
    pick = activate_greedy(offers, target)
    cycle = capacity.cycle_time_s(k, t_train_s, t_bcast_s, rollouts_per_step, pick.mu_pool)
    return Plan(
        kappa=k, mu_min=mu_min, mu_target=target, workers=tuple(pick.names), mu_pool=pick.mu_pool,
        usd_per_hour=pick.usd_per_hour, learner_usd_per_hour=learner_usd_per_hour,
        usd_per_step=(pick.usd_per_hour + learner_usd_per_hour) * cycle / k / 3600.0,
        predicted_bubble_ratio=capacity.predicted_bubble_ratio(k, t_train_s, t_bcast_s, rollouts_per_step, pick.mu_pool),
        staleness_bound_conservative=capacity.staleness_bound_conservative(
            k, t_train_s, t_bcast_s, rollouts_per_step, pick.mu_pool),
        staleness_bound_tight=capacity.staleness_bound_tight(k, t_train_s, t_bcast_s),
        feasible=pick.feasible, shortfall_rollouts_per_s=max(0.0, target - pick.mu_pool),
        staleness=staleness, t_train_s=t_train_s, t_bcast_s=t_bcast_s, rollouts_per_step=rollouts_per_step,
        gamma=gamma,
    )


def format_plan(plan: Plan, offers: Sequence[WorkerOffer]) -> str:
    by_name = {o.name: o for o in offers}
    lines = [
        f"κ = {plan.kappa} (S = {plan.staleness}); T_train = {plan.t_train_s:g} s, T_bcast = {plan.t_bcast_s:g} s, "
        f"R = {plan.rollouts_per_step}",
        f"μ_min = {plan.mu_min:.4g} rollouts/s, μ_target = γ·μ_min = {plan.gamma:g}·μ_min = {plan.mu_target:.4g} rollouts/s",
        f"chosen workers ({len(plan.workers)}), cheapest ρ = c/μ first:",
    ]
    for name in plan.workers:
        o = by_name[name]
        mu, usd = f"μ={o.rollouts_per_s:.4g}/s", f"c=${o.usd_per_hour:.4g}/h"
        lines.append(f"  {name:24s} {o.gpu:10s} {mu:12s} {usd:12s} ρ={rho(o.usd_per_hour, o.rollouts_per_s):.4g}")
    lines += [
        f"μ_pool = {plan.mu_pool:.4g} rollouts/s, pool cost ${plan.usd_per_hour:.4g}/h"
        + (f" + learner ${plan.learner_usd_per_hour:.4g}/h" if plan.learner_usd_per_hour else "")
        + f", ${plan.usd_per_step:.4g} per learner step",
        f"predicted bubble ratio = {plan.predicted_bubble_ratio:.4f}",
        f"staleness bounds: Δ_max ≤ {plan.staleness_bound_conservative} (conservative), "
        f"≤ {plan.staleness_bound_tight} (tight, under overlap)",
    ]
    if not plan.feasible:
        lines.append(f"NOT FEASIBLE: the pool reaches {plan.mu_pool:.4g} of {plan.mu_target:.4g} rollouts/s "
                     f"(short by {plan.shortfall_rollouts_per_s:.4g}); add workers or lower R or T_bcast")
    return "\n".join(lines)
