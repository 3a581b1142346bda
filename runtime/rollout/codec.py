"""JSON documents for everything a rollout worker sends back (never pickle), and the worker settings
the learner sends a worker outside Ray (``remote``). Ray workers reply with the same documents.

A worker's reply is data from a machine the learner may not trust: it is decoded here with
``json.loads`` and checked field by field, so a malformed reply is a counted error, not a crash and
never code execution. Rollout groups inside stay plain dicts; the driver's admission gate rebuilds and
checks them record by record later, as for any worker. The settings travel the other way, checked the
same way on arrival: a field the worker does not know is refused rather than silently ignored.
"""

from __future__ import annotations

import dataclasses
import json
import math
from typing import Any

import orjson

from echo2_sdk.adapter import Example
from echo2_sdk.config import VLLMOptions
from echo2_sdk.runtime.rollout.backends.base import SamplingParams
from echo2_sdk.runtime.rollout.base import GenerationResult, WorkerSettings

MAX_RESULT_BYTES = 256 * 1024 * 1024
"""A generate reply larger than this is refused unread (a sane one is a few MB)."""
MAX_INSTALLED = 1024
"""Installs one reply may report (one per snapshot published since the worker's previous reply): the
learner keeps every one for the run's statistics, so the count must not be the worker's to choose."""
MAX_REWARD_STATUSES, MAX_STATUS_CHARS = 64, 64
"""Distinct reward outcomes one reply may report, and their name length: they are counted for the whole
run (a handful exist: ``ok``, ``timeout``, ...)."""


class MalformedReply(ValueError):
    """A worker's reply is not the documented JSON document."""


class MalformedSettings(ValueError):
    """Worker settings received over the wire are not the documented JSON document."""


def example_to_dict(example: Example) -> dict:
    return {"id": example.id, "prompt": example.prompt, "answer": example.answer, "meta": dict(example.meta)}


def example_from_dict(data: Any) -> Example:
    try:
        meta = data.get("meta") or {}
        if not isinstance(data["id"], str) or not isinstance(data["prompt"], str) or not isinstance(meta, dict):
            raise TypeError("id and prompt must be strings, meta a mapping")
        return Example(id=data["id"], prompt=data["prompt"], answer=data.get("answer"), meta=meta)
    except (KeyError, TypeError, AttributeError) as exc:
        raise MalformedReply(f"malformed example {str(data)[:120]!r}: {exc}") from None


def result_document(result) -> dict[str, Any]:
    """``GenerationResult`` → the JSON-ready document (version keys of ``installed`` become strings)."""
    # Shallow: asdict() would deep-copy every token list (10× the cost of the encoding itself).
    doc = {f.name: getattr(result, f.name) for f in dataclasses.fields(result)}
    doc["installed"] = {str(v): t for v, t in result.installed.items()}
    return doc


def result_to_json(result) -> bytes:
    """``GenerationResult`` → UTF-8 JSON, the reply a worker sends (:func:`result_document`).

    Encoded by orjson: the document ``json.dumps`` writes, every float the same double (spelt shortest:
    ``1e-9``, not ``1e-09``), at a twentieth of the time (0.07 ms against 1.45 ms for the quickstart's 76 KB
    reply), time a worker otherwise spends holding the GIL beside its next generation. A non-finite float
    is written ``null`` (the stdlib writes ``NaN``, which is not JSON); the learner refuses the record
    either way. A document orjson cannot write (an integer past 64 bits, numpy's scalars) goes to the stdlib."""
    doc = result_document(result)
    try:
        return orjson.dumps(doc, option=orjson.OPT_NON_STR_KEYS)
    except TypeError:
        return json.dumps(doc, separators=(",", ":")).encode()


_NUMBERS = ("num_tokens", "t_generate_s", "t_reward_s", "t_throttle_s")


