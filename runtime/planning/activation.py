"""Which workers to rent: greedy activation by cost per unit throughput, and the NoCost ablation.

ρ_i = c_i / μ_i is what worker i costs per rollout-per-second of throughput (US $/h per rollout/s).
Greedy activation sorts the capable workers (μ_i > 0) by ρ_i (ties: faster first, then name) and
adds them until Σ μ_i ≥ μ_target; a final pass drops chosen workers, most expensive first, whose
throughput is not needed to stay at or above μ_target (it can only lower the bill). A worker with
μ_i = 0 has ρ_i = +inf and is never chosen. ``activate_random`` is the NoCost ablation: the same
target, reached by adding capable workers in uniformly random order.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass
from typing import Sequence

from echo2_sdk.runtime.planning.poolfile import WorkerOffer


def rho(usd_per_hour: float, rollouts_per_s: float) -> float:
    """ρ = c/μ in $/h per rollout/s; +inf when μ = 0 (the worker delivers nothing at any price)."""
    if usd_per_hour < 0 or rollouts_per_s < 0:
        raise ValueError(f"ρ needs c ≥ 0 and μ ≥ 0, got c={usd_per_hour!r} $/h, μ={rollouts_per_s!r} rollouts/s")
    return math.inf if rollouts_per_s == 0 else usd_per_hour / rollouts_per_s


@dataclass(frozen=True)
class Activation:
    """The outcome of an activation: the chosen workers and what they add up to."""

    chosen: tuple[WorkerOffer, ...]
    """Workers to activate, in the order they were picked."""
    mu_target: float
    """μ_target the activation aimed at (rollouts/s)."""
    mu_pool: float
    """Σ μ_i of the chosen workers (rollouts/s)."""
    usd_per_hour: float
    """Σ c_i of the chosen workers ($/h)."""

    @property
    def feasible(self) -> bool:
        """True when the chosen workers reach μ_target (False for an empty or too slow pool, or μ_target = inf)."""
        return self.mu_pool >= self.mu_target

    @property
    def names(self) -> list[str]:
        return [o.name for o in self.chosen]


def _check_target(mu_target: float) -> None:
    if math.isnan(mu_target):
        raise ValueError("μ_target is NaN: check T_train, T_bcast and R")


def _fill(order: Sequence[WorkerOffer], mu_target: float) -> list[WorkerOffer]:
    chosen, total = [], 0.0
    if mu_target <= 0:
        return chosen
    for offer in order:
        chosen.append(offer)
        total += offer.rollouts_per_s
        if total >= mu_target:
            break
    return chosen


def _summary(chosen: Sequence[WorkerOffer], mu_target: float) -> Activation:
    return Activation(tuple(chosen), mu_target, sum(o.rollouts_per_s for o in chosen),
                      sum(o.usd_per_hour for o in chosen))


def activate_greedy(offers: Sequence[WorkerOffer], mu_target: float) -> Activation:
    """The cheapest-ρ workers reaching Σ μ_i ≥ μ_target (all capable ones when it is out of reach)."""
    _check_target(mu_target)
    capable = [o for o in offers if o.rollouts_per_s > 0]
    order = sorted(capable, key=lambda o: (rho(o.usd_per_hour, o.rollouts_per_s), -o.rollouts_per_s, o.name))
    chosen = _fill(order, mu_target)
    total = sum(o.rollouts_per_s for o in chosen)
    if total >= mu_target:  # trim: drop the dearest workers whose throughput is surplus
        for offer in sorted(chosen, key=lambda o: (-o.usd_per_hour, o.rollouts_per_s, o.name)):
            if total - offer.rollouts_per_s >= mu_target:
                chosen.remove(offer)
                total -= offer.rollouts_per_s
    return _summary(chosen, mu_target)


def activate_random(offers: Sequence[WorkerOffer], mu_target: float, rng: random.Random) -> Activation:
    """NoCost ablation: capable workers in uniformly random order until Σ μ_i ≥ μ_target."""
    _check_target(mu_target)
    capable = sorted((o for o in offers if o.rollouts_per_s > 0), key=lambda o: o.name)
    rng.shuffle(capable)
    return _summary(_fill(capable, mu_target), mu_target)
