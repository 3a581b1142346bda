"""Dollar accounting: Cost = Σ_g p_g · GPU-hours_g, per step and cumulative.

The price table is a YAML mapping from GPU class to US dollars per GPU-hour::

    A100: 1.60
    RTX5090: 0.65

A :class:`Resource` is what is being paid for over an interval: ``count`` GPUs of class ``gpu``, at the
table's price p_g unless the resource carries its own (a worker's c_i from the pool file).
:class:`CostMeter` is called by the driver once per learner step (and by the simulator whenever the
set of rented resources changes); each call charges the resources for the time since the previous
call and returns the metrics row fields:

* ``cost_usd``: cumulative dollars; ``cost_step_usd``: dollars since the previous call;
* ``usd_per_accepted_sample``: cumulative dollars / samples accepted into the replay buffer;
* ``usd_per_reward_point``: cumulative dollars / reward points gained, where a point is 0.01 of reward
  (a percentage point for rewards in [0, 1]) and the gain is measured from the first reward reported;
  None until the reward has improved.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from typing import Iterable, Mapping


from echo2_sdk.config_loader import ConfigError, read_yaml_file
from echo2_sdk.runtime.planning.pool_state import CostTotals
from echo2_sdk.scheduler_config import check_prices

POINTS_PER_REWARD_UNIT = 100.0


@dataclass(frozen=True)
class Resource:
    gpu: str
    """GPU class (a price-table key unless ``usd_per_hour`` is given)."""
    count: int = 1
    """Number of GPUs of this class."""
    usd_per_hour: float | None = None
    """Price per GPU-hour overriding the table (e.g. a worker's c_i); None: the table's p_g."""


def parse_prices(data: object, source: str = "prices") -> dict[str, float]:
    """Validate a price table: a mapping GPU class → dollars per GPU-hour (≥ 0)."""
    return check_prices(data, source)


def load_prices(path: str) -> dict[str, float]:
    data = read_yaml_file(path, "price table", "examples/pools/prices.yaml")
    return parse_prices(data if data is not None else {}, source=path)


class CostMeter:
    """Cumulative Σ_g p_g · GPU-hours_g with per-step deltas and per-sample / per-reward-point rates."""

    def __init__(self, prices: Mapping[str, float] | None = None, *, start_s: float = 0.0) -> None:
        self.prices = parse_prices(dict(prices or {}))
        self.last_s = start_s
        self.cost_usd = 0.0
        self.gpu_hours: dict[str, float] = defaultdict(float)
        self.usd_by_gpu: dict[str, float] = defaultdict(float)
        self.accepted_samples = 0
        self._first_reward: float | None = None
        self._last_step_cost = 0.0

    def price(self, resource: Resource) -> float:
        if resource.usd_per_hour is not None:
            return resource.usd_per_hour
        try:
            return self.prices[resource.gpu]
        except KeyError:
            known = ", ".join(sorted(self.prices)) or "none"
            raise ConfigError(f"no price for GPU class {resource.gpu!r}: add it to the price table "
                              f"(known: {known}) or give the resource its own usd_per_hour") from None

    def advance(self, now_s: float, resources: Iterable[Resource]) -> float:
        """Charge ``resources`` (rented during [last call, now_s]) and return the dollars of that interval."""
        dt_h = (now_s - self.last_s) / 3600.0
        if dt_h < 0:
            raise ValueError(f"time went backwards: now_s={now_s} < last charge at {self.last_s}")
        usd = 0.0
        for r in resources:
            p = self.price(r)
            hours = r.count * dt_h
            self.gpu_hours[r.gpu] += hours
            self.usd_by_gpu[r.gpu] += p * hours
            usd += p * hours
        self.cost_usd += usd
        self.last_s = now_s
        return usd

    def step(self, now_s: float, resources: Iterable[Resource], *, accepted_samples: int = 0,
             reward_mean: float | None = None) -> dict:
        """Charge up to ``now_s``, count this step's accepted samples and reward; return metric fields."""
        usd = self.advance(now_s, resources)
        step_usd, self._last_step_cost = self._last_step_cost + usd, 0.0
        self.accepted_samples += accepted_samples
        gain = None
        if reward_mean is not None:
            if self._first_reward is None:
                self._first_reward = reward_mean
            gain = POINTS_PER_REWARD_UNIT * (reward_mean - self._first_reward)
        return {
            "cost_usd": self.cost_usd,
            "cost_step_usd": step_usd,
            "usd_per_accepted_sample": self.cost_usd / self.accepted_samples if self.accepted_samples else None,
            "usd_per_reward_point": self.cost_usd / gain if gain is not None and gain > 0 else None,
        }

    def charge_between_steps(self, now_s: float, resources: Iterable[Resource]) -> float:
        """Like :meth:`advance`, but the dollars are added to the next :meth:`step`'s ``cost_step_usd``."""
        usd = self.advance(now_s, resources)
        self._last_step_cost += usd
        return usd

    def summary(self) -> dict:
        return {"cost_usd": self.cost_usd, "gpu_hours": dict(self.gpu_hours), "usd_by_gpu": dict(self.usd_by_gpu)}

    def totals(self) -> CostTotals:
        """The cumulative figures a checkpoint carries (``pool_state``)."""
        return CostTotals(self.cost_usd, dict(self.gpu_hours), dict(self.usd_by_gpu), self.accepted_samples,
                          self._first_reward)

    def restore(self, totals: CostTotals) -> None:
        """Continue from a checkpoint's totals (charging goes on from ``last_s``, the resumed run's clock)."""
        self.cost_usd, self.accepted_samples, self._first_reward = totals.cost_usd, totals.accepted_samples, totals.first_reward
        self.gpu_hours = defaultdict(float, totals.gpu_hours)
        self.usd_by_gpu = defaultdict(float, totals.usd_by_gpu)
