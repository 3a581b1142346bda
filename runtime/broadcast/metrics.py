"""Broadcast measurements: T_bcast at fraction q = 1/γ, time to all, the physical lower bound, CPU.

Times are CLOCK_MONOTONIC readings taken by the nodes themselves (system-wide on Linux, so the
host processes' clocks and the learner's agree), relative to the moment ``publish`` began — i.e.
they include serializing, hashing and signing the snapshot on the learner.
"""

from __future__ import annotations

import math
import os
import time
from dataclasses import dataclass

from echo2_sdk.runtime.broadcast.base import Faults


def fraction_time(install_times: list[float], live_workers: int, q: float) -> float | None:
    """Time by which ceil(q·live) workers had installed (None if fewer ever did)."""
    if live_workers <= 0:
        return None
    need = max(1, math.ceil(q * live_workers - 1e-9))
    ordered = sorted(install_times)
    return ordered[need - 1] if len(ordered) >= need else None


def lower_bound_s(size_bytes: int, uplink_mbps: float | None, worker_mbps: float | None, latency_ms: float) -> float:
    """max(G/B0, G/Bw) plus one hop of latency: no topology can deliver G to a worker faster."""
    rates = [r for r in (uplink_mbps, worker_mbps) if r is not None]
    transfer = size_bytes * 8 / (min(rates) * 1e6) if rates else 0.0
    return transfer + latency_ms / 1000.0


def model_s(cfg, plan, size_bytes: int, prepare_s: float) -> float | None:
    """What the design predicts: prepare + G/rate + pipeline fill (L-1)·c/rate + L·latency."""
    rate = plan.stripe_mbps
    if rate is None:
        return None
    bytes_per_s = rate * 1e6 / 8
    length = max(len(c) for c in plan.chains)
    fill = (length - 1) * plan.chunk_size / bytes_per_s
    return prepare_s + size_bytes / bytes_per_s + fill + length * cfg.latency_ms / 1000.0


def _proc_stat() -> tuple[int, int] | None:
    """(busy, total) jiffies of the whole machine, or None off Linux."""
    try:
        with open("/proc/stat") as f:
            values = [int(v) for v in f.readline().split()[1:]]
    except OSError:
        return None
    idle = values[3] + (values[4] if len(values) > 4 else 0)
    return sum(values) - idle, sum(values)


@dataclass
class CpuWindow:
    wall0: float
    cpu0: float
    stat0: tuple[int, int] | None

    @classmethod
    def start(cls) -> "CpuWindow":
        return cls(time.monotonic(), time.process_time(), _proc_stat())

    def finish(self, wall_end: float, host_stats: list[dict], hosts_in_process: bool = False) -> dict:
        """``hosts_in_process``: the nodes ran in this process, so its CPU time already counts them."""
        wall = max(1e-9, wall_end - self.wall0)
        learner = time.process_time() - self.cpu0
        hosts = 0.0 if hosts_in_process else sum(h.get("cpu_s_broadcast", 0.0) for h in host_stats)
        cores = os.cpu_count() or 1
        out = {
            "wall_s": round(wall, 3),
            "learner_cpu_s": round(learner, 3),
            "hosts_cpu_s": round(hosts, 3),
            "cpu_s": round(learner + hosts, 3),
            "cores_used": round((learner + hosts) / wall, 3),
            "machine_cores": cores,
            "share_of_machine": round((learner + hosts) / wall / cores, 3),
            "hosts": host_stats,
        }
        stat1 = _proc_stat()
        if self.stat0 and stat1 and stat1[1] > self.stat0[1]:
            # Everything the machine did (other users included): near 1.0 would mean CPU-bound figures.
            out["machine_busy_fraction"] = round((stat1[0] - self.stat0[0]) / (stat1[1] - self.stat0[1]), 3)
        return out


def summarize(cfg, record, coordinator, size_bytes: int, prepare_s: float, settled: bool, cpu: dict,
              source_bytes_out: int) -> dict:
    t0 = record.t_publish
    dead = coordinator.dead | {w for w, f in cfg.faults.items() if Faults(**f).expects_loss()}
    live = [w for w in record.assigned if w not in dead]
    per_worker = {}
    for w in record.assigned:
        detail = record.installed.get(w) or record.failed.get(w) or {}
        installed = w in record.installed
        per_worker[w] = {
            "installed": installed,
            "t_install_s": round(detail["t_installed"] - t0, 4) if installed else None,
            "t_assigned_s": round(record.assigned[w] - t0, 4),
            "dead": w in dead,
            **{k: detail.get(k) for k in ("repairs", "rejected_chunks", "refetched_chunks", "duplicate_chunks",
                                          "rejected_manifests", "bytes_in", "bytes_out", "late_s")},
            **({"failure": detail.get("reason")} if w in record.failed else {}),
            **({"sha256": detail["sha256"]} if "sha256" in detail else {}),
        }
    times = [p["t_install_s"] for w, p in per_worker.items() if p["installed"] and w in live]
    q = 1.0 / cfg.gamma
    t_bcast = fraction_time(times, len(live), q)
    t_all = max(times) if len(times) == len(live) and times else None
    uplink = cfg.effective_uplink()
    bound = lower_bound_s(size_bytes, uplink, cfg.worker_mbps, cfg.latency_ms)
    plan = record.plan
    return {
        "topology": cfg.topology,
        "workers": cfg.workers,
        "size_mb": cfg.size_mb,
        "size_bytes": size_bytes,
        "worker_mbps": cfg.worker_mbps,
        "uplink_mbps": uplink,
        "latency_ms": cfg.latency_ms,
        "gamma": cfg.gamma,
        "q": round(q, 4),
        "plan": plan.to_dict(),
        "t_prepare_s": round(prepare_s, 4),
        "t_bcast_s": None if t_bcast is None else round(t_bcast, 4),
        "t_all_s": None if t_all is None else round(t_all, 4),
        "lower_bound_s": round(bound, 4),
        "ratio": None if t_bcast is None or not bound else round(t_bcast / bound, 4),
        "ratio_all": None if t_all is None or not bound else round(t_all / bound, 4),
        "model_s": _round(model_s(cfg, plan, size_bytes, prepare_s)),
        "live_workers": len(live),
        "installed_workers": len(times),
        "settled": settled,
        "source_bytes_out": source_bytes_out,
        "repairs_total": sum(p["repairs"] or 0 for p in per_worker.values()),
        "rejected_chunks_total": sum(p["rejected_chunks"] or 0 for p in per_worker.values()),
        "refetched_chunks_total": sum(p["refetched_chunks"] or 0 for p in per_worker.values()),
        "install_times_s": {w: p["t_install_s"] for w, p in per_worker.items()},
        "per_worker": per_worker,
        "chains_final": [list(c) for c in record.topology.chains],
        "repair_events": record.repairs,
        "refetch_events": record.refetches,
        "cpu": cpu,
        "timer_lateness_s_mean": _round(_mean([p["late_s"] for p in per_worker.values() if p["late_s"] is not None])),
    }


def _mean(values: list[float]) -> float | None:
    return sum(values) / len(values) if values else None


def _round(x: float | None, digits: int = 4) -> float | None:
    return None if x is None else round(x, digits)
