"""``echo2 check``: every SDK checker on one task, as a pass/fail report.

:func:`check_task` runs, and records instead of raising:

1. ``check_adapter`` — splits non-empty with unique ids, seeding deterministic, the gold answer earns
   ``max_reward`` and wrong ones do not, rewards finite, Ω masks aligned, records validate;
2. multi-turn tasks with ``make_env()``: ``check_env`` on a fresh env — gymnasium's checker, seeded
   determinism and replay, malformed replies answered (never raised), episodes end;
3. multi-turn tasks: whole episodes played through ``open_episode`` / ``to_rollout`` with the task's
   scripted player (``reference_reply``) or else the first legal action — rewards finite, the loss
   mask covers exactly the replies (assistant tokens), records validate, a replay gives the same record;
4. multi-turn tasks with a scripted player: its return equals ``max_reward``.

``echo2_sdk`` never imports Ray; this module imports neither Ray nor the runtime.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import Any

from echo2_sdk.adapter import BaseTaskAdapter, Example, MultiTurnTaskAdapter
from echo2_sdk.checks import check_adapter
from echo2_sdk.records import RecordLimits, Rollout, validate_rollout
from echo2_sdk.masks import turn_spans



@dataclass(frozen=True)
class CheckResult:
    name: str
    status: str
    """``PASS``, ``FAIL`` or ``SKIP``."""
    detail: str


def _guard(name: str, fn) -> CheckResult:
    try:
        return CheckResult(name, "PASS", fn())
    except _Skip as skip:
        return CheckResult(name, "SKIP", str(skip))
    except Exception as exc:  # a checker's own error says what, where and the fix
        return CheckResult(name, "FAIL", f"{type(exc).__name__}: {exc}")


class _Skip(Exception):
    pass


def check_task(adapter: BaseTaskAdapter, tokenizer, *, max_examples: int = 8, episodes: int = 4) -> list[CheckResult]:
    """All checks that apply to ``adapter`` (see the module docstring); never raises for a broken task."""
    results = [_guard("data, seeding, rewards, masks, records (check_adapter)",
                      lambda: _adapter_detail(check_adapter(adapter, tokenizer, max_examples=max_examples)))]
    if isinstance(adapter, MultiTurnTaskAdapter):
        results.append(_guard("environment (check_env)", lambda: _env_detail(adapter)))
        played: list[tuple[Example, Rollout]] = []
        results.append(_guard("episodes: rewards finite, mask = assistant tokens, records valid, replayable",
                              lambda: _episodes_detail(adapter, tokenizer, episodes, played)))
        results.append(_guard(f"scripted player earns max_reward={adapter.max_reward}",
                              lambda: _max_reward_detail(adapter, played)))
    return results


def _adapter_detail(report: dict[str, Any]) -> str:
    splits = " ".join(f"{k}={v}" for k, v in report["splits"].items())
    return f"splits {splits}; {report['checked']} examples checked, {report['with_reference']} with a gold answer"


def _env_detail(adapter: MultiTurnTaskAdapter) -> str:
    from echo2_sdk.env_check import check_env

    make_env = getattr(adapter, "make_env", None)
    if make_env is None:
        raise _Skip(f"{type(adapter).__name__} has no make_env(); nothing to give check_env")
    report = check_env(make_env(), seeds=(0, 1))
    return f"{report['episodes']} episodes, {report['steps']} steps"


def _episode_examples(adapter: MultiTurnTaskAdapter, count: int) -> list[Example]:
    train, held_out = list(adapter.examples("train")), list(adapter.examples("eval"))
    half = max(1, count // 2)
    return (train[:half] + held_out[: count - half])[:count]


def _play(adapter: MultiTurnTaskAdapter, tokenizer, example: Example) -> tuple[Rollout, list[str], bool]:
    """One episode; returns (record, the replies sent, whether the scripted player played)."""
    episode = adapter.open_episode(example, tokenizer)
    replies: list[str] = []
    scripted = True
    for _ in range(10_000):
        if episode.done:
            break
        reply = adapter.reference_reply(episode)
        if reply is None:
            scripted = False
            legal = episode.env.legal_actions() if hasattr(episode, "env") else []
            reply = legal[0] if legal else ""
        replies.append(episode.submit_text(reply))
    else:
        raise AssertionError(f"episode {example.id!r} did not end within 10000 replies; bound episodes "
                             "(truncate after a step limit)")
    record = adapter.to_rollout(episode, example=example, version=0)
    return record, replies, scripted


def _episodes_detail(adapter: MultiTurnTaskAdapter, tokenizer, count: int, played: list) -> str:
    limits = RecordLimits(vocab_size=len(tokenizer))
    scripted_all = True
    for example in _episode_examples(adapter, count):
        record, replies, scripted = _play(adapter, tokenizer, example)
        scripted_all &= scripted
        where = f"episode {example.id!r}"
        if not isinstance(record, Rollout):
            raise AssertionError(f"{where}: to_rollout returned {type(record).__name__}; return echo2_sdk.records.Rollout")
        if not math.isfinite(record.reward):
            raise AssertionError(f"{where}: return {record.reward!r} is not finite; rewards must be finite floats")
        reason = validate_rollout(record, newest_version=0, limits=limits)
        if reason is not None:
            raise AssertionError(f"{where}: the record fails validation ({reason}); see "
                                 "echo2_sdk.records.validate_rollout")
        mask = list(record.omega.loss_mask)
        trained = [tokenizer.decode(list(record.completion_ids[a:b]), skip_special_tokens=True).strip()
                   for a, b in turn_spans(mask)]
        if trained != [r.strip() for r in replies]:
            raise AssertionError(f"{where}: the loss mask covers {trained!r:.200} but the replies were "
                                 f"{replies!r:.200}; the mask must be 1 on the model's reply tokens (and its "
                                 "end-of-turn token) only — build records with ChatEpisode")
        again, _, _ = _play(adapter, tokenizer, example)
        if (again.prompt_ids, again.completion_ids, again.reward, again.omega) != (
                record.prompt_ids, record.completion_ids, record.reward, record.omega):
            raise AssertionError(f"{where}: replaying the same replies gives a different record; derive all "
                                 "randomness from the example's episode seed")
        played.append((example, record))
    who = "the scripted player (reference_reply)" if scripted_all else "first legal actions (no reference_reply)"
    turns = sum(len(turn_spans(r.omega.loss_mask)) for _, r in played)
    return f"{len(played)} episodes, {turns} replies by {who}; returns {[round(r.reward, 3) for _, r in played]}"


def _max_reward_detail(adapter: MultiTurnTaskAdapter, played: list[tuple[Example, Rollout]]) -> str:
    if not played:
        raise _Skip("no episode was played (see the episodes check)")
    if type(adapter).reference_reply is MultiTurnTaskAdapter.reference_reply:
        raise _Skip(f"{type(adapter).__name__} defines no reference_reply (a scripted player); "
                    "add one to have its return checked")
    short = [(ex.id, r.reward) for ex, r in played if r.reward < adapter.max_reward - 1e-9]
    if short:
        raise AssertionError(f"the scripted player earns {short[0][1]} on episode {short[0][0]!r}, below "
                             f"max_reward={adapter.max_reward}; fix the player (expert_action) or the "
                             "rules, or lower max_reward to the best achievable return")
    return f"{len(played)}/{len(played)} episodes at {adapter.max_reward}"


def format_report(task: str, results: list[CheckResult], seconds: float) -> str:
    lines = [f"echo2 check: {task}"]
    for r in results:
        lines.append(f"  {r.status}  {r.name}")
        lines += [f"        {line}" for line in r.detail.splitlines()]
    failed = sum(r.status == "FAIL" for r in results)
    passed = sum(r.status == "PASS" for r in results)
    skipped = len(results) - failed - passed
    lines.append(f"{passed} passed, {failed} failed, {skipped} skipped ({seconds:.1f} s)"
                 + (" — FAILED" if failed else ""))
    return "\n".join(lines)


def run_check(task_name: str, options: Any, seed: int, tokenizer, *, max_examples: int = 8,
              episodes: int = 4) -> tuple[str, bool]:
    """Build the task and check it: (report text, all passed). A task that cannot be built fails."""
    from echo2_sdk.registry import make_task

    started = time.perf_counter()
    try:
        adapter = make_task(task_name, options, seed=seed)
    except Exception as exc:
        results = [CheckResult("build the task", "FAIL", f"{type(exc).__name__}: {exc}")]
    else:
        results = check_task(adapter, tokenizer, max_examples=max_examples, episodes=episodes)
    report = format_report(task_name, results, time.perf_counter() - started)
    return report, all(r.status != "FAIL" for r in results)


def load_tokenizer(spec: str):
    """``tiny`` → the tiny model's char-level tokenizer; anything else → ``AutoTokenizer.from_pretrained``."""
    if spec in ("tiny", "tiny-qwen3"):
        from echo2_sdk.tiny_tokenizer import build_tiny_tokenizer

        return build_tiny_tokenizer()
    from transformers import AutoTokenizer

    try:
        return AutoTokenizer.from_pretrained(spec)
    except Exception as exc:
        raise ValueError(f"cannot load the tokenizer of {spec!r} ({type(exc).__name__}: {str(exc)[:200]}); "
                         "offline, pass --tokenizer tiny (the checks do not depend on the vocabulary)") from None


