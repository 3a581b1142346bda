"""Pure training-signal functions: group-normalized advantages, their broadcast to tokens, and the
turn-aware assistant mask (:mod:`echo2_sdk.masks`, torch-free, re-exported here). No state, no I/O;
shapes are in the docstrings.

The advantage estimators themselves are registered functions of :mod:`echo2_sdk.algos` (a config
string picks one); their names are re-exported here.
"""

from __future__ import annotations

import difflib
from typing import Sequence

import torch

from echo2_sdk.masks import assistant_mask, shift_to_targets, turn_index  # noqa: F401  (re-exported)
from echo2_sdk.algos import (  # noqa: F401  (re-exported)
    AdvantageFn,
    dr_grpo_advantage,
    get_advantage,
    grpo_advantage,
    list_advantages,
    register_advantage,
)

GROUPINGS = ("prompt", "key", "batch")


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
