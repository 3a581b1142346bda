"""The ``echo2 simulate`` config: learner, broadcast, pool, scheduler, prices and the experiment to run.

Loaded from YAML with the run config's loader (typed, unknown keys rejected with the closest valid
key, ``--set a.b=c`` overrides). Relative paths (``pool.file``, ``prices_file``) are resolved against
the folder of the config file.
"""

from __future__ import annotations

import dataclasses
import random
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from echo2_sdk.config_loader import ConfigError, apply_overrides, build_dataclass, load_yaml
from echo2_sdk.runtime.planning.cost import load_prices, parse_prices
from echo2_sdk.runtime.planning.poolfile import WorkerOffer, load_pool
from echo2_sdk.runtime.planning.scheduler import SchedulerConfig


@dataclass(frozen=True)
class LearnerSpec:
    t_train_s: float = 60.0
    """T_train: mean seconds per learner step."""
    t_train_cv: float = 0.0
    """Coefficient of variation of the step time (lognormal noise, mean kept)."""
    rollouts_per_step: int = 256
    """R: rollouts one learner step consumes (prompts per step × samples per group)."""
    samples_per_group: int = 8
    """n: samples per group (the replay buffer's unit); R must be a multiple of n."""
    staleness: int = 3
    """S: the buffer admits groups with v ≥ v_t − S."""
    kappa: int | None = None
    """κ: publish every κ steps (null: the planner's choice, S − 1 when the staleness bound allows)."""
    steps: int = 200
    """Learner steps to simulate."""
    warmup_steps: int | None = None
    """Steps left out of the steady-state bubble and $/step (null: 2κ)."""
    gpu: str = "A100"
    """GPU class of the learner (price-table key)."""
    num_gpus: int = 8
    """Learner GPUs (charged for the whole simulated time, idle or not)."""


@dataclass(frozen=True)
class BroadcastSpec:
    topology: Literal["fixed", "chain", "star"] = "fixed"
    """``chain``: peer-assisted pipelined broadcast; ``star``: learner sends to all (NoP2P); ``fixed``: constant."""
    t_bcast_s: float = 40.0
    """T_bcast for ``topology: fixed`` (also a late joiner's download time there)."""
    snapshot_gb: float = 8.0
    """G: snapshot size in gigabytes (1e9 bytes); 8 GB ≈ a 4B-parameter model in bf16."""
    learner_uplink_mbps: float = 10000.0
    """B0: the learner's uplink, megabits per second."""
    worker_link_mbps: float = 1000.0
    """Link speed of workers whose pool entry gives none, megabits per second."""
    hop_latency_s: float = 0.05
    """Per-hop latency added by the broadcast model."""
    generate_during_broadcast: bool = False
    """False (the capacity model's assumption): a worker generates nothing while it receives a snapshot.
    True: it keeps generating with its old version; only the buffer's staleness rule limits what counts."""


@dataclass(frozen=True)
class WorkerClass:
    gpu: str
    """GPU class label."""
    count: int
    """How many workers of this class."""
    rollouts_per_s: float
    """Mean μ_i of the class (rollouts per second)."""
    usd_per_hour: float
    """c_i of the class ($ per hour)."""
    rollouts_per_s_spread: float = 0.0
    """Per-worker μ_i drawn uniformly in μ·[1 − spread, 1 + spread] (spread < 1)."""
    uplink_mbps: float | None = None
    """Upload bandwidth, megabits per second (null: broadcast.worker_link_mbps)."""
    downlink_mbps: float | None = None
    """Download bandwidth, megabits per second (null: broadcast.worker_link_mbps)."""


@dataclass(frozen=True)
class PoolSpec:
    file: str | None = None
    """Pool file (YAML list of workers); relative to this config's folder."""
    synthetic: tuple[WorkerClass, ...] = ()
    """Generated workers, appended to the file's (for pools too large to list)."""
    activate: Literal["scheduler", "all"] = "scheduler"
    """``scheduler``: the closed-loop PoolScheduler decides; ``all``: every worker is active (sweeps)."""
    prompts_per_request: int = 1
    """Groups a worker generates per request (one completion event delivers this many groups)."""
    throughput_cv: float = 0.1
    """Worker noise: coefficient of variation of each request's duration (lognormal, mean kept)."""
    heartbeat_interval_s: float = 30.0
    """How often alive workers report their measured throughput (and the scheduler ticks)."""
    preempt_per_hour: float = 0.0
    """Preemption rate of each worker (Poisson, per hour); a preempted worker loses its request."""
    rejoin_after_s: float | None = None
    """A preempted worker registers again after this many seconds (null: never)."""
    join_per_hour: float = 0.0
    """Rate at which new workers (copies of random pool entries) join the pool (Poisson, per hour)."""
    activation_delay_s: float = 0.0
    """Seconds from activation until a worker starts its snapshot download (instance spin-up)."""


