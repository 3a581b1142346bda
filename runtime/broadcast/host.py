"""A process (or event-loop task) hosting many broadcast nodes.

Two cores cannot run 32 worker processes well, so the benchmark runs nodes as asyncio peers inside a
few host processes: each node still has its own listening socket, its own uplink/downlink buckets
and its own buffer, and every byte between nodes crosses a real loopback TCP connection and is
hashed on arrival. A host talks to the learner's control server over one ``TcpControlClient``.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import os
import resource
import subprocess
import sys
import time

from echo2_sdk.runtime.broadcast.control_channel import TcpControlClient
from echo2_sdk.runtime.broadcast.manifest import Manifest, public_key_from_bytes
from echo2_sdk.runtime.broadcast.node import BroadcastError, BroadcastNode, Faults, Peer
from echo2_sdk.runtime.broadcast.shaping import LinkProfile
from echo2_sdk.runtime.broadcast.snapshot import state_dict_from_bytes
from echo2_sdk.runtime.broadcast.transfer import PrefaultedBuffers, allocate_buffer

log = logging.getLogger(__name__)
INSTALL_MODES = ("views", "copy", "none")


def make_installer(mode: str, digest: bool = False):
    """What "install" costs in the benchmark.

    views: parse the safetensors header and build zero-copy tensors over the receive buffer (what a
           worker hands to ``RolloutWorker.install``); copy: the same with a private copy of every
           tensor; none: bytes verified, nothing parsed. ``digest`` adds the SHA-256 of the final
           bytes to the install report, so a test can check every worker against the manifest.
    """
    if mode not in INSTALL_MODES:
        raise ValueError(f"install={mode!r}; choose one of {', '.join(INSTALL_MODES)}")

    def install(version: int, buffer, manifest: Manifest) -> dict:
        detail = {}
        if mode != "none":
            tensors = state_dict_from_bytes(buffer, copy=mode == "copy")
            if not tensors:
                raise BroadcastError(f"version {version} decoded to an empty state dict")
            detail["tensors"] = len(tensors)
        if digest:
            detail["sha256"] = hashlib.sha256(buffer).hexdigest()
        return detail

    return install


def spawn_host_process(control: tuple[str, int], host_id: str, specs: list[dict], public_key: bytes,
                       options: dict) -> subprocess.Popen:
    """Start a host as ``python -m echo2_sdk.runtime.broadcast.host`` (a fresh interpreter: no fork of
    the caller's state, and no re-import of the caller's ``__main__`` as multiprocessing's spawn does)."""
    job = {"control": list(control), "host_id": host_id, "specs": specs, "public_key": public_key.hex(), "options": options}
    proc = subprocess.Popen([sys.executable, "-m", __name__], stdin=subprocess.PIPE)
    proc.stdin.write(json.dumps(job).encode())
    proc.stdin.close()
    return proc


def _main() -> None:
    logging.basicConfig(level=os.environ.get("ECHO2_BROADCAST_LOG", "WARNING"))
    job = json.loads(sys.stdin.read())
    asyncio.run(run_host(tuple(job["control"]), job["host_id"], job["specs"], bytes.fromhex(job["public_key"]), **job["options"]))


async def run_host(
    control: tuple[str, int],
    host_id: str,
    specs: list[dict],
    public_key: bytes,
    *,
    install: str = "views",
    stall_timeout_s: float = 3.0,
    slice_bytes: int = 128 * 1024,
    verify_whole: bool = True,
    prefault_bytes: int = 0,
    report_digest: bool = False,
) -> dict:
    """Start one node per spec ({"id", "key": its node key in hex, "link": LinkProfile kwargs, "faults":
    Faults kwargs}), register
    them, obey the control server until it says stop; returns (and sends) this host's statistics."""
    key = public_key_from_bytes(public_key)
    installer = make_installer(install, report_digest)
    nodes: dict[str, BroadcastNode] = {}
    receiving: set[asyncio.Task] = set()
    stop = asyncio.Event()
    cpu = {"start": time.process_time(), "first_assign": None}

    def on_command(message: dict) -> None:
        op = message["op"]
        if op == "assign":
            if cpu["first_assign"] is None:
                cpu["first_assign"] = time.process_time()
            node = nodes[message["node"]]
            parent = Peer(**message["parent"])
            task = asyncio.ensure_future(_receive_logged(node, message["version"], parent))
            receiving.add(task)
            task.add_done_callback(receiving.discard)
        elif op == "crash":
            nodes[message["node"]].crash()
        elif op == "stop":
            stop.set()

    client = await TcpControlClient.connect(*control, on_command)
    for spec in specs:
        node = BroadcastNode(
            spec["id"],
            link=LinkProfile(**spec.get("link", {})),
            public_key=key,
            node_key=bytes.fromhex(spec["key"]),
            control=client,
            on_install=installer,
            stall_timeout_s=stall_timeout_s,
            slice_bytes=slice_bytes,
            verify_whole=verify_whole,
            allocate=PrefaultedBuffers(1, prefault_bytes) if prefault_bytes else allocate_buffer,
            faults=Faults(**{k: tuple(v) if k == "corrupt_chunks" else v for k, v in spec.get("faults", {}).items()}),
        )
        await node.start()
        nodes[node.id] = node
    client.register(host_id, [n.peer for n in nodes.values()], {n.id: n.node_key for n in nodes.values()})
    runner = asyncio.ensure_future(client.run())
    await asyncio.wait([asyncio.ensure_future(stop.wait()), runner], return_when=asyncio.FIRST_COMPLETED)
    cpu_now = time.process_time()
    usage = resource.getrusage(resource.RUSAGE_SELF)
    stats = {
        "host": host_id,
        "pid": os.getpid(),
        "nodes": len(nodes),
        "cpu_s_total": round(cpu_now - cpu["start"], 3),
        "cpu_s_broadcast": round(cpu_now - (cpu["first_assign"] or cpu_now), 3),
        "max_rss_mb": round(usage.ru_maxrss / 1024, 1),
    }
    if not runner.done():
        client.send({"op": "bye", "host": host_id, "stats": stats})
        try:
            await client.writer.drain()
        except ConnectionError:
            pass
    for task in list(receiving):
        task.cancel()
    await asyncio.gather(*(n.close() for n in nodes.values()), return_exceptions=True)
    client.writer.close()
    runner.cancel()
    return stats


async def _receive_logged(node: BroadcastNode, version: int, parent: Peer) -> None:
    try:
        await node.receive(version, parent)
    except BroadcastError as exc:
        log.warning("%s", exc)
    except asyncio.CancelledError:
        pass


if __name__ == "__main__":
    _main()
