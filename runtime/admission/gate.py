"""The admission gate: the one way from a rollout worker's reply into the replay buffer.

Every group of a generate result goes through the same checks, in this order, and the first that fails
refuses it and counts its samples under that reason:

1. decode: the wire dict rebuilds into records whose fields have the JSON types records need (``malformed``);
2. worker identity: the group and each of its records name the worker the pool asked (``wrong_worker``),
   because per-worker accounting (agreement flags, dollars, stale drops) trusts these names;
3. shape, against the request the pool sent (``request``): an asked example, answered once, with exactly
   n records that agree on prompt, tag and prompt ids (``unrequested``, ``duplicate_group``,
   ``group_size``, ``mixed_group``);
4. record validation (``echo2_sdk.records.validate_group``) against the newest published version and the
   record limits (types, vocabulary, finite and bounded numbers, lengths): an invalid record is refused
   alone, the rest of its group goes on;
5. prompt ids against the learner's rendering of the asked example (``prompt_mismatch``);
6. reward audit (``reward_audit``) on what validation kept (``reward_mismatch``): it decodes the
   completions, whose token ids validation has just checked against the vocabulary;
7. staleness: the replay buffer admits the group only while v ≥ v_t − S; a drop is counted by worker,
   apart on arrival (never accepted) and later when the learner moves on (evicted after acceptance).

Every sample of a reply is counted as returned on arrival and, exactly once, under what became of it
(``admission.accounting`` states the per-worker invariant this gives).

A malformed or hostile reply is refused and counted here, never raised: what passes these checks is
what ``learning.batching.collate`` can always turn into tensors. Should one of checks 1-5 itself raise (a
bug, not the worker's doing), the group is refused as ``check_failed`` instead of stopping the learner.
"""

from __future__ import annotations

import dataclasses
import logging
from typing import Iterable

from echo2_sdk.records import RecordLimits, RolloutGroup, group_from_wire, validate_group
from echo2_sdk.runtime.admission.base import (
    CHECK_FAILED, MALFORMED, RESTORE_INVALID, REWARD_MISMATCH, WRONG_WORKER, Admission, AdmissionCounters,
    RewardCheck,
)
from echo2_sdk.runtime.admission.request import PromptIds, ReplyCheck
from echo2_sdk.runtime.learning.buffer import EVICTED, ReplayBuffer
from echo2_sdk.runtime.rollout.base import GenerationResult, SentRequest

log = logging.getLogger(__name__)


