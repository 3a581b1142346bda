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

from echo2_sdk.masks import assistant_mask, shift_to_targets, turn_index, turn_spans  # noqa: F401  (re-exported)
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
    spans = turn_spans(loss_mask)
    return tuple(completion_ids[spans[0][0]:spans[0][1]]) if spans else ()


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


def turn_state_keys(prompt_ids: Sequence[int], completion_ids: Sequence[int],
                    spans: Sequence[tuple[int, int]]) -> list[int]:
    """One state key per assistant turn: a hash of every token before it (prompt, earlier turns, the env's
    replies). Two episodes of a group reach the same state exactly when their histories are identical, which
    in an env whose randomness the group shares (one seed per deal or lane) means the same situation."""
    history = tuple(prompt_ids) + tuple(completion_ids)
    return [hash(history[: len(prompt_ids) + start]) for start, _ in spans]


def turn_advantages(rewards: Sequence[float], keys: Sequence[str], turn_states: Sequence[Sequence[int]],
                    estimator: str = "grpo") -> list[list[float]]:
    """GiGPO's step-level advantages (Feng et al., 2025): each assistant turn's advantage among the turns,
    in the same group, taken from the same state — the episodes whose histories are identical up to it.

    Each turn is scored by its episode's whole return (γ = 1): in an env whose rewards so far are a function
    of the history, the difference of two whole returns from one state is the difference of their returns
    from that state on. A state reached by one episode only gives 0 (nothing to compare with), so the first
    turn of a group that shares its prompt gets the episode-level advantage again, and later turns are
    credited only against episodes that played the same hand so far.

    Args:
        rewards: [N] episode returns. keys: [N] group keys. turn_states: [N] lists of per-turn state keys
            (:func:`turn_state_keys`). estimator: a registered advantage estimator.
    Returns:
        [N] lists, one float per turn of that sample.

    >>> [[round(a, 3) for a in t] for t in turn_advantages([1.0, 0.0, 2.0], ["g"] * 3, [[7, 8], [7, 8], [7, 9]], "dr_grpo")]
    [[0.0, 0.5], [-1.0, -0.5], [1.0, 0.0]]
    """
    if not len(rewards) == len(keys) == len(turn_states):
        raise ValueError(f"{len(rewards)} rewards, {len(keys)} group keys, {len(turn_states)} turn-state lists")
    flat_rewards = [float(r) for r, states in zip(rewards, turn_states) for _ in states]
    flat_keys = [f"{k}\x00{s}" for k, states in zip(keys, turn_states) for s in states]
    if not flat_rewards:
        return [[] for _ in rewards]
    flat = compute_advantages(flat_rewards, flat_keys, estimator).tolist()
    out, i = [], 0
    for states in turn_states:
        out.append(flat[i: i + len(states)])
        i += len(states)
    return out


def shared_turn_fraction(keys: Sequence[str], turn_states: Sequence[Sequence[int]]) -> float:
    """Fraction of the turns whose state another episode of their group also reached (the turns a step-level
    advantage can compare; the rest get 0 from it).

    >>> shared_turn_fraction(["g", "g"], [[1, 2], [1, 3]])
    0.5
    """
    counts: dict[tuple[str, int], int] = {}
    for key, states in zip(keys, turn_states):
        for s in states:
            counts[(key, s)] = counts.get((key, s), 0) + 1
    total = sum(counts.values())
    return sum(c for c in counts.values() if c > 1) / total if total else 0.0
