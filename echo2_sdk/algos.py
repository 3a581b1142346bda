"""Registered algorithm functions, in the style of verl's ``core_algos``: advantage estimators and
policy losses, each a pure function looked up by the name a config gives (``algo.advantage``,
``algo.loss``). No state, no I/O; tensor shapes are in the docstrings.

Both kinds live in one registry each (:mod:`echo2_sdk.algo_registry` says how registering and lookup
behave; an unknown name raises :class:`UnknownAlgorithmError` with the closest known one).

**Advantage estimators** ``fn(rewards[N], group_index[N]) -> advantages[N]``: one scalar per sample
from the rewards of its group (:func:`echo2_sdk.signals.compute_advantages` calls them).

**Policy losses** ``fn(logprobs, old_logprobs, sampler_logprobs, advantages, loss_mask, *,
ref_logprobs=None, **hyperparameters) -> (loss, metrics)``: every tensor float ``[B, T]``,
target-aligned (position j holds the log-prob of the token the sequence has at j+1), ``loss_mask``
0/1; a scalar loss to minimise (grad through ``logprobs`` only) and a dict of float metrics. The
learner calls one per mini-batch and knows nothing else about the algorithm.

    @register_policy_loss("my_loss")
    def my_loss(logprobs, old_logprobs, sampler_logprobs, advantages, loss_mask, *,
                ref_logprobs=None, my_coef=1.0): ...
"""

from __future__ import annotations

from typing import Callable

import torch
from torch import Tensor

from echo2_sdk.algo_registry import AlgorithmRegistry, UnknownAlgorithmError  # noqa: F401  (the error: re-exported)
from echo2_sdk.corrections import LOG_RATIO_CLAMP, get_correction, log_ratio

AdvantageFn = Callable[..., Tensor]
PolicyLossFn = Callable[..., tuple]


ADVANTAGES = AlgorithmRegistry("advantage estimator", "advantage estimators", "register_advantage")
POLICY_LOSSES = AlgorithmRegistry("policy loss", "policy losses", "register_policy_loss")


def register_advantage(name: str) -> Callable[[AdvantageFn], AdvantageFn]:
    """Register an advantage estimator ``fn(rewards[N], group_index[N]) -> advantages[N]``."""
    return ADVANTAGES.register(name)


def get_advantage(name: str) -> AdvantageFn:
    """The advantage estimator registered under ``name``."""
    return ADVANTAGES.get(name)


def list_advantages() -> list[str]:
    """Sorted names of the registered advantage estimators."""
    return ADVANTAGES.names()


def register_policy_loss(name: str) -> Callable[[PolicyLossFn], PolicyLossFn]:
    """Register a policy loss (the signature is in the module docstring)."""
    return POLICY_LOSSES.register(name)


def get_policy_loss(name: str) -> PolicyLossFn:
    """The policy loss registered under ``name``."""
    return POLICY_LOSSES.get(name)


def list_policy_losses() -> list[str]:
    """Sorted names of the registered policy losses."""
    return POLICY_LOSSES.names()


# ----- advantage estimators -----------------------------------------------------------------------
def _group_stats(rewards: torch.Tensor, index: torch.Tensor) -> tuple[torch.Tensor, ...]:
    """Per-sample group mean, unbiased group std and group size. All [N]."""
    num_groups = int(index.max()) + 1 if index.numel() else 0
    size = torch.zeros(num_groups, dtype=rewards.dtype).index_add_(0, index, torch.ones_like(rewards))
    total = torch.zeros(num_groups, dtype=rewards.dtype).index_add_(0, index, rewards)
    mean = total / size
    sq = torch.zeros(num_groups, dtype=rewards.dtype).index_add_(0, index, (rewards - mean[index]) ** 2)
    var = sq / (size - 1).clamp(min=1)
    return mean[index], var.sqrt()[index], size[index]


