"""Sending work to the rollout workers: async keeps each worker's queue full unless admission control
(``admission/dispatch.py``) holds a request back; sync asks for exactly the groups a step still lacks."""

from __future__ import annotations

import time
from typing import Mapping

from echo2_sdk.runtime.admission.dispatch import DispatchControl
from echo2_sdk.runtime.driver.data import PromptStream
from echo2_sdk.runtime.driver.opponents import OpponentSampler
from echo2_sdk.runtime.learning.buffer import ReplayBuffer
from echo2_sdk.runtime.rollout.pool import RolloutPool
from echo2_sdk.runtime.rollout.slots import WorkerSlot


class Dispatcher:
    def __init__(self, pool: RolloutPool, stream: PromptStream, buffer: ReplayBuffer, control: DispatchControl,
                 prompts_per_request: int, holds: Mapping[str, int], opponents: OpponentSampler | None = None) -> None:
        """``holds``: the newest version each worker is known to have installed, kept up to date by the
        deliveries (``DeliveryTracker.holds``: read, not copied); ``opponents``: re-draws each example's
        line-up (prioritized opponent sampling), None keeps the examples' own draws."""
        self.pool, self.stream, self.buffer, self.control = pool, stream, buffer, control
        self.opponents = opponents
        self.prompts_per_request = prompts_per_request
        self.holds = holds

    def worker_version(self, slot: WorkerSlot) -> int:
        """The version ``slot``'s next request will be generated under, at the least: the newest it is known
        to hold, from its replies or the deliveries. (Trusting a delivery in progress to land in time, judged
        by the previous delivery's duration, dropped 6 % of a quickstart's samples instead of 1.7 %: on a
        busy machine delivery times vary too much.)"""
        return max(slot.version, self.holds.get(slot.name, 0))

    def fill_all(self, learner_version: int) -> None:
        """Async: queue requests on every worker up to the pool's queue depth while admission control allows.
        What the rules read — the admissible groups buffered, the requests out per worker — is counted once
        per call and kept current as requests go out (this runs at every collect)."""
        buffered = self.buffer.num_admissible(learner_version) if self.control.enabled else 0
        in_flight = {s.name: len(s.inflight) for s in self.pool.slots if s.inflight or self.pool.accepts_work(s)}
        for slot in self.pool.slots:
            while self.pool.accepts_work(slot) and len(slot.inflight) < self.pool.queue_depth:
                if not self.control.allows(slot.name, request_groups=self.prompts_per_request,
                                           version=self.worker_version(slot), learner_version=learner_version,
                                           buffered_groups=buffered, in_flight=in_flight, now=time.perf_counter()):
                    # Liveness: nothing in flight anywhere and too little buffered for a step — the learner
                    # would wait forever on estimates (e.g. a version never learned); one goes out regardless.
                    if any(in_flight.values()) or buffered >= self.control.groups_per_step:
                        break
                    self.control.forced += 1
                    self.control.forget(slot.name, time.perf_counter())  # it works: its pause ends
                self.pool.submit(slot, self._take(self.prompts_per_request))
                in_flight[slot.name] = len(slot.inflight)

    def fill_sync(self, missing: int) -> bool:
        """Sync: spread ``missing`` prompts over the workers that take work; False if none does."""
        live = [s for s in self.pool.live_slots if self.pool.accepts_work(s)]
        if not live:
            return False
        k = self.prompts_per_request
        for i in range(0, missing, k):
            self.pool.submit(live[(i // k) % len(live)], self._take(min(k, missing - i)))
        return True

    def _take(self, count: int) -> list:
        examples = self.stream.take(count)
        return examples if self.opponents is None else self.opponents.assign(examples)

    def on_reply(self, slot: WorkerSlot, request_s: float, *, wasted_total: int) -> None:
        """``slot``'s reply occupied it ``request_s`` and went through admission, after which the run has
        dropped ``wasted_total`` samples as stale in all: the rates and the margin learn from it."""
        self.control.on_reply(slot.name, request_s)
        self.control.on_admitted(wasted_total)

    def row(self) -> dict[str, float]:
        """The step's metrics.jsonl fields: the admission margin in use (none while admission control is off)."""
        return {"admission_margin_devs": self.control.margin_now_devs} if self.control.enabled else {}

    def on_restart(self, name: str) -> None:
        """``name`` restarts (its fresh actor installs the latest snapshot, so its known version still holds)."""
        self.control.forget(name, time.perf_counter())
