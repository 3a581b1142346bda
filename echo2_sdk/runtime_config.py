"""The ``runtime`` config section: async or sync, the staleness bound S and κ, admission control, where the
learner runs.

Kept apart from ``config.py`` (which re-exports every name here) to keep each module small.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Literal

from echo2_sdk.config_loader import ConfigError
from echo2_sdk.rollout_config import check_resources_map


@dataclass(frozen=True)
class RuntimeConfig:
    mode: Literal["async", "sync"] = "async"
    """``async``: bounded-staleness ECHO-2 runtime; ``sync``: generate → train → generate baseline."""
    staleness: int = 3
    """S: the buffer admits groups of version v ≥ v_t − S."""
    kappa: int | None = None
    """κ: publish a snapshot every κ learner steps (default S − 1, at least 2, at most S)."""
    admission_control: bool = True
    """Async mode: send a worker a request only if its groups can still be admissible (v ≥ v_t − S) when
    the learner reaches them, from the queue ahead and the measured rates (``runtime/admission/dispatch.py``);
    a worker idles instead of generating samples that would be dropped as stale. False: keep every worker
    busy and drop stale groups on arrival (the behaviour of TRL, prime-rl and verl)."""
    admission_margin_devs: float = 0.0
    """The least admission control leans toward holding a request back, in mean deviations of each worker's
    request time: the worker asking is expected back that much later and the others that much faster (at most
    twice their mean rate). 0: the mean times alone until a stale drop raises the margin (next field)."""
    admission_margin_max_devs: float = 3.0
    """How far the margin may rise: each reply after which the run had dropped samples as stale raises it by 1,
    each reply without lowers it by 0.01 (``runtime/admission/dispatch.py``, ``adapt_margin``). A run whose
    estimates hold keeps the means (the quickstart alone, poker and MOBA never raised it); a busy machine's
    uneven request times raise it (the quickstart beside a second job dropped 3.3-3.9 % at 0, 1.0-1.1 % so).
    Set at or below ``admission_margin_devs``, the margin stays fixed at that floor."""
    buffer_order: Literal["oldest", "freshest", "mixed"] = "oldest"
    """Which admissible groups a learner step takes: ``oldest`` version first (nothing ages out while younger
    groups are trained: least waste, staleness near the queue's length), ``freshest`` first (lowest
    staleness; older groups age out and are dropped when the queue runs long), ``mixed`` (half of each)."""
    ray_address: str | None = None
    """Join an existing Ray cluster (``auto`` or ``host:port``); null starts a local one, even when another
    Ray cluster runs on this machine (Ray's own default would join the newest)."""
    ray_num_cpus: int | None = None
    """Logical CPUs of the local Ray cluster (null: Ray's default)."""
    learner_threads: int = 1
    """torch threads of the learner."""
    device: str = "auto"
    """Learner device: ``auto`` (cuda if available, else cpu), ``cpu`` or ``cuda``."""
    require_gpus: int = 0
    """Refuse to start unless this many GPUs are visible (large-model configs set it). With a Ray
    address and no ``learner_resources``, the learner is placed on a cluster node that has them."""
    learner_resources: dict[str, float] = field(default_factory=dict)
    """Ray custom resources of the learner, e.g. ``{learner: 1}`` for the node started with
    ``ray start --resources='{"learner": 1}'``. Set (or a Ray address with ``require_gpus`` > 0), the
    training driver runs as a Ray actor placed there (with ``require_gpus`` GPUs) and ``echo2 train``
    streams its log; the run directory is then written on that node. Empty: the learner runs in the
    ``echo2 train`` process."""
    poll_interval_s: float = 0.01
    """How often the driver collects finished rollouts."""

    def __post_init__(self) -> None:
        check_resources_map(self.learner_resources, "runtime.learner_resources")
        for name in ("admission_margin_devs", "admission_margin_max_devs"):
            value = getattr(self, name)
            if not (value >= 0 and math.isfinite(value)):
                raise ConfigError(f"runtime.{name}={value} must be a finite number >= 0 "
                                  "(deviations of request time, e.g. 2.0; 0: the means alone)")


def resolve_kappa(staleness: int, kappa: int | None) -> int:
    """κ from S: default S − 1 (but at least 2); an explicit κ must satisfy 2 ≤ κ ≤ S.

    Raises ConfigError naming the quantity to change when no valid κ exists.
    """
    if staleness < 2:
        raise ConfigError(
            f"runtime.staleness={staleness}: the async runtime needs S ≥ 2 (κ ≥ 2 and κ ≤ S); "
            "raise runtime.staleness or use runtime.mode=sync"
        )
    if kappa is None:
        return max(2, staleness - 1)
    if not 2 <= kappa <= staleness:
        raise ConfigError(
            f"runtime.kappa={kappa} must satisfy 2 ≤ κ ≤ S={staleness}; "
            f"drop it to use the default κ = S − 1 = {max(2, staleness - 1)}"
        )
    return kappa
