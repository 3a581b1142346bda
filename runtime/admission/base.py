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


class RewardCheck(Protocol):
    """What the gate asks of the reward audit (``reward_audit.RewardAudit``)."""

    def check(self, group: RolloutGroup) -> bool:
        """True if the group may be trained on."""


@dataclass
class AdmissionCounters:
    """Cumulative counts of what rollout workers handed the learner. Only the gate writes them; they are
    checkpointed with the learner so that a resumed run continues them."""

    accepted: int = 0
    """Samples added to the replay buffer."""
    reject_reasons: Counter = field(default_factory=Counter)
    """Samples refused by a check, by reason: ``malformed`` (a group that does not decode counts once),
    ``wrong_worker``, the group checks of ``admission.request`` (``unrequested``, ``duplicate_group``,
    ``group_size``, ``mixed_group``, ``prompt_mismatch``), ``reward_mismatch``, ``check_failed``, and the
    codes of ``echo2_sdk.records.validate_group``."""
    dropped_stale_by_worker: Counter = field(default_factory=Counter)
    """Samples that passed every check but fell below the staleness bound, on arrival or later in the
    buffer, by the worker that generated them."""
    reward_status: Counter = field(default_factory=Counter)
    """Reward outcomes the workers report (``ok``, ``timeout``, ...): samples by status."""
    tokens: int = 0
    """Generated tokens the workers report."""
    worker_errors: int = 0
    """Generate requests that failed: a crashed or lost worker, or a reply that is not the documented
    JSON document."""

    @property
    def rejected(self) -> int:
        """Samples refused by any check."""
        return sum(self.reject_reasons.values())

    @property
    def dropped_stale(self) -> int:
        """Samples dropped as stale, all workers together."""
        return sum(self.dropped_stale_by_worker.values())

    def to_dict(self) -> dict[str, Any]:
        return {"accepted": self.accepted, "reject_reasons": dict(self.reject_reasons),
                "dropped_stale_by_worker": dict(self.dropped_stale_by_worker),
                "reward_status": dict(self.reward_status), "tokens": self.tokens, "worker_errors": self.worker_errors}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "AdmissionCounters":
        """Inverse of :meth:`to_dict`; other keys are ignored, so the run statistics of a checkpoint
        written before the gate counted (which held these counters) load too."""
        # Those older checkpoints named the stale drops by worker ``dropped_by_worker``.
        by_worker = d.get("dropped_stale_by_worker", d.get("dropped_by_worker", {}))
        return cls(accepted=int(d.get("accepted", 0)), reject_reasons=Counter(d.get("reject_reasons", {})),
                   dropped_stale_by_worker=Counter(by_worker), reward_status=Counter(d.get("reward_status", {})),
                   tokens=int(d.get("tokens", 0)), worker_errors=int(d.get("worker_errors", 0)))


@dataclass(frozen=True)
class Admission:
    """What the gate did with one generate result."""

    accepted: int
    """Samples added to the replay buffer."""
    rejected: int
    """Samples refused by a check (a group that does not decode counts once)."""
    dropped_stale: int
    """Samples that passed every check but were too old for the learner on arrival."""
    arrived_versions: tuple[int, ...]
    """Policy version of every group that passed the checks, fresh enough or not, in arrival order."""
