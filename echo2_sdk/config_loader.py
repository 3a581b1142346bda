"""Typed construction of frozen dataclasses from plain mappings (YAML), with ``--set a.b=c`` overrides.

Errors name the dotted path, the offending value, what was expected and — for unknown keys — the
closest valid key, so that a typo in a config file is fixed in one read.
"""

from __future__ import annotations

import dataclasses
import difflib
import re
import types
import typing
from pathlib import Path
from typing import Any, Mapping

import yaml


class ConfigError(ValueError):
    """A config value or key is invalid. The message says where, what and how to fix it."""


class NumberLoader(yaml.SafeLoader):
    """PyYAML's safe loader, reading numbers in the forms people write.

    YAML 1.1 (what PyYAML implements) reads ``1e-6`` and ``3e-4`` as *strings*: its float needs a dot
    (``1.0e-6``). Every user types the short form, so a plain decimal mantissa with an exponent is a
    float here too (``1_000`` and ``1_000.5`` already were numbers). Used for config files and ``--set``
    values alike, so that both read the same text the same way.
    """


NumberLoader.add_implicit_resolver(
    "tag:yaml.org,2002:float",
    re.compile(r"^[-+]?(?:[0-9][0-9_]*(?:\.[0-9_]*)?|\.[0-9_]+)[eE][-+]?[0-9]+$"),
    list("-+.0123456789"),
)


def load_yaml_text(stream: Any) -> Any:
    """``yaml.safe_load`` with :class:`NumberLoader` (``1e-6`` is a number)."""
    return yaml.load(stream, Loader=NumberLoader)


def _type_name(tp: Any) -> str:
    if isinstance(tp, type):
        return tp.__name__
    return str(tp).replace("typing.", "")


def _coerce(value: Any, tp: Any, path: str) -> Any:
    origin = typing.get_origin(tp)
    args = typing.get_args(tp)
    if tp is Any:
        return value
    if origin in (typing.Union, types.UnionType):
        if value is None and type(None) in args:
            return None
        errors = []
        for arg in (a for a in args if a is not type(None)):
            try:
                return _coerce(value, arg, path)
            except ConfigError as exc:
                errors.append(str(exc))
        raise ConfigError(f"{path}: {value!r} is not a valid {_type_name(tp)}")
    if origin is typing.Literal:
        if value not in args:
            close = difflib.get_close_matches(str(value), [str(a) for a in args], n=1)
            hint = f" Did you mean {close[0]!r}?" if close else ""
            raise ConfigError(f"{path}: {value!r} is not one of {list(args)}.{hint}")
        return value
    if dataclasses.is_dataclass(tp):
        if isinstance(value, tp):
            return value
        if not isinstance(value, Mapping):
            raise ConfigError(f"{path}: expected a mapping for {tp.__name__}, got {value!r}")
        return build_dataclass(tp, value, path=path)
    if origin in (tuple, list):
        if isinstance(value, (str, bytes)) or not isinstance(value, (list, tuple)):
            raise ConfigError(f"{path}: expected a list, got {value!r} ({type(value).__name__})")
        if origin is tuple and len(args) == 2 and args[1] is Ellipsis:
            item_types = [args[0]] * len(value)
        elif origin is tuple and args:
            if len(args) != len(value):
                raise ConfigError(f"{path}: expected {len(args)} items, got {len(value)}: {value!r}")
            item_types = list(args)
        else:
            item_types = [args[0] if args else Any] * len(value)
        items = [_coerce(v, t, f"{path}[{i}]") for i, (v, t) in enumerate(zip(value, item_types))]
        return tuple(items) if origin is tuple else items
    if origin is dict or tp is dict:
        if not isinstance(value, Mapping):
            raise ConfigError(f"{path}: expected a mapping, got {value!r}")
        return dict(value)
    if tp is bool:
        if isinstance(value, bool):
            return value
        raise ConfigError(f"{path}: expected true/false, got {value!r} ({type(value).__name__})")
    if tp is int:
        if isinstance(value, int) and not isinstance(value, bool):
            return value
        if isinstance(value, float) and value.is_integer():
            return int(value)
        raise ConfigError(f"{path}: expected an integer, got {value!r} ({type(value).__name__})")
    if tp is float:
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return float(value)
        raise ConfigError(f"{path}: expected a number, got {value!r} ({type(value).__name__})")
    if tp is str:
        if isinstance(value, str):
            return value
        raise ConfigError(f"{path}: expected a string, got {value!r} ({type(value).__name__})")
    if isinstance(tp, type) and isinstance(value, tp):
        return value
    raise ConfigError(f"{path}: cannot read {value!r} as {_type_name(tp)}")