class AdmissionGate:
    """Checks what workers return and fills the replay buffer the learner draws from (``buffer``)."""

    def __init__(self, *, staleness: int, limits: RecordLimits, audit: RewardCheck,
                 counters: AdmissionCounters | None = None, prompt_ids: PromptIds | None = None,
                 buffer_order: str = "oldest") -> None:
        """``counters``: those of a checkpoint when resuming (a fresh run starts at zero);
        ``prompt_ids``: the learner's prompt ids of an asked example (``request.PromptRenderer``);
        ``buffer_order``: which admissible groups the learner takes first (``buffer.ORDERS``)."""
        self.limits, self.audit, self.prompt_ids = limits, audit, prompt_ids
        self.counters = counters if counters is not None else AdmissionCounters()
        self.buffer = ReplayBuffer(staleness, on_drop=self._count_stale, order=buffer_order)

    def admit(self, worker: str, result: GenerationResult, *, newest_version: int, learner_version: int,
              request: SentRequest | None = None) -> Admission:
        """Check every group of ``result`` (from worker ``worker``) and add those that pass to the buffer.

        ``newest_version``: the newest snapshot published (no honest record is newer);
        ``learner_version``: the learner's version v_t, for the staleness bound;
        ``request``: what the pool asked ``worker`` for (None: only the checks within the reply)."""
        c = self.counters
        c.tokens += result.num_tokens
        c.reward_status.update(result.reward_status)
        accepted, rejected, stale = c.accepted, c.rejected, c.dropped_on_arrival
        arrived = []
        reply = ReplyCheck(request, self.prompt_ids)
        for wire in result.groups:
            c.returned_by_worker[worker] += _samples_in(wire)  # before any check: each sample ends somewhere
            refused_before = c.rejected_by_worker[worker]
            try:
                group = self._checked(worker, wire, newest_version, reply)
            except Exception:  # a bug in a check must not stop the learner; counted and logged, so it is seen
                if not self.counters.reject_reasons[CHECK_FAILED]:
                    log.exception("a record check raised on a group from %s (a bug: please report it); "
                                  "such groups are refused as %s", worker, CHECK_FAILED)
                # Records validation already refused stay counted under their own reason, once.
                self._refuse(worker, CHECK_FAILED, _samples_in(wire) - (c.rejected_by_worker[worker] - refused_before))
                continue
            if group is None:
                continue
            # The audit is the learner's own reward code on checked records: its failures are not the
            # worker's doing, so they are not hidden under a refusal reason.
            if not self.audit.check(group):
                self._refuse(worker, REWARD_MISMATCH, len(group.rollouts))
                continue
            arrived.append(group.version)
            if self.buffer.add(group, learner_version):
                c.accepted += len(group.rollouts)
        return Admission(accepted=c.accepted - accepted, rejected=c.rejected - rejected,
                         dropped_stale=c.dropped_on_arrival - stale, arrived_versions=tuple(arrived))

    def count_worker_error(self) -> None:
        """A generate request failed (the worker crashed or was lost, or its reply did not decode)."""
        self.counters.worker_errors += 1

    def count_lost(self, worker: str, samples: int, cause: str) -> None:
        """``samples`` asked of ``worker`` will never come back (``cause``: see ``lost_in_flight_by_cause``)."""
        if samples:
            self.counters.lost_in_flight_by_worker[worker] += samples
            self.counters.lost_in_flight_by_cause[cause] += samples

    def count_trained(self, groups: Iterable[RolloutGroup]) -> None:
        """The learner trained on ``groups`` (taken from the buffer)."""
        for group in groups:
            self.counters.trained_by_worker[group.worker_id] += len(group.rollouts)

    def restore(self, wires: Iterable[dict], learner_version: int) -> None:
        """Refill the buffer with a checkpoint's buffered groups (wire forms, in take order), checked again:
        one that no longer decodes or validates (other record limits, say) is refused as
        ``restore_invalid``; one below the bound at ``learner_version`` (S may have changed) is evicted.
        Their samples were counted as returned and accepted when they first arrived."""
        for wire in wires:
            try:
                group = group_from_wire(wire)
            except ValueError:
                claimed = wire.get("worker_id") if isinstance(wire, dict) else None
                self._refuse(claimed if isinstance(claimed, str) else "", RESTORE_INVALID, _samples_in(wire))
                continue
            kept, rejected = validate_group(group, newest_version=learner_version, limits=self.limits)
            if rejected:
                self._refuse(group.worker_id, RESTORE_INVALID, sum(rejected.values()))
            if kept:
                self.buffer.restore(dataclasses.replace(group, rollouts=tuple(kept)))
        self.buffer.evict_stale(learner_version)

    def _checked(self, worker: str, wire: dict, newest_version: int, reply: ReplyCheck) -> RolloutGroup | None:
        """The group with its valid records, or None when a check on what the worker sent refused it (and
        counted why)."""
        try:
            group = group_from_wire(wire)  # also refuses fields of the wrong JSON type
        except ValueError:
            self._refuse(worker, MALFORMED, _samples_in(wire))
            return None
        if group.worker_id != worker or any(r.meta.get("worker") != worker for r in group.rollouts):
            self._refuse(worker, WRONG_WORKER, len(group.rollouts))
            return None
        reason = reply.shape(group)
        if reason is not None:
            self._refuse(worker, reason, len(group.rollouts))
            return None
        accepted, rejected = validate_group(group, newest_version=newest_version, limits=self.limits)
        self.counters.reject_reasons.update(rejected)
        if rejected:
            self.counters.rejected_by_worker[worker] += sum(rejected.values())
        if not accepted:
            return None
        if len(accepted) < len(group.rollouts):
            group = dataclasses.replace(group, rollouts=tuple(accepted))
        reason = reply.prompt(group)
        if reason is not None:
            self._refuse(worker, reason, len(group.rollouts))
            return None
        return group

    def _refuse(self, worker: str, reason: str, samples: int) -> None:
        # A refused group counts at least once, even one that claims no samples: every refusal is seen.
        self.counters.reject_reasons[reason] += max(1, samples)
        self.counters.rejected_by_worker[worker] += max(1, samples)

    def _count_stale(self, group: RolloutGroup, kind: str) -> None:
        by_worker = self.counters.evicted_by_worker if kind == EVICTED else self.counters.dropped_on_arrival_by_worker
        by_worker[group.worker_id] += len(group.rollouts)


def _samples_in(wire: object) -> int:
    """How many samples a refused wire group claims to hold (1 when it cannot even be counted)."""
    rollouts = wire.get("rollouts") if isinstance(wire, dict) else None
    return len(rollouts) if isinstance(rollouts, list) and rollouts else 1
