"""JSON documents for everything a rollout worker sends back (never pickle).

A worker's reply is data from a machine the learner may not trust: it is decoded here with
``json.loads`` and checked field by field, so a malformed reply is a counted error, not a crash and
never code execution. Rollout groups inside stay plain dicts; ``echo2_sdk.records.group_from_wire`` and
``validate_group`` check them record by record later, as for any worker.
"""

from __future__ import annotations

import dataclasses
import json
import math
from typing import Any

from echo2_sdk.adapter import Example
from echo2_sdk.runtime.rollout.base import GenerationResult

MAX_RESULT_BYTES = 256 * 1024 * 1024
"""A generate reply larger than this is refused unread (a sane one is a few MB)."""


class MalformedReply(ValueError):
    """A worker's reply is not the documented JSON document."""


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


def result_to_json(result) -> bytes:
    """``GenerationResult`` → UTF-8 JSON (version keys of ``installed`` become strings, as JSON needs)."""
    # Shallow: asdict() would deep-copy every token list (10× the cost of the encoding itself).
    doc = {f.name: getattr(result, f.name) for f in dataclasses.fields(result)}
    doc["installed"] = {str(v): t for v, t in result.installed.items()}
    return json.dumps(doc, separators=(",", ":")).encode()


_NUMBERS = ("num_tokens", "t_generate_s", "t_reward_s", "t_throttle_s")


def result_from_json(data: bytes | str):
    """Decode and check a worker's generate reply; :class:`MalformedReply` says what is wrong."""

    if isinstance(data, (bytes, bytearray)) and len(data) > MAX_RESULT_BYTES:
        raise MalformedReply(f"reply of {len(data)} bytes exceeds the {MAX_RESULT_BYTES}-byte limit")
    try:
        doc = json.loads(data)
    except (UnicodeDecodeError, json.JSONDecodeError, TypeError) as exc:
        raise MalformedReply(f"reply is not JSON ({type(data).__name__}): {exc}") from None
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
            raise MalformedReply(f"reply: {key} must be a finite number ≥ 0, got {doc[key]!r}")
    status = doc.get("reward_status", {})
    if not isinstance(status, dict) or not all(isinstance(k, str) and _is_int(n) for k, n in status.items()):
        raise MalformedReply(f"reply: reward_status must map strings to counts, got {str(status)[:120]}")
    installed = doc.get("installed", {})
    try:
        installed = {int(v): float(t) for v, t in installed.items()}
    except (AttributeError, TypeError, ValueError):
        raise MalformedReply(f"reply: installed must map versions to times, got {str(installed)[:120]}") from None
    doc["installed"] = installed
    for key in ("node",):
        if key in doc and not isinstance(doc[key], str):
            raise MalformedReply(f"reply: {key} must be a string")
    return GenerationResult(**doc)


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
