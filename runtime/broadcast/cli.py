"""``echo2 bench broadcast``: one measured snapshot broadcast on loopback.

Wire it into the main CLI with ``add_bench_broadcast_parser(bench_subparsers)``; the parser's
``func`` default runs it. Standalone: ``python -m echo2_sdk.runtime.broadcast.cli --workers 8 ...``.
"""

from __future__ import annotations

import argparse
import json
import sys

from echo2_sdk.runtime.broadcast.topology import TOPOLOGIES  # light: the parser must not import torch


def _mbps(text: str) -> float | None:
    """A rate in Mb/s; 'none' or 0 means unshaped."""
    if text.lower() in ("none", "inf", "0"):
        return None
    value = float(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"rate {text} Mb/s must be ≥ 0 (0 or 'none' = unshaped)")
    return value


def _fault(text: str) -> tuple[str, float]:
    worker, _, fraction = text.partition("@")
    try:
        value = float(fraction)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: expected WORKER@FRACTION, e.g. w5@0.5") from None
    if not worker or not 0 <= value <= 1:
        raise argparse.ArgumentTypeError(f"{text!r}: expected WORKER@FRACTION with 0 ≤ FRACTION ≤ 1, e.g. w5@0.5")
    return worker, value


def _join(text: str) -> tuple[str, float]:
    worker, _, at = text.partition("@")
    try:
        return worker, float(at)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: expected WORKER@SECONDS, e.g. w32@2.0") from None


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--workers", type=int, required=True, metavar="N", help="number of rollout workers")
    p.add_argument("--size-mb", type=float, required=True, metavar="G", help="snapshot size in MiB")
    p.add_argument("--worker-mbps", type=_mbps, default=100.0, metavar="Bw", help="each worker's link, Mb/s (none = unshaped)")
    p.add_argument("--uplink-mbps", type=_mbps, default=400.0, metavar="B0", help="the learner's uplink, Mb/s")
    p.add_argument("--topology", choices=TOPOLOGIES, default="chain")
    p.add_argument("--chunk-kb", type=int, default=None, help="chunk size in KiB (default: planned from G, N, B0, Bw)")
    p.add_argument("--stripes", type=int, default=None, help="chains for --topology chain (default floor(B0/Bw))")
    p.add_argument("--latency-ms", type=float, default=0.0, help="one-way latency per hop")
    p.add_argument("--gamma", type=float, default=1.1, help="T_bcast is the time until 1/gamma of the workers installed")
    p.add_argument("--hosts", type=int, default=None,
                   help="worker host processes (default min(N, CPU cores); 0 = all nodes in this process)")
    p.add_argument("--install", choices=("views", "copy", "none"), default="views")
    p.add_argument("--verify-whole", action="store_true",
                   help="workers also re-hash the whole snapshot (doubles hashing CPU; see transfer.py)")
    p.add_argument("--no-prefault", action="store_true", help="let receive buffers fault in during the transfer")
    p.add_argument("--kill", type=_fault, action="append", default=[], metavar="W@F",
                   help="crash worker W once it has fraction F of the chunks (repeatable)")
    p.add_argument("--stall", type=_fault, action="append", default=[], metavar="W@F",
                   help="worker W stops forwarding (sockets open) after sending fraction F of the chunks")
    p.add_argument("--corrupt", action="append", default=[], metavar="W:I",
                   help="worker W flips a byte of chunk I when it forwards it")
    p.add_argument("--join", type=_join, action="append", default=[], metavar="W@S",
                   help="worker W (a new id) joins S seconds after publish")
    p.add_argument("--forge-manifest", action="store_true",
                   help="sign with a key the workers do not trust (every worker must refuse)")
    p.add_argument("--stall-timeout-s", type=float, default=3.0, help="silence after which a parent is replaced")
    p.add_argument("--json", action="store_true", help="print the full result as JSON")


def config_from_args(args: argparse.Namespace):
    """The ``BroadcastConfig`` the arguments describe."""
    from echo2_sdk.runtime.broadcast.session import BroadcastConfig

    faults: dict[str, dict] = {}
    for worker, fraction in args.kill:
        faults.setdefault(worker, {})["crash_at_fraction"] = fraction
    for worker, fraction in args.stall:
        faults.setdefault(worker, {})["stall_at_fraction"] = fraction
    for spec in args.corrupt:
        worker, _, index = spec.partition(":")
        faults.setdefault(worker, {}).setdefault("corrupt_chunks", []).append(int(index))
    return BroadcastConfig(
        workers=args.workers, size_mb=args.size_mb, topology=args.topology, worker_mbps=args.worker_mbps,
        uplink_mbps=args.uplink_mbps, latency_ms=args.latency_ms, chunk_kb=args.chunk_kb, stripes=args.stripes,
        gamma=args.gamma, hosts=args.hosts, install=args.install, verify_whole=args.verify_whole,
        prefault=not args.no_prefault, faults=faults, late_joiners=dict(args.join),
        stall_timeout_s=args.stall_timeout_s, forge_manifest=args.forge_manifest,
    )


def format_summary(r: dict) -> str:
    plan, cpu = r["plan"], r["cpu"]
    lines = [
        f"{r['topology']}: N={r['workers']} G={r['size_mb']} MiB Bw={r['worker_mbps']} B0={r['uplink_mbps']} Mb/s "
        f"latency={r['latency_ms']} ms — {plan['stripes']} stripe(s), chain length {plan['chain_length']}, "
        f"chunk {plan['chunk_size'] // 1024} KiB",
        f"  T_bcast(q={r['q']}) = {r['t_bcast_s']} s   T_all = {r['t_all_s']} s   lower bound = {r['lower_bound_s']} s   "
        f"ratio = {r['ratio']}   model = {r['model_s']} s   prepare = {r['t_prepare_s']} s",
        f"  installed {r['installed_workers']}/{r['live_workers']} live workers; repairs {r['repairs_total']}, "
        f"rejected chunks {r['rejected_chunks_total']}, re-fetched {r['refetched_chunks_total']}",
        f"  CPU {cpu['cpu_s']} s over {cpu['wall_s']} s wall = {cpu['cores_used']} of {cpu['machine_cores']} cores"
        + (f" (whole machine busy {cpu['machine_busy_fraction']:.0%})" if "machine_busy_fraction" in cpu else ""),
    ]
    return "\n".join(lines)


def run_from_args(args: argparse.Namespace) -> int:
    from echo2_sdk.runtime.broadcast.session import run_broadcast

    result = run_broadcast(config_from_args(args))
    print(json.dumps(result, indent=2) if args.json else format_summary(result))
    return 0 if result["t_all_s"] is not None else 1


def add_bench_broadcast_parser(subparsers) -> argparse.ArgumentParser:
    """Register ``broadcast`` under an ``echo2 bench`` subparsers object."""
    p = subparsers.add_parser(
        "broadcast",
        help="measure a peer-assisted snapshot broadcast (chain / star / star-unlimited) on loopback",
        description=__doc__,
    )
    add_arguments(p)
    p.set_defaults(func=run_from_args)
    return p


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m echo2_sdk.runtime.broadcast.cli", description=__doc__)
    add_arguments(parser)
    return run_from_args(parser.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
