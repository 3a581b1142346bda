"""The ``echo2`` command line.

Subcommands import the runtime lazily, so ``echo2 --help`` and ``echo2 config`` start fast and the
public ``echo2_sdk`` package never imports Ray by itself.
"""

from __future__ import annotations

import argparse
import json
import shlex
import signal
import sys
from pathlib import Path

import yaml

from echo2_sdk import examples
from echo2_sdk.config import ConfigError, load_config, to_dict
from echo2_sdk.evaluation import HeadToHead, add_head_to_head_arguments


def _config_path(args: argparse.Namespace) -> str | None:
    """``--config FILE`` wins; ``--task NAME`` uses the shipped examples/NAME.yaml when there is one (package
    data of ``echo2_sdk.examples``, so a wheel install finds it too)."""
    if getattr(args, "config", None):
        return args.config
    task = getattr(args, "task", None)
    shipped = examples.config(task) if task else None
    return str(shipped) if shipped else None


def _load(args: argparse.Namespace):
    overrides = list(args.set or [])
    path = _config_path(args)
    if getattr(args, "task", None) and path is None:
        overrides.insert(0, f"task.name={args.task}")
    if getattr(args, "resume", None) and not args.config:
        saved = Path(args.resume) / "config.yaml"
        if not saved.is_file():  # never fall back to the defaults: that would be another run
            raise ConfigError(f"--resume {args.resume!r}: {_resume_problem(args.resume)}")
        path = str(saved)
    return load_config(path, overrides)


def _resume_problem(run_dir: str) -> str:
    if not Path(run_dir).is_dir():
        return ("no such run directory; give the folder of an earlier run (runs/<time>-<task>), the one its "
                "`echo2 train` printed")
    return "it holds no config.yaml, so it is not an echo2 run directory; pass the run's --config FILE too"


def _add_config_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--config", metavar="FILE", help="YAML config file (see examples/)")
    p.add_argument("--task", metavar="NAME",
                   help="task name; uses examples/NAME.yaml when present, else the defaults with task.name=NAME")
    p.add_argument("--set", action="append", metavar="KEY=VALUE",
                   help="override a config value, e.g. --set train.steps=50 (repeatable; value read as YAML)")


