"""Hostile peers on `echo2 worker serve`'s port (loopback only): before authentication only tiny frames
are read within a short deadline, a silent or slow stranger delays no learner, frames stay bounded after
authentication, and every refused connection is counted; seeded random frames never crash the server."""

import json
import random
import socket
import threading
import time

import pytest

from echo2_sdk.runtime.rollout.remote import server as server_module
from echo2_sdk.runtime.rollout.remote.protocol import (
    AUTH_FRAME_BYTES, MAX_HEADER_BYTES, PREFIX, PROTOCOL, FramedSocket, ProtocolError, _mac, authenticate,
)
from echo2_sdk.runtime.rollout.remote.server import ServeCounters, serve_worker

TOKEN = b"t" * 32
DEADLINE_S = 1.0  # the server's handshake deadline in these tests (5 s in `echo2 worker serve`)


def start_server(**kwargs):
    """An in-process `echo2 worker serve` on a free loopback port; returns (port, counters)."""
    counters, ready, port = ServeCounters(), threading.Event(), []
    thread = threading.Thread(target=serve_worker, args=("127.0.0.1", 0, TOKEN), daemon=True, kwargs=dict(
        log=lambda m: None, on_listening=lambda p: (port.append(p), ready.set()), handshake_timeout_s=DEADLINE_S,
        counters=counters, **kwargs))
    thread.start()
    assert ready.wait(10)
    return port[0], counters


@pytest.fixture(scope="module")
def served():
    return start_server()


def wait_for(predicate, timeout_s=10.0):
    end = time.monotonic() + timeout_s
    while time.monotonic() < end:
        if predicate():
            return True
        time.sleep(0.02)
    return predicate()


def connect(port) -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", port), timeout=5)
    sock.settimeout(5)
    return sock


def learner_session(port, timeout_s=5.0) -> float:
    """Authenticate as the learner, end the session with ``close``; returns the seconds authentication took."""
    conn = FramedSocket(connect(port))
    t0 = time.monotonic()
    authenticate(conn, TOKEN, "learner", timeout_s=timeout_s)
    took = time.monotonic() - t0
    conn.send({"op": "close", "id": 1})
    reply, _ = conn.recv(allow_payload=False, deadline=time.monotonic() + 10)
    assert reply == {"op": "reply", "id": 1, "value": None}
    assert closed_by_server(conn.sock, within_s=10)  # the session is over (and counted)
    conn.close()
    return took


def closed_by_server(sock, within_s) -> bool:
    """True if the server closes ``sock`` within ``within_s`` (whatever it sent before, e.g. its hello)."""
    sock.settimeout(within_s)
    end = time.monotonic() + within_s
    try:
        while time.monotonic() < end:
            if sock.recv(65536) == b"":
                return True
    except socket.timeout:
        return False
    except OSError:  # reset: closed too
        return True
    return False


def hello(role="learner", nonce="n" * 32, **extra) -> bytes:
    return frame({"op": "hello", "protocol": PROTOCOL, "role": role, "nonce": nonce, **extra})


def frame(header, payload=b"") -> bytes:
    head = json.dumps(header).encode()
    return PREFIX.pack(len(head), len(payload)) + head + payload


# ---- hand-written attacks before authentication --------------------------------------------------------
PRE_AUTH = {
    "a 60 MiB header claim": PREFIX.pack(60 * 1024 * 1024, 0),
    "a header one byte over the pre-auth bound": PREFIX.pack(AUTH_FRAME_BYTES + 1, 0),
    "a payload before authentication": PREFIX.pack(2, 8) + b"{}" + b"\0" * 8,
    "a 64 GiB payload claim": PREFIX.pack(2, 64 * 1024**3),
    "a header that is not JSON": PREFIX.pack(4, 0) + b"\xff\xfe\x00{",
    "a JSON header that is no object": frame([1, 2]),
    "a header without an op": frame({"nonce": "x"}),
    "deeply nested JSON": PREFIX.pack(1000, 0) + b"[" * 1000,
    "another protocol version": frame({"op": "hello", "protocol": "echo2-worker/1", "role": "learner", "nonce": "x"}),
    "the worker's own role": hello(role="worker"),
    "a wrong proof": hello() + frame({"op": "proof", "mac": "0" * 64}),
    "a proof for another nonce (replayed)": hello() + frame({"op": "proof", "mac": _mac(TOKEN, "old", "learner")}),
    "a proof that is no string": hello() + frame({"op": "proof", "mac": [1]}),
    "a request instead of a proof": hello() + frame({"op": "init", "id": 1, "name": "x"}),
}


