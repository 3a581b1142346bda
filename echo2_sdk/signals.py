"""Pure training-signal functions: group-normalized advantages, their broadcast to tokens, and the
turn-aware assistant mask. No state, no I/O; shapes are in the docstrings.

Advantage estimators are registered by name (``register_advantage``) so that a config string picks
one, in the style of verl's ``core_algos``.
"""

from __future__ import annotations

import difflib
from typing import Callable, Sequence

import torch

AdvantageFn = Callable[..., torch.Tensor]
_ADVANTAGES: dict[str, AdvantageFn] = {}
GROUPINGS = ("prompt", "key", "batch")


def register_advantage(name: str) -> Callable[[AdvantageFn], AdvantageFn]:
    """Register an advantage estimator ``fn(rewards[N], group_index[N]) -> advantages[N]``."""

    def deco(fn: AdvantageFn) -> AdvantageFn:
        if name in _ADVANTAGES:
            raise ValueError(f"advantage estimator {name!r} is already registered")
        _ADVANTAGES[name] = fn
        return fn

    return deco


def get_advantage(name: str) -> AdvantageFn:
    if name not in _ADVANTAGES:
        close = difflib.get_close_matches(name, list(_ADVANTAGES), n=1)
        hint = f" Did you mean {close[0]!r}?" if close else ""
        raise KeyError(f"unknown advantage estimator {name!r}; known: {sorted(_ADVANTAGES)}.{hint}")
    return _ADVANTAGES[name]


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


def group_index(keys: Sequence[str]) -> torch.Tensor:
    """Map string group keys to a dense [N] long index, in order of first appearance."""
    seen: dict[str, int] = {}
    return torch.tensor([seen.setdefault(k, len(seen)) for k in keys], dtype=torch.long)


def grouping_keys(prompt_keys: Sequence[str], task_keys: Sequence[str], grouping: str) -> list[str]:
    """Choose the group key of each sample.

    ``"prompt"``: samples of the same prompt (GRPO's default); ``"key"``: the task-provided Ω.group tag
    (e.g. poker's private-hand bucket); ``"batch"``: one group for the whole batch.
    """
    if grouping == "prompt":
        return list(prompt_keys)
    if grouping == "key":
        return list(task_keys)
    if grouping == "batch":
        return ["batch"] * len(prompt_keys)
    close = difflib.get_close_matches(grouping, GROUPINGS, n=1)
    hint = f" Did you mean {close[0]!r}?" if close else ""
    raise ValueError(f"unknown advantage grouping {grouping!r}; use one of {GROUPINGS}.{hint}")


def compute_advantages(
    rewards: Sequence[float], keys: Sequence[str], estimator: str = "grpo"
) -> torch.Tensor:
    """[N] advantages of N samples with group keys ``keys`` using a registered estimator."""
    if len(rewards) != len(keys):
        raise ValueError(f"{len(rewards)} rewards but {len(keys)} group keys")
    r = torch.tensor(list(rewards), dtype=torch.float32)
    return get_advantage(estimator)(r, group_index(keys))


def broadcast_to_tokens(advantages: torch.Tensor, loss_mask: torch.Tensor) -> torch.Tensor:
    """Spread one scalar advantage per sequence over its trained tokens.

    Args:
        advantages: [B] per-sequence advantage.
        loss_mask: [B, T] 0/1 mask of trained tokens.
    Returns:
        [B, T] per-token advantages (0 where the mask is 0).
    """
    return advantages[:, None].to(loss_mask.dtype) * loss_mask


def turn_index(token_ids: Sequence[int], im_start_id: int) -> list[int]:
    """c_t: how many ``<|im_start|>`` tokens occur at positions ≤ t. [T] ints."""
    out, c = [], 0
    for t in token_ids:
        c += t == im_start_id
        out.append(c)
    return out


def assistant_mask(
    token_ids: Sequence[int],
    *,
    im_start_id: int,
    im_end_id: int,
    newline_id: int,
    first_assistant_turn: int = 3,
) -> list[int]:
    """Turn-aware mask over a Qwen-style chat token sequence: 1 on assistant-written tokens.

    A token is in an assistant turn when its turn counter c_t (see :func:`turn_index`) satisfies
    c_t ≥ ``first_assistant_turn`` and c_t has the parity of ``first_assistant_turn``. With the
    default 3 this is the rule "c_t > 1 and c_t odd" for conversations laid out
    system, user, assistant, user, assistant, ...; pass 2 for conversations without a system
    message (user, assistant, user, ...).

    Within an assistant turn the role header (``<|im_start|>`` up to and including the first
    newline) is excluded — the model never writes it — and the closing ``<|im_end|>`` is included so
    the model learns to stop; the template's newline after ``<|im_end|>`` is excluded.

    Returns a [T] 0/1 list aligned to ``token_ids``. Use :func:`shift_to_targets` to align it with
    next-token targets.
    """
    mask, c, in_header, closed = [], 0, False, False
    parity = first_assistant_turn % 2
    for t in token_ids:
        if t == im_start_id:
            c += 1
            in_header, closed = True, False
            mask.append(0)
            continue
        is_assistant = c >= first_assistant_turn and c % 2 == parity
        if in_header:
            mask.append(0)
            in_header = t != newline_id
            continue
        if closed:
            mask.append(0)
            continue
        mask.append(int(is_assistant))
        closed = t == im_end_id
    return mask


def shift_to_targets(mask: Sequence[int]) -> list[int]:
    """Align a per-token mask [T] with next-token targets [T-1]: target j predicts token j+1."""
    return list(mask[1:])
