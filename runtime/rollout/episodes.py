"""Multi-turn rollouts: n episodes per example, played in lock-step through a generation backend.

Used by :class:`echo2_sdk.runtime.rollout.worker.RolloutWorker` for a ``MultiTurnTaskAdapter``, and by
held-out evaluation. Every round samples one assistant turn for *every* live episode in a single
``backend.generate`` call (the first round samples the n episodes of an example from their shared
prompt with ``n``; later rounds one completion per episode context); each episode's context is the
chat-template token ids of its conversation so far (:attr:`echo2_sdk.env.ChatEpisode.context_ids`),
so the model always conditions on exactly the tokens it sampled.

The records come from the adapter (``adapter.open_episode`` / ``adapter.to_rollout``): prompt = the
first context, completion = the rest of the conversation, loss mask 1 on sampled assistant tokens
only, sampler log-probs aligned to the completion with 0.0 on environment tokens (the learner
multiplies log-probs by the loss mask, and ``validate_rollout`` checks only masked-in positions).
The reward is the trajectory return, computed here; no reward subprocess is involved.

Malformed model output is data: the environment answers unusable text with a reason, re-prompts,
then folds (or checks) for the model, and the counts travel in each record's meta. An episode whose
next prompt would not fit ``max_context_tokens`` is stopped (``meta["stop"] == "length"``).
"""

from __future__ import annotations

import dataclasses
import math
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Sequence

from echo2_sdk.adapter import BaseTaskAdapter, Example, MultiTurnTaskAdapter
from echo2_sdk.records import RecordLimits, Rollout, RolloutGroup
from echo2_sdk.runtime.rollout.backends.base import GenerationBackend, SamplingParams
from echo2_sdk.runtime.rollout.mirror import bind_seats

# Episode counters summed over records (``summarize_rollouts``), when the adapter reports them.
COUNTERS = ("turns", "invalid_actions", "forced_actions", "hands_played", "chips", "walks", "all_in_hands")


@dataclass
class EpisodeBatch:
    """What :func:`run_episodes` returns."""

    groups: list[RolloutGroup]
    """One group per example: its n episodes as records, generated under one version."""
    num_tokens: int = 0
    """Tokens sampled by the backend (assistant turns only)."""
    rounds: int = 0
    """Backend calls made (one per lock-step round)."""
    reward_status: dict[str, int] = field(default_factory=dict)
    """``ok`` per finished episode, ``episode_error`` where the environment itself raised."""


def run_episodes(
    adapter: BaseTaskAdapter,
    backend: GenerationBackend,
    tokenizer,
    examples: Sequence[Example],
    n: int,
    params: SamplingParams,
    *,
    version: int,
    worker: str = "",
    node: str = "",
    max_context_tokens: int = RecordLimits().max_total_tokens,
) -> EpisodeBatch:
    """Play ``n`` episodes of every example under the backend's weights; records built by the adapter.

    ``max_context_tokens`` bounds prompt + completion of a record (the learner rejects longer ones,
    see ``RecordLimits.max_total_tokens``). ``params.seed`` (if set) seeds round r with
    ``seed + 7919 * r``, so a call is reproducible and rounds do not replay one random stream.
    """
    if n < 1:
        raise ValueError(f"run_episodes needs n >= 1 episodes per example, got n={n}")
    if not isinstance(adapter, MultiTurnTaskAdapter):
        raise ValueError(f"task {adapter.name!r} is single-turn (not a MultiTurnTaskAdapter); the worker's "
                         "single-turn path generates it")
    if max_context_tokens <= params.max_new_tokens:
        raise ValueError(f"max_context_tokens={max_context_tokens} leaves no room for a prompt with "
                         f"max_new_tokens={params.max_new_tokens}; raise it")
    bind_seats(adapter, backend, tokenizer, params.max_new_tokens)  # llm:PATH loads a checkpoint, llm:self mirrors
    per_example = [[adapter.open_episode(ex, tokenizer) for _ in range(n)] for ex in examples]
    episodes = [ep for eps in per_example for ep in eps]
    errors: dict[int, str] = {}
    batch = EpisodeBatch(groups=[])
    while True:
        for ep in episodes:
            if not ep.done and len(ep.context_ids) + params.max_new_tokens > max_context_tokens:
                ep.stop("length")
        live = [ep for ep in episodes if not ep.done]
        if not live:
            break
        round_params = params
        if params.seed is not None:
            round_params = dataclasses.replace(params, seed=params.seed + 7919 * batch.rounds)
        if batch.rounds == 0 and len(live) == len(episodes) and n > 1:
            # Round 0: the n episodes of an example share their prompt; sample them as one group.
            outputs = backend.generate([eps[0].context_ids for eps in per_example], n, round_params)
            completions = [c for outs in outputs for c in outs]
        else:
            outputs = backend.generate([ep.context_ids for ep in live], 1, round_params)
            completions = [outs[0] for outs in outputs]
        if len(completions) != len(live):
            raise RuntimeError(f"{type(backend).__name__}.generate returned {len(completions)} completions "
                               f"for {len(live)} live episodes; a backend must return [len(prompts)][n]")
        batch.rounds += 1
        for ep, completion in zip(live, completions):
            batch.num_tokens += len(completion.token_ids)
            try:
                ep.submit(completion.token_ids, completion.logprobs)
            except Exception as exc:  # the env broke on some output: keep the record, count the case
                errors[id(ep)] = f"{type(exc).__name__}: {exc}"[:300]
                ep.stop("error")
    status: Counter = Counter()
    t_generated = time.time()
    for ex, eps in zip(examples, per_example):
        rollouts = []
        for ep in eps:
            meta: dict[str, Any] = {"worker": worker, "turns": len(ep.rewards)}
            if node:
                meta["node"] = node
            if id(ep) in errors:
                meta["error"] = errors[id(ep)]
            status["episode_error" if id(ep) in errors else "ok"] += 1
            rollouts.append(adapter.to_rollout(ep, example=ex, version=version, meta=meta))
        batch.groups.append(RolloutGroup(ex.id, version, tuple(rollouts), worker_id=worker, t_generated=t_generated))
    batch.reward_status = dict(status)
    return batch


