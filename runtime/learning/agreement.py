"""Sampler/learner log-prob agreement per rollout worker (the TIS ratio's health check).

On the same snapshot and tokens, a worker's reported log-probs and the learner's recomputation should
agree up to numerics (the backend's kernels and dtype). The learner's θ_old equals the sampling
snapshot only for samples trained at the version they were generated with (staleness 0), so the
per-worker verdict uses those tokens; samples of older versions also carry the policy's drift and are
reported separately, never flagged. A worker whose mean |Δ log-prob| per token on the same snapshot
exceeds ``rollout.logprob_tolerance`` (after ``min_tokens`` such tokens) is flagged once, in the log,
in the step row and in the summary: its backend, dtype or weights disagree with the learner's.
"""

from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Callable, Sequence

import torch


@dataclass
class _Tally:
    tokens: float = 0.0
    abs_sum: float = 0.0
    delta_sum: float = 0.0
    ratio_min: float = math.inf
    ratio_max: float = 0.0

    def add(self, tokens: float, abs_sum: float, delta_sum: float, ratio_min: float, ratio_max: float) -> None:
        self.tokens += tokens
        self.abs_sum += abs_sum
        self.delta_sum += delta_sum
        self.ratio_min = min(self.ratio_min, ratio_min)
        self.ratio_max = max(self.ratio_max, ratio_max)

    def report(self) -> dict:
        if not self.tokens:
            return {"tokens": 0}
        return {"tokens": int(self.tokens), "mean_abs_delta": self.abs_sum / self.tokens,
                "mean_delta": self.delta_sum / self.tokens,
                "tis_ratio_min": self.ratio_min, "tis_ratio_max": self.ratio_max}


@dataclass
class SamplerAgreement:
    tolerance: float | None
    """Mean |log π_learner − log π_sampler| per token on the same snapshot above which a worker is flagged."""
    min_tokens: int = 64
    """Same-snapshot tokens a worker needs before it can be flagged (few tokens are noise)."""
    log: Callable[[str], None] = print
    same: dict[str, _Tally] = field(default_factory=lambda: defaultdict(_Tally))
    stale: dict[str, _Tally] = field(default_factory=lambda: defaultdict(_Tally))
    flagged: dict[str, float] = field(default_factory=dict)

    def update(self, workers: Sequence[str], lags: Sequence[int], per_sequence: dict[str, torch.Tensor]) -> dict:
        """Fold one step's per-sequence sums (``Learner.last_agreement``, batch order) in; return row metrics.

        per_sequence: ``tokens``, ``abs_delta``, ``delta`` (sums over loss-masked tokens), ``ratio_min``,
        ``ratio_max`` (of exp(Δ) over those tokens), each [B] float.
        """
        step = _Tally()
        columns = [per_sequence[k].tolist() for k in ("tokens", "abs_delta", "delta", "ratio_min", "ratio_max")]
        for worker, lag, *values in zip(workers, lags, *columns):
            if not values[0]:
                continue
            (self.same if lag == 0 else self.stale)[worker].add(*values)
            if lag == 0:
                step.add(*values)
        newly = self._check()
        row = {"flagged_workers": len(self.flagged)}
        if step.tokens:
            row["logprob_abs_delta_same_version"] = step.abs_sum / step.tokens
        if newly:
            row["newly_flagged"] = newly
        return row

    def _check(self) -> list[str]:
        newly = []
        if self.tolerance is None:
            return newly
        for worker, tally in self.same.items():
            if worker in self.flagged or tally.tokens < self.min_tokens:
                continue
            mean_abs = tally.abs_sum / tally.tokens
            if mean_abs > self.tolerance:
                self.flagged[worker] = mean_abs
                newly.append(worker)
                self.log(f"worker {worker}: its sampler log-probs differ from the learner's by {mean_abs:.4f} per token "
                         f"on the same snapshot ({int(tally.tokens)} tokens; rollout.logprob_tolerance={self.tolerance}). "
                         "Its backend, dtype or installed weights disagree with the learner's; TIS (algo.tis_cap) bounds "
                         "the damage, but check that worker")
        return newly

    def summary(self) -> dict:
        workers = sorted(set(self.same) | set(self.stale))
        return {
            "tolerance": self.tolerance,
            "min_tokens": self.min_tokens,
            "flagged": dict(self.flagged),
            "workers": {w: {"same_version": self.same[w].report() if w in self.same else {"tokens": 0},
                            "older_versions": self.stale[w].report() if w in self.stale else {"tokens": 0}}
                        for w in workers},
        }


def sequence_agreement(old_logprobs: torch.Tensor, sampler_logprobs: torch.Tensor,
                       mask: torch.Tensor) -> dict[str, torch.Tensor]:
    """Per-sequence sums of Δ = log π_old − log π_sampler over masked tokens.

    old_logprobs, sampler_logprobs, mask: [B, T]. Returns tokens, abs_delta, delta, ratio_min, ratio_max: [B]
    (ratios exp(Δ); rows without tokens get min = +inf, max = 0).
    """
    mask = mask.float()
    delta = (old_logprobs.float() - sampler_logprobs.float()) * mask
    ratio = delta.exp()
    present = mask > 0
    return {
        "tokens": mask.sum(-1),
        "abs_delta": delta.abs().sum(-1),
        "delta": delta.sum(-1),
        "ratio_min": torch.where(present, ratio, torch.full_like(ratio, math.inf)).amin(-1),
        "ratio_max": torch.where(present, ratio, torch.zeros_like(ratio)).amax(-1),
    }
