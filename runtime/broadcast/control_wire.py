"""Typed, bounded messages of the broadcast control channel, parsed before anything acts on them.

Every field a host sends is checked here — type, range, length — so that the coordinator only ever
sees well-formed values: a malformed message raises ``BadMessage`` (counted and dropped by the
server), never a ``KeyError`` or ``TypeError`` deep inside the learner.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass
from typing import Any, Literal

from echo2_sdk.runtime.broadcast.base import Peer

MAX_VERSION = 2**53
"""Versions count learner steps; anything at or past 2^53 is garbage (and not exact in JSON)."""
MAX_CHUNK = 2**31
MAX_NODES_PER_HOST = 1024
MAX_DETAIL_KEYS = 64
MAX_TEXT = 1024
_NODE_ID = re.compile(r"[A-Za-z0-9_.:@+-]{1,128}")
_HOST = re.compile(r"[A-Za-z0-9_.:%\[\]-]{1,255}")


class BadMessage(ValueError):
    """A control message that is not well formed; ``reason`` is its counter name."""

    def __init__(self, reason: str, detail: str) -> None:
        super().__init__(detail)
        self.reason = reason


def decode_object(body: bytes) -> dict[str, Any]:
    """A JSON object, or BadMessage."""
    try:
        raw = json.loads(body)
    except (UnicodeDecodeError, ValueError) as exc:
        raise BadMessage("malformed", f"not JSON: {exc}") from None
    if not isinstance(raw, dict):
        raise BadMessage("malformed", f"a {type(raw).__name__}, not a JSON object")
    return raw


def encode(message: dict[str, Any]) -> bytes:
    return json.dumps(message, separators=(",", ":"), sort_keys=True).encode()


def node_id(raw: Any, field: str = "node") -> str:
    if not isinstance(raw, str) or not _NODE_ID.fullmatch(raw):
        raise BadMessage("malformed", f"{field}={str(raw)[:80]!r} is not a node id")
    return raw


def integer(raw: Any, field: str, lo: int, hi: int) -> int:
    if isinstance(raw, bool) or not isinstance(raw, int) or not lo <= raw < hi:
        raise BadMessage("malformed", f"{field}={str(raw)[:80]!r} is not an integer in [{lo}, {hi})")
    return raw


def text(raw: Any, field: str) -> str:
    if not isinstance(raw, str):
        raise BadMessage("malformed", f"{field} is a {type(raw).__name__}, not a string")
    return raw[:MAX_TEXT]


def version(raw: Any) -> int:
    return integer(raw, "version", 0, MAX_VERSION)


def scalars(raw: Any, field: str) -> dict[str, float | int | str | bool | None]:
    """A flat dict of finite numbers, short strings, booleans and nulls (a report's statistics)."""
    if not isinstance(raw, dict) or len(raw) > MAX_DETAIL_KEYS:
        raise BadMessage("malformed", f"{field} must be an object of at most {MAX_DETAIL_KEYS} scalars")
    out: dict[str, float | int | str | bool | None] = {}
    for key, value in raw.items():
        if isinstance(value, float) and not math.isfinite(value):
            raise BadMessage("malformed", f"{field}.{str(key)[:40]} is not finite")
        if isinstance(value, str):
            value = value[:MAX_TEXT]
        elif value is not None and not isinstance(value, (int, float, bool)):
            raise BadMessage("malformed", f"{field}.{str(key)[:40]} is a {type(value).__name__}, not a scalar")
        out[str(key)[:64]] = value
    return out


def peer(raw: Any) -> Peer:
    if not isinstance(raw, dict):
        raise BadMessage("malformed", "a node must be an object {id, host, port}")
    host = raw.get("host")
    if not isinstance(host, str) or not _HOST.fullmatch(host):
        raise BadMessage("malformed", f"host={str(host)[:80]!r} is not an address")
    return Peer(node_id(raw.get("id"), "id"), host, integer(raw.get("port"), "port", 1, 65536))


@dataclass(frozen=True)
class Register:
    host: str
    nodes: tuple[Peer, ...]
    nonce: str
    proofs: dict[str, str]
    """Node id → HMAC proof under that node's key (``credentials.register_proof``)."""
    node_json: dict[str, str]
    """Node id → the exact JSON of its entry that the proof covers."""


def parse_register(raw: dict[str, Any]) -> Register:
    if raw.get("op") != "register":
        raise BadMessage("unauthenticated", f"first message is {str(raw.get('op'))[:40]!r}, not register")
    nodes_raw, proofs = raw.get("nodes"), raw.get("proofs")
    if not isinstance(nodes_raw, list) or not 0 < len(nodes_raw) <= MAX_NODES_PER_HOST:
        raise BadMessage("malformed", f"register needs 1..{MAX_NODES_PER_HOST} nodes")
    if not isinstance(proofs, dict):
        raise BadMessage("unauthenticated", "register carries no proofs")
    nonce = raw.get("nonce")
    if not isinstance(nonce, str) or len(nonce) != 32:
        raise BadMessage("malformed", "register needs a 32-hex-digit nonce")
    nodes = tuple(peer(n) for n in nodes_raw)
    if len({n.id for n in nodes}) != len(nodes):
        raise BadMessage("malformed", "register names a node twice")
    return Register(text(raw.get("host", ""), "host"), nodes, nonce, {str(k): v for k, v in proofs.items()},
                    {n.id: encode({"id": n.id, "host": n.host, "port": n.port}).decode() for n in nodes})


@dataclass(frozen=True)
class FindParent:
    req: int
    node: str
    version: int
    failed: str
    reason: str


@dataclass(frozen=True)
class FindHolder:
    req: int
    node: str
    version: int
    chunk: int
    exclude: str


@dataclass(frozen=True)
class Report:
    node: str
    version: int
    event: Literal["installed", "failed"]
    detail: dict[str, float | int | str | bool | None]


@dataclass(frozen=True)
class Bye:
    host: str
    stats: dict[str, float | int | str | bool | None]


HostMessage = FindParent | FindHolder | Report | Bye


def request_id(raw: dict[str, Any]) -> int | None:
    req = raw.get("req")
    return req if isinstance(req, int) and not isinstance(req, bool) and 0 <= req < MAX_VERSION else None


def parse_host_message(raw: dict[str, Any]) -> HostMessage:
    """One message of an authenticated host, typed; BadMessage if any field is missing or out of range."""
    op = raw.get("op")
    if op == "find_parent":
        return FindParent(integer(raw.get("req"), "req", 0, MAX_VERSION), node_id(raw.get("node")),
                          version(raw.get("version")), node_id(raw.get("failed"), "failed"),
                          text(raw.get("reason", ""), "reason"))
    if op == "find_holder":
        return FindHolder(integer(raw.get("req"), "req", 0, MAX_VERSION), node_id(raw.get("node")),
                          version(raw.get("version")), integer(raw.get("chunk"), "chunk", 0, MAX_CHUNK),
                          node_id(raw.get("exclude"), "exclude"))
    if op == "report":
        event = raw.get("event")
        if event not in ("installed", "failed"):
            raise BadMessage("malformed", f"report event {str(event)[:40]!r} is not installed|failed")
        return Report(node_id(raw.get("node")), version(raw.get("version")), event,
                      scalars(raw.get("detail", {}), "detail"))
    if op == "bye":
        return Bye(text(raw.get("host", ""), "host"), scalars(raw.get("stats", {}), "stats"))
    raise BadMessage("unknown_op", f"op {str(op)[:40]!r}")
