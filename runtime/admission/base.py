"""Contracts of the admission gate: the reasons it refuses samples for, its counters, what one admission
did, and the reward check it calls."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Protocol

from echo2_sdk.records import RolloutGroup

MALFORMED = "malformed"
"""A group that does not decode into records, or whose fields have the wrong JSON types."""
WRONG_WORKER = "wrong_worker"
"""A group (or one of its records) naming a worker other than the one the pool asked."""
REWARD_MISMATCH = "reward_mismatch"
"""A group with an audited sample whose reported reward differs from the learner's recomputation."""
UNREQUESTED = "unrequested"
"""A group for an example the pool did not ask this worker for in that request."""
DUPLICATE_GROUP = "duplicate_group"
"""A second group for one asked example (each request's example is answered once, so a group is
trained on at most once however often it is resent)."""
GROUP_SIZE = "group_size"
"""A group without records, or (against the request) not of exactly ``samples_per_prompt`` records."""
MIXED_GROUP = "mixed_group"
"""A group whose records disagree on what defines one group: prompt key, Ω.group tag or prompt ids."""
PROMPT_MISMATCH = "prompt_mismatch"
"""A group whose prompt ids differ from the learner's own rendering of the example it was asked for."""
CHECK_FAILED = "check_failed"
"""A check itself raised on a group (a bug on the learner side, not the worker's fault): the group is
refused rather than the learner stopped; a run that counts any should be reported."""
RESTORE_INVALID = "restore_invalid"
"""A buffered group of a checkpoint that no longer decodes or validates when a resumed run reloads it."""


class RewardCheck(Protocol):
    """What the gate asks of the reward audit (``reward_audit.RewardAudit``)."""

    def check(self, group: RolloutGroup) -> bool:
        """True if the group may be trained on."""


