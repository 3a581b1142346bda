"""The per-worker sample ledger: nothing lost, nothing hidden.

Every sample a worker was asked for ends in exactly one place. Per worker w, at any moment of a run
(after every step, at a stop, and across a resume):

    generated_w = trained_w + dropped_on_arrival_w + evicted_w + rejected_w + buffered_w
                  + lost_in_flight_w + in_flight_w

* ``generated``: samples the worker returned (``returned_by_worker``, counted by the gate on arrival,
  before any check) plus those asked of it that did not come back (``lost_in_flight``) or have not yet
  (``in_flight``). A request's samples are counted as asked (prompts × ``samples_per_prompt``) until
  it returns, then as what it held;
* ``trained``: taken from the buffer and trained on; ``buffered``: in the buffer now;
* ``dropped_on_arrival``: fresh enough for no check to refuse them, too old for the learner on arrival;
  ``evicted``: accepted, then below the bound in the buffer before the learner took them;
* ``rejected``: refused by a check (``reject_reasons``), including ``restore_invalid`` on a resume;
* ``lost_in_flight``: asked in a request that failed, that was queued on a worker the pool stopped, or
  that was in flight when the checkpoint a resumed run started from was written (a resumed run cannot
  receive it); ``in_flight``: asked and not answered yet (at the end of a run: in flight at stop).

The left side and the right side are counted at different places (arrival; the buffer, the learner,
the pool), so a sample that goes missing between them — say a buffer a resume forgot — unbalances it.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import Any, Iterable, Mapping

from echo2_sdk.records import RolloutGroup
from echo2_sdk.runtime.admission.base import AdmissionCounters

AT_CHECKPOINT = "at_checkpoint"
"""Cause of a loss: in flight when the checkpoint this run resumed from was written."""
FAILED = "failed"
"""Cause of a loss: the request failed (a dead or lost worker, a reply that does not decode)."""
ABANDONED = "abandoned"
"""Cause of a loss: the request was queued on a worker the pool stopped (released, lost, replaced)."""


@dataclass(frozen=True)
class WorkerLedger:
    """One worker's terms of the invariant (samples)."""

    worker: str
    generated: int
    trained: int
    dropped_on_arrival: int
    evicted: int
    rejected: int
    buffered: int
    lost_in_flight: int
    in_flight: int

    @property
    def accounted(self) -> int:
        """The right side of the invariant."""
        return (self.trained + self.dropped_on_arrival + self.evicted + self.rejected + self.buffered
                + self.lost_in_flight + self.in_flight)

    @property
    def balanced(self) -> bool:
        return self.generated == self.accounted


def samples_by_worker(groups: Iterable[RolloutGroup]) -> Counter:
    """Samples of ``groups`` by the worker that generated them (``buffered`` from the buffer's groups)."""
    out: Counter = Counter()
    for group in groups:
        out[group.worker_id] += len(group.rollouts)
    return out


def ledgers(counters: AdmissionCounters, buffered: Mapping[str, int],
            in_flight: Mapping[str, int]) -> tuple[WorkerLedger, ...]:
    """Every worker's ledger (workers named by any term, sorted by name)."""
    c = counters
    names = set(c.returned_by_worker) | set(c.rejected_by_worker) | set(c.dropped_on_arrival_by_worker)
    names |= set(c.evicted_by_worker) | set(c.trained_by_worker) | set(c.lost_in_flight_by_worker)
    names |= {w for w, n in buffered.items() if n} | {w for w, n in in_flight.items() if n}
    out = []
    for w in sorted(names):
        lost, pending = c.lost_in_flight_by_worker[w], int(in_flight.get(w, 0))
        out.append(WorkerLedger(
            worker=w, generated=c.returned_by_worker[w] + lost + pending, trained=c.trained_by_worker[w],
            dropped_on_arrival=c.dropped_on_arrival_by_worker[w], evicted=c.evicted_by_worker[w],
            rejected=c.rejected_by_worker[w], buffered=int(buffered.get(w, 0)), lost_in_flight=lost,
            in_flight=pending))
    return tuple(out)


def balanced(books: Iterable[WorkerLedger]) -> bool:
    return all(b.balanced for b in books)


def at_checkpoint(counters: AdmissionCounters, in_flight: Mapping[str, int]) -> AdmissionCounters:
    """The counters a checkpoint stores: the live ones with the requests in flight now counted as lost
    (``at_checkpoint``), since a run resumed from it will never receive their replies. The live counters
    are left as they are: this run, going on, still receives them."""
    saved = counters.copy()
    for worker, samples in in_flight.items():
        if samples:
            saved.lost_in_flight_by_worker[worker] += samples
            saved.lost_in_flight_by_cause[AT_CHECKPOINT] += samples
    return saved


def summary(counters: AdmissionCounters, books: Iterable[WorkerLedger]) -> dict[str, Any]:
    """summary.json's ``accounting`` block: the terms all workers together, per worker, and ``balanced``."""
    books = list(books)
    terms = ("generated", "trained", "dropped_on_arrival", "evicted", "rejected", "buffered", "lost_in_flight",
             "in_flight")
    total = {t: sum(getattr(b, t) for b in books) for t in terms}
    total["in_flight_at_stop"] = total.pop("in_flight")
    return {
        **total,
        "balanced": all(b.balanced for b in books),
        "lost_in_flight_by_cause": dict(counters.lost_in_flight_by_cause),
        "since_step": counters.ledger_since_step,
        "by_worker": {b.worker: {**{t: getattr(b, t) for t in terms[:-1]}, "in_flight_at_stop": b.in_flight,
                                 "balanced": b.balanced} for b in books},
    }
