"""Task registry: names → task adapter classes (``TaskAdapter`` or ``MultiTurnTaskAdapter`` subclasses).

Three ways in, looked up in this order:
1. built-ins (``arith``, ``aime24``, ``poker``, ``moba``), imported lazily;
2. classes registered at import time with ``@register_task("name")``;
3. third-party packages declaring an entry point in the ``echo2.tasks`` group
   (``[project.entry-points."echo2.tasks"] mytask = "mypkg.task:MyAdapter"``);
and, anywhere a task name is accepted, an import path ``"module:Class"`` or a file path
``"path/to/file.py:Class"`` (what ``echo2 new-task`` configs use; nothing to install).
"""

from __future__ import annotations

import difflib
import importlib
import sys
from importlib.metadata import entry_points
from pathlib import Path
from typing import Any

from echo2_sdk.adapter import BaseTaskAdapter

ENTRY_POINT_GROUP = "echo2.tasks"

_BUILTINS: dict[str, str] = {
    "arith": "echo2_sdk.adapters.arith:ArithAdapter",
    "aime24": "echo2_sdk.adapters.aime24:Aime24Adapter",
    "poker": "echo2_sdk.adapters.poker:PokerAdapter",
    "moba": "echo2_sdk.adapters.moba:MobaAdapter",
}
_REGISTERED: dict[str, type[BaseTaskAdapter]] = {}
_KINDS = "TaskAdapter or MultiTurnTaskAdapter subclass"  # what a task class must be, for errors


def register_task(name: str):
    """Class decorator: make a task adapter class (single- or multi-turn) available under ``name``."""

    def deco(cls: type[BaseTaskAdapter]) -> type[BaseTaskAdapter]:
        if not (isinstance(cls, type) and issubclass(cls, BaseTaskAdapter)):
            raise TypeError(f"@register_task({name!r}) expects a {_KINDS}, got {cls!r}")
        existing = _REGISTERED.get(name)
        if existing is not None and existing is not cls and _qualname(existing) != _qualname(cls):
            raise ValueError(f"task {name!r} is already registered by {_qualname(existing)}")
        cls.name = cls.name or name
        _REGISTERED[name] = cls
        return cls

    return deco


def _qualname(cls: type) -> str:
    return f"{cls.__module__}:{cls.__qualname__}"


def is_file_spec(name: str) -> bool:
    """``path/to/file.py:Class`` (a task in a plain file, e.g. one written by ``echo2 new-task``)."""
    return name.rpartition(":")[0].endswith(".py")


def _import_file(path: str, attr: str, spec: str) -> Any:
    """Import ``path`` (a .py file) as a top-level module named after it, its folder put on ``sys.path``
    so that it can import its sibling files (a task's env module); every process (Ray workers, the
    reward subprocess) that resolves the same spec gets the same module name."""
    file = Path(path).expanduser().resolve()
    if not file.is_file():
        raise ImportError(f"task file {str(file)!r} (from {spec!r}) does not exist; give an existing "
                          "'path/to/file.py:ClassName' (relative paths in a YAML config are read from "
                          "the config file's folder, on the command line from the current folder)")
    module_name = file.stem
    if not module_name.isidentifier():
        raise ImportError(f"task file {file.name!r} (from {spec!r}) is not importable as a module; "
                          "rename it to a valid Python identifier plus .py, e.g. 'my_task.py'")
    # Appended, never prepended: a task folder must not shadow the standard library or installed
    # packages in this process or in the processes it spawns (which inherit sys.path).
    if str(file.parent) not in sys.path:
        sys.path.append(str(file.parent))
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise ImportError(f"cannot import task file {str(file)!r} (from {spec!r}): {exc}") from exc
    except SyntaxError as exc:  # the user's file: say where, no traceback of ours is needed
        raise ImportError(f"task file {exc.filename or str(file)!r} line {exc.lineno}: {exc.msg}; "
                          "fix the Python syntax there (`python -m py_compile FILE` shows it)") from None
    loaded = getattr(module, "__file__", None)
    if loaded is None or Path(loaded).resolve() != file:
        raise ImportError(f"task file {str(file)!r}: the module name {module_name!r} is already taken by "
                          f"{loaded or 'a built-in module'}; rename the file (e.g. '{module_name}_task.py')")
    try:
        return getattr(module, attr)
    except AttributeError:
        names = [n for n in vars(module) if isinstance(vars(module)[n], type)]
        close = difflib.get_close_matches(attr, names, n=1)
        hint = f" Did you mean {close[0]!r}?" if close else ""
        raise ImportError(f"task file {str(file)!r} has no class {attr!r} (from {spec!r}).{hint}") from None


def _import_path(path: str) -> Any:
    if is_file_spec(path):
        file, _, attr = path.rpartition(":")
        return _import_file(file, attr, path)
    module_name, _, attr = path.partition(":")
    if not module_name or not attr:
        raise ValueError(f"import path {path!r} must look like 'package.module:ClassName' or "
                         "'path/to/file.py:ClassName'")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise ImportError(f"cannot import task module {module_name!r} (from {path!r}): {exc}") from exc
    try:
        return getattr(module, attr)
    except AttributeError:
        raise ImportError(f"module {module_name!r} has no attribute {attr!r} (from {path!r})") from None


def _entry_points() -> dict[str, Any]:
    return {ep.name: ep for ep in entry_points(group=ENTRY_POINT_GROUP)}


def known_tasks() -> list[str]:
    """All task names that :func:`get_task_class` resolves without an import path."""
    return sorted(set(_BUILTINS) | set(_REGISTERED) | set(_entry_points()))


def get_task_class(name: str) -> type[BaseTaskAdapter]:
    """Resolve a task name or ``module:Class`` path to its adapter class."""
    if ":" in name:
        cls = _import_path(name)
    elif name in _REGISTERED:
        return _REGISTERED[name]
    elif name in _BUILTINS:
        cls = _import_path(_BUILTINS[name])
    elif name in (eps := _entry_points()):
        cls = eps[name].load()
    else:
        known = known_tasks()
        close = difflib.get_close_matches(name, known, n=1)
        hint = f" Did you mean {close[0]!r}?" if close else ""
        raise KeyError(
            f"unknown task {name!r}; known tasks: {', '.join(known)}.{hint} "
            "A third-party task can also be given as 'package.module:AdapterClass' or "
            "'path/to/file.py:AdapterClass'."
        )
    if not (isinstance(cls, type) and issubclass(cls, BaseTaskAdapter)):
        raise TypeError(f"task {name!r} resolved to {cls!r}, which is not a {_KINDS}")
    return cls


def make_task(name: str, options: Any = None, *, seed: int = 0) -> BaseTaskAdapter:
    """Instantiate a task adapter by name with its options (a mapping or the Options dataclass)."""
    return get_task_class(name)(options, seed=seed)
