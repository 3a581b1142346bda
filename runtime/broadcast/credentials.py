"""Who may speak on the broadcast plane: a per-run secret, per-node keys, single-use chunk-port tickets
and a counter of everything refused.

The learner draws a 32-byte run secret when it starts. Each worker receives only its *own* node key,
``HMAC(run secret, node id)``, over a channel it already trusts (its Ray actor call, or the
authenticated ``echo2 worker serve`` link), so holding a key means "I am node X" and nothing more.

- Control channel: the server opens with a fresh challenge; the host answers with one proof per node
  it registers (HMAC under that node's key), and every later line in either direction carries an HMAC
  under a session key derived from both nonces and a per-direction sequence number. A stranger cannot
  register, a replayed line does not verify, and a peer can speak only for the nodes it proved.
- Chunk ports: the learner hands a child a ticket with every parent it assigns (HMAC under the
  *parent's* key over version, child, parent and a nonce). The parent checks it before any work and
  accepts each ticket once, so only a child the learner sent — for a version the learner published —
  is served, and a sniffed HELLO cannot be replayed.
"""

from __future__ import annotations

import hashlib
import hmac
import logging
import secrets
from collections import Counter
from dataclasses import dataclass

log = logging.getLogger(__name__)

KEY_BYTES = 32
MAC_HEX = 32
"""HMAC-SHA256 truncated to 128 bits (32 hex digits): ample against forgery, short on the wire."""


def mac(key: bytes, *parts: bytes | str | int) -> str:
    """HMAC-SHA256 of the parts (each length-prefixed, so ``("ab", "c")`` ≠ ``("a", "bc")``), hex, truncated.

    >>> mac(b"k", "a", 1) == mac(b"k", "a", 1) != mac(b"k", "a1")
    True
    """
    h = hmac.new(key, digestmod=hashlib.sha256)
    for part in parts:
        raw = part if isinstance(part, bytes) else str(part).encode()
        h.update(len(raw).to_bytes(4, "big"))
        h.update(raw)
    return h.hexdigest()[:MAC_HEX]


def macs_equal(a: object, b: str) -> bool:
    """Constant-time comparison; anything that is not a string of the right length is unequal."""
    return isinstance(a, str) and len(a) == len(b) and hmac.compare_digest(a.encode(), b.encode())


def nonce() -> str:
    return secrets.token_hex(16)


@dataclass(frozen=True)
class RunSecret:
    """The learner's secret for one run; never leaves the learner process."""

    secret: bytes

    @classmethod
    def generate(cls) -> "RunSecret":
        return cls(secrets.token_bytes(KEY_BYTES))

    def node_key(self, node_id: str) -> bytes:
        """The key handed to node ``node_id`` (and only to it)."""
        return hmac.new(self.secret, b"echo2-node\0" + node_id.encode(), hashlib.sha256).digest()

    def ticket(self, version: int, child: str, parent: str) -> str:
        """A single-use pass for ``child`` to fetch ``version`` from ``parent``: ``nonce.mac``."""
        n = secrets.token_hex(8)
        return f"{n}.{mac(self.node_key(parent), 'ticket', version, child, parent, n)}"


def ticket_valid(node_key: bytes, version: int, child: str, parent: str, ticket: object) -> bool:
    """Whether ``ticket`` was issued by the learner for ``child`` to fetch ``version`` from ``parent``
    (``node_key`` is the parent's own key)."""
    if not isinstance(ticket, str) or ticket.count(".") != 1:
        return False
    n, tag = ticket.split(".")
    return len(n) == 16 and macs_equal(tag, mac(node_key, "ticket", version, child, parent, n))


def register_proof(node_key: bytes, server_nonce: str, client_nonce: str, node_json: str) -> str:
    """A host's proof that it holds ``node_key``, bound to this connection's nonces and the node's address."""
    return mac(node_key, "register", server_nonce, client_nonce, node_json)


def session_key(node_key: bytes, server_nonce: str, client_nonce: str) -> bytes:
    return hmac.new(node_key, f"session|{server_nonce}|{client_nonce}".encode(), hashlib.sha256).digest()


class LineSigner:
    """MACs for one direction of an authenticated JSON-lines channel: ``mac SP body``, sequence implicit.

    The sequence number advances only on a line that verifies, so a forged or replayed line is dropped
    and the honest stream goes on."""

    def __init__(self, key: bytes, direction: str) -> None:
        self.key, self.direction, self.seq = key, direction, 0

    def sign(self, body: bytes) -> bytes:
        tag = mac(self.key, self.direction, self.seq, body)
        self.seq += 1
        return tag.encode() + b" " + body + b"\n"

    def verify(self, line: bytes) -> bytes | None:
        """The body of ``line`` if its MAC is the next one expected in this direction, else None."""
        tag, _, body = line.rstrip(b"\n").partition(b" ")
        try:
            tag_text = tag.decode("ascii")
        except UnicodeDecodeError:
            return None
        if not macs_equal(tag_text, mac(self.key, self.direction, self.seq, body)):
            return None
        self.seq += 1
        return body


class Refusals:
    """What was refused, by reason; the first of each reason is logged with its detail."""

    def __init__(self, where: str) -> None:
        self.where = where
        self.counts: Counter[str] = Counter()

    def refuse(self, reason: str, detail: str = "") -> None:
        if not self.counts[reason]:
            log.warning("%s: refused (%s) %s; further ones are only counted", self.where, reason, detail[:300])
        self.counts[reason] += 1

    def total(self) -> int:
        return sum(self.counts.values())

    def to_dict(self) -> dict[str, int]:
        return dict(sorted(self.counts.items()))
