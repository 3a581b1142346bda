"""One measured broadcast on loopback: learner node + control server here, worker nodes in hosts.

``run_broadcast(BroadcastConfig)`` builds a policy-like state dict of G MiB, starts the control
server and the learner's source node in this process, starts the worker nodes (in ``hosts`` spawned
processes, or as tasks of this event loop with ``hosts=0``), then publishes: serialize → manifest →
sign → seed the source → tell every worker its parent. It waits until every live worker installed
(or gave up) and returns the measurements (see ``metrics.summarize``).
"""

from __future__ import annotations

import asyncio
import math
import os
import time
from dataclasses import asdict, dataclass, field

import torch

from echo2_sdk.runtime.broadcast.control import Coordinator
from echo2_sdk.runtime.broadcast.control_channel import ControlServer
from echo2_sdk.runtime.broadcast.credentials import RunSecret
from echo2_sdk.runtime.broadcast.host import run_host, spawn_host_process
from echo2_sdk.runtime.broadcast.manifest import build_manifest, new_signing_key, public_key_bytes, sign_manifest
from echo2_sdk.runtime.broadcast.metrics import CpuWindow, summarize
from echo2_sdk.runtime.broadcast.base import Faults
from echo2_sdk.runtime.broadcast.node import BroadcastNode
from echo2_sdk.runtime.broadcast.shaping import LinkProfile
from echo2_sdk.runtime.broadcast.snapshot import state_dict_to_bytes
from echo2_sdk.runtime.broadcast.topology import SOURCE, TOPOLOGIES, plan_broadcast

MIB = 1 << 20


@dataclass
class BroadcastConfig:
    workers: int
    size_mb: float
    """Snapshot size G in MiB (2**20 bytes), as the safetensors body."""
    topology: str = "chain"
    worker_mbps: float | None = 100.0
    """Each worker's link Bw, both directions (Mb/s = 1e6 bit/s); None = unshaped."""
    uplink_mbps: float | None = 400.0
    """The learner's uplink B0; ignored (unshaped) for star-unlimited."""
    latency_ms: float = 0.0
    chunk_kb: int | None = None
    slice_kb: int = 128
    """Granularity of shaping and socket writes/reads (≤ chunk size is pointless; larger = fewer events)."""
    stripes: int | None = None
    gamma: float = 1.1
    hosts: int | None = None
    """Worker host processes; None = min(N, CPU cores); 0 = nodes run in this process's event loop."""
    install: str = "views"
    verify_whole: bool = False
    """Workers also re-hash the whole snapshot (redundant with the signed chunk hashes, see transfer.py);
    off by default here because N emulated workers would pay it N times on the same two cores."""
    prefault: bool = True
    """Hosts map each node's receive buffer before publish (see transfer.PrefaultedBuffers)."""
    report_digest: bool = False
    """Each worker reports the SHA-256 of its final bytes (tests compare it with the manifest)."""
    stall_timeout_s: float = 3.0
    timeout_s: float | None = None
    version: int = 1
    seed: int = 0
    faults: dict[str, dict] = field(default_factory=dict)
    """Worker id → Faults kwargs (e.g. {"w2": {"crash_at_fraction": 0.5}})."""
    late_joiners: dict[str, float] = field(default_factory=dict)
    """Worker id → seconds after publish at which it joins (it is not in the initial plan)."""
    forge_manifest: bool = False
    """Sign with a key the workers do not trust (they must refuse the snapshot)."""
    payload: bytes | None = None
    """Broadcast these bytes (e.g. a delta snapshot) instead of a generated state dict of ``size_mb``
    (keep ``size_mb`` about their size: it sizes the pre-faulted buffers and the timeout)."""
    metadata: dict = field(default_factory=dict)
    """Extra signed manifest metadata (a delta's ``DeltaSpec.to_metadata()``)."""

    def __post_init__(self) -> None:
        if self.topology not in TOPOLOGIES:
            raise ValueError(f"topology={self.topology!r}; choose one of {', '.join(TOPOLOGIES)}")
        if self.workers < 1:
            raise ValueError(f"workers={self.workers}; need at least 1")
        if self.size_mb <= 0:
            raise ValueError(f"size_mb={self.size_mb} must be > 0")
        if self.gamma < 1:
            raise ValueError(f"gamma={self.gamma} must be ≥ 1 (q = 1/gamma of the workers)")

    def worker_ids(self) -> list[str]:
        return [f"w{i}" for i in range(self.workers)]

    def effective_uplink(self) -> float | None:
        return None if self.topology == "star-unlimited" else self.uplink_mbps


