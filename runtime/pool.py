"""The rollout pool: Ray actors running ``RolloutWorker``, request dispatch and snapshot delivery.

Each worker keeps ``queue_depth`` generate requests queued so it never waits for the driver while
the learner trains. Snapshots travel through a ``SnapshotTransport``; here the Ray object store
(one ``ray.put`` per snapshot, every worker fetches it on its control thread).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Any, Sequence

import ray

from echo2_sdk.adapter import Example
from echo2_sdk.runtime.worker import GenerationResult, RolloutWorker

CONTROL = "control"


class SnapshotTransport(ABC):
    """How a published snapshot reaches the workers. ``publish`` must not block the learner."""

    @abstractmethod
    def publish(self, state_dict: dict, version: int, workers: Sequence[Any]) -> list[Any]:
        """Start delivering ``state_dict`` as ``version``; return handles that complete on install."""


class ObjectStoreTransport(SnapshotTransport):
    """One ``ray.put`` per snapshot; each worker pulls it from the object store."""

    def publish(self, state_dict: dict, version: int, workers: Sequence[Any]) -> list[Any]:
        ref = ray.put(state_dict)
        return [w.install.options(concurrency_group=CONTROL).remote(ref, version) for w in workers]


@dataclass
class WorkerSlot:
    name: str
    actor: Any
    spec: dict
    inflight: list[Any] = field(default_factory=list)
    samples: int = 0
    tokens: int = 0
    generate_s: float = 0.0
    reward_s: float = 0.0
    throttle_s: float = 0.0
    errors: int = 0
    version: int = 0
    dead: bool = False
    """The actor process is gone (crashed or killed); the pool stops sending it work."""


class RolloutPool:
    def __init__(
        self,
        specs: Sequence[dict],
        worker_kwargs: dict,
        *,
        transport: SnapshotTransport | None = None,
        queue_depth: int = 2,
        gpus_per_worker: float = 0.0,
    ) -> None:
        remote_cls = ray.remote(concurrency_groups={CONTROL: 1})(RolloutWorker)
        self.transport = transport or ObjectStoreTransport()
        self.queue_depth = queue_depth
        self.slots: list[WorkerSlot] = []
        for i, spec in enumerate(specs):
            # Workers reserve no CPU slot: light control calls must never wait for a free CPU.
            # max_concurrency=2: one request generates while the previous one scores its rewards.
            actor = remote_cls.options(num_cpus=0, num_gpus=gpus_per_worker, max_concurrency=2).remote(
                spec["name"],
                max_tokens_per_s=spec.get("max_tokens_per_s"),
                **{**worker_kwargs, "seed": worker_kwargs["seed"] + 7919 * (i + 1)},
            )
            self.slots.append(WorkerSlot(spec["name"], actor, dict(spec)))
        self._ref_owner: dict[Any, WorkerSlot] = {}
        ray.get([s.actor.ping.options(concurrency_group=CONTROL).remote() for s in self.slots])

    @property
    def actors(self) -> list[Any]:
        return [s.actor for s in self.slots]

    @property
    def live_slots(self) -> list[WorkerSlot]:
        return [s for s in self.slots if not s.dead]

    def submit(self, slot: WorkerSlot, examples: list[Example]) -> None:
        ref = slot.actor.generate.remote(examples)
        slot.inflight.append(ref)
        self._ref_owner[ref] = slot

    def pending(self) -> list[Any]:
        return list(self._ref_owner)

    def collect(self, timeout_s: float) -> list[tuple[WorkerSlot, GenerationResult | Exception]]:
        """Results finished within ``timeout_s`` (0 = only those already done)."""
        refs = self.pending()
        if not refs:
            return []
        if timeout_s > 0:
            ray.wait(refs, num_returns=1, timeout=timeout_s)
        ready, _ = ray.wait(refs, num_returns=len(refs), timeout=0)
        out = []
        for ref in ready:
            slot = self._ref_owner.pop(ref)
            slot.inflight.remove(ref)
            try:
                result = ray.get(ref)
            except Exception as exc:  # a crashed request is data: count it and go on
                slot.errors += 1
                slot.dead = slot.dead or isinstance(exc, ray.exceptions.RayActorError)
                out.append((slot, exc))
                continue
            slot.samples += sum(len(g["rollouts"]) for g in result.groups)
            slot.tokens += result.num_tokens
            slot.generate_s += result.t_generate_s
            slot.reward_s += result.t_reward_s
            slot.throttle_s += result.t_throttle_s
            slot.version = result.version
            out.append((slot, result))
        return out

    def publish(self, state_dict: dict, version: int) -> list[Any]:
        return self.transport.publish(state_dict, version, self.actors)

    def worker_report(self) -> list[dict]:
        return [
            {
                "name": s.name,
                "gpu": s.spec.get("gpu", "cpu"),
                "max_tokens_per_s": s.spec.get("max_tokens_per_s"),
                "usd_per_hour": s.spec.get("usd_per_hour", 0.0),
                "samples": s.samples,
                "tokens": s.tokens,
                "generate_s": round(s.generate_s, 3),
                "reward_s": round(s.reward_s, 3),
                "throttle_s": round(s.throttle_s, 3),
                # Reward scoring overlaps the next generation, so generation time is the capacity.
                "tokens_per_generate_s": round(s.tokens / s.generate_s, 1) if s.generate_s else None,
                "errors": s.errors,
                "dead": s.dead,
                "last_version": s.version,
            }
            for s in self.slots
        ]

    def shutdown(self) -> None:
        for s in self.slots:
            try:
                ray.get(s.actor.close.options(concurrency_group=CONTROL).remote(), timeout=10)
            except Exception:
                pass
            ray.kill(s.actor)
        self.slots.clear()
        self._ref_owner.clear()
