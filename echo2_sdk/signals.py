"""Pure training-signal functions: group-normalized advantages, their broadcast to tokens, and the
turn-aware assistant mask (:mod:`echo2_sdk.masks`, torch-free, re-exported here). No state, no I/O;
shapes are in the docstrings.

The advantage estimators themselves are registered functions of :mod:`echo2_sdk.algos` (a config
string picks one); their names are re-exported here.
"""

from __future__ import annotations

import difflib
import math
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


def zero_advantage_fraction(rewards: Sequence[float], keys: Sequence[str]) -> float:
    """Fraction of the groups (samples sharing a key) whose rewards are all equal: every group-normalized
    estimator gives them zero advantage, so they teach nothing (GRPO's dead groups).

    >>> zero_advantage_fraction([1, 1, 0, 1, 0.5, 0.5], ["a", "a", "b", "b", "c", "c"])
    0.6666666666666666
    >>> zero_advantage_fraction([1.0], ["a"])
    1.0
    """
    if len(rewards) != len(keys):
        raise ValueError(f"{len(rewards)} rewards but {len(keys)} group keys")
    seen: dict[str, set[float]] = {}
    for key, reward in zip(keys, rewards):
        seen.setdefault(key, set()).add(float(reward))
    return sum(len(r) == 1 for r in seen.values()) / len(seen) if seen else 0.0


def first_turn(completion_ids: Sequence[int], loss_mask: Sequence[int]) -> tuple[int, ...]:
    """The tokens of the first assistant turn: the first run of trained (mask 1) completion tokens. For a
    single-turn task that is the whole answer; for a game, the model's first action.

    >>> first_turn([7, 8, 1, 2, 3, 9], [1, 1, 0, 0, 1, 1])
    (7, 8)
    >>> first_turn([5, 6, 7], [0, 1, 1]), first_turn([5], [0])
    ((6, 7), ())
    """
    start = next((i for i, m in enumerate(loss_mask) if m), len(loss_mask))
    end = next((i for i in range(start, len(loss_mask)) if not loss_mask[i]), len(loss_mask))
    return tuple(completion_ids[start:end])


def first_turn_entropy(first_turns: Sequence[tuple[int, ...]], keys: Sequence[str]) -> float:
    """Mean over groups (samples sharing a key) of the entropy, in nats, of the empirical distribution of
    their first turns: 0 when every sample of a group opens alike (nothing for its advantages to compare),
    ln n when all n differ.

    >>> round(first_turn_entropy([(1,), (1,), (2,), (3,)], ["a", "a", "b", "b"]), 4)  # a: 0, b: ln 2
    0.3466
    """
    if len(first_turns) != len(keys):
        raise ValueError(f"{len(first_turns)} first turns but {len(keys)} group keys")
    groups: dict[str, dict[tuple[int, ...], int]] = {}
    for key, turn in zip(keys, first_turns):
        counts = groups.setdefault(key, {})
        counts[turn] = counts.get(turn, 0) + 1
    entropies = []
    for counts in groups.values():
        n = sum(counts.values())
        entropies.append(-sum(c / n * math.log(c / n) for c in counts.values()))
    return sum(entropies) / len(entropies) if entropies else 0.0


def broadcast_to_tokens(advantages: torch.Tensor, loss_mask: torch.Tensor) -> torch.Tensor:
    """Spread one scalar advantage per sequence over its trained tokens.

    Args:
        advantages: [B] per-sequence advantage.
        loss_mask: [B, T] 0/1 mask of trained tokens.
    Returns:
        [B, T] per-token advantages (0 where the mask is 0).
    """
    return advantages[:, None].to(loss_mask.dtype) * loss_mask
