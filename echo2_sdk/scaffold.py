"""``echo2 new-task``: write a working task (adapter, env for multi-turn, YAML config, tests) to edit.

Two ways to start:

- from a built-in (``echo2 new-task poker``, ``echo2 new-task shortdeck --from poker``): a small
  subclass of the built-in's adapter (and env, for a game) that restates every option and hook the
  built-in has, each place to change marked ``EDIT:``. The files *import* the built-in engine
  (``echo2_sdk.adapters.<builtin>``, ``echo2_sdk.envs.<builtin>``) instead of copying it, so fixes to
  the engine reach the task; the YAML starts from the built-in's example config.
- from a generic kind (``--kind single-turn|multi-turn``): a tiny self-contained task (reverse a word,
  guess a number) with the places to change marked ``TODO``.

The files come from ``echo2_sdk/templates/<builtin or kind>/`` (package data), with ``{{name}}`` (the
task name), ``{{Name}}`` (its CamelCase class prefix) and ``{{dir}}`` (the output folder) filled in; in
file names ``__name__`` stands for the task name. The YAML names the adapter as
``<name>_task.py:<Name>Task``, a path relative to the YAML (see :mod:`echo2_sdk.registry`), so the task
trains without being installed and never clashes with a registered name. This module is SDK core: it
reads template folders and the registry's names, and never imports the built-in tasks themselves.
"""

from __future__ import annotations

import argparse
import difflib
import keyword
import re
import sys
from pathlib import Path

TEMPLATES = Path(__file__).resolve().parent / "templates"
KINDS = ("single-turn", "multi-turn")
GENERIC: dict[str, str] = {
    "single-turn": "a prompt, one reply, a reward (the example: reverse a short word)",
    "multi-turn": "a text game played turn by turn (the example: guess a number)",
}
BUILTINS: dict[str, str] = {
    # Each has a template folder templates/<name>/ (tests/test_new_task_builtin.py checks both ways).
    "aime24": "AIME 2024 problems, math-verify reward (single-turn; Hub data or a local JSONL)",
    "arith": "synthetic arithmetic, exact-integer reward (single-turn; the CPU quickstart)",
    "moba": "one-lane MOBA hero vs rule bots, shaped reward (multi-turn; the MOBA engine)",
    "poker": "No-Limit Hold'em vs rule bots, chips won (multi-turn; the pokerkit env)",
}
"""Built-in tasks ``echo2 new-task`` can start from, with the line ``--list`` shows."""
_NAME = re.compile(r"[a-z][a-z0-9_]*")


class ScaffoldError(ValueError):
    """The task cannot be written; the message says why and what to do."""


def camel(name: str) -> str:
    """The class prefix of a task name.

    >>> camel("my_poker"), camel("aime24")
    ('MyPoker', 'Aime24')
    """
    return "".join(part[:1].upper() + part[1:] for part in name.split("_") if part)


def check_name(name: str, source: str | None = None) -> None:
    """A usable new task name: an identifier, not a registered task (unless it is the built-in
    ``source`` itself: ``echo2 new-task poker`` starts from poker; the file-named task cannot clash)."""
    from echo2_sdk.registry import known_tasks

    if not _NAME.fullmatch(name) or keyword.iskeyword(name):
        raise ScaffoldError(f"task name {name!r} must be a lower-case Python identifier (letters, digits, "
                            "'_', starting with a letter), e.g. 'wordle' or 'my_game'")
    if name in known_tasks() and name != source:
        hint = f", or start from the built-in: echo2 new-task {name} (without --kind)" \
            if source is None and name in BUILTINS else ""
        raise ScaffoldError(f"task name {name!r} is already registered ({', '.join(known_tasks())}); "
                            f"choose another, e.g. 'my_{name}'{hint}")


def check_source(source: str) -> str:
    """``source`` if ``echo2 new-task`` can start from it; else a one-line error with the fix."""
    if source in BUILTINS:
        return source
    if source in KINDS:
        raise ScaffoldError(f"--from {source!r} is a generic kind, not a built-in task; use --kind {source}")
    close = difflib.get_close_matches(source, [*BUILTINS, *KINDS], n=1)
    hint = f" Did you mean {close[0]!r}?" if close else ""
    raise ScaffoldError(f"--from {source!r} is not a built-in task to start from ({', '.join(BUILTINS)}); "
                        f"for a task of your own use --kind {'|'.join(KINDS)}.{hint}")


def render(text: str, name: str, out_dir: str) -> str:
    return text.replace("{{name}}", name).replace("{{Name}}", camel(name)).replace("{{dir}}", out_dir)


def _plan(folder: str, name: str, out: Path) -> dict[Path, Path]:
    templates = sorted((TEMPLATES / folder).glob("*.tmpl"))
    if not templates:
        raise ScaffoldError(f"no templates under {TEMPLATES / folder}; the echo2 installation is incomplete "
                            "(reinstall it: pip install -e .)")
    return {out / t.name.removesuffix(".tmpl").replace("__name__", name): t for t in templates}


def planned_files(name: str, kind: str, out: Path) -> dict[Path, Path]:
    """Destination → template for the generic ``kind``."""
    if kind not in KINDS:
        raise ScaffoldError(f"--kind {kind!r} is not one of {list(KINDS)}")
    return _plan(kind, name, out)


def _write(plan: dict[Path, Path], name: str, out_dir: Path) -> list[Path]:
    existing = [str(path) for path in plan if path.exists()]
    if existing:
        raise ScaffoldError(f"refusing to overwrite existing file(s): {', '.join(existing)}; remove them "
                            "or choose another --out folder")
    out_dir.mkdir(parents=True, exist_ok=True)
    for dest, template in plan.items():
        dest.write_text(render(template.read_text(), name, str(out_dir)))
    return list(plan)


