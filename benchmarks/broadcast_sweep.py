"""T_bcast against N for chain / star / star-unlimited (ECHO-2 figure-4 style), on loopback.

    python benchmarks/broadcast_sweep.py --out runs/bcast --workers 4,8,16,32 --size-mb 64 \
        --worker-mbps 100 --uplink-mbps 400

Writes OUT/broadcast_sweep.json (one row per run plus the acceptance summary) and
OUT/broadcast_sweep.png, and prints the table. Each run is a real ``run_broadcast``: worker nodes in
host processes exchanging real, hashed bytes over shaped loopback TCP.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np

from echo2_sdk.runtime.broadcast.cli import _mbps
from echo2_sdk.runtime.broadcast.session import BroadcastConfig, run_broadcast
from echo2_sdk.runtime.broadcast.topology import TOPOLOGIES

ROW_KEYS = ("topology", "workers", "t_bcast_s", "t_all_s", "lower_bound_s", "ratio", "model_s", "t_prepare_s",
            "installed_workers", "live_workers")


def sweep(args: argparse.Namespace) -> dict:
    rows = []
    for n in args.workers:
        for topology in args.topologies:
            for repeat in range(args.repeats):
                config = BroadcastConfig(
                    workers=n, size_mb=args.size_mb, topology=topology, worker_mbps=args.worker_mbps,
                    uplink_mbps=args.uplink_mbps, latency_ms=args.latency_ms, gamma=args.gamma, hosts=args.hosts,
                    verify_whole=args.verify_whole, chunk_kb=args.chunk_kb,
                )
                result = run_broadcast(config)
                row = {k: result[k] for k in ROW_KEYS}
                row.update(
                    repeat=repeat, stripes=result["plan"]["stripes"], chunk_kb=result["plan"]["chunk_size"] // 1024,
                    cores_used=result["cpu"]["cores_used"], cpu_s=result["cpu"]["cpu_s"],
                    machine_busy=result["cpu"].get("machine_busy_fraction"),
                    timer_lateness_s=result["timer_lateness_s_mean"],
                    install_times_s=sorted(t for t in result["install_times_s"].values() if t is not None),
                )
                rows.append(row)
                print(_format_row(row), flush=True)
    return {"config": vars(args) | {"out": str(args.out)}, "rows": rows, "acceptance": acceptance(rows, args)}


def _median(rows: list[dict], topology: str, n: int, key: str = "t_bcast_s") -> float | None:
    values = [r[key] for r in rows if r["topology"] == topology and r["workers"] == n and r[key] is not None]
    return float(np.median(values)) if values else None


def acceptance(rows: list[dict], args: argparse.Namespace) -> dict:
    ns = sorted({r["workers"] for r in rows})
    out: dict = {}
    chain = {n: _median(rows, "chain", n, "ratio") for n in ns}
    if any(v is not None for v in chain.values()):
        out["chain_ratio_by_n"] = chain
        out["chain_ratio_max"] = max(v for v in chain.values() if v is not None)
        t_lo, t_hi = _median(rows, "chain", ns[0]), _median(rows, "chain", ns[-1])
        if t_lo and t_hi:
            out[f"chain_t_bcast_{ns[-1]}_over_{ns[0]}"] = round(t_hi / t_lo, 4)
    star = [(n, _median(rows, "star", n)) for n in ns]
    bw, b0 = args.worker_mbps, args.uplink_mbps
    congested = [(n, t) for n, t in star if t is not None and (bw is None or b0 is None or n * bw > b0)]
    if len(congested) >= 2:
        slope, intercept = np.polyfit([n for n, _ in congested], [t for _, t in congested], 1)
        out["star_slope_s_per_worker"] = round(float(slope), 4)
        out["star_intercept_s"] = round(float(intercept), 4)
        g_bits = args.size_mb * (1 << 20) * 8
        if b0:
            out["star_slope_expected_s_per_worker"] = round(g_bits / (b0 * 1e6), 4)  # G/B0
    floor = {n: _median(rows, "star-unlimited", n) for n in ns}
    if any(v is not None for v in floor.values()):
        out["star_unlimited_t_bcast_by_n"] = floor
    return out


def _format_row(r: dict) -> str:
    return (f"{r['topology']:>15} N={r['workers']:>3}  T_bcast={r['t_bcast_s']!s:>8} s  T_all={r['t_all_s']!s:>8} s  "
            f"bound={r['lower_bound_s']:.3f} s  ratio={r['ratio']!s:>7}  stripes={r['stripes']:>2}  "
            f"chunk={r['chunk_kb']} KiB  CPU={r['cores_used']:.2f} cores  machine busy={r['machine_busy']}")


def plot(result: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = result["rows"]
    ns = sorted({r["workers"] for r in rows})
    fig, ax = plt.subplots(figsize=(6.4, 4.2))
    styles = {"chain": ("o-", "ECHO-2 striped chains"), "star": ("s--", "star (NoP2P)"),
              "star-unlimited": ("^:", "star, unlimited uplink")}
    for topology in TOPOLOGIES:
        points = [(n, _median(rows, topology, n)) for n in ns]
        points = [(n, t) for n, t in points if t is not None]
        if points:
            marker, label = styles[topology]
            ax.plot([n for n, _ in points], [t for _, t in points], marker, label=label)
    bounds = [_median(rows, rows[0]["topology"], n, "lower_bound_s") for n in ns]
    ax.plot(ns, bounds, "k-", lw=0.8, alpha=0.6, label="max(G/B0, G/Bw)")
    cfg = result["config"]
    ax.set_xlabel("workers N")
    ax.set_ylabel(f"T_bcast (s), q = 1/{cfg['gamma']}")
    ax.set_title(f"G = {cfg['size_mb']:g} MiB, Bw = {cfg['worker_mbps']} Mb/s, B0 = {cfg['uplink_mbps']} Mb/s")
    ax.set_xticks(ns)
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--workers", type=lambda s: [int(x) for x in s.split(",")], default=[4, 8, 16, 32])
    p.add_argument("--topologies", type=lambda s: s.split(","), default=list(TOPOLOGIES))
    p.add_argument("--size-mb", type=float, default=64)
    p.add_argument("--worker-mbps", type=_mbps, default=100.0)
    p.add_argument("--uplink-mbps", type=_mbps, default=400.0)
    p.add_argument("--latency-ms", type=float, default=0.0)
    p.add_argument("--chunk-kb", type=int, default=None)
    p.add_argument("--gamma", type=float, default=1.1)
    p.add_argument("--hosts", type=int, default=None)
    p.add_argument("--repeats", type=int, default=1)
    p.add_argument("--verify-whole", action="store_true")
    args = p.parse_args(argv)
    unknown = set(args.topologies) - set(TOPOLOGIES)
    if unknown:
        p.error(f"unknown topologies {sorted(unknown)}; choose from {', '.join(TOPOLOGIES)}")
    args.out.mkdir(parents=True, exist_ok=True)
    t0 = time.monotonic()
    result = sweep(args)
    result["sweep_wall_s"] = round(time.monotonic() - t0, 1)
    (args.out / "broadcast_sweep.json").write_text(json.dumps(result, indent=2))
    plot(result, args.out / "broadcast_sweep.png")
    print(json.dumps(result["acceptance"], indent=2))
    print(f"wrote {args.out / 'broadcast_sweep.json'} and {args.out / 'broadcast_sweep.png'}")


if __name__ == "__main__":
    main()
