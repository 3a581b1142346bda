"""Worker offers and the pool file: a YAML list of workers a run may rent.

Each entry is a mapping::

    - {name: w4090-01, gpu: RTX4090, rollouts_per_s: 0.25, usd_per_hour: 0.35, uplink_mbps: 500, downlink_mbps: 1000}

``rollouts_per_s`` is μ_i (what the worker is expected to deliver; the scheduler replaces it with
measurements), ``usd_per_hour`` is c_i. Keys are checked like the run config: a typo names the
closest valid key.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Sequence


from echo2_sdk.config_loader import ConfigError, build_dataclass, read_yaml_file


@dataclass(frozen=True)
class WorkerOffer:
    name: str
    """Unique worker name (shown in plans, decisions and metrics)."""
    gpu: str
    """GPU class label, e.g. ``RTX5090`` (a key of the price table when dollars are accounted per class)."""
    rollouts_per_s: float
    """μ_i: rollouts per second the worker delivers (0 = not capable; never activated)."""
    usd_per_hour: float
    """c_i: what renting the worker costs, US dollars per hour."""
    uplink_mbps: float | None = None
    """Upload bandwidth in megabits per second (None: the simulator's default link speed)."""
    downlink_mbps: float | None = None
    """Download bandwidth in megabits per second (None: the simulator's default link speed)."""

    def __post_init__(self) -> None:
        if not self.name:
            raise ConfigError("worker name must be a non-empty string")
        if not (self.rollouts_per_s >= 0 and math.isfinite(self.rollouts_per_s)):
            raise ConfigError(
                f"worker {self.name!r}: rollouts_per_s={self.rollouts_per_s!r} must be a finite number ≥ 0"
            )
        if not (self.usd_per_hour >= 0 and math.isfinite(self.usd_per_hour)):
            raise ConfigError(
                f"worker {self.name!r}: usd_per_hour={self.usd_per_hour!r} must be a finite number ≥ 0"
            )
        for key in ("uplink_mbps", "downlink_mbps"):
            value = getattr(self, key)
            if value is not None and not value > 0:
                raise ConfigError(f"worker {self.name!r}: {key}={value!r} must be > 0 (or omitted)")


def parse_pool(entries: Any, source: str = "pool") -> tuple[WorkerOffer, ...]:
    """Offers from an already-loaded YAML value (a list of mappings); names must be unique."""
    if not isinstance(entries, (list, tuple)):
        raise ConfigError(
            f"{source}: a pool file holds a YAML list of workers (- {{name: ..., gpu: ..., "
            f"rollouts_per_s: ..., usd_per_hour: ...}}), got {type(entries).__name__}"
        )
    offers = tuple(build_dataclass(WorkerOffer, e, path=f"{source}[{i}]") for i, e in enumerate(entries))
    seen: dict[str, int] = {}
    for i, offer in enumerate(offers):
        if offer.name in seen:
            raise ConfigError(
                f"{source}[{i}]: worker name {offer.name!r} repeats entry {seen[offer.name]}; names must be unique"
            )
        seen[offer.name] = i
    return offers


def load_pool(path: str) -> tuple[WorkerOffer, ...]:
    """Read and validate a pool file."""
    data = read_yaml_file(path, "pool file", "examples/pools/mixed.yaml")
    return parse_pool(data if data is not None else [], source=path)


def pool_to_yaml(offers: Sequence[WorkerOffer]) -> str:
    """A pool file's text (one flow mapping per worker), the inverse of :func:`parse_pool`."""
    lines = []
    for o in offers:
        fields = [f"name: {o.name}", f"gpu: {o.gpu}", f"rollouts_per_s: {o.rollouts_per_s:g}",
                  f"usd_per_hour: {o.usd_per_hour:g}"]
        if o.uplink_mbps is not None:
            fields.append(f"uplink_mbps: {o.uplink_mbps:g}")
        if o.downlink_mbps is not None:
            fields.append(f"downlink_mbps: {o.downlink_mbps:g}")
        lines.append("- {" + ", ".join(fields) + "}")
    return "\n".join(lines) + "\n"
