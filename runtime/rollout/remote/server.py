"""``echo2 worker serve``: a rollout worker on a machine that does not join the Ray cluster.

The learner's pool reaches it through a ``RemoteWorkerProxy`` (a Ray actor on the learner's node) over
one authenticated TCP connection (``protocol``). The learner sends JSON requests (init, generate, the
broadcast calls) and snapshots as raw safetensors bytes; this process answers with JSON only. It runs a
plain ``RolloutWorker``: same sampling, local reward scoring, snapshot reception over the P2P chain.
One learner connection at a time; when it ends, the worker is torn down and the next one may connect.

The port is open to the network, so the accept loop never waits on a peer: each new connection
authenticates on its own thread within a short deadline, reading only tiny frames until the peer has
proven the token (``protocol.authenticate``), and at most ``MAX_PENDING_HANDSHAKES`` do so at once (a
new connection cuts the oldest, so idle strangers cannot fill the table against a learner). A silent or
slow stranger therefore costs one thread for a few seconds and delays no learner; what the handshakes
refused is counted (``ServeCounters``) and logged.
"""

from __future__ import annotations

import queue
import socket
import threading
import traceback
from dataclasses import dataclass
from typing import Callable

from echo2_sdk.runtime.rollout.remote.protocol import MAX_HEADER_BYTES, FramedSocket, ProtocolError, authenticate

_OPS = ("init", "generate", "install", "broadcast_start", "broadcast_receive", "broadcast_close", "ping", "stats", "close")
HANDSHAKE_TIMEOUT_S = 5.0
"""A connection must have authenticated this long after it was accepted (a learner on the far side of
the world needs two round trips), or it is dropped."""
MAX_PENDING_HANDSHAKES = 64
"""Connections authenticating at once; one more cuts the oldest (which is counted evicted and refused)."""
MAX_WAITING_SESSIONS = 4
"""Authenticated learners waiting for the current session to end; one more is closed (and counted)."""


@dataclass
class ServeCounters:
    """What the accept loop did with the connections it got (written by its threads, read by tests)."""

    accepted: int = 0
    """TCP connections accepted."""
    authenticated: int = 0
    """Connections whose peer proved the token."""
    refused: int = 0
    """Connections that failed or did not finish authentication in time, or were evicted (closed)."""
    evicted: int = 0
    """Handshakes cut because ``MAX_PENDING_HANDSHAKES`` newer connections arrived."""
    busy: int = 0
    """Authenticated learners closed because ``MAX_WAITING_SESSIONS`` already wait for the session."""
    sessions: int = 0
    """Learner sessions served to their end."""


