"""The admission gate: the one way from a rollout worker's reply into the replay buffer.

Every group of a generate result goes through the same checks, in this order, and the first that fails
refuses it and counts its samples under that reason:

1. decode: the wire dict rebuilds into records whose fields have the JSON types records need (``malformed``);
2. worker identity: the group and each of its records name the worker the pool asked (``wrong_worker``),
   because per-worker accounting (agreement flags, dollars, stale drops) trusts these names;
3. record validation (``echo2_sdk.records.validate_group``) against the newest published version and the
   record limits: an invalid record is refused alone, the rest of its group goes on;
4. reward audit (``reward_audit``) on what validation kept (``reward_mismatch``): it decodes the
   completions, whose token ids validation has just checked against the vocabulary;
5. staleness: the replay buffer admits the group only while v ≥ v_t − S; a drop is counted by worker,
   on arrival as well as later when the learner moves on.

A malformed or hostile reply is refused and counted here, never raised.
"""

from __future__ import annotations

import dataclasses

from echo2_sdk.records import RecordLimits, RolloutGroup, group_from_wire, validate_group
from echo2_sdk.runtime.admission.base import (
    MALFORMED, REWARD_MISMATCH, WRONG_WORKER, Admission, AdmissionCounters, RewardCheck,
)
from echo2_sdk.runtime.learning.buffer import ReplayBuffer
from echo2_sdk.runtime.rollout.base import GenerationResult


class AdmissionGate:
    """Checks what workers return and fills the replay buffer the learner draws from (``buffer``)."""

    def __init__(self, *, staleness: int, limits: RecordLimits, audit: RewardCheck,
                 counters: AdmissionCounters | None = None) -> None:
        """``counters``: those of a checkpoint when resuming (a fresh run starts at zero)."""
        self.limits, self.audit = limits, audit
        self.counters = counters if counters is not None else AdmissionCounters()
        self.buffer = ReplayBuffer(staleness, on_drop=self._count_stale)

    def admit(self, worker: str, result: GenerationResult, *, newest_version: int, learner_version: int) -> Admission:
        """Check every group of ``result`` (from worker ``worker``) and add those that pass to the buffer.

        ``newest_version``: the newest snapshot published (no honest record is newer);
        ``learner_version``: the learner's version v_t, for the staleness bound."""
        c = self.counters
        c.tokens += result.num_tokens
        c.reward_status.update(result.reward_status)
        accepted, rejected, stale = c.accepted, c.rejected, c.dropped_stale
        arrived = []
        for wire in result.groups:
            group = self._checked(worker, wire, newest_version)
            if group is None:
                continue
            arrived.append(group.version)
            if self.buffer.add(group, learner_version):
                c.accepted += len(group.rollouts)
        return Admission(accepted=c.accepted - accepted, rejected=c.rejected - rejected,
                         dropped_stale=c.dropped_stale - stale, arrived_versions=tuple(arrived))

    def count_worker_error(self) -> None:
        """A generate request failed (the worker crashed or was lost, or its reply did not decode)."""
        self.counters.worker_errors += 1

    def _checked(self, worker: str, wire: dict, newest_version: int) -> RolloutGroup | None:
        """The group with its valid records, or None when a check refused it (and counted why)."""
        try:
            group = group_from_wire(wire)  # also refuses fields of the wrong JSON type
        except ValueError:
            self._refuse(MALFORMED, _samples_in(wire))
            return None
        if group.worker_id != worker or any(r.meta.get("worker") != worker for r in group.rollouts):
            self._refuse(WRONG_WORKER, len(group.rollouts))
            return None
        accepted, rejected = validate_group(group, newest_version=newest_version, limits=self.limits)
        self.counters.reject_reasons.update(rejected)
        if not accepted:
            return None
        if len(accepted) < len(group.rollouts):
            group = dataclasses.replace(group, rollouts=tuple(accepted))
        if not self.audit.check(group):
            self._refuse(REWARD_MISMATCH, len(group.rollouts))
            return None
        return group

    def _refuse(self, reason: str, samples: int) -> None:
        self.counters.reject_reasons[reason] += samples

    def _count_stale(self, group: RolloutGroup) -> None:
        self.counters.dropped_stale_by_worker[group.worker_id] += len(group.rollouts)


def _samples_in(wire: object) -> int:
    """How many samples a refused wire group claims to hold (1 when it cannot even be counted)."""
    rollouts = wire.get("rollouts") if isinstance(wire, dict) else None
    return len(rollouts) if isinstance(rollouts, list) and rollouts else 1