def result_from_json(data: bytes | str):
    """Decode and check a worker's generate reply; :class:`MalformedReply` says what is wrong."""

    if isinstance(data, (bytes, bytearray)) and len(data) > MAX_RESULT_BYTES:
        raise MalformedReply(f"reply of {len(data)} bytes exceeds the {MAX_RESULT_BYTES}-byte limit")
    try:
        doc = json.loads(data)
    # ValueError: an integer of more digits than Python converts; RecursionError: nesting too deep.
    except (UnicodeDecodeError, ValueError, TypeError, RecursionError) as exc:
        raise MalformedReply(f"reply is not JSON ({type(data).__name__}): {str(exc)[:200]}") from None
    if not isinstance(doc, dict):
        raise MalformedReply(f"reply must be a JSON object, got {type(doc).__name__}")
    known = {f.name for f in dataclasses.fields(GenerationResult)}
    unknown = sorted(set(doc) - known)
    if unknown:
        raise MalformedReply(f"reply has unknown fields {unknown[:5]}; known: {sorted(known)}")
    missing = sorted(k for k in ("worker", "groups", "version", *_NUMBERS) if k not in doc)
    if missing:
        raise MalformedReply(f"reply lacks fields {missing}")
    if not isinstance(doc["worker"], str) or not isinstance(doc["groups"], list):
        raise MalformedReply("reply: 'worker' must be a string and 'groups' a list")
    if not all(isinstance(g, dict) for g in doc["groups"]):
        raise MalformedReply("reply: every entry of 'groups' must be a JSON object")
    if not _is_int(doc["version"]) or doc["version"] < 0:
        raise MalformedReply(f"reply: version must be an integer ≥ 0, got {doc['version']!r}")
    for key in _NUMBERS:
        if not _is_number(doc[key]) or doc[key] < 0:
            raise MalformedReply(f"reply: {key} must be a finite number ≥ 0, got {str(doc[key])[:40]}")
    if not _is_int(doc["num_tokens"]):
        raise MalformedReply(f"reply: num_tokens must be an integer, got {str(doc['num_tokens'])[:40]}")
    status = doc.get("reward_status", {})
    if (not isinstance(status, dict) or len(status) > MAX_REWARD_STATUSES
            or not all(isinstance(k, str) and len(k) <= MAX_STATUS_CHARS and _is_int(n) and n >= 0
                       for k, n in status.items())):
        raise MalformedReply(f"reply: reward_status must map at most {MAX_REWARD_STATUSES} short strings to "
                             f"counts ≥ 0, got {str(status)[:120]}")
    detail = doc.get("reward_detail", {})
    if not isinstance(detail, dict) or not all(isinstance(k, str) and isinstance(t, str) for k, t in detail.items()):
        raise MalformedReply(f"reply: reward_detail must map statuses to texts, got {str(detail)[:120]}")
    doc["reward_detail"] = {k: t[:500] for k, t in list(detail.items())[:8]}  # bounded: it is only shown
    doc["installed"] = _installed(doc.get("installed", {}))
    for key in ("node",):
        if key in doc and not isinstance(doc[key], str):
            raise MalformedReply(f"reply: {key} must be a string")
    return GenerationResult(**doc)


def _installed(raw: Any) -> dict[int, float]:
    """``installed`` of a reply: at most :data:`MAX_INSTALLED` versions ≥ 0 → finite wall times."""
    if not isinstance(raw, dict) or len(raw) > MAX_INSTALLED:
        raise MalformedReply(f"reply: installed must map at most {MAX_INSTALLED} versions to times, "
                             f"got {str(raw)[:120]}")
    try:
        installed = {int(v): float(t) for v, t in raw.items()}
    except (TypeError, ValueError, OverflowError):
        raise MalformedReply(f"reply: installed must map versions to times, got {str(raw)[:120]}") from None
    if not all(v >= 0 and math.isfinite(t) for v, t in installed.items()):
        raise MalformedReply(f"reply: installed needs versions ≥ 0 and finite times, got {str(raw)[:120]}")
    return installed


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value: Any) -> bool:
    if not isinstance(value, (int, float)) or isinstance(value, bool):
        return False
    try:
        return math.isfinite(value)
    except OverflowError:  # a JSON integer too large for a float
        return False