@pytest.mark.parametrize("name", list(PRE_AUTH))
def test_each_pre_auth_attack_is_refused_at_once_and_counted(served, name):
    port, counters = served
    refused = counters.refused
    sock = connect(port)
    sock.sendall(PRE_AUTH[name])
    # Refused on what was sent, not after the deadline and never after reading what a prefix claims.
    assert closed_by_server(sock, within_s=DEADLINE_S * 0.8), name
    sock.close()
    assert wait_for(lambda: counters.refused == refused + 1)
    assert learner_session(port) < DEADLINE_S  # and the next learner is served


def test_silent_connections_delay_no_learner_and_are_dropped_at_the_deadline(served):
    port, counters = served
    refused = counters.refused
    silent = [connect(port) for _ in range(8)]
    time.sleep(0.1)
    # Was: the serial accept loop held the learner behind each silent one for the whole deadline.
    assert learner_session(port) < DEADLINE_S * 0.9
    assert all(closed_by_server(s, within_s=DEADLINE_S + 2) for s in silent)
    assert wait_for(lambda: counters.refused == refused + 8)
    [s.close() for s in silent]


def test_a_frame_trickled_byte_by_byte_is_cut_at_the_deadline_not_per_byte(served):
    port, counters = served
    refused = counters.refused
    sock = connect(port)
    data = hello()
    t0 = time.monotonic()
    cut = None
    for byte in data:  # one byte every 0.2 s: each read is fast, the frame as a whole is not
        try:
            sock.sendall(bytes([byte]))
        except OSError:
            cut = time.monotonic() - t0
            break
        if closed_by_server(sock, within_s=0.2):
            cut = time.monotonic() - t0
            break
    assert cut is not None and cut < DEADLINE_S + 1.0
    assert wait_for(lambda: counters.refused == refused + 1)
    sock.close()


def test_a_full_table_of_silent_handshakes_cannot_keep_a_learner_out(monkeypatch):
    monkeypatch.setattr(server_module, "MAX_PENDING_HANDSHAKES", 4)
    port, counters = start_server()
    silent = [connect(port) for _ in range(4)]
    assert wait_for(lambda: counters.accepted == 4)
    more = [connect(port) for _ in range(3)]
    assert wait_for(lambda: counters.evicted == 3)
    assert all(closed_by_server(s, within_s=1.0) for s in silent[:3])  # the oldest are cut at once
    assert learner_session(port) < DEADLINE_S * 0.9  # it cuts the oldest left and is served at once
    assert counters.evicted == 4 and wait_for(lambda: counters.refused == 4)
    assert wait_for(lambda: counters.refused == 7, timeout_s=DEADLINE_S + 3)  # the rest at their deadline
    [s.close() for s in silent + more]


# ---- after authentication --------------------------------------------------------------------------------
def authed(port) -> FramedSocket:
    conn = FramedSocket(connect(port))
    authenticate(conn, TOKEN, "learner", timeout_s=5)
    return conn


POST_AUTH = {
    "a payload on an operation that takes none": PREFIX.pack(len(b'{"op":"ping","id":1}'), 8)
    + b'{"op":"ping","id":1}' + b"\0" * 8,
    "a header over the bound": PREFIX.pack(MAX_HEADER_BYTES + 1, 0),
    "a header that is not JSON": PREFIX.pack(3, 0) + b"{{{",
}


@pytest.mark.parametrize("name", list(POST_AUTH))
def test_frames_stay_bounded_after_authentication(served, name):
    port, counters = served
    sessions = counters.sessions
    conn = authed(port)
    conn.sock.sendall(POST_AUTH[name])
    assert closed_by_server(conn.sock, within_s=2.0), name  # the session ends; the server serves on
    conn.close()
    assert wait_for(lambda: counters.sessions == sessions + 1)
    learner_session(port)


