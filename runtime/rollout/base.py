"""Contracts of the rollout plane: what a worker returns to the driver."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class GenerationResult:
    """What one ``generate`` call returns to the driver."""

    worker: str
    groups: list[dict]
    """Rollout groups in the wire format of ``echo2_sdk.records.group_to_wire``."""
    version: int
    num_tokens: int
    t_generate_s: float
    t_reward_s: float
    t_throttle_s: float
    reward_status: dict[str, int] = field(default_factory=dict)
    installed: dict[int, float] = field(default_factory=dict)
    """Versions installed since the last call → wall time (time.time()) of the install."""
    node: str = ""
    """Where it was generated: the Ray node id of the worker's actor (the hostname outside Ray)."""