def new_task(name: str, kind: str = "single-turn", out: str | Path | None = None) -> list[Path]:
    """Write a generic ``kind`` task into ``out`` (default ``./<name>``); refuses to overwrite any file."""
    check_name(name)
    out_dir = Path(out) if out is not None else Path(name)
    return _write(planned_files(name, kind, out_dir), name, out_dir)


def new_task_from(name: str, source: str, out: str | Path | None = None) -> list[Path]:
    """Write a task derived from the built-in ``source`` into ``out`` (default ``./<name>``); refuses to
    overwrite any file."""
    check_source(source)
    check_name(name, source)
    out_dir = Path(out) if out is not None else Path(name)
    return _write(_plan(source, name, out_dir), name, out_dir)


def sources_text() -> str:
    """What ``echo2 new-task --list`` prints."""
    width = max(map(len, [*BUILTINS, *KINDS]))
    lines = ["Built-in tasks (echo2 new-task NAME --from BUILTIN; NAME = BUILTIN itself works too):"]
    lines += [f"  {name:{width}}  {about}" for name, about in BUILTINS.items()]
    lines.append("Generic kinds (echo2 new-task NAME --kind KIND; single-turn is the default):")
    lines += [f"  {kind:{width}}  {about}" for kind, about in GENERIC.items()]
    return "\n".join(lines)


def _next_steps(written: list[Path], name: str, kind: str | None, source: str | None) -> list[str]:
    out = written[0].parent
    yaml_file = out / f"{name}.yaml"
    if source is None:
        edit = out / (f"{name}_env.py" if kind == "multi-turn" else f"{name}_task.py")
        first = f"edit the TODOs in {edit}" + (" (the rules; the task file is glue)" if kind == "multi-turn" else "")
    else:
        code = sorted((p for p in written if p.suffix == ".py" and not p.name.startswith("test_")),
                      key=lambda p: not p.name.endswith("_task.py"))  # the task file first
        marked = [str(p) for p in code if "EDIT:" in p.read_text()]
        first = f"edit the places marked EDIT: in {' and '.join(marked)}"
    check = f"echo2 check --config {yaml_file}"
    if source == "aime24":  # its config reads the Hub dataset with Qwen3's tokenizer
        check += f" --tokenizer tiny --set task.options.path={out / (name + '_sample.jsonl')}  (offline)"
    train = f"echo2 train --config {yaml_file} --set train.steps=2" + ("  (GPUs: Qwen3-4B)" if source == "aime24" else "")
    steps = [first, f"pytest {out}", check, train]
    if source in ("poker", "moba"):
        steps.append(f"echo2 eval --config {yaml_file}   (head to head with this task's own opponents)")
    return [f"  {i}. {step}" for i, step in enumerate(steps, 1)]


def cmd_new_task(args: argparse.Namespace) -> int:
    if args.list:
        print(sources_text())
        return 0
    source, kind = args.source, args.kind
    try:
        if args.name is None:
            raise ScaffoldError("give the task's NAME, e.g. echo2 new-task poker or echo2 new-task wordle "
                                "(echo2 new-task --list shows what a task can start from)")
        if source is not None and kind is not None:
            raise ScaffoldError(f"--from {source} and --kind {kind} exclude each other; --from starts from a "
                                "built-in task, --kind from a generic template")
        if source is None and kind is None and args.name in BUILTINS:
            source = args.name  # `echo2 new-task poker`: the built-in to edit
        if source is not None:
            written = new_task_from(args.name, source, args.out)
        else:
            kind = kind or "single-turn"
            written = new_task(args.name, kind, args.out)
    except ScaffoldError as exc:
        print(f"echo2 new-task: {exc}", file=sys.stderr)
        return 2
    origin = f" (from the built-in {source}, which they import)" if source else ""
    print(f"wrote {len(written)} files into {written[0].parent}/{origin}: " + ", ".join(p.name for p in written))
    print("\n".join(_next_steps(written, args.name, kind, source)))
    return 0


def add_new_task_parser(sub) -> None:
    p = sub.add_parser(
        "new-task", help="write a working task to edit: adapter (+ env), YAML config, tests",
        description="Write a task that trains at once. From a built-in (NAME = poker, moba, arith or aime24, "
                    "or --from BUILTIN): NAME_task.py, a subclass of the built-in's adapter with every option "
                    "restated, for a game NAME_env.py with its hooks (seats, text, reward), NAME.yaml (from the "
                    "built-in's example config) and test_NAME.py; the places to change are marked EDIT: and the "
                    "files import the built-in engine. Otherwise a generic --kind: NAME_task.py, for multi-turn "
                    "NAME_env.py (number guessing, rules marked TODO), NAME.yaml (tiny CPU model) and "
                    "test_NAME.py. task.name in the YAML is the file path: nothing to install. Never overwrites files.")
    p.add_argument("name", metavar="NAME", nargs="?",
                   help="task name, a lower-case identifier (e.g. wordle); a built-in's name starts from it")
    p.add_argument("--from", dest="source", metavar="BUILTIN",
                   help=f"start from this built-in task ({', '.join(BUILTINS)}); default for NAME = a built-in")
    p.add_argument("--kind", choices=KINDS,
                   help="a generic task: single-turn (prompt → reply → reward; the default) or multi-turn (a text game)")
    p.add_argument("--out", metavar="DIR", help="output folder (default: ./NAME)")
    p.add_argument("--list", action="store_true", help="list what a task can start from (built-ins and kinds)")
    p.set_defaults(func=cmd_new_task)