def cmd_train(args: argparse.Namespace) -> int:
    if args.resume and not Path(args.resume).is_dir():  # before anything is read or created
        print(f"echo2 train: --resume {args.resume!r}: {_resume_problem(args.resume)}", file=sys.stderr)
        return 2
    cfg = _load(args)
    from echo2_sdk.runtime.driver.launch import learner_placement, train
    from echo2_sdk.runtime.driver.rundir import default_run_dir
    from echo2_sdk.runtime.driver.setup import ResourceError, check_resources

    placed = learner_placement(cfg, args.ray_address) is not None  # the learner runs on a learner node
    try:
        if not placed:  # fail before starting anything; a placed learner checks on its node
            check_resources(cfg, args.ray_address)
    except ResourceError as exc:
        print(f"echo2 train: {exc}", file=sys.stderr)
        return 2

    from echo2_sdk.runtime.driver.rundir import RunDirError
    from echo2_sdk.runtime.driver.stop import exit_code
    from echo2_sdk.runtime.learning.checkpoint import CheckpointError

    run_dir = args.resume or args.run_dir or default_run_dir(cfg.task.name)
    print(f"echo2 train: task={cfg.task.name} model={cfg.model.name} mode={cfg.runtime.mode} "
          f"steps={cfg.train.steps} run_dir={run_dir}", flush=True)
    resume_hint = f"echo2 train --resume {shlex.quote(str(run_dir))}"
    try:
        summary = train(cfg, run_dir, resume=bool(args.resume), ray_address=args.ray_address,
                        log=lambda m: print(m, flush=True))
    except (ResourceError, RunDirError, CheckpointError) as exc:  # the cluster, the run directory, a checkpoint
        print(f"echo2 train: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt as exc:  # a second Ctrl-C, or one before training started
        signum = getattr(exc, "signum", signal.SIGINT)
        saved = any(Path(run_dir, "checkpoints").glob("step_*"))  # the newest complete one is kept
        then = f"continue from its newest checkpoint with: {resume_hint}" if saved else "no checkpoint to resume from"
        print(f"echo2 train: aborted by {signal.Signals(signum).name}; nothing more was saved; {then}", file=sys.stderr)
        return exit_code(signum)
    keys = ("steps", "wall_s", "reward_first_10pct", "reward_last_10pct", "bubble_ratio", "staleness_max",
            "samples_accepted", "samples_dropped_stale", "samples_rejected")
    print(json.dumps({k: summary.get(k) for k in keys}, indent=1))
    where = f" (on the learner's node {summary['learner_node'][:12]})" if summary.get("learner_node") else ""
    print(f"run directory: {run_dir}{where}")
    failed = summary.get("failed")
    if failed:  # no rollout worker could be kept alive: summary and checkpoint are saved, one line says why
        then = f"; once workers can run again, continue with: {resume_hint}" if failed["checkpoint"] else ""
        print(f"echo2 train: failed at step {failed['step']}/{cfg.train.steps}: {failed['error']}{then}", file=sys.stderr)
        return 1
    stopped = summary.get("stopped")
    if stopped:
        signum = signal.Signals[stopped["signal"]]
        if stopped["checkpoint"]:
            print(f"stopped by {stopped['signal']} at step {stopped['step']}/{cfg.train.steps} with checkpoint "
                  f"{stopped['checkpoint']}; continue with: {resume_hint}", file=sys.stderr)
        else:
            print(f"stopped by {stopped['signal']} before the first step; nothing to resume (start the run again)",
                  file=sys.stderr)
        return exit_code(signum)
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


EVAL_DESCRIPTION = (
    "Play every agent against every opponent in the task's head-to-head evaluation and print the table "
    "(everything with --json). Agents and opponents: the task's rule:NAME players, llm:PATH, or a model path "
    "(a training run's runs/NAME/checkpoints/step_K, its base_model folder, or runs/NAME)."
)
EVAL_TASK_HELP = ("task to evaluate (default poker); any task whose adapter provides head_to_head(), "
                  "e.g. poker or moba; `echo2 eval --task NAME --help` shows its own arguments")


def _tasks_with_head_to_head() -> list[str]:
    from echo2_sdk.registry import get_task_class, known_tasks

    names = []
    for name in known_tasks():
        try:
            if get_task_class(name).head_to_head() is not None:
                names.append(name)
        except Exception:  # a task that fails to load must not hide the ones that work
            continue
    return names


def _head_to_head(task: str) -> HeadToHead:
    """The task's head-to-head evaluation, found through the registry; ``ValueError`` without one."""
    from echo2_sdk.registry import get_task_class

    head_to_head = get_task_class(task).head_to_head()  # KeyError (with "did you mean") for unknown tasks
    if head_to_head is None:
        raise ValueError(f"task {task!r} has no head-to-head evaluation; tasks with one: "
                         f"{', '.join(_tasks_with_head_to_head()) or 'none'} (single-turn tasks report held-out "
                         "accuracy in the run's summary.json)")
    if not isinstance(head_to_head, HeadToHead):
        raise ValueError(f"task {task!r}: head_to_head() returned {type(head_to_head).__name__}, "
                         "not an echo2_sdk.evaluation.HeadToHead")
    return head_to_head


def _eval_parser(task: str, head_to_head: HeadToHead, options: dict | None) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="echo2 eval", description=f"{EVAL_DESCRIPTION} {head_to_head.description}")
    parser.add_argument("--task", default=task, help=EVAL_TASK_HELP)
    _add_eval_config_args(parser)  # read by the first stage; here for --help
    add_head_to_head_arguments(parser, head_to_head)
    parser.add_argument("--temperature", type=float, default=0.0, help="sampling temperature of model agents (0 = greedy)")
    parser.add_argument("--max-new-tokens", type=int, default=None,
                        help="reply length limit of model players, in tokens (default: a run's own "
                             "rollout.max_new_tokens for its checkpoints and base_model, else 16)")
    if options is not None and head_to_head.task_defaults is not None:
        parser.set_defaults(**head_to_head.task_defaults(_task_options(task, options)))
    return parser