def cmd_check(args) -> int:
    import sys

    from echo2_sdk.config import load_config

    if not (args.config or args.task):
        print("echo2 check: give the task to check: --task NAME (e.g. --task arith) or --config FILE",
              file=sys.stderr)
        return 2
    from echo2_sdk.examples import config as shipped_config

    shipped = shipped_config(args.task) if args.task else None
    path = args.config or (str(shipped) if shipped is not None else None)
    overrides = list(args.set or [])
    if args.task and path is None:
        overrides.insert(0, f"task.name={args.task}")
    cfg = load_config(path, overrides)
    spec = args.tokenizer or (cfg.model.name if args.config else "tiny")
    try:
        if spec == "tiny-qwen3" and not args.tokenizer and cfg.model.tiny.tokenizer == "task":
            # What training will tokenize with: the vocabulary fitted to this task (the checks align masks
            # and turn markers token by token, so they should see the tokenizer the run uses).
            from echo2_sdk.registry import make_task
            from echo2_sdk.task_tokenizer import fit_task_tokenizer

            task = make_task(cfg.task.name, dict(cfg.task.options), seed=cfg.train.seed)
            tokenizer = fit_task_tokenizer(task, vocab_size=cfg.model.tiny.task_vocab_size)
        else:
            tokenizer = load_tokenizer(spec)
    except ValueError as exc:
        print(f"echo2 check: {exc}", file=sys.stderr)
        return 2
    report, ok = run_check(cfg.task.name, dict(cfg.task.options), cfg.train.seed, tokenizer,
                           max_examples=args.max_examples, episodes=args.episodes)
    print(report)
    return 0 if ok else 1


