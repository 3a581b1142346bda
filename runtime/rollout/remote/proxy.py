"""``RemoteWorkerProxy``: stands in the rollout pool for a worker outside Ray (``echo2 worker serve``).

It runs as a Ray actor on the learner's node and has the methods of ``RolloutWorker`` that the pool and
the snapshot transports call, each forwarded as one request over the authenticated connection. What
comes back is JSON only; ``generate_wire`` hands the worker's JSON document to the driver unparsed, and
the driver checks it like any worker's (``codec.result_from_json``).
"""

from __future__ import annotations

import concurrent.futures
import itertools
import socket
import threading

from echo2_sdk.config import parse_endpoint
from echo2_sdk.runtime.rollout.base import WorkerSettings
from echo2_sdk.runtime.rollout.codec import MAX_RESULT_BYTES, settings_to_dict
from echo2_sdk.runtime.rollout.remote.protocol import MAX_REPLY_HEADER_BYTES, FramedSocket, ProtocolError, authenticate


class RemoteWorkerError(RuntimeError):
    """The remote worker answered a request with an error (its reason is in the message)."""


class RemoteWorkerProxy:
    def __init__(self, name: str, settings: WorkerSettings, *, endpoint: str, token: str,
                 connect_timeout_s: float = 30.0, init_timeout_s: float = 900.0) -> None:
        self.name, self.endpoint = name, endpoint
        host, port = parse_endpoint(endpoint)
        try:
            sock = socket.create_connection((host, port), timeout=connect_timeout_s)
        except OSError as exc:
            raise ConnectionError(f"rollout worker {name!r}: cannot reach `echo2 worker serve` at {endpoint} ({exc}); "
                                  "is it running and is the port open to the learner?") from None
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.conn = FramedSocket(sock)
        authenticate(self.conn, token.encode(), role="learner", timeout_s=connect_timeout_s)
        sock.settimeout(None)
        self._ids = itertools.count(1)
        self._waiting: dict[int, concurrent.futures.Future] = {}
        self._lock = threading.Lock()
        self._broken: Exception | None = None
        self._reader = threading.Thread(target=self._read_replies, name=f"echo2-proxy-{name}", daemon=True)
        self._reader.start()
        # The remote machine loads ``model_path`` itself (a hub name, or a path that exists there): the
        # packed base-model files shipped to Ray nodes do not travel over this JSON channel.
        info = self._call({"op": "init", "name": name, "settings": settings_to_dict(settings)}, timeout_s=init_timeout_s)
        self.node_id = str(info.get("node", "")) if isinstance(info, dict) else ""

    # ---- the RolloutWorker surface ----------------------------------------------------------
    def generate_wire(self, examples: list[dict]) -> bytes:
        """The worker's JSON document, unparsed: the driver decodes and checks it (``codec.result_from_json``)."""
        return self._call({"op": "generate", "examples": examples}, json_payload=True)

    def install(self, state_dict: dict, version: int) -> int:
        from echo2_sdk.runtime.broadcast.snapshot import state_dict_to_bytes

        return int(self._call({"op": "install", "version": int(version)}, payload=state_dict_to_bytes(state_dict)))

    def broadcast_start(self, node_id: str, control_address: tuple[str, int], public_key: bytes, node_key: bytes,
                        link: dict | None = None, bind_host: str = "127.0.0.1",
                        advertise_host: str | None = None, port_range: tuple[int, int] | None = None) -> tuple[str, int]:
        # The remote machine's own --advertise-host / --broadcast-ports win over these (see server).
        args = {"node_id": node_id, "control_address": list(control_address), "public_key": bytes(public_key).hex(),
                "node_key": bytes(node_key).hex(),
                "link": link, "bind_host": bind_host, "advertise_host": advertise_host,
                "port_range": list(port_range) if port_range else None}
        host, port = self._call({"op": "broadcast_start", "args": args})
        return str(host), int(port)

    def broadcast_receive(self, version: int, timeout_s: float = 600.0) -> int:
        return int(self._call({"op": "broadcast_receive", "version": int(version), "timeout_s": timeout_s},
                              timeout_s=timeout_s + 30))

    def broadcast_close(self) -> None:
        self._call({"op": "broadcast_close"})

    def ping(self) -> str:
        return str(self._call({"op": "ping"}, timeout_s=60))

    def stats(self) -> dict:
        return self._call({"op": "stats"})

    def close(self) -> None:
        try:
            self._call({"op": "close"}, timeout_s=30)
        except Exception:  # already gone: nothing to release remotely
            pass
        self.conn.close()

    # ---- plumbing ------------------------------------------------------------------------------
    def _call(self, header: dict, payload: bytes = b"", timeout_s: float | None = 3600.0, json_payload: bool = False):
        rid = next(self._ids)
        future: concurrent.futures.Future = concurrent.futures.Future()
        with self._lock:
            if self._broken is not None:
                raise ConnectionError(f"rollout worker {self.name!r} at {self.endpoint}: connection lost ({self._broken})")
            self._waiting[rid] = future
        self.conn.send({**header, "id": rid}, payload)
        reply, body = future.result(timeout_s)
        if "error" in reply:
            raise RemoteWorkerError(f"rollout worker {self.name!r} at {self.endpoint}: {header['op']} failed: {reply['error']}")
        if bool(reply.get("json_payload")) != json_payload:
            raise ProtocolError(f"rollout worker {self.name!r}: {header['op']} reply "
                                f"{'lacks' if json_payload else 'carries'} a JSON payload")
        return body if json_payload else reply.get("value")

    def _read_replies(self) -> None:
        try:
            while True:
                # Workers send JSON only: headers, and a generate reply's document as a capped payload.
                header, body = self.conn.recv(max_payload_bytes=MAX_RESULT_BYTES,
                                              max_header_bytes=MAX_REPLY_HEADER_BYTES)
                if header.get("op") != "reply":
                    raise ProtocolError(f"expected a reply, got op {header.get('op')!r}")
                if body and not header.get("json_payload"):
                    raise ProtocolError("a reply carried a payload without declaring it a JSON document")
                with self._lock:
                    future = self._waiting.pop(header.get("id"), None)
                if future is not None:
                    future.set_result((header, body))
        except Exception as exc:  # connection lost or protocol broken: fail every waiting call
            with self._lock:
                self._broken = exc
                waiting, self._waiting = self._waiting, {}
            for future in waiting.values():
                future.set_exception(ConnectionError(f"rollout worker {self.name!r} at {self.endpoint}: {exc}"))
