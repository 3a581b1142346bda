"""Framing and authentication between the learner side and a rollout worker outside Ray.

Every frame: ``header length u32 | payload length u64 | JSON header | payload bytes``. The JSON header
carries the operation and a request id; the optional raw payload carries safetensors snapshot bytes
learner → worker, and worker → learner only a generate reply's JSON document (flagged ``json_payload``,
size-capped, handed unparsed to the driver, which decodes it with ``json.loads`` — never anything else),
so the learner parses no binary data from workers and nothing is encoded twice on the hot path. Both sides prove knowledge of a shared token before anything else
(HMAC-SHA256 over the other side's fresh nonce and a role label), so neither a stranger nor a replayed
conversation can drive a worker or feed the learner. The link is authenticated, not encrypted: run it
over a VPN or SSH tunnel when prompts must stay private (README "Trust model").
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import secrets
import socket
import struct
import threading
import time
from typing import Container

PREFIX = struct.Struct("!IQ")
MAX_HEADER_BYTES = 64 * 1024 * 1024
"""JSON headers (requests with their prompts, small replies); anything larger is refused unread."""
MAX_PAYLOAD_BYTES = 64 * 1024**3
AUTH_FRAME_BYTES = 1024
"""Before authentication only a hello or a proof is read (about 100 bytes each, never a payload): a peer
that has not proven the token cannot make the other side buffer more than this."""
MAX_REPLY_HEADER_BYTES = 1024 * 1024
"""A worker's reply headers (a value or an error with a short trace); its generate document travels as
the payload, capped separately (``codec.MAX_RESULT_BYTES``)."""
PREALLOCATE_BYTES = 1024 * 1024
"""Larger frames are read into a buffer that grows as their bytes arrive, so memory follows what a peer
sends, not the size it claims."""
PROTOCOL = "echo2-worker/2"
"""Version 2: ``init`` carries typed worker settings (``codec.settings_to_dict``); a peer speaking another
version is refused at the hello."""
TOKEN_ENV = "ECHO2_WORKER_TOKEN"


class ProtocolError(ConnectionError):
    """The peer broke the protocol (bad frame, failed authentication, oversized message)."""


def token_from_env(name: str = TOKEN_ENV) -> bytes:
    value = os.environ.get(name, "")
    if len(value) < 16:
        raise ProtocolError(
            f"environment variable {name} must hold the shared worker token (≥ 16 characters), "
            f"got {len(value)} characters; generate one with `python -c \"import secrets; print(secrets.token_hex(32))\"` "
            "and export it on the learner and on the worker machine"
        )
    return value.encode()


class FramedSocket:
    """A blocking socket speaking the frame format; ``send`` is thread-safe."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self._send_lock = threading.Lock()

    def send(self, header: dict, payload: bytes | memoryview = b"") -> None:
        head = json.dumps(header, separators=(",", ":")).encode()
        with self._send_lock:
            self.sock.sendall(PREFIX.pack(len(head), len(payload)) + head)
            if payload:
                self.sock.sendall(payload)

    def recv(self, *, allow_payload: bool = True, max_payload_bytes: int = MAX_PAYLOAD_BYTES,
             max_header_bytes: int = MAX_HEADER_BYTES, payload_ops: Container[str] | None = None,
             deadline: float | None = None) -> tuple[dict, bytes]:
        """One frame. Sizes are checked against the limits before anything is read; ``payload_ops``: the
        operations that may carry a payload (None: any); ``deadline`` (time.monotonic()): the whole
        frame must have arrived by then, however slowly the peer trickles it (else socket.timeout)."""
        head_len, payload_len = PREFIX.unpack(self._exact(PREFIX.size, deadline))
        if head_len > max_header_bytes or payload_len > max_payload_bytes:
            raise ProtocolError(f"frame of {head_len} + {payload_len} bytes exceeds the limits "
                                f"({max_header_bytes} + {max_payload_bytes})")
        if payload_len and not allow_payload:
            raise ProtocolError("the peer sent a binary payload where only JSON is allowed")
        try:
            header = json.loads(self._exact(head_len, deadline))
        except (UnicodeDecodeError, ValueError, RecursionError) as exc:
            raise ProtocolError(f"frame header is not JSON: {str(exc)[:200]}") from None
        if not isinstance(header, dict) or not isinstance(header.get("op"), str):
            raise ProtocolError(f"frame header must be an object with an 'op' string, got {str(header)[:120]}")
        if payload_len and payload_ops is not None and header["op"] not in payload_ops:
            raise ProtocolError(f"operation {header['op'][:40]!r} may not carry a payload")
        return header, self._exact(payload_len, deadline) if payload_len else b""

    def _exact(self, n: int, deadline: float | None = None) -> bytes:
        # The buffer starts at PREALLOCATE_BYTES and doubles as bytes arrive: a claimed size costs
        # nothing until it is sent, and a real snapshot is still read straight into one buffer.
        buf = bytearray(min(n, PREALLOCATE_BYTES))
        got = 0
        while got < n:
            if got == len(buf):
                buf[got:] = bytes(min(len(buf), n - got))
            self._arm(deadline)
            view = memoryview(buf)[got:]
            try:
                k = self.sock.recv_into(view)
            finally:
                view.release()  # a bytearray cannot grow while a view of it is held
            if k == 0:
                raise ConnectionError("connection closed by the peer")
            got += k
        return bytes(buf)

    def _arm(self, deadline: float | None) -> None:
        """Before each read: the time left until ``deadline`` becomes the socket timeout."""
        if deadline is not None:
            left = deadline - time.monotonic()
            if left <= 0:
                raise socket.timeout("the peer did not send the frame in time")
            self.sock.settimeout(left)

    def close(self) -> None:
        try:
            self.sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self.sock.close()