def _add_eval_config_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--config", metavar="FILE", help="evaluate the task of this YAML config at its own table "
                        "(its task.options, e.g. the seats, blinds and opponents of a task from echo2 new-task)")
    parser.add_argument("--set", action="append", metavar="KEY=VALUE", help="override a value of --config (repeatable)")


def _task_options(task: str, options: dict):
    from echo2_sdk.config_loader import build_dataclass
    from echo2_sdk.registry import get_task_class

    return build_dataclass(get_task_class(task).Options, dict(options), path="task.options")


def cmd_eval(args: argparse.Namespace) -> int:
    """Two stages: ``--task`` picks the evaluation, whose parser then reads the other arguments. A task of
    your own (``--config FILE`` or ``--task path/to/file.py:Class``) is played at its own table: the
    evaluation's defaults come from its options (``HeadToHead.task_defaults``)."""
    if args.config and args.task:
        print("echo2 eval: give --config FILE (its task.name and task.options) or --task NAME, not both",
              file=sys.stderr)
        return 2
    options = None
    if args.config:
        cfg = load_config(args.config, list(args.set or []))
        task, options = cfg.task.name, dict(cfg.task.options)
    elif args.set:
        print("echo2 eval: --set needs --config FILE (it overrides the config's values)", file=sys.stderr)
        return 2
    else:
        task = args.task or "poker"
        options = {} if ":" in task else None  # a path-named task: its Options defaults
    try:
        while True:
            head_to_head = _head_to_head(task)
            parser = _eval_parser(task, head_to_head, options)
            named = parser.parse_known_args(args.more_arguments)[0].task
            if named == task:
                opts = parser.parse_args(args.more_arguments)
                break
            task = named  # an abbreviated --task (e.g. --ta moba) reached the task's parser
            options = {} if ":" in task else None
    except (ImportError, TypeError, ValueError) as exc:
        print(f"echo2 eval: {exc}", file=sys.stderr)
        return 2
    games = head_to_head.games(opts)
    if games < 1:
        print(f"echo2 eval: {head_to_head.games_flag} {games} must be >= 1", file=sys.stderr)
        return 2
    opts.agents, opts.opponents = _player_specs(opts.agents), _player_specs(opts.opponents)

    def llm_policy(path: str):
        # torch + transformers (no Ray), loaded only when a model plays
        from echo2_sdk.runtime.rollout.chat_policy import cached_chat_policy, reply_tokens
        from echo2_sdk.runtime.rollout.mirror import SeatPolicies

        def load(name: str):
            max_new_tokens = opts.max_new_tokens if opts.max_new_tokens is not None else reply_tokens(name, 16)
            return cached_chat_policy(name, opts.temperature, max_new_tokens)

        return SeatPolicies(load=load)(path)  # no mirror here: llm:self fails in one line

    try:
        print(head_to_head.run(opts, llm_policy))
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

    # The task's own arguments (--hands, --episodes, ...) are read by its parser in cmd_eval.
    p = sub.add_parser("eval", add_help=False, allow_abbrev=False,
                       help="head-to-head evaluation of a task that has one (e.g. poker, moba): agents x opponents, "
                            "95%% CIs")
    p.add_argument("--task", help=EVAL_TASK_HELP)
    _add_eval_config_args(p)
    p.set_defaults(func=cmd_eval, more_arguments=[])

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
    args, more = parser.parse_known_args(argv)
    if more:  # only a subcommand that reads its arguments in two stages (eval) takes the rest
        if not hasattr(args, "more_arguments"):
            parser.error(f"unrecognized arguments: {' '.join(more)}")
        args.more_arguments = more
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
    except KeyboardInterrupt:  # Ctrl-C outside a training run (while loading, in another subcommand)
        print(f"echo2 {args.command}: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