def summarize_rollouts(rollouts: Sequence[Rollout]) -> dict[str, Any]:
    """Play statistics of multi-turn records: mean return, legal-action rate, stops, ...

    ``legal_action_rate`` = share of the model's replies the environment accepted (a refused reply
    is re-prompted; after too many the environment acts for the model: ``forced_action_rate`` per
    decision). ``chips_per_hand`` is the agent's mean chip result per hand it played.
    """
    if not rollouts:
        raise ValueError("summarize_rollouts needs at least one record")
    summary = _play_summary(rollouts)
    opponents = sorted({str(r.meta["opponent"]) for r in rollouts if "opponent" in r.meta})
    if len(opponents) > 1:  # an opponent pool: the same figures per line-up (a gain on one may hide a loss on another)
        summary["by_opponent"] = {
            o: {k: v for k, v in _play_summary([r for r in rollouts if r.meta.get("opponent") == o]).items()
                if k in ("episodes", "mean_return", "return_ci95", "legal_action_rate", "chips_per_hand")}
            for o in opponents}
    return summary


def clustered_ci95(keyed_returns: Sequence[tuple[str, float]]) -> tuple[float, float]:
    """95 % CI of the mean return, the episodes of one example counted as one draw.

    The k episodes of a held-out example share its deal or game seed (and opponent), so they are not k
    independent draws: treating them so understates the interval. The standard error is taken from the
    per-example totals (a cluster-robust, ratio-estimator form; with one episode per example it is the
    plain one). Normal approximation, 1.96 standard errors; one example: an empty-width interval.

    >>> clustered_ci95([("a", 1.0), ("b", 0.0)])
    (-0.48, 1.48)
    >>> [round(x, 3) for x in clustered_ci95([("a", 1.0), ("a", 1.0), ("b", 0.0), ("b", 0.0)])]
    [-0.48, 1.48]
    """
    clusters: dict[str, list[float]] = {}
    for key, value in keyed_returns:
        clusters.setdefault(key, []).append(value)
    n = len(clusters)
    total = sum(len(v) for v in clusters.values())
    mean = sum(sum(v) for v in clusters.values()) / total
    if n < 2:
        return (mean, mean)
    size = total / n
    # residual totals per cluster around the overall mean, scaled by the mean cluster size
    residuals = [(sum(v) - mean * len(v)) / size for v in clusters.values()]
    half = 1.96 * math.sqrt(sum(e * e for e in residuals) / (n - 1) / n)
    return (mean - half, mean + half)


def _play_summary(rollouts: Sequence[Rollout]) -> dict[str, Any]:
    totals = {key: sum(float(r.meta.get(key, 0) or 0) for r in rollouts) for key in COUNTERS}
    turns, invalid, forced = totals["turns"], totals["invalid_actions"], totals["forced_actions"]
    decisions = turns - invalid + forced  # every accepted reply, plus every forced action
    returns = [r.reward for r in rollouts]
    mean = sum(returns) / len(returns)
    stops = Counter(str(r.meta.get("stop")) for r in rollouts)
    return {
        "episodes": len(rollouts),
        "examples": len({r.prompt_key for r in rollouts}),
        "mean_return": mean,
        "return_ci95": list(clustered_ci95([(r.prompt_key, r.reward) for r in rollouts])),
        "legal_action_rate": (turns - invalid) / turns if turns else None,
        "forced_action_rate": forced / decisions if decisions else None,
        "turns_per_episode": turns / len(rollouts),
        "hands_played": int(totals["hands_played"]),
        "chips_per_hand": totals["chips"] / totals["hands_played"] if totals["hands_played"] else None,
        "all_in_hand_rate": totals["all_in_hands"] / totals["hands_played"] if totals["hands_played"] else None,
        "stops": dict(stops),
        "mean_completion_tokens": sum(len(r.completion_ids) for r in rollouts) / len(rollouts),
    }


def evaluate_episodes(adapter: BaseTaskAdapter, backend: GenerationBackend, tokenizer, examples: Sequence[Example],
                      *, k: int, params: SamplingParams, batch_size: int = 64) -> tuple[list[list[float]], dict]:
    """Held-out play: ``k`` episodes per example, ``batch_size`` examples per lock-step batch.

    Returns (returns[i][j] of episode j of example i, :func:`summarize_rollouts` of all records).
    """
    returns: list[list[float]] = []
    records: list[Rollout] = []
    version = int(getattr(backend, "version", 0) or 0)
    for index, start in enumerate(range(0, len(examples), batch_size)):
        batch_params = params if params.seed is None else dataclasses.replace(params, seed=params.seed + index)
        result = run_episodes(adapter, backend, tokenizer, examples[start:start + batch_size], k, batch_params,
                              version=version, worker="eval")
        for group in result.groups:
            returns.append([r.reward for r in group.rollouts])
            records.extend(group.rollouts)
    return returns, summarize_rollouts(records)
