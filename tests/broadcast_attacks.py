"""Helpers for the broadcast-plane attack and fuzz tests: a learner broadcaster with one honest worker
(both thread-hosted, no Ray), and raw-socket clients that speak — or mangle — the protocols."""

from __future__ import annotations

import json
import socket
import struct

import torch

from echo2_sdk.runtime.broadcast.credentials import register_proof, session_key, LineSigner, nonce
from echo2_sdk.runtime.broadcast.control_wire import encode
from echo2_sdk.runtime.broadcast.endpoints import LearnerBroadcaster, WorkerBroadcastEndpoint
from echo2_sdk.runtime.broadcast.wire import HELLO, HEADER


class Plane:
    """A learner broadcaster and one honest worker ``w0`` on loopback."""

    def __init__(self, stall_timeout_s: float = 1.0) -> None:
        self.learner = LearnerBroadcaster(stall_timeout_s=stall_timeout_s)
        self.worker = WorkerBroadcastEndpoint("w0", self.learner.control_address, self.learner.public_key,
                                              self.learner.credential_for("w0"), stall_timeout_s=stall_timeout_s)
        self.learner.wait_registered(["w0"], timeout_s=10)
        self.version = 0

    @property
    def control(self) -> tuple[str, int]:
        return self.learner.control_address

    @property
    def source(self) -> tuple[str, int]:
        return "127.0.0.1", self.learner.source.port

    def publish_and_install(self, timeout_s: float = 20.0) -> int:
        """Publish the next version to w0; return the version w0 installed (asserts it is that one)."""
        self.version += 1
        state = {"w": torch.arange(4096, dtype=torch.float32) + self.version}
        self.learner.publish(state, self.version, ["w0"]).result(timeout_s)
        installed, tensors = self.worker.wait_installed(self.version, timeout_s)
        assert installed == self.version and torch.equal(tensors["w"], state["w"])
        report = self.learner.wait(self.version, timeout_s)
        assert "w0" in report["installed_s"], report
        return installed

    def close(self) -> None:
        self.worker.close()
        self.learner.close()


def connect(address: tuple[str, int], timeout_s: float = 5.0) -> socket.socket:
    sock = socket.create_connection(address, timeout=timeout_s)
    sock.settimeout(timeout_s)
    return sock


def read_line(sock: socket.socket) -> bytes:
    out = bytearray()
    while not out.endswith(b"\n"):
        piece = sock.recv(1)
        if not piece:
            break
        out += piece
    return bytes(out)


def closed_by_peer(sock: socket.socket, timeout_s: float = 5.0) -> bool:
    """True once the other side closed without sending anything more than ``drain`` allows."""
    sock.settimeout(timeout_s)
    try:
        while True:
            data = sock.recv(65536)
            if not data:
                return True
    except (ConnectionResetError, BrokenPipeError):
        return True
    except TimeoutError:
        return False


class HostSession:
    """A raw control connection that registers ``nodes`` with the keys given (right or wrong)."""

    def __init__(self, address: tuple[str, int], nodes: list[dict], keys: dict[str, bytes]) -> None:
        self.sock = connect(address)
        challenge = json.loads(read_line(self.sock))["nonce"]
        mine = nonce()
        proofs = {n["id"]: register_proof(keys[n["id"]], challenge, mine, encode(n).decode()) for n in nodes}
        self.sock.sendall(encode({"op": "register", "host": "h", "nodes": nodes, "nonce": mine, "proofs": proofs}) + b"\n")
        key = session_key(keys[nodes[0]["id"]], challenge, mine)
        self.out, self.inbound = LineSigner(key, "host"), LineSigner(key, "learner")

    def send(self, message: dict) -> None:
        self.sock.sendall(self.out.sign(encode(message)))

    def send_raw(self, line: bytes) -> None:
        self.sock.sendall(line)

    def close(self) -> None:
        self.sock.close()


def hello_frame(payload: bytes, version: int = 1, kind: int = HELLO, length: int | None = None) -> bytes:
    return HEADER.pack(kind, version, 0, len(payload) if length is None else length) + payload


def hello_payload(node: str = "w9", version: int = 1, have=None, want=None, ticket: str = "") -> bytes:
    return json.dumps({"node": node, "version": version, "have": have or [], "want": want, "ticket": ticket}).encode()


def first_frame_kind(sock: socket.socket) -> int | None:
    """The kind of the first frame the parent answers with, or None if it closed without answering."""
    try:
        raw = b""
        while len(raw) < HEADER.size:
            piece = sock.recv(HEADER.size - len(raw))
            if not piece:
                return None
            raw += piece
    except (ConnectionResetError, TimeoutError):
        return None
    return struct.unpack_from("!B", raw)[0]
