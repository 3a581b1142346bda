"""The driver's side of the sample ledger (``admission.accounting``) and what a checkpoint carries beyond
the learner: the admission counters, the replay buffer's groups, the pool scheduler's state and the
deliveries still open.

Buffer policy on resume: the buffered groups are restored, not regenerated. They were generated, checked
and counted as accepted; dropping them would lose samples the ledger says are buffered, and regenerating
them would change the data a resumed run trains on. They are checked again on load (``AdmissionGate.
restore``): one that no longer validates is refused (``restore_invalid``), one below the staleness bound
at the resumed version is evicted, both counted. Requests in flight when a checkpoint is written cannot
reach a run resumed from it: the checkpoint counts them as lost (``at_checkpoint``), so the ledger
balances there too, and their prompts are not asked again (the data position continues after them, as
the uninterrupted run's does).
"""

from __future__ import annotations

import json
from typing import Any, Mapping

from echo2_sdk.records import group_to_wire
from echo2_sdk.runtime.admission import accounting
from echo2_sdk.runtime.admission.accounting import ABANDONED, FAILED, WorkerLedger
from echo2_sdk.runtime.admission.gate import AdmissionGate
from echo2_sdk.runtime.planning.pool_state import PoolState
from echo2_sdk.runtime.rollout.base import SentRequest

BUFFER_FORMAT = "echo2-buffer/1"


def asked(request: SentRequest | None) -> int:
    """Samples a generate request asked for (a worker's start asks none)."""
    return 0 if request is None else len(request.examples) * request.samples_per_prompt


class RunLedger:
    """Counts what the gate cannot see (requests that never came back) and reads the ledger."""

    def __init__(self, gate: AdmissionGate, pool, controller=None) -> None:
        """``controller``: the cost-aware pool's ``PoolController`` (None without the scheduler)."""
        self.gate, self.pool, self.controller = gate, pool, controller

    def on_failed(self, worker: str, request: SentRequest | None) -> None:
        """A generate request (or a worker's start) failed: its samples will never come back."""
        self.gate.count_worker_error()
        self.gate.count_lost(worker, asked(request), FAILED)

    def settle(self) -> None:
        """Count the requests the pool dropped when it stopped a worker (released, lost, replaced)."""
        for worker, request in self.pool.take_abandoned():
            self.gate.count_lost(worker, asked(request), ABANDONED)

    def books(self, in_flight: Mapping[str, int] | None = None) -> tuple[WorkerLedger, ...]:
        """Every worker's ledger now (``in_flight``: the pool's, unless given, e.g. at the end of a run)."""
        self.settle()
        pending = self.pool.in_flight_samples() if in_flight is None else in_flight
        return accounting.ledgers(self.gate.counters, accounting.samples_by_worker(self.gate.buffer.groups()), pending)

    def row(self) -> dict[str, Any]:
        """A step row's field: does the invariant hold after this step?"""
        return {"accounting_balanced": accounting.balanced(self.books())}

    def summary(self, in_flight_at_stop: Mapping[str, int]) -> dict[str, Any]:
        return accounting.summary(self.gate.counters, self.books(in_flight_at_stop))

    # ---- checkpoints -----------------------------------------------------------------------------
    def checkpoint_extra(self) -> dict[str, Any]:
        """The checkpoint's ``admission`` (in-flight requests counted lost), ``buffer`` and, with the
        scheduler, ``pool`` (``planning.pool_state``) entries."""
        self.settle()
        saved = accounting.at_checkpoint(self.gate.counters, self.pool.in_flight_samples())
        # One JSON string: a torch checkpoint pickles it as one object, not thousands of small lists.
        groups = json.dumps([group_to_wire(g) for g in self.gate.buffer.groups()], separators=(",", ":"))
        extra = {"admission": saved.to_dict(), "buffer": {"format": BUFFER_FORMAT, "groups": groups}}
        if self.controller is not None:
            extra["pool"] = self.controller.state().to_dict()
        return extra

    def restore(self, extra: Mapping[str, Any], learner_version: int, log) -> None:
        """Refill the buffer from a checkpoint's ``extra``. A checkpoint written before buffers were saved
        has none: the resumed run starts with an empty buffer (those groups were not counted as buffered
        by a ledger either, which such a checkpoint did not keep)."""
        saved = extra.get("buffer")
        if saved is None:
            return
        if saved.get("format") != BUFFER_FORMAT:
            raise ValueError(f"checkpoint buffer format {saved.get('format')!r}, this driver reads {BUFFER_FORMAT!r}")
        wires = json.loads(saved["groups"])
        before = (self.gate.counters.rejected, self.gate.counters.evicted)
        self.gate.restore(wires, learner_version)
        refused, evicted = self.gate.counters.rejected - before[0], self.gate.counters.evicted - before[1]
        dropped = f" ({refused} samples refused as no longer valid, {evicted} evicted as stale)" if refused or evicted else ""
        log(f"replay buffer restored: {len(self.gate.buffer)} of {len(wires)} groups{dropped}")


def restore_pool(controller, extra: Mapping[str, Any], log) -> None:
    """Give the cost-aware pool a checkpoint's cost and estimates, before its first plan. A checkpoint
    without them (no scheduler then, or written before they were saved) leaves the priors and zero cost."""
    saved = extra.get("pool")
    if controller is None or saved is None:
        return
    state = PoolState.from_dict(saved)
    controller.restore(state)
    log(f"pool: resumed at ${state.cost.cost_usd:.4f} spent, {len(state.estimates.mu_measured)} measured μ_i")


def stats_at_checkpoint(stats, deliveries) -> dict[str, Any]:
    """The run statistics a checkpoint stores: with the deliveries still open (``settled: false``,
    ``open_at_checkpoint: true``) in the per-version table, which a resumed run would otherwise lack —
    their replies go to workers that end with this run."""
    saved = stats.to_dict()
    for rec in deliveries.open_records():
        rec["t_publish_s"] = round(stats.publish_time_s(rec["version"]), 4)
        saved["deliveries"] = [*saved["deliveries"], {**rec, "released": [], "open_at_checkpoint": True}]
    return saved