def test_an_unknown_or_premature_request_gets_an_error_reply_and_the_session_goes_on(served):
    port, _ = served
    conn = authed(port)
    for rid, header in enumerate([{"op": "evil"}, {"op": "ping"}, {"op": "generate", "examples": "x"}], 1):
        conn.send({**header, "id": rid})
        reply, _ = conn.recv(allow_payload=False, deadline=time.monotonic() + 10)
        assert reply["id"] == rid and "error" in reply
    conn.send({"op": "close", "id": 9})
    assert conn.recv(allow_payload=False, deadline=time.monotonic() + 10)[0]["id"] == 9
    conn.close()


def test_the_frame_deadline_holds_on_the_learner_side_too():
    a, b = socket.socketpair()
    conn = FramedSocket(a)
    b.sendall(PREFIX.pack(10, 0) + b"{")  # a frame that never completes
    t0 = time.monotonic()
    with pytest.raises(socket.timeout):
        conn.recv(deadline=time.monotonic() + 0.3)
    assert time.monotonic() - t0 < 1.0
    a.close(), b.close()
    a, b = socket.socketpair()
    b.sendall(PREFIX.pack(AUTH_FRAME_BYTES + 1, 0))
    with pytest.raises(ProtocolError, match="exceeds"):
        FramedSocket(a).recv(max_header_bytes=AUTH_FRAME_BYTES)
    a.close(), b.close()


# ---- seeded random frames --------------------------------------------------------------------------------
def random_bytes(rng: random.Random) -> bytes:
    """A hostile opening: random prefixes, truncated or oversized frames, random JSON, raw garbage."""
    kind = rng.randrange(6)
    if kind == 0:
        return bytes(rng.randrange(256) for _ in range(rng.randint(1, 64)))
    if kind == 1:
        return PREFIX.pack(rng.choice([0, 1, 2**31, 2**32 - 1, rng.randrange(4096)]),
                           rng.choice([0, 1, 2**63, rng.randrange(4096)]))
    if kind == 2:
        value = rng.choice([None, 1, "x", [], {"op": 1}, {"op": "hello"}, {"op": "proof", "mac": None}])
        return frame(value) if value is not None else frame({})
    if kind == 3:
        return hello(nonce=rng.choice(["", "x" * 900, None, 5]))
    if kind == 4:
        head = hello()
        return head[:rng.randrange(len(head))]
    return hello() + bytes(rng.randrange(256) for _ in range(rng.randint(1, 64)))


def test_seeded_random_openings_are_all_refused_and_counted_and_the_server_keeps_serving(served):
    port, counters = served
    rng = random.Random(17)
    refused, accepted, authenticated = counters.refused, counters.accepted, counters.authenticated
    tried, t_end = 0, time.monotonic() + 20
    while tried < 300 and time.monotonic() < t_end:
        tried += 1
        sock = connect(port)
        try:
            sock.sendall(random_bytes(rng))
        except OSError:  # refused before everything was sent
            pass
        sock.close()  # what the server still waits for never comes: it sees the end of the stream
    assert wait_for(lambda: counters.refused == refused + tried, timeout_s=DEADLINE_S + 5)
    assert counters.accepted == accepted + tried and counters.authenticated == authenticated
    took = learner_session(port)
    print(f"\nworker-serve fuzz [pre-auth]: {tried} connections, {counters.refused - refused} refused and counted, "
          f"0 authenticated, crashes 0; a learner then authenticated in {took:.3f} s")
    assert took < DEADLINE_S


def test_seeded_random_frames_after_authentication_never_stop_the_server(served):
    port, counters = served
    rng = random.Random(18)
    sessions, tried = counters.sessions, 0
    t_end = time.monotonic() + 20
    while tried < 40 and time.monotonic() < t_end:
        tried += 1
        conn = authed(port)
        for _ in range(rng.randint(1, 4)):
            try:
                if rng.random() < 0.5:
                    conn.sock.sendall(random_bytes(rng))
                else:
                    conn.send({"op": rng.choice(["ping", "stats", "evil", "install", "broadcast_close", ""]),
                               "id": rng.choice([1, "x", None, [1]]), "version": rng.choice([1, "x", None])})
            except OSError:
                break
        conn.close()
        assert wait_for(lambda: counters.sessions == sessions + tried), tried
    took = learner_session(port)
    print(f"\nworker-serve fuzz [post-auth]: {tried} sessions of random frames, all ended, crashes 0; "
          f"a learner then authenticated in {took:.3f} s")
