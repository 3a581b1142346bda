"""Seeded fuzzing of the broadcast plane's two network boundaries (the control line and the chunk-port
HELLO), before and after authentication: every input is refused and counted exactly once, nothing
raises in the learner, memory stays bounded, and the honest worker installs the next version."""

from __future__ import annotations

import json
import random
import socket
import tracemalloc

from broadcast_attacks import HostSession, Plane, closed_by_peer, connect, hello_frame, hello_payload, read_line
from echo2_sdk.runtime.broadcast.control_wire import encode
from echo2_sdk.runtime.broadcast.wire import HEADER

ODD_VALUES = [None, True, -1, 0, 1, 2**62, 2**64, 1.5, float("nan"), float("inf"), "", "x" * 5000, "w0", "w1",
              "source", [], [1, 2], {}, {"a": {"b": 1}}, [[0, 10**9]], "../../etc"]
OPS = ["register", "find_parent", "find_holder", "report", "nope", "", None, 7, "assign", "crash"]
FIELDS = ["op", "node", "version", "req", "chunk", "failed", "exclude", "reason", "event", "detail", "nodes",
          "proofs", "nonce", "host", "stats", "have", "want", "ticket"]


def random_message(rng: random.Random) -> dict:
    message = {"op": rng.choice(OPS)}
    for field in rng.sample(FIELDS, rng.randint(0, 8)):
        message[field] = rng.choice(ODD_VALUES)
    return message


def random_line(rng: random.Random) -> bytes:
    kind = rng.random()
    if kind < 0.3:
        return bytes(rng.getrandbits(8) for _ in range(rng.randint(0, 300))).replace(b"\n", b"") + b"\n"
    if kind < 0.4:
        return json.dumps(rng.choice(ODD_VALUES)).encode() + b"\n"
    return json.dumps(random_message(rng)).encode() + b"\n"


def test_control_line_fuzz_every_input_refused_once_none_raises():
    plane = Plane()
    try:
        plane.publish_and_install()
        rng = random.Random(1234)
        tracemalloc.start()
        before = plane.learner.coordinator.refused.total()
        strangers = 120
        for _ in range(strangers):  # a stranger's first (and only) line
            sock = connect(plane.control)
            read_line(sock)
            sock.sendall(random_line(rng))
            assert closed_by_peer(sock, 5)
        assert plane.learner.coordinator.refused.total() - before == strangers
        host = HostSession(plane.control, [{"id": "w1", "host": "127.0.0.1", "port": 9}],
                           {"w1": plane.learner.credential_for("w1")})
        insiders = 400
        for _ in range(insiders):  # an authenticated but hostile host: every body signed correctly
            body = encode(random_message(rng)) if rng.random() < 0.8 else bytes(rng.getrandbits(8) for _ in range(40))
            host.send_raw(host.out.sign(body.replace(b"\n", b"")))
        host.send({"op": "bye", "host": "h", "stats": {}})
        wait_total = before + strangers + insiders
        for _ in range(200):
            if plane.learner.coordinator.refused.total() >= wait_total:
                break
            plane.publish_and_install()  # keeps the honest worker installing while the fuzz lands
        _, peak = tracemalloc.get_traced_memory()
        tracemalloc.stop()
        assert plane.learner.coordinator.refused.total() == wait_total, plane.learner.refusals()
        assert peak < 64 << 20
        plane.publish_and_install()
        print(json.dumps({"control_fuzz": {"inputs": strangers + insiders, "refused": wait_total - before,
                                           "crashes": 0, "by_reason": plane.learner.refusals()}}))
        host.close()
    finally:
        plane.close()


def random_frame(rng: random.Random, version: int) -> bytes:
    kind = rng.random()
    if kind < 0.25:  # garbage
        return bytes(rng.getrandbits(8) for _ in range(rng.randint(0, 64)))
    if kind < 0.45:  # a header announcing anything, with a short body
        header = HEADER.pack(rng.randint(0, 255), rng.getrandbits(64), rng.getrandbits(32), rng.getrandbits(32))
        return header + bytes(rng.getrandbits(8) for _ in range(rng.randint(0, 32)))
    if kind < 0.6:  # well formed, with a ticket nobody issued
        ticket = rng.choice(["", "0" * 16 + "." + "0" * 32, f"{rng.getrandbits(64):016x}.{rng.getrandbits(128):032x}"])
        return hello_frame(hello_payload("w9", version, have=[[0, rng.randint(1, 2**31)]], ticket=ticket), version)
    fields = {f: rng.choice(ODD_VALUES) for f in rng.sample(["node", "version", "have", "want", "ticket"], rng.randint(0, 5))}
    payload = json.dumps(fields).encode() if rng.random() < 0.9 else b"[1, 2"
    return hello_frame(payload, rng.choice([version, 0, 2**62]), kind=rng.choice([1, 1, 1, 2, 3, 6]))


def test_chunk_port_fuzz_every_hello_refused_once_none_raises():
    plane = Plane()
    try:
        plane.publish_and_install()
        rng = random.Random(99)
        tracemalloc.start()
        per_port = 150
        for target, counter in ((plane.source, plane.learner.source.refused), (plane.worker.address, plane.worker.node.refused)):
            before = counter.total()
            for _ in range(per_port):
                sock = connect(target)
                sock.sendall(random_frame(rng, plane.version))
                sock.shutdown(socket.SHUT_WR)  # a truncated frame ends at once instead of at the stall deadline
                assert closed_by_peer(sock, 5)
            for _ in range(100):
                if counter.total() - before >= per_port:
                    break
                plane.publish_and_install()
            assert counter.total() - before == per_port, counter.to_dict()
        _, peak = tracemalloc.get_traced_memory()
        tracemalloc.stop()
        assert peak < 64 << 20
        plane.publish_and_install()
        assert max(plane.learner.source.transfers) == plane.version
        print(json.dumps({"chunk_port_fuzz": {"inputs": 2 * per_port, "refused": 2 * per_port, "crashes": 0,
                                              "source": plane.learner.source.refused.to_dict(),
                                              "worker": plane.worker.node.refused.to_dict(),
                                              }}))
    finally:
        plane.close()
