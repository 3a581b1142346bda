"""Learner-side spot checks of the rewards that rollout workers report.

Rewards are computed on the workers (the design keeps reward compute off the learner), so a worker
outside the trust boundary (``echo2 worker serve``) could report false ones. The learner re-scores a
random fraction of its samples with the task's own reward (in a ``RewardGuard`` child process, same
deadline as on the workers) from the prompt's example and the decoded completion. A group with an
audited sample whose reported reward differs is rejected (``reward_mismatch``); the worker is flagged
at its first mismatch and evicted from the pool after ``evict_after`` of them. Multi-turn tasks are not
audited (their reward is an episode's return, produced by playing the environment).
"""

from __future__ import annotations

import random
from collections import Counter
from typing import Callable, Sequence

from echo2_sdk.adapter import BaseTaskAdapter, Example, MultiTurnTaskAdapter
from echo2_sdk.config import WorkerSpec
from echo2_sdk.records import RolloutGroup

REWARD_ATOL = 1e-6


class RewardAudit:
    def __init__(self, adapter: BaseTaskAdapter, tokenizer, guard_factory: Callable[[], object], *, fraction: float,
                 audited: set[str], evict_after: int, seed: int, log: Callable[[str], None] = print) -> None:
        """``audited``: names of the workers whose rewards are checked; ``guard_factory`` builds the
        ``RewardGuard`` on first use (no child process when nothing is ever audited)."""
        self.enabled = fraction > 0 and bool(audited) and not isinstance(adapter, MultiTurnTaskAdapter)
        self.fraction, self.audited, self.evict_after, self.log = fraction, set(audited), evict_after, log
        self.tokenizer, self._guard_factory, self._guard = tokenizer, guard_factory, None
        self._rng = random.Random(seed * 7_368_787 + 17)
        self._examples: dict[str, Example] = {}
        self._adapter = adapter
        self.checked: Counter = Counter()
        self.mismatches: Counter = Counter()
        self.evicted: list[str] = []

    def check(self, group: RolloutGroup) -> bool:
        """True if the group may be trained on (not audited, or every audited reward matched)."""
        worker = group.worker_id
        if not self.enabled or worker not in self.audited:
            return True
        picked = [r for r in group.rollouts if self._rng.random() < self.fraction]
        if not picked:
            return True
        example = self._example(group.prompt_key)
        if example is None:  # not a training prompt of this task: the record cannot be honest
            self.mismatches[worker] += 1
            self._report(worker, f"unknown prompt_key {group.prompt_key!r}")
            return False
        texts = self.tokenizer.batch_decode([list(r.completion_ids) for r in picked], skip_special_tokens=True)
        results = self._guard_or_start().score_many([(example, t) for t in texts])
        self.checked[worker] += len(picked)
        bad = [(r.reward, res.reward) for r, res in zip(picked, results) if abs(r.reward - res.reward) > REWARD_ATOL]
        if not bad:
            return True
        self.mismatches[worker] += 1
        reported, recomputed = bad[0]
        self._report(worker, f"reported reward {reported!r}, the learner computes {recomputed!r} for the same "
                             f"completion of {group.prompt_key!r}")
        return False

    def to_evict(self) -> list[str]:
        """Workers that reached ``evict_after`` mismatches and were not evicted yet (the caller evicts)."""
        if self.evict_after <= 0:
            return []
        out = [w for w, n in self.mismatches.items() if n >= self.evict_after and w not in self.evicted]
        self.evicted.extend(out)
        return out

    def summary(self) -> dict:
        return {"fraction": self.fraction if self.enabled else 0.0, "workers": sorted(self.audited),
                "checked": dict(self.checked), "mismatched_groups": dict(self.mismatches), "evicted": list(self.evicted)}

    def close(self) -> None:
        if self._guard is not None:
            self._guard.close()

    def _report(self, worker: str, what: str) -> None:
        n = self.mismatches[worker]
        self.log(f"reward audit: worker {worker}: {what}; group rejected ({n} mismatching group(s)"
                 + (f", evicted at {self.evict_after})" if self.evict_after > 0 else ")"))

    def _example(self, prompt_key: str) -> Example | None:
        if not self._examples:
            self._examples = {ex.id: ex for ex in self._adapter.examples("train")}
        return self._examples.get(prompt_key)

    def _guard_or_start(self):
        if self._guard is None:
            self._guard = self._guard_factory()
        return self._guard


def audited_workers(specs: Sequence[WorkerSpec], include_ray_workers: bool) -> set[str]:
    """Workers outside Ray (``endpoint``) always; Ray workers too when asked."""
    return {s.name for s in specs if s.endpoint or include_ray_workers}