class WorkerSession:
    """Serves one learner connection: each request runs on its own thread, replies carry its id."""

    def __init__(self, conn: FramedSocket, *, allowed_tasks: set[str] | None, log: Callable[[str], None],
                 advertise_host: str | None = None, port_range: tuple[int, int] | None = None) -> None:
        self.conn, self.allowed_tasks, self.log = conn, allowed_tasks, log
        self.advertise_host, self.port_range = advertise_host, port_range
        self.worker = None
        self._init_lock = threading.Lock()
        self._threads: list[threading.Thread] = []

    def run(self) -> None:
        try:
            while True:
                # An authenticated learner is still held to bounded frames; only a snapshot has a payload.
                header, payload = self.conn.recv(max_header_bytes=MAX_HEADER_BYTES, payload_ops=("install",))
                thread = threading.Thread(target=self._handle, args=(header, payload), daemon=True)
                thread.start()
                self._threads = [t for t in self._threads if t.is_alive()] + [thread]
                if header["op"] == "close":
                    thread.join(30)
                    return
        except (ConnectionError, OSError) as exc:
            self.log(f"learner connection ended ({exc})")
        finally:
            self._teardown()

    def _handle(self, header: dict, payload: bytes) -> None:
        rid = header.get("id")
        try:
            op = header["op"]
            if op not in _OPS:
                raise ProtocolError(f"unknown operation {op!r}; known: {', '.join(_OPS)}")
            value = getattr(self, f"_op_{op}")(header, payload)
            if isinstance(value, bytes):  # a generate reply: its JSON document travels as the payload
                reply, body = {"op": "reply", "id": rid, "json_payload": True}, value
            else:
                reply, body = {"op": "reply", "id": rid, "value": value}, b""
        except Exception as exc:  # the learner gets the reason; this process keeps serving
            self.log(f"{header.get('op')!r} failed: {type(exc).__name__}: {exc}")
            reply, body = {"op": "reply", "id": rid, "error": f"{type(exc).__name__}: {exc}",
                           "trace": traceback.format_exc(limit=4)[-2000:]}, b""
        try:
            self.conn.send(reply, body)
        except OSError:
            pass

    def _worker(self):
        if self.worker is None:
            raise RuntimeError("the learner must send 'init' before any other request")
        return self.worker

    # ---- operations ------------------------------------------------------------------------
    def _op_init(self, header: dict, _: bytes) -> dict:
        from echo2_sdk.runtime.rollout.codec import settings_from_dict
        from echo2_sdk.runtime.rollout.worker import RolloutWorker

        name = header.get("name")
        if not isinstance(name, str) or not name:
            raise ProtocolError(f"init: the worker name must be a non-empty string, got {name!r}")
        settings = settings_from_dict(header.get("settings"))
        task = settings.task_name
        if self.allowed_tasks is not None and task not in self.allowed_tasks:
            raise PermissionError(f"task {task!r} is not allowed on this worker (allowed: {sorted(self.allowed_tasks)}); "
                                  "restart `echo2 worker serve` with --task naming it")
        with self._init_lock:
            if self.worker is None:
                self.worker = RolloutWorker(name, settings)
                import sys

                self.log(f"worker {name!r} ready: task {task!r}, model {settings.model_path!r} "
                         f"(Ray loaded in this process: {'ray' in sys.modules})")
        return {"name": self.worker.name, "node": getattr(self.worker, "node_id", socket.gethostname())}

    def _op_generate(self, header: dict, _: bytes) -> bytes:
        return self._worker().generate_wire(header["examples"])

    def _op_install(self, header: dict, payload: bytes) -> int:
        from echo2_sdk.runtime.broadcast.snapshot import state_dict_from_bytes

        return self._worker().install(state_dict_from_bytes(payload), int(header["version"]))

    def _op_broadcast_start(self, header: dict, _: bytes) -> list:
        a = header["args"]
        bind, advertise = a.get("bind_host", "127.0.0.1"), a.get("advertise_host")
        if self.advertise_host:  # this machine knows its public address; the learner cannot
            bind, advertise = "0.0.0.0", self.advertise_host
        elif bind == "0.0.0.0" and advertise is None:
            advertise = socket.gethostbyname(socket.gethostname())  # not Ray's node IP: this is no Ray node
        port_range = self.port_range or (tuple(a["port_range"]) if a.get("port_range") else None)
        host, port = self._worker().broadcast_start(
            a["node_id"], tuple(a["control_address"]), bytes.fromhex(a["public_key"]), bytes.fromhex(a["node_key"]),
            link=a.get("link"),
            bind_host=bind, advertise_host=advertise, port_range=port_range)
        return [host, port]

    def _op_broadcast_receive(self, header: dict, _: bytes) -> int:
        return self._worker().broadcast_receive(int(header["version"]), float(header.get("timeout_s", 600.0)))

    def _op_broadcast_close(self, header: dict, _: bytes) -> None:
        if self.worker is not None:
            self.worker.broadcast_close()

    def _op_ping(self, header: dict, _: bytes) -> str:
        return self._worker().name

    def _op_stats(self, header: dict, _: bytes) -> dict:
        import sys

        # Proof for the learner's logs (and tests) that this machine runs no part of Ray.
        return {**self._worker().stats(), "ray_loaded": "ray" in sys.modules}

    def _op_close(self, header: dict, _: bytes) -> None:
        self._teardown()

    def _teardown(self) -> None:
        with self._init_lock:
            worker, self.worker = self.worker, None
        if worker is not None:
            try:
                worker.close()
            except Exception as exc:
                self.log(f"closing the worker: {type(exc).__name__}: {exc}")


