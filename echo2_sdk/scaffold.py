"""``echo2 new-task``: write a working task (adapter, env for multi-turn, YAML config, tests) to edit.

The files come from ``echo2_sdk/templates/<kind>/`` (package data), with ``{{name}}`` (the task
name), ``{{Name}}`` (its CamelCase class prefix) and ``{{dir}}`` (the output folder) filled in; in
file names ``__name__`` stands for the task name. The YAML names the adapter as
``<name>_task.py:<Name>Task``, a path relative to the YAML (see :mod:`echo2_sdk.registry`), so the task
trains without being installed.
"""

from __future__ import annotations

import argparse
import keyword
import re
import sys
from pathlib import Path

TEMPLATES = Path(__file__).resolve().parent / "templates"
KINDS = ("single-turn", "multi-turn")
_NAME = re.compile(r"[a-z][a-z0-9_]*")


class ScaffoldError(ValueError):
    """The task cannot be written; the message says why and what to do."""


def camel(name: str) -> str:
    return "".join(part[:1].upper() + part[1:] for part in name.split("_") if part)


def check_name(name: str) -> None:
    from echo2_sdk.registry import known_tasks

    if not _NAME.fullmatch(name) or keyword.iskeyword(name):
        raise ScaffoldError(f"task name {name!r} must be a lower-case Python identifier (letters, digits, "
                            "'_', starting with a letter), e.g. 'wordle' or 'my_game'")
    if name in known_tasks():
        raise ScaffoldError(f"task name {name!r} is already registered ({', '.join(known_tasks())}); "
                            f"choose another, e.g. 'my_{name}'")


def render(text: str, name: str, out_dir: str) -> str:
    return text.replace("{{name}}", name).replace("{{Name}}", camel(name)).replace("{{dir}}", out_dir)


def planned_files(name: str, kind: str, out: Path) -> dict[Path, Path]:
    """Destination → template for ``kind``."""
    if kind not in KINDS:
        raise ScaffoldError(f"--kind {kind!r} is not one of {list(KINDS)}")
    templates = sorted((TEMPLATES / kind).glob("*.tmpl"))
    if not templates:
        raise ScaffoldError(f"no templates under {TEMPLATES / kind}; the echo2 installation is incomplete "
                            "(reinstall it: pip install -e .)")
    return {out / t.name.removesuffix(".tmpl").replace("__name__", name): t for t in templates}


def new_task(name: str, kind: str = "single-turn", out: str | Path | None = None) -> list[Path]:
    """Write the task's files into ``out`` (default ``./<name>``); refuses to overwrite any file."""
    check_name(name)
    out_dir = Path(out) if out is not None else Path(name)
    plan = planned_files(name, kind, out_dir)
    existing = [str(path) for path in plan if path.exists()]
    if existing:
        raise ScaffoldError(f"refusing to overwrite existing file(s): {', '.join(existing)}; remove them "
                            "or choose another --out folder")
    out_dir.mkdir(parents=True, exist_ok=True)
    for dest, template in plan.items():
        dest.write_text(render(template.read_text(), name, str(out_dir)))
    return list(plan)


def cmd_new_task(args: argparse.Namespace) -> int:
    try:
        written = new_task(args.name, args.kind, args.out)
    except ScaffoldError as exc:
        print(f"echo2 new-task: {exc}", file=sys.stderr)
        return 2
    out = written[0].parent
    yaml_file = out / f"{args.name}.yaml"
    edit = out / (f"{args.name}_env.py" if args.kind == "multi-turn" else f"{args.name}_task.py")
    print(f"wrote {len(written)} files into {out}/: " + ", ".join(p.name for p in written))
    print(f"  1. edit the TODOs in {edit}" + (" (the rules; the task file is glue)" if args.kind == "multi-turn" else ""))
    print(f"  2. pytest {out}")
    print(f"  3. echo2 check --config {yaml_file}")
    print(f"  4. echo2 train --config {yaml_file} --set train.steps=2")
    return 0


def add_new_task_parser(sub) -> None:
    p = sub.add_parser(
        "new-task", help="write a working task to edit: adapter (+ env), YAML config, tests",
        description="Write a minimal task that trains at once: NAME_task.py (the adapter), for multi-turn "
                    "NAME_env.py (a gymnasium-style text game: number guessing, rules marked TODO), NAME.yaml "
                    "(tiny CPU model; task.name is the file path, nothing to install) and test_NAME.py. "
                    "Never overwrites files.")
    p.add_argument("name", metavar="NAME", help="task name, a lower-case identifier (e.g. wordle)")
    p.add_argument("--kind", choices=KINDS, default="single-turn",
                   help="single-turn (prompt → reply → reward; default) or multi-turn (a text game)")
    p.add_argument("--out", metavar="DIR", help="output folder (default: ./NAME)")
    p.set_defaults(func=cmd_new_task)
