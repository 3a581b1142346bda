"""The ECHO-2 capacity model: the overlap rule (eq. 1), the pool it needs (eq. 2), staleness bounds.

Symbols (units in the argument names):

* κ (``kappa``): the learner publishes a snapshot every κ steps.
* T_train (``t_train_s``): seconds per learner step. T_bcast (``t_bcast_s``): seconds from publishing a
  snapshot until every active worker has it.
* R (``rollouts_per_step``): rollouts one learner step consumes (prompts per step × samples per prompt).
* μ_i: rollouts per second worker i delivers; μ_pool = Σ_{i∈A} μ_i over the active set A.
* S (``staleness``): the buffer admits a group of version v while the learner is at v_t iff v ≥ v_t − S.

Capacity model. A κ-step cycle lasts κ·T_train of training. During it the new snapshot is broadcast
(T_bcast, time in which the pool produces nothing usable for the next cycle) and the pool must then
produce the κ·R rollouts that the next κ steps consume. The learner never idles iff

    eq. 1   κ·T_train ≥ T_bcast + κ·R / μ_pool,
    eq. 2   i.e. μ_pool ≥ μ_min(κ) = κ·R / (κ·T_train − T_bcast).

When κ·T_train ≤ T_bcast no finite pool hides the broadcast: μ_min = +inf (returned, not raised;
the planner turns it into an error that says to raise κ/S or to shorten T_bcast).

Below μ_min the cycle stretches to C = T_bcast + κ·R/μ_pool and the learner waits C − κ·T_train of
it, so the predicted bubble ratio (learner idle time / wall time) is

    bubble = max(0, T_bcast + κ·R/μ_pool − κ·T_train) / (κ·T_train + max(0, T_bcast + κ·R/μ_pool − κ·T_train)).

Staleness. A rollout's staleness is Δ = v_t − v at the step that trains on it. Conservatively
(the first R rollouts of a snapshot need T_bcast + R/μ_pool after its publication)
Δ_max ≤ κ + ⌈(T_bcast + R/μ_pool) / T_train⌉ − 1; when generation overlaps training (eq. 1 holds)
it tightens to Δ_max ≤ κ + ⌈(1 − 1/κ)·T_bcast / T_train⌉. The default κ is S − 1 (at least 2); κ is
lowered until the tight bound fits in S, and it is an error when no κ ≥ 2 does.

Ceilings use a 1e-9 tolerance so that a quotient that is an integer on paper (e.g. 40/20) is not
pushed up by floating-point rounding.
"""

from __future__ import annotations

import math

from echo2_sdk.config import resolve_kappa

_EPS = 1e-9


class PlanningError(ValueError):
    """No plan satisfies the capacity model; the message names the quantity to change and by how much."""


def _ceil(x: float) -> int:
    return math.ceil(x - _EPS)


def _check_times(t_train_s: float, t_bcast_s: float) -> None:
    if not (t_train_s > 0 and math.isfinite(t_train_s)):
        raise ValueError(f"T_train={t_train_s!r} s: the learner step time must be a positive finite number")
    if not (t_bcast_s >= 0 and math.isfinite(t_bcast_s)):
        raise ValueError(f"T_bcast={t_bcast_s!r} s: the broadcast time must be ≥ 0 and finite")


def _check_kappa(kappa: int) -> None:
    if isinstance(kappa, bool) or not isinstance(kappa, int) or kappa < 1:
        raise ValueError(f"κ={kappa!r}: the snapshot period must be an integer ≥ 1 (learner steps)")


def _check_rollouts(rollouts_per_step: float) -> None:
    if not rollouts_per_step > 0:
        raise ValueError(f"R={rollouts_per_step!r}: rollouts per learner step must be > 0")


def _check_mu(mu_pool: float) -> None:
    if not mu_pool >= 0:  # also rejects NaN
        raise ValueError(f"μ_pool={mu_pool!r} rollouts/s: pool throughput must be ≥ 0")


def overlap_holds(kappa: int, t_train_s: float, t_bcast_s: float, rollouts_per_step: float,
                  mu_pool: float) -> bool:
    """Eq. 1: κ·T_train ≥ T_bcast + κ·R/μ_pool (the learner never idles). μ_pool = 0 → False."""
    _check_kappa(kappa)
    _check_times(t_train_s, t_bcast_s)
    _check_rollouts(rollouts_per_step)
    _check_mu(mu_pool)
    if mu_pool == 0:
        return False
    return kappa * t_train_s >= t_bcast_s + kappa * rollouts_per_step / mu_pool


def mu_min(kappa: int, t_train_s: float, t_bcast_s: float, rollouts_per_step: float) -> float:
    """Eq. 2: μ_min(κ) = κ·R / (κ·T_train − T_bcast) rollouts/s; +inf when κ·T_train ≤ T_bcast."""
    _check_kappa(kappa)
    _check_times(t_train_s, t_bcast_s)
    _check_rollouts(rollouts_per_step)
    slack = kappa * t_train_s - t_bcast_s
    if slack <= 0:
        return math.inf
    return kappa * rollouts_per_step / slack


def mu_target(mu_min_value: float, gamma: float = 1.1) -> float:
    """μ_target = γ·μ_min, the throughput the scheduler provisions (γ ≥ 1 is the headroom)."""
    if not (gamma >= 1 and math.isfinite(gamma)):
        raise ValueError(f"γ={gamma!r}: the headroom factor must be a finite number ≥ 1 (default 1.1)")
    return gamma * mu_min_value