def make_state_dict(size_bytes: int, seed: int = 0, tensors: int = 16) -> dict[str, torch.Tensor]:
    """float32 'layers' totalling ``size_bytes`` (rounded down to whole floats)."""
    generator = torch.Generator().manual_seed(seed)
    numel = max(1, size_bytes // 4)
    per, sd = numel // tensors, {}
    for i in range(tensors):
        count = per if i < tensors - 1 else numel - per * (tensors - 1)
        if count > 0:
            sd[f"layers.{i}.weight"] = torch.randn(count, generator=generator)
    return sd


def run_broadcast(config: BroadcastConfig) -> dict:
    return asyncio.run(_run(config))


async def _run(cfg: BroadcastConfig) -> dict:
    signing_key = new_signing_key()
    trusted = new_signing_key() if cfg.forge_manifest else signing_key
    public = public_key_bytes(trusted.public_key())
    secret = RunSecret.generate()
    source = BroadcastNode(
        SOURCE, link=LinkProfile(uplink_mbps=cfg.effective_uplink(), latency_ms=cfg.latency_ms),
        public_key=trusted.public_key(), node_key=secret.node_key(SOURCE), control=None, stall_timeout_s=cfg.stall_timeout_s, slice_bytes=cfg.slice_kb * 1024,
    )
    coordinator = Coordinator(await source.start(), secret)
    server = ControlServer(coordinator)
    control_addr = await server.start()

    all_ids = cfg.worker_ids() + [w for w in cfg.late_joiners if w not in cfg.worker_ids()]
    specs = [
        {"id": w, "key": secret.node_key(w).hex(), "link": asdict(LinkProfile.symmetric(cfg.worker_mbps, cfg.latency_ms)), "faults": cfg.faults.get(w, {})}
        for w in all_ids
    ]
    options = {"install": cfg.install, "stall_timeout_s": cfg.stall_timeout_s, "verify_whole": cfg.verify_whole,
               "slice_bytes": cfg.slice_kb * 1024,
               "prefault_bytes": int(cfg.size_mb * MIB) + MIB if cfg.prefault else 0,
               "report_digest": cfg.report_digest}
    n_hosts = min(len(all_ids), os.cpu_count() or 1) if cfg.hosts is None else cfg.hosts
    processes, local_hosts = [], []
    if n_hosts == 0:
        local_hosts = [asyncio.ensure_future(run_host(control_addr, "local", specs, public, **options))]
    else:
        for h in range(n_hosts):
            group = specs[h::n_hosts]  # interleave so chain neighbours live in different processes
            processes.append(spawn_host_process(control_addr, f"host{h}", group, public, options))
    try:
        await _wait_registered(coordinator, all_ids, timeout_s=120.0)
        state_dict = make_state_dict(int(cfg.size_mb * MIB), cfg.seed) if cfg.payload is None else {}
        cpu = CpuWindow.start()
        t_publish = time.monotonic()
        data = state_dict_to_bytes(state_dict) if cfg.payload is None else cfg.payload
        plan = plan_broadcast(
            cfg.worker_ids(), len(data), cfg.topology, uplink_mbps=cfg.effective_uplink(),
            worker_mbps=cfg.worker_mbps, chunk_size=cfg.chunk_kb * 1024 if cfg.chunk_kb else None, stripes=cfg.stripes,
        )
        manifest = build_manifest(data, cfg.version, plan.chunk_size, {"tensors": len(state_dict), **cfg.metadata},
                                  public_key=signing_key.public_key())
        source.seed(manifest, sign_manifest(manifest, signing_key), data)
        t_prepared = time.monotonic()
        record = coordinator.start(cfg.version, plan, t_publish)
        joins = [asyncio.ensure_future(_join_later(coordinator, cfg.version, w, t_publish + at))
                 for w, at in cfg.late_joiners.items()]
        expected_dead = {w for w, f in cfg.faults.items() if Faults(**f).expects_loss()}
        settled = await coordinator.wait_settled(cfg.version, cfg.timeout_s or _default_timeout(cfg, len(data)), expected_dead)
        await asyncio.gather(*joins)
        if cfg.late_joiners:
            settled = await coordinator.wait_settled(cfg.version, cfg.timeout_s or _default_timeout(cfg, len(data)), expected_dead)
        t_end = time.monotonic()
        host_stats = await _stop_hosts(coordinator, server, processes, local_hosts)
        cpu_summary = cpu.finish(t_end, host_stats, hosts_in_process=bool(local_hosts))
        result = summarize(cfg, record, coordinator, len(data), t_prepared - t_publish, settled, cpu_summary,
                           source_bytes_out=source.transfers[cfg.version].stats.bytes_out)
        result["manifest_sha256"] = manifest.sha256
        return result
    finally:
        for proc in processes:
            if proc.poll() is None:
                proc.kill()
            proc.wait(timeout=10)
        await source.close()
        await server.close()


async def _wait_registered(coordinator: Coordinator, ids: list[str], timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while not all(w in coordinator.peers for w in ids):
        if time.monotonic() > deadline:
            missing = [w for w in ids if w not in coordinator.peers]
            raise TimeoutError(f"workers {missing[:8]} did not register within {timeout_s:.0f} s; a host process failed to start")
        await asyncio.sleep(0.05)


async def _join_later(coordinator: Coordinator, version: int, node: str, at: float) -> None:
    await asyncio.sleep(max(0.0, at - time.monotonic()))
    coordinator.join(version, node)


async def _stop_hosts(coordinator, server: ControlServer, processes, local_hosts) -> list[dict]:
    coordinator.tell_all_hosts({"op": "stop"})
    if local_hosts:
        return list(await asyncio.gather(*local_hosts))
    deadline = time.monotonic() + 15
    while len(server.host_stats) < sum(p.poll() is None for p in processes) and time.monotonic() < deadline:
        await asyncio.sleep(0.05)
    while any(p.poll() is None for p in processes) and time.monotonic() < deadline:
        await asyncio.sleep(0.05)
    return list(server.host_stats.values())


def _default_timeout(cfg: BroadcastConfig, size_bytes: int) -> float:
    """Generous: the star time N·G/B0 (or G/Bw) times 3, plus a minute for slow machines."""
    rates = [r for r in (cfg.worker_mbps, cfg.effective_uplink() and cfg.effective_uplink() / cfg.workers) if r]
    slowest = min(rates) if rates else 10_000.0
    return 3 * size_bytes * 8 / (slowest * 1e6) + 60 + cfg.stall_timeout_s * 4 * math.log2(cfg.workers + 1)
