"""Off-policy corrections: how much each sampled token may count when the policy that sampled it
(``pi_sampler``: a worker some versions behind, another inference engine) is not the learner's
``pi_old``. Registered pure functions, looked up by ``algo.correction``; the GRPO loss multiplies its
per-token surrogate by the weight they return.

Every correction is ``fn(log_rho[B, T], keep[B, T] bool, *, cap, low, high) -> weights[B, T]`` (float,
detached, 0 where a token is masked out). ``log_rho`` is :func:`log_ratio` of ``pi_old`` over
``pi_sampler`` (computed once by the loss, 0 off the kept tokens); with ``l_t = log_rho_t`` and
``rho_t = exp(l_t)``:

- ``none``: ``w = 1`` — plain GRPO, samples treated as on-policy.
- ``tis``: truncated importance sampling ``w = min(rho, cap)`` (ECHO-2; the default).
- ``icepop``: token-level masked IS (IcePop): ``w = rho`` inside ``[low, high]``, else ``0`` — a token
  whose two policies disagree too much is dropped instead of merely capped, so its (biased, high
  variance) gradient never reaches the update.
- ``seq_mask_tis``: sequence-level geometric-mean mask then token TIS (verl's rollout correction
  ``geo_mask`` + ``token`` TIS): a sequence whose ``exp(mean_t l_t)`` falls outside ``[low, high]`` is
  dropped whole; the others get ``min(rho, cap)`` per token. Staleness moves whole sequences off
  policy, so judging the sequence catches drift that each token's small ratio hides.

All three depend only on the sequence itself, so a mini-batch split into micro-batches gets the same
weights (the learner's exact micro-batching relies on that). A masked token still counts in the loss
denominator: masking removes its gradient, it does not re-weight the others.
"""

from __future__ import annotations

from typing import Callable

import torch
from torch import Tensor

CorrectionFn = Callable[..., Tensor]
LOG_RATIO_CLAMP = 20.0
"""Log-ratios are clamped to ±20 before exp() (as verl does): a garbage or -inf log-prob on a kept token
gives a huge-but-finite ratio (exp(20) ~ 4.9e8) instead of inf/NaN."""
_CORRECTIONS: dict[str, CorrectionFn] = {}


def register_correction(name: str) -> Callable[[CorrectionFn], CorrectionFn]:
    """Register an off-policy correction under ``name`` (signature in the module docstring)."""

    def decorator(fn: CorrectionFn) -> CorrectionFn:
        existing = _CORRECTIONS.get(name)
        if existing is not None and existing.__qualname__ != fn.__qualname__:
            raise ValueError(f"off-policy correction {name!r} is already registered to {existing.__qualname__}")
        _CORRECTIONS[name] = fn
        return fn

    return decorator


def get_correction(name: str) -> CorrectionFn:
    if name not in _CORRECTIONS:
        raise ValueError(f"unknown off-policy correction {name!r}; registered: {list_corrections()}")
    return _CORRECTIONS[name]


def list_corrections() -> list[str]:
    return sorted(_CORRECTIONS)


def log_ratio(old_logprobs: Tensor, sampler_logprobs: Tensor, keep: Tensor) -> Tensor:
    """``[B, T]`` clamped ``log pi_old - log pi_sampler`` on kept tokens, 0 elsewhere."""
    diff = (old_logprobs - sampler_logprobs).clamp(-LOG_RATIO_CLAMP, LOG_RATIO_CLAMP)
    return torch.where(keep, diff, torch.zeros_like(diff))


@register_correction("none")
def no_correction(log_rho: Tensor, keep: Tensor, *, cap: float | None = None, low: float = 0.5,
                  high: float = 2.0) -> Tensor:
    """``[B, T]`` ones on kept tokens.

    >>> no_correction(torch.full((1, 2), 5.0), torch.tensor([[True, False]])).tolist()
    [[1.0, 0.0]]
    """
    return keep.to(torch.float32)


@register_correction("tis")
def truncated_is(log_rho: Tensor, keep: Tensor, *, cap: float | None = 2.0, low: float = 0.5,
                 high: float = 2.0) -> Tensor:
    """``[B, T]`` ``min(rho, cap)`` on kept tokens (``cap=None``: ``rho`` itself).

    >>> keep = torch.tensor([[True, True]])
    >>> truncated_is(log_ratio(torch.log(torch.tensor([[0.5, 0.9]])), torch.log(torch.tensor([[0.1, 0.9]])), keep),
    ...              keep, cap=2.0).tolist()
    [[2.0, 1.0]]
    """
    rho = torch.exp(log_rho)
    weight = rho if cap is None else rho.clamp(max=cap)
    return torch.where(keep, weight, torch.zeros_like(weight))


@register_correction("icepop")
def icepop_masked_is(log_rho: Tensor, keep: Tensor, *, cap: float | None = None, low: float = 0.5,
                     high: float = 2.0) -> Tensor:
    """``[B, T]`` ``rho`` where ``low <= rho <= high``, else 0.

    >>> rho = torch.tensor([[5.0, 1.5, 0.2]])
    >>> [round(w, 4) for w in icepop_masked_is(rho.log(), torch.ones(1, 3, dtype=torch.bool))[0].tolist()]
    [0.0, 1.5, 0.0]
    """
    rho = torch.exp(log_rho)
    inside = keep & (rho >= low) & (rho <= high)
    return torch.where(inside, rho, torch.zeros_like(rho))


@register_correction("seq_mask_tis")
def sequence_masked_tis(log_rho: Tensor, keep: Tensor, *, cap: float | None = 2.0, low: float = 0.5,
                        high: float = 2.0) -> Tensor:
    """``[B, T]`` token TIS on sequences whose geometric-mean ratio lies in ``[low, high]``, 0 on the rest.

    >>> rho = torch.tensor([[3.0, 1.0], [9.0, 9.0]])   # geo-means sqrt(3) and 9
    >>> sequence_masked_tis(rho.log(), torch.ones(2, 2, dtype=torch.bool), cap=2.0).tolist()
    [[2.0, 1.0], [0.0, 0.0]]
    """
    tokens = keep.sum(dim=-1)
    geo_mean = torch.exp(log_rho.sum(dim=-1) / tokens.clamp(min=1))
    sequence_ok = (geo_mean >= low) & (geo_mean <= high)
    weight = truncated_is(log_rho, keep, cap=cap)
    return torch.where(sequence_ok[:, None] & keep, weight, torch.zeros_like(weight))
