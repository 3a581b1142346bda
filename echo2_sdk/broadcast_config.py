"""The ``broadcast`` section of the config: how snapshots reach the rollout workers (transport, topology,
emulated links, delta snapshots). Importable from ``echo2_sdk.config`` like every section."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from echo2_sdk.config_loader import ConfigError


@dataclass(frozen=True)
class BroadcastConfig:
    transport: Literal["p2p", "object_store"] = "p2p"
    """``p2p``: snapshots travel worker to worker over TCP (striped pipelined chains, signed and
    hash-checked chunks); ``object_store``: one ``ray.put`` that every worker pulls (single machine only)."""
    topology: Literal["chain", "star", "star-unlimited"] = "chain"
    """``chain``: stripes of the learner's uplink feed chains of workers that forward each chunk at once;
    ``star``: the learner sends to every worker itself (the NoP2P ablation); ``star-unlimited``: star
    without the uplink limit (the ideal reference)."""
    uplink_mbps: float | None = None
    """B0, the learner's uplink in Mbit/s; plans the stripes and is enforced by a token bucket (null: unshaped)."""
    worker_mbps: float | None = None
    """Bw, each worker's link in Mbit/s; plans the chains (and shapes worker links if ``emulate_links``)."""
    latency_ms: float = 0.0
    """Emulated one-way latency per hop, in milliseconds (0 on a real network)."""
    emulate_links: bool = False
    """Shape every worker's uplink and downlink at ``worker_mbps`` on loopback (single-machine experiments)."""
    chunk_kb: int | None = None
    """Chunk size in KiB (null: chosen from the link rates so that pipeline fill stays small)."""
    gamma: float = 1.1
    """T_bcast is the time until a fraction q = 1/γ of the active workers installed the snapshot."""
    bind_host: str | None = None
    """Address the learner and workers listen on (null: ``127.0.0.1`` on a Ray cluster this run started,
    ``0.0.0.0`` when it joined one with ``--ray-address`` / ``runtime.ray_address``, or the cluster has
    more than one node)."""
    advertise_host: str | None = None
    """Address workers dial to reach the learner (null: ``bind_host``, or this node's IP when binding 0.0.0.0;
    each worker advertises its own node's IP)."""
    port_range: tuple[int, int] | None = None
    """Ports the broadcast listens on, ``[first, last]`` inclusive: the learner's control server and
    source node take two (three with ``delta``: the full-snapshot node), every worker one (on its node);
    open them in the firewall. Null: the OS picks
    free ephemeral ports."""
    receive_timeout_s: float = 600.0
    """A worker gives up on a snapshot version it has not fully received after this long."""
    delta: bool | None = None
    """Publish only what changed: the XOR of the snapshot's bits against a version every worker holds,
    compressed, installed only if the result hashes to the full snapshot's SHA-256 (else that worker
    fetches the full one from the learner). Null (default): on where it pays — 16-bit snapshots
    (``model.dtype`` bfloat16/float16) of float32 masters, whose values mostly stay put at RL learning
    rates (measured: under 1 % of the bytes at lr 1e-6) — and off for float32 snapshots, where every
    value changes. A delta larger than ``delta_max_fraction`` is sent full anyway; ``transport:
    object_store`` always sends full snapshots. Costs the learner 3 snapshots of host memory, each
    worker 2 (its delta bases), and the learner one more port."""
    delta_max_fraction: float = 0.5
    """Send the full snapshot when the compressed delta is larger than this fraction of it (0 < f ≤ 1)."""
    delta_keyframe_every: int = 0
    """Send a full snapshot every K publishes (0: never; every install is hash-checked against the full
    snapshot, so errors cannot accumulate — keyframes only bound how long a worker that keeps failing
    deltas relies on the fallback fetch)."""
    delta_zstd_level: int = 3
    """zstd level of delta compression (1-22; higher: slower encode, little smaller at these densities)."""

    def __post_init__(self) -> None:
        if not 0 < self.delta_max_fraction <= 1:
            raise ConfigError(f"broadcast.delta_max_fraction={self.delta_max_fraction} must be in (0, 1]; "
                              "e.g. 0.5 sends a full snapshot when the delta is over half its size")
        if self.delta_keyframe_every < 0:
            raise ConfigError(f"broadcast.delta_keyframe_every={self.delta_keyframe_every} must be ≥ 0 "
                              "(0: no periodic full snapshots)")
        if not 1 <= self.delta_zstd_level <= 22:
            raise ConfigError(f"broadcast.delta_zstd_level={self.delta_zstd_level} must be in 1..22; 3 is the default")
        if self.port_range is not None and not 0 < self.port_range[0] <= self.port_range[1] < 65536:
            raise ConfigError(f"broadcast.port_range={list(self.port_range)} must be [first, last] with "
                              "0 < first ≤ last < 65536, e.g. [47000, 47099]; or null for ports the OS picks")
        if self.gamma < 1.0:
            raise ConfigError(f"broadcast.gamma={self.gamma} must be ≥ 1 (q = 1/γ is a fraction of workers); the paper uses 1.1")
        for name in ("uplink_mbps", "worker_mbps"):
            value = getattr(self, name)
            if value is not None and value <= 0:
                raise ConfigError(f"broadcast.{name}={value} must be > 0 Mbit/s, or null for an unshaped link")