def add_check_parser(sub) -> None:
    p = sub.add_parser(
        "check", help="run the SDK's checkers on a task (data, seeding, rewards, masks, records; env for multi-turn)",
        description="Check a task before training: check_adapter (splits, deterministic seeding, the gold answer "
                    "earns max_reward, finite rewards, masks, records validate) and, for multi-turn tasks, "
                    "check_env plus whole episodes (mask = assistant tokens, replayable records, the scripted "
                    "player earns max_reward). Prints a PASS/FAIL report; exit code 1 when a check fails.")
    p.add_argument("--config", metavar="FILE", help="YAML config whose task (and task.options) to check")
    p.add_argument("--task", metavar="NAME", help="registered task name or path/to/file.py:Class "
                   "(uses examples/NAME.yaml for its options when present)")
    p.add_argument("--set", action="append", metavar="KEY=VALUE",
                   help="override a config value, e.g. --set task.options.path=aime24.jsonl (repeatable)")
    p.add_argument("--tokenizer", metavar="NAME",
                   help="tokenizer to render prompts with: 'tiny' (default with --task) or a model name/path "
                        "(default with --config: the config's model, with its task-fitted vocabulary when "
                        "model.tiny.tokenizer is task)")
    p.add_argument("--max-examples", type=int, default=8, help="examples whose reward and records are checked")
    p.add_argument("--episodes", type=int, default=4, help="multi-turn: episodes played through the adapter")
    p.set_defaults(func=cmd_check)
