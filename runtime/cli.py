"""The ``echo2`` command line.

Subcommands import the runtime lazily, so ``echo2 --help`` and ``echo2 config`` start fast and the
public ``echo2_sdk`` package never imports Ray by itself.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import yaml

from echo2_sdk.config import ConfigError, load_config, to_dict

EXAMPLES_DIR = Path(__file__).resolve().parent.parent / "examples"


def _config_path(args: argparse.Namespace) -> str | None:
    """``--config FILE`` wins; ``--task NAME`` uses examples/NAME.yaml when it exists."""
    if getattr(args, "config", None):
        return args.config
    task = getattr(args, "task", None)
    if task and (EXAMPLES_DIR / f"{task}.yaml").exists():
        return str(EXAMPLES_DIR / f"{task}.yaml")
    return None


def _load(args: argparse.Namespace):
    overrides = list(args.set or [])
    path = _config_path(args)
    if getattr(args, "task", None) and path is None:
        overrides.insert(0, f"task.name={args.task}")
    if getattr(args, "resume", None) and not args.config:
        saved = Path(args.resume) / "config.yaml"
        if saved.exists():
            path = str(saved)
    return load_config(path, overrides)


def _add_config_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--config", metavar="FILE", help="YAML config file (see examples/)")
    p.add_argument("--task", metavar="NAME",
                   help="task name; uses examples/NAME.yaml when present, else the defaults with task.name=NAME")
    p.add_argument("--set", action="append", metavar="KEY=VALUE",
                   help="override a config value, e.g. --set train.steps=50 (repeatable; value read as YAML)")


def cmd_train(args: argparse.Namespace) -> int:
    cfg = _load(args)
    from echo2_sdk.runtime.driver.launch import learner_placement, train
    from echo2_sdk.runtime.driver.rundir import default_run_dir
    from echo2_sdk.runtime.driver.setup import ResourceError, check_resources

    placed = learner_placement(cfg, args.ray_address) is not None  # the learner runs on a learner node
    try:
        if not placed:  # fail before starting anything; a placed learner checks on its node
            check_resources(cfg)
    except ResourceError as exc:
        print(f"echo2 train: {exc}", file=sys.stderr)
        return 2

    run_dir = args.resume or args.run_dir or default_run_dir(cfg.task.name)
    print(f"echo2 train: task={cfg.task.name} model={cfg.model.name} mode={cfg.runtime.mode} "
          f"steps={cfg.train.steps} run_dir={run_dir}", flush=True)
    try:
        summary = train(cfg, run_dir, resume=bool(args.resume), ray_address=args.ray_address,
                        log=lambda m: print(m, flush=True))
    except ResourceError as exc:  # cannot join the cluster, or no node offers the requested resources
        print(f"echo2 train: {exc}", file=sys.stderr)
        return 2
    keys = ("steps", "wall_s", "reward_first_10pct", "reward_last_10pct", "bubble_ratio", "staleness_max",
            "samples_accepted", "samples_dropped_stale", "samples_rejected")
    print(json.dumps({k: summary.get(k) for k in keys}, indent=1))
    where = f" (on the learner's node {summary['learner_node'][:12]})" if summary.get("learner_node") else ""
    print(f"run directory: {run_dir}{where}")
    return 0


def cmd_config(args: argparse.Namespace) -> int:
    cfg = _load(args)
    text = json.dumps(to_dict(cfg), indent=2) if args.json else yaml.safe_dump(to_dict(cfg), sort_keys=False)
    print(text)
    return 0


def cmd_tasks(args: argparse.Namespace) -> int:
    from echo2_sdk.registry import get_task_class, known_tasks

    for name in known_tasks():
        cls = get_task_class(name)
        doc = (cls.__doc__ or "").strip().splitlines()
        print(f"{name:10s} {doc[0] if doc else ''}")
    return 0


def _player_specs(text: str) -> str:
    """Agent/opponent lists: a bare model path (a run's checkpoint, a model folder) means ``llm:PATH``."""
    specs = []
    for spec in (part.strip() for part in text.split(",")):
        if spec and not spec.startswith(("rule:", "llm:")) and (Path(spec).exists() or spec == "tiny-qwen3"):
            spec = f"llm:{spec}"
        specs.append(spec)
    return ",".join(specs)


# Head-to-head evaluators: task -> (module with eval_from_args(args, llm_policy_factory), default agents,
# default opponents, the argument that counts games).
EVALUATORS = {
    "poker": ("echo2_sdk.envs.poker_eval", "rule:tag", "rule:calling,rule:tag,rule:lag", "hands"),
    "moba": ("echo2_sdk.envs.moba_eval", "rule:farmer", "rule:farmer,rule:pusher,rule:random", "episodes"),
}


def cmd_eval(args: argparse.Namespace) -> int:
    if args.task not in EVALUATORS:
        print(f"echo2 eval: --task {args.task!r} has no head-to-head evaluation; use --task "
              f"{' or '.join(EVALUATORS)} (single-turn tasks report held-out accuracy in the run's summary.json)",
              file=sys.stderr)
        return 2
    import importlib

    from echo2_sdk.runtime.rollout.chat_policy import cached_chat_policy  # torch + transformers, no Ray

    module, agents, opponents, count = EVALUATORS[args.task]
    eval_from_args = importlib.import_module(module).eval_from_args
    args.agents, args.opponents = _player_specs(args.agents or agents), _player_specs(args.opponents or opponents)
    if args.episodes is None:
        args.episodes = 200
    if getattr(args, count) < 1:
        print(f"echo2 eval: --{count} {getattr(args, count)} must be >= 1", file=sys.stderr)
        return 2
    try:
        print(eval_from_args(args, lambda path: cached_chat_policy(path, args.temperature, args.max_new_tokens)))
    except (ValueError, FileNotFoundError) as exc:
        print(f"echo2 eval: {exc}", file=sys.stderr)
        return 2
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="echo2",
        description="echo2: cost-efficient RL post-training (GRPO) with a bounded-staleness rollout pool.",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")

    p = sub.add_parser("train", help="train a policy with GRPO (async ECHO-2 runtime or sync baseline)",
                       description="Train with GRPO. Writes metrics.jsonl, summary.json, plots and "
                                   "checkpoints into the run directory.")
    _add_config_args(p)
    p.add_argument("--run-dir", metavar="DIR", help="run directory (default: runs/<time>-<task>)")
    p.add_argument("--resume", metavar="RUN_DIR",
                   help="continue a run from its latest checkpoint (uses RUN_DIR/config.yaml unless --config)")
    p.add_argument("--ray-address", metavar="ADDR",
                   help="join an existing Ray cluster ('auto' or host:port) instead of starting a local one")
    p.set_defaults(func=cmd_train)

    p = sub.add_parser("config", help="print the resolved config (defaults + file + --set overrides)")
    _add_config_args(p)
    p.add_argument("--json", action="store_true", help="print JSON instead of YAML")
    p.set_defaults(func=cmd_config)

    p = sub.add_parser("tasks", help="list registered tasks")
    p.set_defaults(func=cmd_tasks)

    from echo2_sdk.scaffold import add_new_task_parser
    from echo2_sdk.task_check import add_check_parser

    add_new_task_parser(sub)
    add_check_parser(sub)

    from echo2_sdk.envs.poker_eval import add_eval_arguments

    p = sub.add_parser("eval", help="head-to-head evaluation (poker, moba: agents x opponents, 95%% CIs)",
                       description="Play --hands hands of every agent against every opponent with duplicate deals "
                                   "and print chips won per 100 big blinds (table) or everything (--json). Agents and "
                                   "opponents: rule:calling|tag|lag|random, llm:PATH, or a model path (a training "
                                   "run's runs/NAME/checkpoints/step_K, its base_model folder, or runs/NAME). "
                                   "--task moba: --episodes games per cell, win rate and mean reward with 95%% CIs; "
                                   "bots rule:farmer|pusher|random.")
    p.add_argument("--task", default="poker", help="task to evaluate (poker, moba)")
    add_eval_arguments(p)
    p.set_defaults(agents=None, opponents=None)  # per task, see EVALUATORS
    p.add_argument("--episodes", type=int, default=None,
                   help="moba: games per agent/opponent cell, half on each side (default 200)")
    p.add_argument("--temperature", type=float, default=0.0, help="sampling temperature of model agents (0 = greedy)")
    p.add_argument("--max-new-tokens", type=int, default=16, help="reply length limit of model agents, in tokens")
    p.set_defaults(func=cmd_eval)

    from echo2_sdk.runtime.planning.cli import add_plan_parser, add_simulate_parser

    add_plan_parser(sub)
    add_simulate_parser(sub)

    from echo2_sdk.runtime.rollout.remote.cli import add_worker_parser

    add_worker_parser(sub)

    from echo2_sdk.runtime.broadcast.cli import add_bench_broadcast_parser

    bench = sub.add_parser("bench", help="benchmarks (broadcast: peer-assisted snapshot broadcast on loopback)")
    add_bench_broadcast_parser(bench.add_subparsers(dest="bench", metavar="BENCHMARK", required=True))
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return 0
    try:
        return args.func(args)
    except ConfigError as exc:
        print(f"echo2 {args.command}: config error: {exc}", file=sys.stderr)
        return 2
    except KeyError as exc:  # unknown task / estimator names carry a full message
        print(f"echo2 {args.command}: {exc.args[0] if exc.args else exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
