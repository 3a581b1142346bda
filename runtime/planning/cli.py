"""``echo2 plan`` and ``echo2 simulate``: parsers for the echo2 CLI (each sets ``func``).

Wiring (in echo2_sdk/cli.py ``build_parser``)::

    from echo2_sdk.runtime.planning.cli import add_plan_parser, add_simulate_parser
    add_plan_parser(sub)
    add_simulate_parser(sub)

Both commands return 0 on success, 1 when the plan is not feasible, 2 on a usage/config error.
"""

from __future__ import annotations

import argparse
import json
import sys

from echo2_sdk.config_loader import ConfigError


def add_plan_parser(subparsers) -> argparse.ArgumentParser:
    p = subparsers.add_parser(
        "plan", help="capacity plan: κ, μ_min, the cheapest workers, $/h, bubble and staleness bounds",
        description="Apply the ECHO-2 capacity model (μ_min = κR/(κ·T_train − T_bcast)) to a pool file and "
                    "activate the cheapest workers (by $/h per rollout/s) reaching γ·μ_min.")
    p.add_argument("--t-train", type=float, required=True, metavar="SECONDS", help="T_train: seconds per learner step")
    p.add_argument("--t-bcast", type=float, required=True, metavar="SECONDS", help="T_bcast: seconds per snapshot broadcast")
    p.add_argument("--rollouts-per-step", type=int, required=True, metavar="R", help="R: rollouts one step consumes")
    p.add_argument("--staleness", type=int, required=True, metavar="S", help="S: staleness bound of the buffer")
    p.add_argument("--kappa", type=int, metavar="K", help="κ: snapshot period (default: S − 1 if the bound allows)")
    p.add_argument("--pool", required=True, metavar="FILE", help="pool file (YAML list of workers; examples/pools/)")
    p.add_argument("--gamma", type=float, default=1.1, help="γ: headroom, μ_target = γ·μ_min (default 1.1)")
    p.add_argument("--prices", metavar="FILE", help="price table ($ per GPU-hour per class) for the learner's cost")
    p.add_argument("--learner-gpu", metavar="CLASS", default="A100", help="learner GPU class (with --learner-gpus)")
    p.add_argument("--learner-gpus", type=int, default=0, metavar="N", help="learner GPUs to add to $/step (needs --prices)")
    p.add_argument("--json", action="store_true", help="print JSON")
    p.set_defaults(func=cmd_plan)
    return p


def cmd_plan(args: argparse.Namespace) -> int:
    from echo2_sdk.runtime.planning.capacity import PlanningError
    from echo2_sdk.runtime.planning.cost import CostMeter, Resource, load_prices
    from echo2_sdk.runtime.planning.plan import format_plan, make_plan
    from echo2_sdk.runtime.planning.poolfile import load_pool

    try:
        offers = load_pool(args.pool)
        learner_usd = 0.0
        if args.learner_gpus:
            if not args.prices:
                raise ConfigError("--learner-gpus needs --prices FILE (e.g. examples/pools/prices.yaml)")
            learner_usd = args.learner_gpus * CostMeter(load_prices(args.prices)).price(Resource(args.learner_gpu))
        plan = make_plan(offers, t_train_s=args.t_train, t_bcast_s=args.t_bcast,
                         rollouts_per_step=args.rollouts_per_step, staleness=args.staleness, kappa=args.kappa,
                         gamma=args.gamma, learner_usd_per_hour=learner_usd)
    except (ConfigError, PlanningError, ValueError) as exc:
        print(f"echo2 plan: {exc}", file=sys.stderr)
        return 2
    print(json.dumps(plan.to_dict(), indent=1) if args.json else format_plan(plan, offers))
    if not plan.feasible and not offers:
        print("echo2 plan: the pool file lists no workers", file=sys.stderr)
    return 0 if plan.feasible else 1


