"""Thread-hosted broadcast endpoints for the real runtime (no Ray in here).

``LearnerBroadcaster`` lives in the learner process: signing key, control server and the source node
run on a private event-loop thread, so ``publish`` returns as soon as the weights are serialized.
``WorkerBroadcastEndpoint`` lives in each rollout worker (e.g. inside its Ray actor): one node on its
own event-loop thread, which keeps forwarding to its child after its own install;
``wait_installed`` blocks the caller (the actor's control thread) until a version is in.
``BroadcastReceiverMixin`` gives a worker class (``RolloutWorker``) the three actor methods the
``P2PSnapshotTransport`` calls.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import dataclasses
import logging
import threading
import time

from echo2_sdk.runtime.broadcast.control import BroadcastRecord, Coordinator
from echo2_sdk.runtime.broadcast.control_channel import ControlServer, TcpControlClient
from echo2_sdk.runtime.broadcast.credentials import RunSecret
from echo2_sdk.runtime.broadcast.delta_install import FULL_SOURCE, HeldBases
from echo2_sdk.runtime.broadcast.delta_plan import DeltaPolicy, DeltaPublisher, Publication
from echo2_sdk.runtime.broadcast.manifest import (
    build_manifest, new_signing_key, public_key_bytes, public_key_from_bytes, sign_manifest,
)
from echo2_sdk.runtime.broadcast.node import BroadcastError, BroadcastNode, Peer
from echo2_sdk.runtime.broadcast.shaping import LinkProfile
from echo2_sdk.runtime.broadcast.snapshot import state_dict_from_bytes, state_dict_to_bytes
from echo2_sdk.runtime.broadcast.topology import SOURCE, plan_broadcast

log = logging.getLogger(__name__)


class _LoopThread:
    """An asyncio loop on a daemon thread; other threads hand it coroutines."""

    def __init__(self, name: str) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, name=name, daemon=True)
        self.thread.start()

    def submit(self, coro) -> concurrent.futures.Future:
        return asyncio.run_coroutine_threadsafe(coro, self.loop)

    def run(self, coro, timeout_s: float | None = 60.0):
        return self.submit(coro).result(timeout_s)

    def stop(self) -> None:
        if self.loop.is_running():
            self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(timeout=5)


async def listen_in_range(start, port_range: tuple[int, int] | None):
    """``await start(port)`` on the first free port of ``port_range`` (inclusive; None: port 0, the OS
    picks). Several processes on one node may race for the range: a taken port is skipped."""
    if not port_range:
        return await start(0)
    first, last = port_range
    for port in range(first, last + 1):
        try:
            return await start(port)
        except OSError:  # in use (by another worker on this node, or anything else)
            continue
    raise OSError(f"no free port in broadcast.port_range [{first}, {last}]: the learner needs 2 (3 with "
                  "broadcast.delta) and every "
                  "worker on a node 1; widen the range")


class LearnerBroadcaster:
    def __init__(
        self, *, topology: str = "chain", uplink_mbps: float | None = None, worker_mbps: float | None = None,
        latency_ms: float = 0.0, chunk_kb: int | None = None, stripes: int | None = None,
        bind_host: str = "127.0.0.1", advertise_host: str | None = None, control_port: int = 0,
        stall_timeout_s: float = 3.0, signing_key=None, port_range: tuple[int, int] | None = None,
        delta: DeltaPolicy | None = None,
    ) -> None:
        """``delta``: publish deltas against a base every worker holds where they pay (None: always full);
        the learner then runs a second node that serves the full snapshot to workers that cannot apply one."""
        self.topology, self.uplink_mbps, self.worker_mbps = topology, uplink_mbps, worker_mbps
        self.chunk_kb, self.stripes = chunk_kb, stripes
        self.key = signing_key or new_signing_key()
        self.public_key = public_key_bytes(self.key.public_key())
        self.secret = RunSecret.generate()
        self._thread = _LoopThread("echo2-broadcast-learner")
        self.source = BroadcastNode(
            SOURCE, link=LinkProfile(uplink_mbps=None if topology == "star-unlimited" else uplink_mbps, latency_ms=latency_ms),
            public_key=self.key.public_key(), node_key=self.secret.node_key(SOURCE), control=None, host=bind_host,
            advertise_host=advertise_host,
            stall_timeout_s=stall_timeout_s,
        )
        self.deltas = DeltaPublisher(delta or DeltaPolicy(enabled=False))
        # Shares the learner's uplink in reality; shaped on its own bucket here (it is rarely used).
        self.full_source = BroadcastNode(
            FULL_SOURCE, link=self.source.link, public_key=self.key.public_key(),
            node_key=self.secret.node_key(FULL_SOURCE), control=None, host=bind_host, advertise_host=advertise_host,
            stall_timeout_s=stall_timeout_s,
        ) if self.deltas.policy.enabled else None
        self.publications: dict[int, Publication] = {}
        """Version → what its publish sent (kind, bytes vs the full snapshot)."""
        self._publish_lock = asyncio.Lock()
        self.server: ControlServer | None = None
        self.coordinator: Coordinator | None = None
        self._publishing: dict[int, concurrent.futures.Future] = {}
        self._thread.run(self._start(bind_host, advertise_host, control_port, port_range))

    async def _start(self, bind_host: str, advertise_host: str | None, control_port: int,
                     port_range: tuple[int, int] | None = None) -> None:
        self.coordinator = Coordinator(await listen_in_range(self.source.start, port_range), self.secret)
        self.server = ControlServer(self.coordinator, host=bind_host)
        if control_port:
            _, port = await self.server.start(control_port)
        else:
            _, port = await listen_in_range(self.server.start, port_range)
        self.control_address = (advertise_host or bind_host, port)
        if self.full_source is not None:
            await listen_in_range(self.full_source.start, port_range)

    def credential_for(self, worker_id: str) -> bytes:
        """The node key to hand worker ``worker_id`` (over a channel that already authenticates it)."""
        return self.secret.node_key(worker_id)

    def refusals(self) -> dict[str, int]:
        """What strangers and misbehaving peers had refused so far (control plane and the source's chunk port)."""
        def read() -> dict[str, int]:
            merged = self.coordinator.refused.to_dict()
            merged.update({f"source_{reason}": n for reason, n in self.source.refused.to_dict().items()})
            return dict(sorted(merged.items()))

        # On the loop thread, which updates the counters (directly once it has stopped).
        return self._thread.run(self._call(read), 10) if self._thread.thread.is_alive() else read()

    def registered(self) -> list[str]:
        return list(self.coordinator.peers)

    def wait_registered(self, worker_ids: list[str], timeout_s: float = 60.0) -> None:
        deadline = time.monotonic() + timeout_s
        while any(w not in self.coordinator.peers for w in worker_ids):
            if time.monotonic() > deadline:
                missing = [w for w in worker_ids if w not in self.coordinator.peers]
                raise TimeoutError(f"workers {missing[:8]} never registered with the broadcast control server at "
                                   f"{self.control_address}; check that they can reach it")
            time.sleep(0.01)

    def publish(self, state_dict: dict, version: int, worker_ids: list[str]) -> concurrent.futures.Future:
        """Serialize now (the learner may keep training afterwards); hash, sign and start in the background.
        The future resolves to the ``BroadcastRecord`` once every worker has been told its parent."""
        t_publish = time.monotonic()
        data = state_dict_to_bytes(state_dict)
        future = self._thread.submit(self._publish(data, version, list(worker_ids), t_publish))
        future.add_done_callback(lambda f: f.exception() and log.error("broadcast of version %d failed to start: %s",
                                                                       version, f.exception()))
        self._publishing = {v: f for v, f in self._publishing.items() if v > version - 8}
        self._publishing[version] = future
        return future

    async def _publish(self, data: bytes, version: int, worker_ids: list[str], t_publish: float) -> BroadcastRecord:
        async with self._publish_lock:  # in order, one at a time: v+1's delta is encoded against what v left
            return await self._publish_now(data, version, worker_ids, t_publish)

    async def _publish_now(self, data: bytes, version: int, worker_ids: list[str], t_publish: float) -> BroadcastRecord:
        worker_ids = self.coordinator.plan_order(worker_ids)
        plan = plan_broadcast(worker_ids, len(data), self.topology, uplink_mbps=self.uplink_mbps,
                              worker_mbps=self.worker_mbps, chunk_size=self.chunk_kb * 1024 if self.chunk_kb else None,
                              stripes=self.stripes)
        loop = asyncio.get_running_loop()
        # hashlib releases the GIL on large buffers: hashing in a worker thread keeps this loop serving.
        manifest = await loop.run_in_executor(
            None, lambda: build_manifest(data, version, plan.chunk_size, public_key=self.key.public_key())
        )
        if self.full_source is not None:
            plan, manifest, data = await self._maybe_delta(plan, manifest, data, version, worker_ids)
        else:
            self.publications[version] = Publication(version, "full", "broadcast.delta is off", len(data), len(data))
        self.source.seed(manifest, sign_manifest(manifest, self.key), data)
        return self.coordinator.start(version, plan, t_publish)

    async def _maybe_delta(self, plan, manifest, data: bytes, version: int, worker_ids: list[str]):
        """(plan, manifest, bytes) for the chain: the full snapshot's, or a delta's (the full one is then
        served by ``full_source`` for workers that cannot apply it)."""
        installs = {w: [v for v, r in self.coordinator.broadcasts.items() if w in r.installed] for w in worker_ids}
        source = self.full_source.peer
        prepared = await asyncio.get_running_loop().run_in_executor(
            None, self.deltas.prepare, data, manifest.sha256, version, worker_ids, installs, (source.host, source.port))
        self.publications[version] = prepared.publication
        for old in [v for v in self.publications if v <= version - 64]:  # deliveries are long settled by then
            del self.publications[old]
        if prepared.spec is None:
            return plan, manifest, data
        tickets = tuple((w, self.secret.ticket(version, w, FULL_SOURCE)) for w in worker_ids)
        spec = dataclasses.replace(prepared.spec, tickets=tickets)
        self.full_source.seed(manifest, sign_manifest(manifest, self.key), data)
        payload = prepared.payload
        plan = plan_broadcast(worker_ids, len(payload), self.topology, uplink_mbps=self.uplink_mbps,
                              worker_mbps=self.worker_mbps, chunk_size=self.chunk_kb * 1024 if self.chunk_kb else None,
                              stripes=self.stripes)
        delta_manifest = build_manifest(payload, version, plan.chunk_size, spec.to_metadata(),
                                        public_key=self.key.public_key())
        return plan, delta_manifest, payload

    def join(self, version: int, worker_id: str) -> Peer:
        """Add a worker that registered after ``version`` was published (appended to a chain)."""
        return self._thread.run(self._call(self.coordinator.join, version, worker_id))

    def wait(self, version: int, timeout_s: float = 600.0) -> dict:
        """Block until every live worker installed ``version`` (or gave up); install times in seconds."""
        started = self._publishing.get(version)
        if started is not None:
            started.result(timeout_s)  # re-raises a failed start (e.g. an unknown worker)
        self._thread.run(self.coordinator.wait_settled(version, timeout_s), timeout_s + 5)
        record = self.coordinator.broadcasts[version]
        return {
            "installed_s": {w: d["t_reported"] - record.t_publish for w, d in record.installed.items()},
            "failed": {w: d.get("reason") for w, d in record.failed.items()},
            "repairs": list(record.repairs),
            "plan": record.plan.to_dict(),
        }

    def progress(self, version: int) -> dict | None:
        """Non-blocking view of ``version``'s delivery (None until the broadcast has started):
        install times in seconds since publish, failures, the live workers and whether it settled."""
        started = self._publishing.get(version)  # kept for the last few publishes; older ones are on record
        if started is None and version not in self.coordinator.broadcasts:
            return None
        if started is not None and not started.done():
            return None
        if started is not None and started.exception() is not None:
            return {"installed_s": {}, "failed": {"*": str(started.exception())}, "live": [], "settled": True}

        async def snapshot() -> dict:
            record = self.coordinator.broadcasts[version]
            return {
                "installed_s": {w: d["t_reported"] - record.t_publish for w, d in record.installed.items()},
                "failed": {w: d.get("reason") for w, d in record.failed.items()},
                "live": self.coordinator.live_workers(version),
                "settled": self.coordinator.settled(version),
                "repairs": len(record.repairs),
                "refetches": len(record.refetches),
                **self.bytes_report(version),
            }

        return self._thread.run(snapshot(), 10)

    def bytes_report(self, version: int) -> dict:
        """What ``version``'s publish put on the wire: kind, bytes each worker received vs the full
        snapshot, and how many workers could not use a delta and fetched the full snapshot."""
        pub, record = self.publications.get(version), self.coordinator.broadcasts.get(version)
        installs = list(record.installed.values()) if record else []
        return {} if pub is None else pub.report(sum(1 for d in installs if d.get("delta_fallback")),
                                                 max((d.get("apply_s") or 0.0 for d in installs), default=0.0))

    @staticmethod
    async def _call(fn, *args):
        return fn(*args)

    def close(self) -> None:
        async def _close():
            await self.source.close()
            if self.full_source is not None:
                await self.full_source.close()
            await self.server.close()

        try:
            self._thread.run(_close(), 10)
        finally:
            self._thread.stop()


class WorkerBroadcastEndpoint:
    def __init__(
        self, node_id: str, control_address: tuple[str, int], public_key: bytes, node_key: bytes, *,
        link: LinkProfile | dict | None = None,
        bind_host: str = "127.0.0.1", advertise_host: str | None = None, stall_timeout_s: float = 3.0,
        port_range: tuple[int, int] | None = None,
    ) -> None:
        self.node_id = node_id
        self._port_range = port_range
        link = link if isinstance(link, LinkProfile) else LinkProfile(**(link or {}))
        self._thread = _LoopThread(f"echo2-broadcast-{node_id}")
        self._cond = threading.Condition()
        self._installed: dict[int, dict] = {}
        self.bases = HeldBases()
        """Snapshot bytes of the newest installs, which deltas apply to."""
        self._failed: dict[int, str] = {}
        self._closed = False
        self.node = BroadcastNode(
            node_id, link=link, public_key=public_key_from_bytes(public_key), node_key=node_key, control=None,
            on_install=self._on_install, host=bind_host, advertise_host=advertise_host, stall_timeout_s=stall_timeout_s,
        )
        self.address = self._thread.run(self._start(tuple(control_address)))

    async def _start(self, control_address: tuple[str, int]) -> tuple[str, int]:
        self.client = await TcpControlClient.connect(*control_address, self._on_command)
        self.node.control = self.client
        peer = await listen_in_range(self.node.start, self._port_range)
        self.client.register(self.node_id, [peer], {self.node_id: self.node.node_key})
        self._runner = asyncio.ensure_future(self.client.run())
        return peer.host, peer.port

    def _on_command(self, message: dict) -> None:
        if message["op"] == "assign":
            task = asyncio.ensure_future(self.node.receive(message["version"], Peer(**message["parent"])))
            task.add_done_callback(lambda t, v=message["version"]: self._receive_done(v, t))
        elif message["op"] == "crash":
            self.node.crash()

    def _receive_done(self, version: int, task: asyncio.Task) -> None:
        if task.cancelled() or task.exception() is None:
            return
        with self._cond:
            self._failed[version] = str(task.exception())
            self._cond.notify_all()

    async def _on_install(self, version: int, buffer, manifest) -> dict:
        try:  # a delta becomes its full snapshot here (hash-checked), or the full one is fetched instead
            installed = await self.bases.resolve(version, buffer, manifest, node_id=self.node_id,
                                                 public_key=self.node.public_key, link=self.node.link,
                                                 stall_timeout_s=self.node.stall_timeout_s)
        except BroadcastError:
            raise
        except Exception as exc:  # must fail this version (and be reported), not leave it hanging
            raise BroadcastError(f"{self.node_id}: cannot install version {version}: {exc}") from exc
        buffer = installed.buffer
        state_dict = state_dict_from_bytes(buffer)  # zero-copy views; the buffer lives as long as they do
        with self._cond:
            self._installed = {v: sd for v, sd in self._installed.items() if v > version}
            self._installed[version] = state_dict
            self._cond.notify_all()
        return {"tensors": len(state_dict), **installed.report()}

    def wait_installed(self, version: int, timeout_s: float = 600.0) -> tuple[int, dict]:
        """(version, state dict) of ``version`` or a newer one, once this node has verified all of it."""
        deadline = time.monotonic() + timeout_s
        with self._cond:
            while True:
                newest = max((v for v in self._installed if v >= version), default=None)
                if newest is not None:
                    return newest, self._installed[newest]
                if version in self._failed:
                    raise BroadcastError(self._failed[version])
                if self._closed:
                    raise BroadcastError(f"{self.node_id}: endpoint closed before version {version} arrived")
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise TimeoutError(f"{self.node_id}: version {version} not installed within {timeout_s} s")
                self._cond.wait(remaining)

    def close(self) -> None:
        with self._cond:
            self._closed = True
            self._cond.notify_all()

        async def _close():
            await self.node.close()
            self.client.writer.close()
            self._runner.cancel()

        try:
            self._thread.run(_close(), 10)
        finally:
            self._thread.stop()


class BroadcastReceiverMixin:
    """Actor methods for receiving snapshots; the class must define ``install(state_dict, version)``."""

    _broadcast_endpoint: WorkerBroadcastEndpoint | None = None

    def broadcast_start(self, node_id: str, control_address: tuple[str, int], public_key: bytes, node_key: bytes,
                        link: dict | None = None, bind_host: str = "127.0.0.1",
                        advertise_host: str | None = None,
                        port_range: tuple[int, int] | None = None) -> tuple[str, int]:
        """Start this worker's node (once); returns the address its children dial. Binding 0.0.0.0
        without an ``advertise_host`` advertises Ray's idea of this node's IP. ``port_range``: listen on
        the first free port of it (None: an ephemeral port). ``node_key``: this node's credential on the
        broadcast plane (``LearnerBroadcaster.credential_for``)."""
        if bind_host == "0.0.0.0" and advertise_host is None:
            import ray  # only in this case: the endpoint itself does not need Ray

            advertise_host = ray.util.get_node_ip_address()
        if self._broadcast_endpoint is None:
            self._broadcast_endpoint = WorkerBroadcastEndpoint(
                node_id, control_address, public_key, node_key, link=link, bind_host=bind_host,
                advertise_host=advertise_host,
                port_range=port_range,
            )
        return self._broadcast_endpoint.address

    def broadcast_receive(self, version: int, timeout_s: float = 600.0) -> int:
        """Block (on the control thread) until ``version`` or newer arrived verified; install it."""
        if self._broadcast_endpoint is None:
            raise RuntimeError("broadcast_receive before broadcast_start: the transport must start the node first")
        installed, state_dict = self._broadcast_endpoint.wait_installed(version, timeout_s)
        return self.install(state_dict, installed)

    def broadcast_close(self) -> None:
        if self._broadcast_endpoint is not None:
            self._broadcast_endpoint.close()
            self._broadcast_endpoint = None