@dataclass
class AdmissionCounters:
    """Cumulative counts of what rollout workers handed the learner. The gate, the replay buffer's drop
    hook and the driver (trained samples, requests lost in flight) write them; they are checkpointed with
    the learner so that a resumed run continues them. The per-worker ledger they form, and the invariant
    it obeys, is ``admission.accounting``."""

    accepted: int = 0
    """Samples added to the replay buffer."""
    reject_reasons: Counter = field(default_factory=Counter)
    """Samples refused by a check, by reason: ``malformed`` (a group that does not decode counts once),
    ``wrong_worker``, the group checks of ``admission.request`` (``unrequested``, ``duplicate_group``,
    ``group_size``, ``mixed_group``, ``prompt_mismatch``), ``reward_mismatch``, ``check_failed``,
    ``restore_invalid`` (a buffered group of a checkpoint that no longer validates), and the codes of
    ``echo2_sdk.records.validate_group``."""
    reward_status: Counter = field(default_factory=Counter)
    """Reward outcomes the workers report (``ok``, ``timeout``, ...): samples by status."""
    tokens: int = 0
    """Generated tokens the workers report."""
    worker_errors: int = 0
    """Generate requests that failed: a crashed or lost worker, or a reply that is not the documented
    JSON document."""
    # ---- the per-worker ledger (``admission.accounting``) ---------------------------------------
    returned_by_worker: Counter = field(default_factory=Counter)
    """Samples in every group a worker's replies held, counted on arrival before any check (a group
    that cannot even be counted counts once, as its refusal does)."""
    rejected_by_worker: Counter = field(default_factory=Counter)
    """Samples refused by a check (``reject_reasons``), by the worker the pool asked."""
    dropped_on_arrival_by_worker: Counter = field(default_factory=Counter)
    """Samples that passed every check but were below the staleness bound on arrival (never in
    ``accepted``)."""
    evicted_by_worker: Counter = field(default_factory=Counter)
    """Samples accepted into the buffer that fell below the staleness bound there before being trained on."""
    trained_by_worker: Counter = field(default_factory=Counter)
    """Samples the learner took from the buffer and trained on."""
    lost_in_flight_by_worker: Counter = field(default_factory=Counter)
    """Samples asked of a worker in requests that never came back: the request failed, the worker was
    stopped with it queued, or it was in flight when the checkpoint this run resumed from was written."""
    lost_in_flight_by_cause: Counter = field(default_factory=Counter)
    """``lost_in_flight`` by cause, all workers together: ``failed``, ``abandoned``, ``at_checkpoint``."""
    ledger_since_step: int = 0
    """Step from which the ledger counts: 0, or the step of a checkpoint written before the ledger
    existed that this run resumed from (its counts start at zero there)."""
    dropped_stale_unsplit_by_worker: Counter = field(default_factory=Counter)
    """Stale drops of such an older checkpoint, which did not tell arrival from eviction (in the totals,
    outside the ledger)."""

    @property
    def rejected(self) -> int:
        """Samples refused by any check."""
        return sum(self.reject_reasons.values())

    @property
    def dropped_stale_by_worker(self) -> Counter:
        """Samples dropped as stale by worker: on arrival, evicted, and unsplit ones of an older checkpoint."""
        return self.dropped_on_arrival_by_worker + self.evicted_by_worker + self.dropped_stale_unsplit_by_worker

    @property
    def dropped_stale(self) -> int:
        """Samples dropped as stale, all workers together."""
        return sum(self.dropped_stale_by_worker.values())

    @property
    def dropped_on_arrival(self) -> int:
        return sum(self.dropped_on_arrival_by_worker.values())

    @property
    def evicted(self) -> int:
        return sum(self.evicted_by_worker.values())

    @property
    def lost_in_flight(self) -> int:
        return sum(self.lost_in_flight_by_worker.values())

    def copy(self) -> "AdmissionCounters":
        return AdmissionCounters.from_dict(self.to_dict())

    def to_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {"accepted": self.accepted, "reject_reasons": dict(self.reject_reasons),
                             "reward_status": dict(self.reward_status), "tokens": self.tokens,
                             "worker_errors": self.worker_errors, "ledger_since_step": self.ledger_since_step}
        d.update({name: dict(getattr(self, name)) for name in _LEDGER})
        d["dropped_stale_unsplit_by_worker"] = dict(self.dropped_stale_unsplit_by_worker)
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any], *, step: int = 0) -> "AdmissionCounters":
        """Inverse of :meth:`to_dict`; other keys are ignored, so the run statistics of a checkpoint
        written before the gate counted (which held these counters) load too.

        A checkpoint written before the ledger (no ``returned_by_worker``) loads with the ledger at zero
        from ``step`` (``ledger_since_step``) and its mixed stale drops kept unsplit."""
        c = cls(accepted=int(d.get("accepted", 0)), reject_reasons=Counter(d.get("reject_reasons", {})),
                reward_status=Counter(d.get("reward_status", {})), tokens=int(d.get("tokens", 0)),
                worker_errors=int(d.get("worker_errors", 0)))
        if "returned_by_worker" not in d:
            # Those older checkpoints named the stale drops by worker ``dropped_stale_by_worker`` (or,
            # older still, ``dropped_by_worker``).
            c.dropped_stale_unsplit_by_worker = Counter(d.get("dropped_stale_by_worker", d.get("dropped_by_worker", {})))
            c.ledger_since_step = step
            return c
        for name in _LEDGER:
            setattr(c, name, Counter(d.get(name, {})))
        c.dropped_stale_unsplit_by_worker = Counter(d.get("dropped_stale_unsplit_by_worker", {}))
        c.ledger_since_step = int(d.get("ledger_since_step", 0))
        return c


_LEDGER = ("returned_by_worker", "rejected_by_worker", "dropped_on_arrival_by_worker", "evicted_by_worker",
           "trained_by_worker", "lost_in_flight_by_worker", "lost_in_flight_by_cause")


@dataclass(frozen=True)
class Admission:
    """What the gate did with one generate result."""

    accepted: int
    """Samples added to the replay buffer."""
    rejected: int
    """Samples refused by a check (a group that does not decode counts once)."""
    dropped_stale: int
    """Samples that passed every check but were too old for the learner on arrival (``dropped_on_arrival``)."""
    arrived_versions: tuple[int, ...]
    """Policy version of every group that passed the checks, fresh enough or not, in arrival order."""