def add_simulate_parser(subparsers) -> argparse.ArgumentParser:
    p = subparsers.add_parser(
        "simulate", help="discrete-event simulation of learner, buffer, broadcast and a worker pool",
        description="Simulate the ECHO-2 runtime (its scheduler, replay buffer and capacity model) on a "
                    "synthetic or file-defined pool: one run, the bubble knee (fig. 3c) or the "
                    "full/NoCost/NoP2P ablation (table 2). Writes JSON and a PNG into out_dir.")
    p.add_argument("--config", required=True, metavar="FILE", help="simulate config (examples/simulate_*.yaml)")
    p.add_argument("--set", action="append", metavar="KEY=VALUE",
                   help="override a config value, e.g. --set learner.steps=100 (repeatable)")
    p.add_argument("--out-dir", metavar="DIR", help="override out_dir")
    p.add_argument("--json", action="store_true", help="print the result as JSON (timeline and decisions stay in the file)")
    p.set_defaults(func=cmd_simulate)
    return p


def cmd_simulate(args: argparse.Namespace) -> int:
    import dataclasses

    from echo2_sdk.runtime.planning.capacity import PlanningError
    from echo2_sdk.runtime.planning.experiments import run_experiment
    from echo2_sdk.runtime.planning.simconfig import load_simulate_config

    try:
        cfg = load_simulate_config(args.config, args.set or [])
        if args.out_dir:
            cfg = dataclasses.replace(cfg, out_dir=args.out_dir)
        result = run_experiment(cfg)
    except (ConfigError, PlanningError, ValueError) as exc:
        print(f"echo2 simulate: {exc}", file=sys.stderr)
        return 2
    brief = {k: v for k, v in result.items() if k not in ("timeline", "decisions")}
    print(json.dumps(brief, indent=1) if args.json else format_result(brief))
    return 0


def format_result(result: dict) -> str:
    exp = result["experiment"]
    lines = []
    if exp == "knee":
        for c in result["curves"]:
            lines.append(f"S={c['staleness_S']} κ={c['kappa']}: μ_min={c['mu_min']:.4g}/s, knee predicted "
                         f"N={c['predicted_knee_workers']}, measured N={c['measured_knee_workers']} "
                         f"(bubble ≤ {result['threshold']:g}); max bubble from γ·μ_min (N ≥ {c['gamma_workers']}): "
                         f"{c['max_bubble_from_gamma']}")
            lines.append("  N: " + " ".join(f"{p['workers']}:{p['bubble_ratio']:.3f}" for p in c["points"]))
    elif exp == "ablation":
        lines.append(f"S={result['staleness_S']} κ={result['kappa']}, {result['workers_in_pool']} workers in pool")
        lines.append(f"{'variant':8s} {'machines':>9s} {'T_bcast s':>10s} {'wait s/step':>12s} {'bubble':>7s} "
                     f"{'pool $/step':>12s} {'total $/step':>13s}")
        for name, r in result["rows"].items():
            cells = [(r["machines_mean"], 9, 1), (r["t_bcast_mean_s"], 10, 1), (r["learner_wait_s_per_step"], 12, 2),
                     (r["bubble_ratio"], 7, 3), (r["usd_pool_per_step"], 12, 3), (r["usd_per_step"], 13, 3)]
            lines.append(f"{name:8s} " + " ".join(f"{v:{w}.{d}f}" if v is not None else f"{'-':>{w}s}"
                                                  for v, w, d in cells))
        for k, v in result["ratios"].items():
            lines.append(f"{k} = {v:.3f}")
    else:
        s = result["summary"]
        keys = ("steps", "sim_time_s", "wall_s", "kappa", "bubble_ratio", "machines_mean", "t_bcast_mean_s",
                "usd_per_step", "usd_pool_per_step", "staleness_max", "staleness_bound_tight",
                "groups_dropped_stale", "preemptions", "joins", "decisions")
        lines += [f"{k}: {s[k]}" for k in keys]
    lines.append("wrote " + ", ".join(result.get("files", [])))
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    """``python -m echo2_sdk.runtime.planning.cli plan|simulate ...`` (the same commands before wiring)."""
    parser = argparse.ArgumentParser(prog="echo2")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    add_plan_parser(sub)
    add_simulate_parser(sub)
    args = parser.parse_args(argv)
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