# ---- worker settings (learner -> worker) ------------------------------------------------------------
def settings_to_dict(settings: WorkerSettings) -> dict:
    """``WorkerSettings`` → a JSON-able document (the inverse of :func:`settings_from_dict`)."""
    doc = {f.name: getattr(settings, f.name) for f in dataclasses.fields(settings)}
    doc["task_options"] = dict(settings.task_options)
    doc["sampling"] = dataclasses.asdict(settings.sampling)
    doc["vllm_options"] = None if settings.vllm_options is None else dataclasses.asdict(settings.vllm_options)
    return doc


def _text(value: Any) -> bool:
    return isinstance(value, str)


def _count(value: Any) -> bool:
    return _is_int(value) and value >= 1


def _positive(value: Any) -> bool:
    return _is_number(value) and value > 0


_SETTINGS_CHECKS = {
    "model_path": (_text, "a string"),
    "task_name": (_text, "a string"),
    "task_options": (lambda v: isinstance(v, dict) and all(isinstance(k, str) for k in v), "a mapping with string keys"),
    "sampling": (lambda v: isinstance(v, dict), "a mapping"),
    "samples_per_prompt": (_count, "an integer ≥ 1"),
    "seed": (_is_int, "an integer"),
    "dtype": (_text, "a string"),
    "threads": (_count, "an integer ≥ 1"),
    "reward_timeout_s": (_positive, "a finite number > 0"),
    "max_answer_chars": (_count, "an integer ≥ 1"),
    "backend": (_text, "a string"),
    "device": (_text, "a string"),
    "vllm_options": (lambda v: v is None or isinstance(v, dict), "a mapping or null"),
    "max_tokens_per_s": (lambda v: v is None or _positive(v), "a finite number > 0 or null"),
    "league_size": (_count, "an integer ≥ 1"),
    "league_every_versions": (_count, "an integer ≥ 1"),
}


def settings_from_dict(doc: Any) -> WorkerSettings:
    """Check and rebuild :func:`settings_to_dict` output; :class:`MalformedSettings` says what is wrong."""
    if not isinstance(doc, dict):
        raise MalformedSettings(f"worker settings must be a JSON object, got {type(doc).__name__}")
    known = {f.name: f for f in dataclasses.fields(WorkerSettings)}
    unknown = sorted(set(doc) - set(known))
    if unknown:
        raise MalformedSettings(f"worker settings have unknown fields {unknown[:5]}; known: {sorted(known)}")
    missing = sorted(k for k, f in known.items() if f.default is dataclasses.MISSING and k not in doc)
    if missing:
        raise MalformedSettings(f"worker settings lack fields {missing}")
    for key, value in doc.items():
        check, expected = _SETTINGS_CHECKS[key]
        if not check(value):
            raise MalformedSettings(f"worker settings: {key} must be {expected}, got {str(value)[:120]!r}")
    values = dict(doc)
    values["sampling"] = _nested(SamplingParams, doc["sampling"], "sampling")
    if doc.get("vllm_options") is not None:
        values["vllm_options"] = _nested(VLLMOptions, doc["vllm_options"], "vllm_options")
    return WorkerSettings(**values)


_SCALARS = {"int": _is_int, "float": _is_number, "bool": lambda v: isinstance(v, bool), "None": lambda v: v is None}


def _nested(cls: type, doc: dict, where: str) -> Any:
    """A frozen dataclass of scalars from its fields, each checked against its annotation (``int``,
    ``float``, ``bool``, ``X | None``); unknown fields and values the class's own checks refuse are errors."""
    fields = {f.name: f for f in dataclasses.fields(cls)}
    unknown = sorted(set(doc) - set(fields))
    if unknown:
        raise MalformedSettings(f"worker settings: {where} has unknown fields {unknown[:5]}; known: {sorted(fields)}")
    for key, value in doc.items():
        kinds = [k.strip() for k in str(fields[key].type).split("|")]
        if not any(_SCALARS.get(kind, lambda v: False)(value) for kind in kinds):
            raise MalformedSettings(f"worker settings: {where}.{key} must be {' or '.join(kinds)}, got {value!r}")
    try:
        return cls(**doc)
    except (TypeError, ValueError) as exc:
        raise MalformedSettings(f"worker settings: {where}: {exc}") from None