def _mac(token: bytes, nonce: str, role: str) -> str:
    return hmac.new(token, f"{PROTOCOL}|{role}|{nonce}".encode(), hashlib.sha256).hexdigest()


def authenticate(conn: FramedSocket, token: bytes, role: str, timeout_s: float = 30.0) -> None:
    """Mutual challenge-response; ``role`` is "learner" or "worker". Raises ProtocolError on failure.

    ``timeout_s`` bounds the whole exchange, not each read (a peer sending a byte now and then cannot
    stretch it), and only tiny frames are read until the peer has proven the token."""
    other = "worker" if role == "learner" else "learner"
    previous = conn.sock.gettimeout()
    conn.sock.settimeout(timeout_s)
    deadline = time.monotonic() + timeout_s
    small = dict(allow_payload=False, max_header_bytes=AUTH_FRAME_BYTES, max_payload_bytes=0, deadline=deadline)
    try:
        mine = secrets.token_hex(16)
        conn.send({"op": "hello", "protocol": PROTOCOL, "role": role, "nonce": mine})
        hello, _ = conn.recv(**small)
        if hello.get("op") != "hello" or hello.get("protocol") != PROTOCOL or hello.get("role") != other:
            raise ProtocolError(f"expected a {PROTOCOL} hello from the {other}, got {str(hello)[:160]}")
        conn.send({"op": "proof", "mac": _mac(token, str(hello.get("nonce")), role)})
        proof, _ = conn.recv(**small)
        if proof.get("op") != "proof" or not hmac.compare_digest(str(proof.get("mac")), _mac(token, mine, other)):
            raise ProtocolError(f"the {other} failed authentication: its token differs from ours ({TOKEN_ENV})")
    except (socket.timeout, OSError) as exc:  # OSError: ConnectionError, a reset, a closed socket
        if isinstance(exc, ProtocolError):
            raise
        raise ProtocolError(f"authentication with the {other} did not complete: {exc or 'timed out'}") from None
    finally:
        conn.sock.settimeout(previous)
