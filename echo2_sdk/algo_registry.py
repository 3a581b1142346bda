"""The name → function registry behind :mod:`echo2_sdk.algos` (advantage estimators, policy losses):
``register(name)`` returns the function unchanged; registering the same function again (a module reload)
is allowed, another function under a taken name raises ValueError; an unknown name raises
:class:`UnknownAlgorithmError` (a KeyError and a ValueError) listing the known names and the closest one.
"""

from __future__ import annotations

import difflib
from typing import Callable


class UnknownAlgorithmError(KeyError, ValueError):
    """A lookup of an unregistered name (catchable as KeyError or ValueError)."""

    def __str__(self) -> str:  # KeyError would otherwise print the message inside quotes
        return str(self.args[0]) if self.args else ""


class AlgorithmRegistry:
    """Name → function for one kind of algorithm (e.g. ``"policy loss"``), with its decorator's name
    for error messages."""

    def __init__(self, kind: str, plural: str, decorator: str) -> None:
        self.kind, self.plural, self.decorator = kind, plural, decorator
        self._functions: dict[str, Callable] = {}

    def register(self, name: str) -> Callable[[Callable], Callable]:
        """Decorator registering a function under ``name``; returns the function unchanged."""
        if not isinstance(name, str) or not name:
            raise ValueError(f"{self.kind} name must be a non-empty string, got {name!r}")

        def decorator(fn: Callable) -> Callable:
            if not callable(fn):
                raise TypeError(f"{self.decorator}({name!r}) needs a function, got {fn!r}")
            existing = self._functions.get(name)
            if existing is not None and _qualname(existing) != _qualname(fn):
                raise ValueError(f"{self.kind} {name!r} is already registered to {_qualname(existing)}; "
                                 f"pick another name for {_qualname(fn)}")
            self._functions[name] = fn
            return fn

        return decorator

    def get(self, name: str) -> Callable:
        """The function registered under ``name``; :class:`UnknownAlgorithmError` otherwise."""
        try:
            return self._functions[name]
        except (KeyError, TypeError):
            known = self.names()
            close = difflib.get_close_matches(str(name), known, n=1)
            hint = f" Did you mean {close[0]!r}?" if close else ""
            raise UnknownAlgorithmError(f"unknown {self.kind} {name!r}.{hint} Known {self.plural}: {known}. "
                                        f"Register new ones with @{self.decorator}(name).") from None

    def names(self) -> list[str]:
        """Sorted registered names."""
        return sorted(self._functions)


def _qualname(fn: Callable) -> str:
    return f"{getattr(fn, '__module__', '?')}.{getattr(fn, '__qualname__', repr(fn))}"
