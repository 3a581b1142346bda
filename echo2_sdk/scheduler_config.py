"""The ``scheduler`` config section: the cost-aware worker pool, its price table and its checks.

Kept apart from ``config.py`` so that the run config stays readable; ``config.py`` imports
:class:`PoolSchedulerConfig` as the ``Echo2Config.scheduler`` field and calls :func:`validate_pool`
from ``load_config``. The workers it prices come from :mod:`echo2_sdk.rollout_config` (which also holds
the rollout pool file). Nothing here imports Ray or the runtime.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from echo2_sdk.config_loader import ConfigError, read_yaml_file
from echo2_sdk.rollout_config import (  # noqa: F401  (check_unique, load_pool_file: re-exported)
    check_unique,
    load_pool_file,
    resolve_workers,
)


@dataclass(frozen=True)
class PoolSchedulerConfig:
    enabled: bool = False
    """Run the closed-loop pool scheduler: start only the workers it activates, release and replace
    them as it decides, and account dollars (``cost_usd`` in metrics.jsonl). Off: every worker runs all along."""
    policy: Literal["cost", "random"] = "cost"
    """``cost``: cheapest ρ_i = c_i/μ_i first (ECHO-2); ``random``: uniform choice of capable workers at
    the same capacity target (the NoCost ablation)."""
    gamma: float = 1.1
    """γ: provisioning headroom, μ_target = γ·μ_min (μ_min from eq. 2), ≥ 1."""
    heartbeat_interval_s: float = 10.0
    """Seconds between heartbeat rounds: measured μ_i reach the scheduler, and it ticks (activate/release/lost)."""
    heartbeat_timeout_s: float = 90.0
    """A worker with no heartbeat for longer than this is lost (a_i = 0; replaced at once if it was
    active). Must exceed ``heartbeat_interval_s``. A killed worker is replaced within about
    ``heartbeat_timeout_s + heartbeat_interval_s``."""
    sustain_s: float = 120.0
    """μ_pool must stay below μ_target (above (1 + m)·μ_target) this long before workers are activated (released)."""
    release_margin: float = 0.2
    """m: release only above (1 + m)·μ_target, keeping at least (1 + m/2)·μ_target (hysteresis)."""
    ema_alpha: float = 0.3
    """Weight of the newest measurement in the EMAs of μ_i and T_bcast, in (0, 1]."""
    t_train_estimate_s: float = 10.0
    """Prior learner step time T_train in seconds for the initial plan; the first measured step replaces it."""
    t_bcast_estimate_s: float = 0.0
    """Prior broadcast time T_bcast in seconds; measured broadcasts replace it (EMA)."""
    prices: dict | str = field(default_factory=dict)
    """Price table: GPU class → US dollars per GPU-hour, inline (``{A100: 1.6, cpu: 0.05}``) or the path
    of a YAML file holding that mapping. Prices workers without their own ``usd_per_hour`` and the learner."""
    learner_gpu: str = "A100"
    """GPU class of the learner (a key of ``prices``), charged for the whole run."""
    learner_gpus: int = 1
    """Number of learner GPUs charged (0: account only the rollout workers)."""

    def __post_init__(self) -> None:
        checks = [
            ("gamma", self.gamma >= 1 and math.isfinite(self.gamma), "≥ 1 (the paper uses 1.1)"),
            ("heartbeat_interval_s", self.heartbeat_interval_s > 0, "> 0 seconds"),
            ("heartbeat_timeout_s", self.heartbeat_timeout_s > self.heartbeat_interval_s,
             f"> heartbeat_interval_s={self.heartbeat_interval_s:g} (or every worker is lost between two rounds)"),
            ("sustain_s", self.sustain_s >= 0, "≥ 0 seconds"),
            ("release_margin", self.release_margin > 0, "> 0"),
            ("ema_alpha", 0 < self.ema_alpha <= 1, "in (0, 1]"),
            ("t_train_estimate_s", self.t_train_estimate_s > 0 and math.isfinite(self.t_train_estimate_s),
             "> 0 seconds"),
            ("t_bcast_estimate_s", self.t_bcast_estimate_s >= 0 and math.isfinite(self.t_bcast_estimate_s),
             "≥ 0 seconds"),
            ("learner_gpus", self.learner_gpus >= 0, "≥ 0"),
        ]
        for name, ok, rule in checks:
            if not ok:
                raise ConfigError(f"scheduler.{name}={getattr(self, name)!r} must be {rule}")
        if isinstance(self.prices, dict):
            check_prices(self.prices, "scheduler.prices")


def check_prices(data: Any, source: str) -> dict[str, float]:
    """A price table: mapping GPU class → $ per GPU-hour (a finite number ≥ 0)."""
    if not isinstance(data, Mapping):
        raise ConfigError(f"{source}: a price table maps GPU class to $ per GPU-hour (e.g. {{A100: 1.6}}), "
                          f"got {type(data).__name__}")
    out = {}
    for gpu, price in data.items():
        if isinstance(price, bool) or not isinstance(price, (int, float)) or not (price >= 0 and math.isfinite(price)):
            raise ConfigError(f"{source}.{gpu}: price {price!r} must be a number ≥ 0 ($ per GPU-hour)")
        out[str(gpu)] = float(price)
    return out


def resolve_prices(cfg: PoolSchedulerConfig) -> dict[str, float]:
    """The price table, read from its file when ``scheduler.prices`` is a path."""
    if isinstance(cfg.prices, str):
        data = read_yaml_file(cfg.prices, "scheduler.prices file", "examples/pools/prices.yaml")
        return check_prices(data if data is not None else {}, cfg.prices)
    return check_prices(cfg.prices, "scheduler.prices")


def reject_old_spellings(data: dict) -> None:
    """The issue text says ``runtime.scheduler: random``; the config spells it ``scheduler.policy``."""
    runtime = data.get("runtime")
    if isinstance(runtime, dict) and "scheduler" in runtime:
        value = runtime["scheduler"]
        raise ConfigError(
            f"runtime.scheduler={value!r} is not a config key: the pool scheduler has its own section. "
            f"Write scheduler: {{enabled: true, policy: {value if value in ('cost', 'random') else 'cost'}}} "
            "(policy random is the NoCost ablation)"
        )


def validate_pool(cfg) -> None:
    """Checks that need files or several sections; run by ``load_config``.

    With the scheduler on: async mode, every worker priced (its ``usd_per_hour`` or ``prices[gpu]``),
    every worker with a throughput prior (``rollouts_per_s`` or ``max_tokens_per_s``), the learner's
    GPU class in the price table.
    """
    workers = resolve_workers(cfg)
    s = cfg.scheduler
    if not s.enabled:
        return
    if cfg.runtime.mode != "async":
        raise ConfigError(f"scheduler.enabled=true needs runtime.mode=async (got {cfg.runtime.mode!r}); "
                          "the sync baseline always runs every worker: set scheduler.enabled=false")
    prices = resolve_prices(s)
    known = ", ".join(sorted(prices)) or "none"
    for w in workers:
        if w.usd_per_hour is None and w.gpu not in prices:
            raise ConfigError(f"worker {w.name!r}: no price; give it usd_per_hour or add its gpu class "
                              f"{w.gpu!r} to scheduler.prices (known: {known})")
        if w.rollouts_per_s is None and w.max_tokens_per_s is None:
            raise ConfigError(f"worker {w.name!r}: the scheduler needs a throughput prior; give it "
                              "rollouts_per_s (μ_i, samples/s) or max_tokens_per_s (a cap it is estimated from)")
    if s.learner_gpus > 0 and s.learner_gpu not in prices:
        raise ConfigError(f"scheduler.learner_gpu={s.learner_gpu!r} has no price in scheduler.prices "
                          f"(known: {known}); add it, or set scheduler.learner_gpus=0 to leave the learner out")
