"""The rollout pool: Ray actors running ``RolloutWorker``, request dispatch and snapshot delivery.

Each worker keeps ``queue_depth`` generate requests queued so it never waits for the driver while
the learner trains. Snapshots travel through a ``SnapshotTransport``; here the Ray object store
(one ``ray.put`` per snapshot, every worker fetches it on its control thread).
"""

from __future__ import annotations

import dataclasses
import time
from typing import Any, Sequence

import ray

from echo2_sdk.adapter import Example
from echo2_sdk.config import WorkerSpec
from echo2_sdk.runtime.broadcast.base import CONTROL, SnapshotTransport
from echo2_sdk.runtime.broadcast.object_store import ObjectStoreTransport
from echo2_sdk.runtime.rollout.codec import example_to_dict, result_from_json
from echo2_sdk.runtime.rollout.base import SentRequest, WorkerSettings
from echo2_sdk.runtime.rollout.slots import Finished, WorkerSlot, report_row
from echo2_sdk.runtime.rollout.worker import RolloutWorker

__all__ = ["Finished", "RolloutPool", "WorkerSlot"]


class RolloutPool:
    start_timeout_s: float = 600.0
    """Seconds a worker may take from its launch until it is up before it counts as hung."""

    def __init__(
        self,
        specs: Sequence[WorkerSpec],
        settings: WorkerSettings,
        *,
        transport: SnapshotTransport | None = None,
        queue_depth: int = 2,
        gpus_per_worker: float = 0.0,
        resources: dict[str, float] | None = None,
        model_files: Any = None,
        lazy: bool = False,
        start_timeout_s: float = 600.0,
    ) -> None:
        """``settings``: what every worker starts with; each gets its own seed and its spec's throughput cap.
        ``lazy``: start no actor yet; :meth:`activate` starts them (the pool scheduler decides which).
        ``resources``: Ray custom resources every worker actor requests (a spec's own ``resources`` add
        to them and win on shared keys), e.g. ``{"rollout": 1}`` to keep workers on rollout nodes.
        ``model_files``: the base model folder packed by ``model_files.pack`` for Ray workers on nodes
        that lack it. ``start_timeout_s``: a worker not up this long after its launch is hung (:meth:`hung`)."""
        # Several control threads: a P2P receive blocks one until its version is in, and must not hold
        # up a direct install or the shutdown call behind it.
        self._remote_cls = ray.remote(concurrency_groups={CONTROL: 4})(RolloutWorker)
        self._settings, self._gpus_per_worker = settings, gpus_per_worker
        self.start_timeout_s = start_timeout_s
        self._resources = dict(resources or {})
        self._model_files = model_files
        self._remote_proxy_cls: Any = None
        self._starting: dict[Any, WorkerSlot] = {}
        self.latest: tuple[dict, int] | None = None
        """The latest (state_dict, version) published through the pool: installed on every activation."""
        self._latest_ref: Any = None
        self.last_publish_names: list[str] = []
        """Workers the last :meth:`publish` handed the snapshot to, in the order of its handles."""
        self.transport = transport or ObjectStoreTransport()
        self.queue_depth = queue_depth
        self.slots: list[WorkerSlot] = []
        for i, spec in enumerate(specs):
            slot = WorkerSlot(spec.name, None, spec, index=i, active=not lazy, ready=not lazy)
            self.slots.append(slot)
            if not lazy:
                self._start(slot)
        self._ref_owner: dict[Any, WorkerSlot] = {}
        self._requests: dict[Any, SentRequest] = {}
        """What each in-flight generate call asked for (as many entries as calls in flight)."""
        self.in_flight_at_shutdown: dict[str, int] = {}
        """:meth:`in_flight_samples` when :meth:`shutdown` began (those requests are never answered)."""
        self.abandoned: list[tuple[str, SentRequest]] = []
        """(worker, request) of every generate call dropped unanswered because its worker was stopped; the
        driver takes them (:meth:`take_abandoned`) and counts their samples as lost in flight."""
        if not lazy:  # wait until every worker is up; one that dies or hangs while starting is dead, not a crash
            pings = [s.actor.ping.options(concurrency_group=CONTROL).remote() for s in self.slots]
            ray.wait(pings, num_returns=len(pings), timeout=start_timeout_s)
            for slot, ping in zip(self.slots, pings):
                try:
                    ray.get(ping, timeout=0)
                    slot.last_progress = time.perf_counter()
                except Exception:  # died, or not up within start_timeout_s (killed: a restart starts afresh)
                    slot.errors += 1
                    if slot.actor is not None:
                        try:
                            ray.kill(slot.actor)
                        except Exception:
                            pass
                    slot.dead = True

    def _start(self, slot: WorkerSlot) -> None:
        # Workers reserve no CPU slot: light control calls must never wait for a free CPU.
        # max_concurrency=2: one request generates while the previous one scores its rewards.
        seed = self._settings.seed + 7919 * (slot.index + 1) + 104729 * slot.starts  # a restart samples anew
        settings = dataclasses.replace(self._settings, seed=seed, max_tokens_per_s=slot.spec.max_tokens_per_s)
        if slot.spec.endpoint:  # a worker outside Ray (`echo2 worker serve`)
            slot.actor = self._start_remote(slot, settings)
        else:
            resources = {**self._resources, **slot.spec.resources}  # placement: rollout nodes
            slot.actor = self._remote_cls.options(num_cpus=0, num_gpus=self._gpus_per_worker, max_concurrency=2,
                                                  resources=resources or None).remote(
                slot.name, settings, model_files=self._model_files)
        slot.starts += 1
        slot.active_since = time.perf_counter()
        slot.overdue = ""

    def _start_remote(self, slot: WorkerSlot, settings: WorkerSettings) -> Any:
        """A proxy actor pinned to this (the learner's) node speaks to the remote worker: the remote
        machine never joins Ray, and its replies are JSON checked by the driver (README "Trust model")."""
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        from echo2_sdk.runtime.rollout.remote.protocol import token_from_env

        if self._remote_proxy_cls is None:
            from echo2_sdk.runtime.rollout.remote.proxy import RemoteWorkerProxy

            self._remote_proxy_cls = ray.remote(concurrency_groups={CONTROL: 4})(RemoteWorkerProxy)
        token = token_from_env(slot.spec.token_env).decode()
        here = NodeAffinitySchedulingStrategy(ray.get_runtime_context().get_node_id(), soft=False)
        return self._remote_proxy_cls.options(num_cpus=0, max_concurrency=4, scheduling_strategy=here).remote(
            slot.name, settings, endpoint=slot.spec.endpoint, token=token)

    # ---- acting on the pool scheduler's decisions ---------------------------------------------
    def slot(self, name: str) -> WorkerSlot:
        for s in self.slots:
            if s.name == name:
                return s
        raise KeyError(f"no rollout worker named {name!r} (known: {', '.join(s.name for s in self.slots)})")

    def is_active(self, name: str) -> bool:
        return self.slot(name).active

    def alive_names(self, stall_timeout_s: float | None = None) -> list[str]:
        """Workers that answer: running and not dead, or not started (offers that can be rented).

        With ``stall_timeout_s``, a hung worker (see :meth:`hung`) counts as silent too."""
        hung = {s.name for s, _ in self.hung(stall_timeout_s)}
        return [s.name for s in self.slots if not s.dead and not s.lost and s.name not in hung]

    def hung(self, stall_timeout_s: float | None, now: float | None = None) -> list[tuple[WorkerSlot, str]]:
        """(slot, why) of the running or starting workers that make no progress (:meth:`why_hung`). A
        stopped process keeps its Ray actor alive, so only missing progress shows it."""
        now = time.perf_counter() if now is None else now
        return [(s, why) for s in self.slots if (why := self.why_hung(s, stall_timeout_s, now))]

    def why_hung(self, slot: WorkerSlot, stall_timeout_s: float | None, now: float) -> str:
        """Why ``slot`` counts as hung ("" if it does not): the pool stopped waiting for it (``overdue``);
        starting for over ``start_timeout_s``; or work queued and nothing finished for ``stall_timeout_s``
        (None: never) — or for 5× its slowest request, if longer, so a slow model is not taken for a hung one."""
        if not slot.active or slot.dead or slot.lost or slot.actor is None:
            return ""
        if slot.overdue:
            return slot.overdue
        if not slot.ready:
            up_s = now - slot.active_since if slot.active_since is not None else 0.0
            return (f"not up {up_s:.0f} s after its launch (rollout.worker_start_timeout_s={self.start_timeout_s:g})"
                    if up_s > self.start_timeout_s else "")
        if stall_timeout_s is None or not slot.inflight or slot.last_progress is None:
            return ""
        quiet_s = now - slot.last_progress
        if quiet_s > max(stall_timeout_s, 5.0 * slot.slowest_request_s):
            return f"no request finished for {quiet_s:.0f} s with {len(slot.inflight)} queued"
        return ""

    def accepts_work(self, slot: WorkerSlot) -> bool:
        return (slot.active and slot.ready and not slot.dead and not slot.lost and slot.actor is not None
                and not slot.overdue)

    def activate(self, name: str) -> str:
        """Start worker ``name`` (if not running) with the latest published snapshot; returns what was done.

        The snapshot is installed directly on the new actor and work is sent only once that install has
        returned (see :meth:`collect`), so it never generates with stale weights.
        """
        slot = self.slot(name)
        if slot.dead or slot.lost:
            raise RuntimeError(f"worker {name!r} is {'dead' if slot.dead else 'lost'}; it cannot be activated again")
        if slot.active:
            return "already active"
        slot.active, slot.ready = True, False
        self._start(slot)
        if self.latest is not None:
            if self._latest_ref is None:
                self._latest_ref = ray.put(self.latest[0])
            ref = slot.actor.install.options(concurrency_group=CONTROL).remote(self._latest_ref, self.latest[1])
            slot.version = max(slot.version, self.latest[1])  # what it generates under once ready (work waits)
            what = f"started actor, installing v{self.latest[1]}"
        else:
            ref = slot.actor.ping.options(concurrency_group=CONTROL).remote()
            what = "started actor (base weights, nothing published yet)"
        self._starting[ref] = slot
        return what

    def wait_started(self, timeout_s: float = 600.0) -> None:
        """Block until every starting worker is up (or failed); the next :meth:`collect` marks them."""
        refs = list(self._starting)
        if refs:
            ray.wait(refs, num_returns=len(refs), timeout=timeout_s)

    def release(self, name: str) -> str:
        """Stop feeding worker ``name`` and stop its actor (its unfinished requests are dropped)."""
        slot = self.slot(name)
        if not slot.active:
            return "already inactive"
        self._stop(slot)
        return "actor stopped"

    def retire(self, name: str) -> int:
        """Kill worker ``name``'s actor (e.g. hung) and count it dead, restartable; returns the requests dropped."""
        slot = self.slot(name)
        dropped = len(slot.inflight)
        self._stop(slot)
        slot.dead = True
        return dropped

    def restart(self, name: str) -> str:
        """Start a fresh actor for dead worker ``name`` (its old one is killed if still there), exactly as an
        activation does: the latest snapshot is installed before any work is sent."""
        slot = self.slot(name)
        if slot.lost:
            raise RuntimeError(f"worker {name!r} was taken out of the pool; it is not restarted")
        slot.dead = False  # first, so that _stop kills what is left of the old actor (a remote worker's proxy)
        if slot.active:
            self._stop(slot)
        return self.activate(name)

    def mark_lost(self, name: str) -> str:
        """The scheduler declared ``name`` lost: no more work or snapshots; its actor is stopped if still there."""
        slot = self.slot(name)
        slot.lost = True
        if slot.active:
            self._stop(slot)
        return "out of the pool"

    def _stop(self, slot: WorkerSlot) -> None:
        for ref in list(slot.inflight):
            self._ref_owner.pop(ref, None)
            request = self._requests.pop(ref, None)
            if request is not None:  # never answered: the sample ledger counts it lost, not forgotten
                self.abandoned.append((slot.name, request))
        slot.inflight.clear()
        for ref in [r for r, s in self._starting.items() if s is slot]:
            del self._starting[ref]
        if slot.actor is not None and not slot.dead:
            try:
                ray.kill(slot.actor)
            except Exception:  # already gone
                pass
        slot.actor, slot.active, slot.ready = None, False, False
        if slot.active_since is not None:
            slot.active_s += time.perf_counter() - slot.active_since
            slot.active_since = None

    @property
    def actors(self) -> list[Any]:
        """Actors of the active, running workers (those that receive snapshots)."""
        return [s.actor for s in self._publish_slots()]

    def _publish_slots(self) -> list[WorkerSlot]:
        return [s for s in self.slots if s.active and not s.dead and s.actor is not None]

    @property
    def live_slots(self) -> list[WorkerSlot]:
        """Active workers whose actor runs (or is starting): they get snapshots and work."""
        return self._publish_slots()

    def exhausted(self) -> bool:
        """No worker is live and none is left to activate (every one died or was lost)."""
        return all(s.dead or s.lost for s in self.slots)

    def submit(self, slot: WorkerSlot, examples: list[Example]) -> None:
        ref = slot.actor.generate_wire.remote([example_to_dict(ex) for ex in examples])
        if not slot.inflight:  # the quiet clock of why_hung starts when an idle worker gets work, not when it went idle
            slot.last_progress = time.perf_counter()
        slot.inflight.append(ref)
        self._ref_owner[ref] = slot
        self._requests[ref] = SentRequest(tuple(examples), self._settings.samples_per_prompt)

    def pending(self) -> list[Any]:
        return list(self._ref_owner)

    def in_flight_samples(self) -> dict[str, int]:
        """Samples asked in the generate calls still in flight, by worker."""
        out: dict[str, int] = {}
        for ref, request in self._requests.items():
            name = self._ref_owner[ref].name
            out[name] = out.get(name, 0) + len(request.examples) * request.samples_per_prompt
        return out

    def take_abandoned(self) -> list[tuple[str, SentRequest]]:
        """The calls dropped unanswered since the previous call (see ``abandoned``)."""
        taken, self.abandoned = self.abandoned, []
        return taken

    def collect(self, timeout_s: float) -> list[Finished]:
        """Calls finished within ``timeout_s`` (0 = only those already done), each with what it asked for."""
        refs = self.pending() + list(self._starting)
        if not refs:
            if timeout_s > 0:  # nothing to wait on (e.g. every active worker died): do not spin
                time.sleep(timeout_s)
            return []
        if timeout_s > 0:
            ray.wait(refs, num_returns=1, timeout=timeout_s)
        ready, _ = ray.wait(refs, num_returns=len(refs), timeout=0)
        out = []
        for ref in ready:
            if ref in self._starting:  # an activated worker finished starting (and installing)
                slot = self._starting.pop(ref)
                try:
                    ray.get(ref)
                    slot.ready, slot.last_progress = True, time.perf_counter()
                except Exception as exc:
                    slot.errors += 1
                    slot.dead = True
                    out.append(Finished(slot, exc, None))
                continue
            slot = self._ref_owner.pop(ref)
            request = self._requests.pop(ref, None)
            slot.inflight.remove(ref)
            slot.last_progress = time.perf_counter()
            try:
                result = result_from_json(ray.get(ref))
            except Exception as exc:  # a crashed request or a malformed reply is data: count it and go on
                slot.errors += 1
                # A remote worker's lost connection surfaces as ConnectionError: it is gone like a dead actor.
                slot.dead = slot.dead or isinstance(exc, (ray.exceptions.RayActorError, ConnectionError))
                out.append(Finished(slot, exc, request))
                continue
            slot.samples += result.num_rollouts
            slot.tokens += result.num_tokens
            slot.generate_s += result.t_generate_s
            slot.reward_s += result.t_reward_s
            slot.throttle_s += result.t_throttle_s
            slot.version = result.version
            slot.node = result.node or slot.node
            slot.slowest_request_s = max(slot.slowest_request_s,
                                         result.t_generate_s + result.t_reward_s + result.t_throttle_s)
            out.append(Finished(slot, result, request))
        return out

    def publish(self, state_dict: dict, version: int) -> list[Any]:
        """Hand ``version`` to the transport for every worker; ``last_publish_names`` says which."""
        self.latest, self._latest_ref = (state_dict, version), None  # installed on later activations
        targets = self.live_slots
        self.last_publish_names = [s.name for s in targets]
        return self.transport.publish(state_dict, version, [s.actor for s in targets], names=self.last_publish_names)

    def released_names(self) -> set[str]:
        """Workers the scheduler released (a lost — hung, evicted — or dead one is not: it did fail)."""
        return {s.name for s in self.slots if not s.active and not s.lost and not s.dead}

    def worker_report(self) -> list[dict]:
        return [report_row(s) for s in self.slots]

    def shutdown(self) -> None:
        self.in_flight_at_shutdown = self.in_flight_samples()  # what the sample ledger reports in flight at stop
        try:
            self.transport.close([s.actor for s in self.slots if not s.dead and s.actor is not None])
        except Exception:  # a dead or stuck worker must not keep the driver from shutting down
            pass
        for s in self.slots:
            if s.actor is None:  # never started, released or lost
                continue
            try:
                ray.get(s.actor.close.options(concurrency_group=CONTROL).remote(), timeout=10)
            except Exception:
                pass
            ray.kill(s.actor)
        self.slots.clear()
        self._ref_owner.clear()
        self._requests.clear()