@register_advantage("grpo")
def grpo_advantage(rewards: torch.Tensor, index: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    """GRPO: A_i = (r_i - mean_g) / (std_g + eps) within the sample's group g.

    Args:
        rewards: [N] float rewards.
        index: [N] long group index in [0, G).
    Returns:
        [N] advantages; 0 for groups of one sample or with all-equal rewards (no signal).
    """
    mean, std, size = _group_stats(rewards.double(), index)
    adv = (rewards.double() - mean) / (std + eps)
    return torch.where(size > 1, adv, torch.zeros_like(adv)).to(rewards.dtype)


@register_advantage("dr_grpo")
def dr_grpo_advantage(rewards: torch.Tensor, index: torch.Tensor, eps: float = 0.0) -> torch.Tensor:
    """Dr. GRPO: A_i = r_i - mean_g (no std division, avoids over-weighting near-uniform groups).

    Args:
        rewards: [N] float. index: [N] long group index.
    Returns:
        [N] advantages (0 for groups of one sample).
    """
    mean, _, size = _group_stats(rewards.double(), index)
    adv = rewards.double() - mean
    return torch.where(size > 1, adv, torch.zeros_like(adv)).to(rewards.dtype)


@register_advantage("grpo_pooled_std")
def grpo_pooled_std_advantage(rewards: torch.Tensor, index: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    """Group mean, pooled std: A_i = (r_i - mean_g) / (s + eps), one s for the whole batch, the pooled
    within-group std sqrt(sum_i (r_i - mean_g(i))^2 / sum_g (n_g - 1)) (LitePPO's "group mean, batch std",
    Liu et al. 2025; REINFORCE++-baseline). Per-group division weighs a deal whose episodes differed by a
    blind as much as one whose differed by a stack; pooled, a group's advantages keep its share of the spread.

    Args:
        rewards: [N] float rewards.
        index: [N] long group index in [0, G).
    Returns:
        [N] advantages; 0 for groups of one sample, all 0 when no group has any spread.

    >>> adv = grpo_pooled_std_advantage(torch.tensor([0.0, 2.0, 0.0, 20.0]), torch.tensor([0, 0, 1, 1]))
    >>> [round(a, 4) for a in adv.tolist()]
    [-0.0995, 0.0995, -0.995, 0.995]
    """
    mean, _, size = _group_stats(rewards.double(), index)
    centred = torch.where(size > 1, rewards.double() - mean, torch.zeros_like(mean))
    dof = (1.0 - 1.0 / size)[size > 1].sum()  # each group of n contributes n - 1: n samples x (1 - 1/n)
    pooled = (centred.pow(2).sum() / dof).sqrt() if dof > 0 else centred.new_zeros(())
    return (centred / (pooled + eps)).to(rewards.dtype)


# ----- policy losses --------------------------------------------------------------------------------
# GRPO policy loss: PPO-clipped surrogate x truncated importance sampling (TIS) + k3 KL.
#
# In ECHO-2 the samples in a batch were generated by rollout workers holding a policy that may be a
# few versions older than the learner's, with a different inference engine (vLLM, bf16 kernels).
# Three policies therefore appear per token:
#
#     pi_theta    the weights being optimised                      -> `logprobs` (carries grad)
#     pi_old      the learner's weights at the start of the step   -> `old_logprobs`
#     pi_sampler  what actually sampled the token (stale/engine)   -> `sampler_logprobs`
#
# The PPO ratio r = pi_theta / pi_old keeps the several mini-batch updates of one step close to
# pi_old, and the detached, truncated weight w = min(pi_old / pi_sampler, C) corrects the
# sampling distribution from pi_sampler to pi_old (policy lag + engine mismatch) at bounded
# variance. Advantages are computed outside (group-relative in GRPO) and arrive per token.

LOSS_AGGREGATIONS = ("token-mean", "seq-mean-token-mean")


@register_policy_loss("grpo")
def grpo_policy_loss(
    logprobs: Tensor,
    old_logprobs: Tensor,
    sampler_logprobs: Tensor,
    advantages: Tensor,
    loss_mask: Tensor,
    *,
    ref_logprobs: Tensor | None = None,
    clip_eps_low: float = 0.2,
    clip_eps_high: float = 0.2,
    tis_cap: float | None = 2.0,
    kl_coef: float = 0.0,
    loss_agg: str = "token-mean",
    correction: str = "tis",
    is_low: float = 0.5,
    is_high: float = 2.0,
) -> tuple[Tensor, dict[str, float]]:
    """GRPO loss for one mini-batch.

    Args:
        logprobs: `[B, T]` log pi_theta(token), with grad. Target-aligned: position j is the
            log-prob of the token the sequence has at j+1.
        old_logprobs: `[B, T]` log pi_old(token) (learner weights before this step); detached.
        sampler_logprobs: `[B, T]` log-probs reported by the rollout worker that sampled the
            token; detached.
        advantages: `[B, T]` per-token advantage A (GRPO: the sequence's group-normalised reward
            broadcast over its completion tokens); detached.
        loss_mask: `[B, T]` float 0/1, 1 on tokens that are trained (the completion). Masked
            positions contribute nothing -- their inputs may be NaN, +-inf or garbage.
        ref_logprobs: `[B, T]` log pi_ref(token) of the frozen reference model; required when
            `kl_coef > 0`, otherwise optional (the `kl` metric is then still reported).
        clip_eps_low, clip_eps_high: ratio clip range [1 - eps_low, 1 + eps_high]
            (eps_high > eps_low is DAPO's "clip-higher").
        tis_cap: truncation C of the importance weight; None turns the correction off (w = 1).
        kl_coef: beta, weight of the k3 KL penalty; 0 disables it.
        loss_agg: "token-mean" or "seq-mean-token-mean" (see below).
        correction: the registered off-policy correction giving w_t (``echo2_sdk.corrections``: ``tis``,
            ``none``, ``icepop``, ``seq_mask_tis``); ``tis`` with ``tis_cap=None`` is ``none``.
        is_low, is_high: the ratio band of the masking corrections (``icepop``, ``seq_mask_tis``).

    Per kept token t (logs clamped to [-20, 20] before exp):

        r_t    = exp(logprobs_t - old_logprobs_t)
        pg_t   = max(-A_t * r_t, -A_t * clip(r_t, 1 - eps_low, 1 + eps_high))
        rho_t  = exp(old_logprobs_t - sampler_logprobs_t)
        w_t    = min(rho_t, C)        (detached; w_t = 1 when tis_cap is None; other corrections mask)
        kl_t   = exp(ref_t - logprobs_t) - (ref_t - logprobs_t) - 1      (k3 estimator, >= 0)
        loss_t = w_t * pg_t + kl_coef * kl_t

    Aggregation of loss_t over the kept tokens (mask m):

        "token-mean":          sum_{b,t} m*loss / sum_{b,t} m. Every token of the mini-batch
                               weighs the same, so long completions carry more total weight
                               (DAPO / Dr. GRPO style; no length bias per token).
        "seq-mean-token-mean": mean_b [ sum_t m*loss / sum_t m ] over sequences with >= 1 kept
                               token. Every sequence weighs the same (original GRPO), so a token
                               of a short completion gets a larger gradient than one of a long
                               completion.

    Returns:
        (loss, metrics): scalar float32 loss to minimise; metrics (Python floats):
        pg_loss and kl (aggregated like the loss; kl unscaled by kl_coef, 0 without ref),
        clip_frac (fraction of kept tokens where the clipped branch was the active one),
        ratio_mean (token mean of r), tis_mean / tis_max (token mean / max of w; of the raw rho
        when no correction is applied, for monitoring), tis_trunc_frac (fraction of kept tokens with
        rho > C), is_masked_frac (fraction of kept tokens a masking correction dropped). Token
        statistics are over kept tokens whatever `loss_agg` is; all are 0 when no token is kept.
    """
    _check_inputs(
        logprobs, old_logprobs, sampler_logprobs, advantages, loss_mask, ref_logprobs,
        clip_eps_low, clip_eps_high, tis_cap, kl_coef, loss_agg,
    )
    if correction == "tis" and tis_cap is None:
        correction = "none"  # the long-standing meaning of tis_cap: null
    correct = get_correction(correction)
    if not 0 < is_low <= 1 <= is_high:
        raise ValueError(f"is_low={is_low}, is_high={is_high} must satisfy 0 < is_low <= 1 <= is_high, e.g. 0.5 and 2")
    mask = loss_mask.to(torch.float32)
    keep = mask > 0
    zero = torch.zeros((), dtype=torch.float32, device=mask.device)

    def clean(x: Tensor) -> Tensor:
        # Select (not multiply) so NaN/inf at masked positions reach neither the loss nor the grad.
        return torch.where(keep, x.to(torch.float32), zero)

    logp = clean(logprobs)
    old = clean(old_logprobs).detach()
    sampler = clean(sampler_logprobs).detach()
    adv = clean(advantages).detach()

    # PPO clipped surrogate.
    ratio = torch.exp((logp - old).clamp(-LOG_RATIO_CLAMP, LOG_RATIO_CLAMP))
    surrogate = -adv * ratio
    surrogate_clipped = -adv * ratio.clamp(1.0 - clip_eps_low, 1.0 + clip_eps_high)
    pg_tokens = torch.maximum(surrogate, surrogate_clipped)
    clipped = (surrogate_clipped > surrogate) & keep

    # Off-policy correction sampler -> old (detached): truncated or masked importance weights.
    with torch.no_grad():
        log_rho = log_ratio(old, sampler, keep)  # once: the correction and the statistics share it
        rho = torch.exp(log_rho)
        weight = correct(log_rho, keep, cap=tis_cap, low=is_low, high=is_high)
        reported_weight = rho if correction == "none" else weight
        truncated = (rho > tis_cap) & keep if tis_cap is not None and correction != "none" else torch.zeros_like(keep)
        masked = keep & (weight == 0)
    pg_tokens = weight * pg_tokens

    # k3 KL to the frozen reference.
    if ref_logprobs is not None:
        log_ref_ratio = (clean(ref_logprobs).detach() - logp).clamp(
            -LOG_RATIO_CLAMP, LOG_RATIO_CLAMP
        )
        kl_tokens = torch.exp(log_ref_ratio) - log_ref_ratio - 1.0
    else:
        kl_tokens = torch.zeros_like(logp)

    loss_tokens = pg_tokens + kl_coef * kl_tokens if kl_coef > 0 else pg_tokens
    loss = aggregate(loss_tokens, mask, loss_agg)

    with torch.no_grad():
        num_kept = mask.sum()
        denom = num_kept.clamp(min=1.0)
        stats = torch.stack(
            [
                aggregate(pg_tokens, mask, loss_agg),
                aggregate(kl_tokens, mask, loss_agg),
                clipped.float().sum() / denom,
                (ratio * mask).sum() / denom,
                (reported_weight * mask).sum() / denom,
                torch.where(keep, reported_weight, zero).max() if keep.any() else zero,
                truncated.float().sum() / denom,
                masked.float().sum() / denom,
            ]
        ).tolist()
    names = ("pg_loss", "kl", "clip_frac", "ratio_mean", "tis_mean", "tis_max", "tis_trunc_frac",
             "is_masked_frac")
    return loss, dict(zip(names, stats))


def aggregate(values: Tensor, mask: Tensor, loss_agg: str) -> Tensor:
    """Reduce `[B, T]` per-token `values` to a scalar over `mask` (`[B, T]` 0/1).

    `values` must already be finite at masked positions (they are multiplied by 0). Returns 0
    (still attached to the graph) when the mask is empty.
    """
    if loss_agg == "token-mean":
        return (values * mask).sum() / mask.sum().clamp(min=1.0)
    if loss_agg == "seq-mean-token-mean":
        tokens_per_seq = mask.sum(dim=-1)
        seq_means = (values * mask).sum(dim=-1) / tokens_per_seq.clamp(min=1.0)
        has_tokens = (tokens_per_seq > 0).to(values.dtype)
        return (seq_means * has_tokens).sum() / has_tokens.sum().clamp(min=1.0)
    raise ValueError(f"loss_agg={loss_agg!r} is not supported; use one of {LOSS_AGGREGATIONS}")


LOSS_LIKE_METRICS = ("pg_loss", "kl")
"""Loss metrics aggregated like the loss; a policy loss's other metrics are token statistics (means over
kept tokens), or maxima when their name ends in ``_max``. The learner combines micro-batches by these rules."""


def aggregation_units(mask: Tensor, loss_agg: str) -> Tensor:
    """What :func:`aggregate` divides by: kept tokens (``token-mean``) or sequences with a kept token.

    A loss aggregated this way splits exactly into micro-batches: the whole batch's loss is the sum of
    each part's loss times its units over the whole batch's units.

    >>> m = torch.tensor([[1., 1., 0.], [0., 0., 0.], [1., 0., 0.]])
    >>> int(aggregation_units(m, "token-mean")), int(aggregation_units(m, "seq-mean-token-mean"))
    (3, 2)
    """
    if loss_agg == "token-mean":
        return mask.sum()
    if loss_agg == "seq-mean-token-mean":
        return (mask.sum(dim=-1) > 0).sum().to(mask.dtype)
    raise ValueError(f"loss_agg={loss_agg!r} is not supported; use one of {LOSS_AGGREGATIONS}")


def _check_inputs(
    logprobs, old_logprobs, sampler_logprobs, advantages, loss_mask, ref_logprobs,
    clip_eps_low, clip_eps_high, tis_cap, kl_coef, loss_agg,
) -> None:
    tensors = {
        "logprobs": logprobs,
        "old_logprobs": old_logprobs,
        "sampler_logprobs": sampler_logprobs,
        "advantages": advantages,
        "loss_mask": loss_mask,
    }
    if ref_logprobs is not None:
        tensors["ref_logprobs"] = ref_logprobs
    for name, value in tensors.items():
        if not isinstance(value, Tensor):
            raise TypeError(f"grpo_policy_loss: {name} must be a torch.Tensor, got {type(value)}")
        if value.dim() != 2:
            raise ValueError(
                f"grpo_policy_loss: {name} must be [B, T], got shape {tuple(value.shape)}; "
                "pass target-aligned per-token tensors"
            )
        if value.shape != logprobs.shape:
            raise ValueError(
                f"grpo_policy_loss: {name} has shape {tuple(value.shape)} but logprobs has "
                f"{tuple(logprobs.shape)}; all per-token inputs must share one [B, T] shape"
            )
    if not bool(((loss_mask == 0) | (loss_mask == 1)).all()):
        raise ValueError(
            "grpo_policy_loss: loss_mask must hold only 0 and 1, got values "
            f"{torch.unique(loss_mask.detach().float().cpu()).tolist()[:8]}; "
            "use 1 for trained completion tokens and 0 elsewhere"
        )
    if loss_agg not in LOSS_AGGREGATIONS:
        raise ValueError(f"loss_agg={loss_agg!r} is not supported; use one of {LOSS_AGGREGATIONS}")
    if not 0.0 <= clip_eps_low < 1.0:
        raise ValueError(f"clip_eps_low={clip_eps_low} must be in [0, 1), e.g. 0.2")
    if clip_eps_high < 0.0:
        raise ValueError(f"clip_eps_high={clip_eps_high} must be >= 0, e.g. 0.2 or 0.28")
    if tis_cap is not None and not tis_cap > 0:
        raise ValueError(f"tis_cap={tis_cap} must be > 0 (e.g. 2.0), or None to disable TIS")
    if kl_coef < 0:
        raise ValueError(f"kl_coef={kl_coef} must be >= 0 (0 disables the KL penalty)")
    if kl_coef > 0 and ref_logprobs is None:
        raise ValueError(
            f"kl_coef={kl_coef} needs ref_logprobs (log-probs of the frozen reference model); "
            "pass ref_logprobs=... or set kl_coef=0"
        )