def serve_worker(host: str, port: int, token: bytes, *, allowed_tasks: set[str] | None = None, once: bool = False,
                 log: Callable[[str], None] = print, on_listening: Callable[[int], None] | None = None,
                 advertise_host: str | None = None, broadcast_ports: tuple[int, int] | None = None,
                 handshake_timeout_s: float = HANDSHAKE_TIMEOUT_S, counters: ServeCounters | None = None) -> None:
    """Accept learner connections on ``host:port`` forever (``once``: serve one session, then return).

    ``advertise_host``: the address other workers dial for snapshot chunks (e.g. this machine's public
    IP behind NAT with a forwarded port); ``broadcast_ports``: the port range its broadcast node may use;
    ``counters``: filled with what happened to each connection."""
    counters = counters if counters is not None else ServeCounters()
    server = socket.create_server((host, port), reuse_port=False)
    log(f"echo2 worker listening on {host}:{server.getsockname()[1]}")
    if on_listening is not None:
        on_listening(server.getsockname()[1])
    ready: queue.Queue = queue.Queue(MAX_WAITING_SESSIONS)
    stopping = threading.Event()
    pending: dict[socket.socket, None] = {}  # connections authenticating now, oldest first
    lock = threading.Lock()

    def count(field: str) -> None:
        with lock:
            setattr(counters, field, getattr(counters, field) + 1)

    def handshake(sock: socket.socket, peer) -> None:
        conn = FramedSocket(sock)
        try:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            authenticate(conn, token, role="worker", timeout_s=handshake_timeout_s)
        except (ProtocolError, OSError) as exc:
            count("refused")
            log(f"refused {peer[0]}:{peer[1]}: {exc}")
            conn.close()
            return
        finally:
            with lock:
                pending.pop(sock, None)
        count("authenticated")
        try:
            if stopping.is_set():
                raise queue.Full
            ready.put_nowait((conn, peer))
        except queue.Full:
            count("busy")
            log(f"closed {peer[0]}:{peer[1]}: another learner session is running and {MAX_WAITING_SESSIONS} wait")
            conn.close()

    def accept_loop() -> None:
        server.settimeout(0.25)  # closing a socket does not wake a blocked accept(): poll for the end
        while not stopping.is_set():
            try:
                sock, peer = server.accept()
            except socket.timeout:
                continue
            except OSError:  # the listening socket was closed: serving is over
                return
            count("accepted")
            with lock:
                oldest = next(iter(pending)) if len(pending) >= MAX_PENDING_HANDSHAKES else None
                if oldest is not None:
                    del pending[oldest]
                    counters.evicted += 1
                pending[sock] = None
            if oldest is not None:  # its handshake thread sees the end of the stream, refuses and closes it
                log(f"{MAX_PENDING_HANDSHAKES} connections are authenticating: cutting the oldest")
                try:
                    oldest.shutdown(socket.SHUT_RDWR)
                except OSError:  # already closed by its own thread
                    pass
            threading.Thread(target=handshake, args=(sock, peer), name="echo2-worker-handshake", daemon=True).start()

    acceptor = threading.Thread(target=accept_loop, name="echo2-worker-accept", daemon=True)
    acceptor.start()
    try:
        while True:
            conn, peer = ready.get()
            log(f"learner connected from {peer[0]}:{peer[1]}")
            try:
                WorkerSession(conn, allowed_tasks=allowed_tasks, log=log, advertise_host=advertise_host,
                              port_range=broadcast_ports).run()
            finally:
                count("sessions")  # before the close: a peer that sees it closed sees it counted
                conn.close()
            if once:
                return
    finally:
        stopping.set()
        acceptor.join(5)
        server.close()
        while not ready.empty():  # learners that authenticated while the last session ran
            ready.get_nowait()[0].close()