def build_dataclass(cls: type, data: Mapping[str, Any], path: str = "") -> Any:
    """Build the frozen dataclass ``cls`` from ``data``, checking keys and types recursively."""
    if not isinstance(data, Mapping):
        raise ConfigError(f"{path or cls.__name__}: expected a mapping, got {data!r}")
    hints = typing.get_type_hints(cls)
    fields = {f.name: f for f in dataclasses.fields(cls) if f.init}
    kwargs = {}
    for key, value in data.items():
        where = f"{path}.{key}" if path else str(key)
        if key not in fields:
            close = difflib.get_close_matches(str(key), list(fields), n=1, cutoff=0.5)
            prefix = f"{path}." if path else ""
            hint = f" Did you mean {prefix + close[0]!r}?" if close else ""
            raise ConfigError(
                f"unknown config key {where!r}.{hint} Valid keys here: {', '.join(sorted(fields))}"
            )
        kwargs[key] = _coerce(value, hints[key], where)
    try:
        obj = cls(**kwargs)
    except (TypeError, ValueError) as exc:
        if isinstance(exc, ConfigError):
            raise
        raise ConfigError(f"{path or cls.__name__}: {exc}") from exc
    return obj


def to_dict(obj: Any) -> Any:
    """A dataclass tree as plain dicts/lists (tuples become lists), e.g. for YAML/JSON output."""
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return {f.name: to_dict(getattr(obj, f.name)) for f in dataclasses.fields(obj)}
    if isinstance(obj, (list, tuple)):
        return [to_dict(v) for v in obj]
    if isinstance(obj, Mapping):
        return {k: to_dict(v) for k, v in obj.items()}
    return obj


def parse_override(text: str) -> tuple[list[str], Any]:
    """Parse ``a.b.c=value`` into (["a", "b", "c"], value); the value is read as YAML."""
    key, sep, raw = text.partition("=")
    if not sep or not key.strip():
        raise ConfigError(f"--set {text!r}: expected KEY=VALUE, e.g. --set train.steps=50")
    try:
        value = load_yaml_text(raw) if raw.strip() else ""
    except yaml.YAMLError as exc:
        raise ConfigError(f"--set {text!r}: value is not valid YAML ({exc})") from exc
    return key.strip().split("."), value


def apply_overrides(data: dict, overrides: list[str]) -> dict:
    """Apply ``--set`` overrides to a nested dict (in place) and return it."""
    for text in overrides:
        keys, value = parse_override(text)
        node = data
        for k in keys[:-1]:
            child = node.get(k)
            if child is None:
                child = node[k] = {}
            if not isinstance(child, dict):
                raise ConfigError(f"--set {text!r}: {k!r} holds a value, not a section")
            node = child
        node[keys[-1]] = value
    return data


def read_yaml_file(path: str, what: str = "config file", example: str | None = None) -> Any:
    """The YAML document in ``path``; a ConfigError naming ``what`` (and an example) when it is missing or broken."""
    try:
        with open(path) as fh:
            return load_yaml_text(fh)
    except FileNotFoundError:
        hint = f" (example: {example})" if example else ""
        raise ConfigError(f"{what} {path!r} does not exist{hint}") from None
    except IsADirectoryError:
        inside = sorted(p.name for p in Path(path).glob("*.y*ml"))[:3]
        hint = f", e.g. {str(Path(path) / inside[0])!r}" if inside else ""
        raise ConfigError(f"{what} {path!r} is a directory; give the YAML file{hint}") from None
    except PermissionError:
        raise ConfigError(f"{what} {path!r} is not readable (permission denied); check its permissions") from None
    except UnicodeDecodeError:
        raise ConfigError(f"{what} {path!r} is not a text file; give a YAML file") from None
    except yaml.YAMLError as exc:
        raise ConfigError(f"{what} {path!r} is not valid YAML: {exc}") from exc


def load_yaml(path: str) -> dict:
    """The mapping in the config file ``path``. An empty file is refused rather than read as "all defaults":
    it is nearly always a wrong or unsaved file, and would start a default run (arith, 100 steps) that
    looks like the intended one. ``{}`` says "all defaults" on purpose (as does leaving out ``--config``)."""
    data = read_yaml_file(path)
    if data is None:
        raise ConfigError(f"config file {path!r} is empty (no YAML document), which would silently train with "
                          "all defaults; check the path, or write `{}` in it to use the defaults on purpose")
    if not isinstance(data, dict):
        raise ConfigError(f"config file {path!r} must hold a mapping at top level, got {type(data).__name__}")
    return data