def cycle_time_s(kappa: int, t_train_s: float, t_bcast_s: float, rollouts_per_step: float,
                 mu_pool: float) -> float:
    """Wall time of one κ-step cycle: max(κ·T_train, T_bcast + κ·R/μ_pool) (inf when μ_pool = 0)."""
    _check_kappa(kappa)
    _check_times(t_train_s, t_bcast_s)
    _check_rollouts(rollouts_per_step)
    _check_mu(mu_pool)
    if mu_pool == 0:
        return math.inf
    return max(kappa * t_train_s, t_bcast_s + kappa * rollouts_per_step / mu_pool)


def predicted_bubble_ratio(kappa: int, t_train_s: float, t_bcast_s: float, rollouts_per_step: float,
                           mu_pool: float) -> float:
    """Learner idle fraction per cycle: (C − κ·T_train)/C with C = :func:`cycle_time_s`; 1.0 when μ_pool = 0."""
    cycle = cycle_time_s(kappa, t_train_s, t_bcast_s, rollouts_per_step, mu_pool)
    if math.isinf(cycle):
        return 1.0
    return (cycle - kappa * t_train_s) / cycle


def staleness_bound_conservative(kappa: int, t_train_s: float, t_bcast_s: float,
                                 rollouts_per_step: float, mu_pool: float) -> float:
    """Δ_max ≤ κ + ⌈(T_bcast + R/μ_pool)/T_train⌉ − 1 (an int; +inf when μ_pool = 0)."""
    _check_kappa(kappa)
    _check_times(t_train_s, t_bcast_s)
    _check_rollouts(rollouts_per_step)
    _check_mu(mu_pool)
    if mu_pool == 0:
        return math.inf
    return kappa + _ceil((t_bcast_s + rollouts_per_step / mu_pool) / t_train_s) - 1


def staleness_bound_tight(kappa: int, t_train_s: float, t_bcast_s: float) -> int:
    """Under overlap (eq. 1 holds): Δ_max ≤ κ + ⌈(1 − 1/κ)·T_bcast/T_train⌉."""
    _check_kappa(kappa)
    _check_times(t_train_s, t_bcast_s)
    return kappa + _ceil((1 - 1 / kappa) * t_bcast_s / t_train_s)


def max_t_bcast_s(staleness: int, kappa: int, t_train_s: float) -> float:
    """Largest T_bcast with κ + ⌈(1 − 1/κ)·T_bcast/T_train⌉ ≤ S: (S − κ)·T_train·κ/(κ − 1)."""
    _check_kappa(kappa)
    if kappa == 1:
        return math.inf if staleness >= 1 else -math.inf
    return (staleness - kappa) * t_train_s * kappa / (kappa - 1)


def choose_kappa(staleness: int, t_train_s: float, t_bcast_s: float, kappa: int | None = None) -> int:
    """κ for staleness bound S: the largest κ ≤ S − 1 (κ ≥ 2) whose tight bound fits in S.

    An explicit ``kappa`` is validated (2 ≤ κ ≤ S, via ``resolve_kappa``) and must satisfy the bound
    itself. Raises :class:`PlanningError` naming the fix (raise S, shorten T_bcast) when no κ ≥ 2 does.
    """
    _check_times(t_train_s, t_bcast_s)
    first = resolve_kappa(staleness, kappa)  # ConfigError for S < 2 or κ outside [2, S]
    candidates = [first] if kappa is not None else range(first, 1, -1)
    for k in candidates:
        if staleness_bound_tight(k, t_train_s, t_bcast_s) <= staleness:
            return k
    need_s = min(staleness_bound_tight(k, t_train_s, t_bcast_s) for k in candidates)
    best_k = max(candidates, key=lambda k: max_t_bcast_s(staleness, k, t_train_s))
    max_tb = max_t_bcast_s(staleness, best_k, t_train_s)
    if kappa is not None:
        raise PlanningError(
            f"κ={kappa} with T_bcast={t_bcast_s:g} s and T_train={t_train_s:g} s gives Δ_max ≤ "
            f"{staleness_bound_tight(kappa, t_train_s, t_bcast_s)} > S={staleness}: raise the staleness S "
            f"to ≥ {need_s}, shorten T_bcast to ≤ {max_t_bcast_s(staleness, kappa, t_train_s):g} s, "
            f"or drop --kappa to let the planner pick"
        )
    tb_hint = (f"shorten T_bcast to ≤ {max_tb:g} s (κ={best_k})" if max_tb > 0
               else "make the broadcast effectively instantaneous (T_bcast = 0)")
    need_tt = [(1 - 1 / k) * t_bcast_s / (staleness - k) for k in candidates if k < staleness]
    tt_hint = f", or lengthen T_train to ≥ {min(need_tt):g} s" if need_tt else ""
    raise PlanningError(
        f"no κ in [2, {first}] keeps Δ_max ≤ S={staleness} with T_bcast={t_bcast_s:g} s and "
        f"T_train={t_train_s:g} s (the smallest bound is {need_s}): raise the staleness S to ≥ {need_s}, "
        f"or {tb_hint}{tt_hint}"
    )
