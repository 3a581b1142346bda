"""Task registry: names → ``TaskAdapter`` classes.

Three ways in, looked up in this order:
1. built-ins (``arith``, ``aime24``, ``poker``, later ``moba``), imported lazily;
2. classes registered at import time with ``@register_task("name")``;
3. third-party packages declaring an entry point in the ``echo2.tasks`` group
   (``[project.entry-points."echo2.tasks"] mytask = "mypkg.task:MyAdapter"``);
and, anywhere a task name is accepted, an import path ``"module:Class"``.
"""

from __future__ import annotations

import difflib
import importlib
from importlib.metadata import entry_points
from typing import Any

from echo2_sdk.adapter import TaskAdapter

ENTRY_POINT_GROUP = "echo2.tasks"

_BUILTINS: dict[str, str] = {
    "arith": "echo2_sdk.adapters.arith:ArithAdapter",
    "aime24": "echo2_sdk.adapters.aime24:Aime24Adapter",
    "poker": "echo2_sdk.adapters.poker:PokerAdapter",
}
_REGISTERED: dict[str, type[TaskAdapter]] = {}


def register_task(name: str):
    """Class decorator: make a ``TaskAdapter`` subclass available under ``name``."""

    def deco(cls: type[TaskAdapter]) -> type[TaskAdapter]:
        if not (isinstance(cls, type) and issubclass(cls, TaskAdapter)):
            raise TypeError(f"@register_task({name!r}) expects a TaskAdapter subclass, got {cls!r}")
        existing = _REGISTERED.get(name)
        if existing is not None and existing is not cls and _qualname(existing) != _qualname(cls):
            raise ValueError(f"task {name!r} is already registered by {_qualname(existing)}")
        cls.name = cls.name or name
        _REGISTERED[name] = cls
        return cls

    return deco


def _qualname(cls: type) -> str:
    return f"{cls.__module__}:{cls.__qualname__}"


def _import_path(path: str) -> Any:
    module_name, _, attr = path.partition(":")
    if not module_name or not attr:
        raise ValueError(f"import path {path!r} must look like 'package.module:ClassName'")
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


def get_task_class(name: str) -> type[TaskAdapter]:
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
            "A third-party task can also be given as 'package.module:AdapterClass'."
        )
    if not (isinstance(cls, type) and issubclass(cls, TaskAdapter)):
        raise TypeError(f"task {name!r} resolved to {cls!r}, which is not a TaskAdapter subclass")
    return cls


def make_task(name: str, options: Any = None, *, seed: int = 0) -> TaskAdapter:
    """Instantiate a task adapter by name with its options (a mapping or the Options dataclass)."""
    return get_task_class(name)(options, seed=seed)