@dataclass(frozen=True)
class KneeSpec:
    staleness: tuple[int, ...] = (3, 6)
    """S values, one curve each (κ from each S)."""
    min_workers: int = 1
    """Smallest pool size of the sweep."""
    max_workers: int = 20
    """Largest pool size of the sweep."""
    gpu: str = "RTX5090"
    """GPU class of the identical workers."""
    rollouts_per_s: float = 0.5
    """μ of each worker (rollouts per second)."""
    usd_per_hour: float = 0.65
    """c of each worker ($ per hour)."""
    threshold: float = 0.02
    """The knee: the smallest N from which on the steady-state bubble ratio stays ≤ this."""


@dataclass(frozen=True)
class AblationSpec:
    variants: tuple[Literal["full", "nocost", "nop2p"], ...] = ("full", "nocost", "nop2p")
    """``full``: cost-aware + chain; ``nocost``: random activation + chain; ``nop2p``: cost-aware + star."""
    seeds: int = 3
    """Runs per variant (seeds seed, seed+1, ...); the table reports means."""


@dataclass(frozen=True)
class SimulateConfig:
    experiment: Literal["run", "knee", "ablation"] = "run"
    """``run``: one simulation; ``knee``: bubble vs pool size (fig. 3c); ``ablation``: full/NoCost/NoP2P (table 2)."""
    out_dir: str = "runs/simulate"
    """Where the JSON and PNG go."""
    seed: int = 0
    """Seed of every random draw."""
    learner: LearnerSpec = field(default_factory=LearnerSpec)
    """Learner model."""
    broadcast: BroadcastSpec = field(default_factory=BroadcastSpec)
    """Broadcast model."""
    pool: PoolSpec = field(default_factory=PoolSpec)
    """Worker pool, noise, preemptions and joins."""
    scheduler: SchedulerConfig = field(default_factory=SchedulerConfig)
    """The runtime's closed-loop scheduler settings."""
    prices: dict = field(default_factory=dict)
    """Price table: GPU class → $ per GPU-hour (learner GPUs; merged over prices_file)."""
    prices_file: str | None = None
    """Price table file (YAML); relative to this config's folder."""
    knee: KneeSpec = field(default_factory=KneeSpec)
    """Settings of ``experiment: knee``."""
    ablation: AblationSpec = field(default_factory=AblationSpec)
    """Settings of ``experiment: ablation``."""

    def __post_init__(self) -> None:
        L = self.learner
        if L.rollouts_per_step < 1 or L.samples_per_group < 1 or L.rollouts_per_step % L.samples_per_group:
            raise ConfigError(f"learner.rollouts_per_step={L.rollouts_per_step} must be a positive multiple of "
                              f"learner.samples_per_group={L.samples_per_group}")
        if L.steps < 1 or L.t_train_s <= 0 or L.num_gpus < 0:
            raise ConfigError(f"learner: steps ({L.steps}) ≥ 1, t_train_s ({L.t_train_s}) > 0, num_gpus ≥ 0 required")
        if self.pool.prompts_per_request < 1 or self.pool.heartbeat_interval_s <= 0:
            raise ConfigError("pool.prompts_per_request must be ≥ 1 and pool.heartbeat_interval_s > 0")
        for c in self.pool.synthetic:
            if c.count < 0 or not 0 <= c.rollouts_per_s_spread < 1:
                raise ConfigError(f"pool.synthetic {c.gpu}: count ≥ 0 and 0 ≤ rollouts_per_s_spread < 1 required")
        if not 1 <= self.knee.min_workers <= self.knee.max_workers:
            raise ConfigError(f"knee: need 1 ≤ min_workers ({self.knee.min_workers}) ≤ max_workers ({self.knee.max_workers})")
        parse_prices(self.prices, "prices")


def load_simulate_config(path: str | None, overrides: list[str] | tuple[str, ...] = ()) -> SimulateConfig:
    data = load_yaml(path) if path else {}
    apply_overrides(data, list(overrides))
    cfg = build_dataclass(SimulateConfig, data)
    base = Path(path).resolve().parent if path else Path.cwd()

    def resolve(p: str | None) -> str | None:
        if p is None or Path(p).is_absolute():
            return p
        return str(base / p)

    return dataclasses.replace(cfg, pool=dataclasses.replace(cfg.pool, file=resolve(cfg.pool.file)),
                               prices_file=resolve(cfg.prices_file))


def resolve_prices(cfg: SimulateConfig) -> dict[str, float]:
    prices = load_prices(cfg.prices_file) if cfg.prices_file else {}
    prices.update(parse_prices(cfg.prices))
    return prices


def build_offers(cfg: SimulateConfig) -> tuple[WorkerOffer, ...]:
    """The pool file's workers followed by the synthetic classes (μ_i spread drawn with ``cfg.seed``)."""
    offers = list(load_pool(cfg.pool.file)) if cfg.pool.file else []
    rng = random.Random(cfg.seed)
    for c in cfg.pool.synthetic:
        for i in range(c.count):
            mu = c.rollouts_per_s * (1 + c.rollouts_per_s_spread * (2 * rng.random() - 1))
            offers.append(WorkerOffer(f"{c.gpu}-{i:04d}", c.gpu, mu, c.usd_per_hour, c.uplink_mbps, c.downlink_mbps))
    names = [o.name for o in offers]
    if len(set(names)) != len(names):
        raise ConfigError("pool: worker names collide between pool.file and pool.synthetic (synthetic ones are GPU-0000...)")
    return tuple(offers)
