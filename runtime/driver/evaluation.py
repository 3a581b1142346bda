"""Evaluate a policy on a task split: k samples per example through a generation backend.

Metrics are computed by :func:`echo2_sdk.evaluation.avg_at_k` (avg@k, pass@k, accuracy).
"""

from __future__ import annotations

import dataclasses
from collections import Counter
from typing import Iterable

from echo2_sdk.adapter import BaseTaskAdapter, MultiTurnTaskAdapter
from echo2_sdk.checks import render_prompt_ids
from echo2_sdk.evaluation import avg_at_k
from echo2_sdk.rewards import RewardGuard, score_directly
from echo2_sdk.rollout_config import answer_char_limit
from echo2_sdk.runtime.rollout.backends.base import FINISH_LENGTH, GenerationBackend, SamplingParams


def eval_answer_char_limit(cfg) -> int:
    """The ``max_chars`` held-out evaluation of ``cfg`` (an ``Echo2Config``) scores with.

    The rollout workers' rule (:func:`echo2_sdk.rollout_config.answer_char_limit`), applied to the larger
    of ``rollout.max_new_tokens`` and ``train.eval_max_new_tokens``: an explicit
    ``rollout.max_answer_chars`` is the limit everywhere; a derived one never drops below the workers'
    (a text scores alike in training and evaluation) and grows with a longer evaluation budget, so
    longer evaluation answers are scored rather than counted ``oversize``.
    """
    budget = max(cfg.rollout.max_new_tokens, cfg.train.eval_max_new_tokens or 0)
    return answer_char_limit(cfg.rollout.max_answer_chars, budget)


def evaluate(
    adapter: BaseTaskAdapter,
    backend: GenerationBackend,
    tokenizer,
    *,
    split: str = "eval",
    k: int = 1,
    params: SamplingParams,
    guard: RewardGuard | None = None,
    limit: int | None = None,
    batch_size: int = 64,
    pass_ks: Iterable[int] = (),
    max_chars: int | None = None,
) -> dict:
    """Generate ``k`` samples for each example of ``split`` (the first ``limit``) and score them.

    Rewards go through ``guard`` when given (deadline, crash isolation; it must serve the same task
    as ``adapter``), else they are computed in this thread with the same 0-on-failure rules.
    ``max_chars``: completions longer than this score 0 as ``oversize``, as on the rollout workers
    (pass :func:`eval_answer_char_limit` of the run's config; None: no limit). A guard applies its
    own ``max_chars``, which must then be the same.
    Prompts are generated ``batch_size`` at a time; each batch gets its own seed
    (``params.seed + batch index``) so batches do not replay one random stream.

    Multi-turn tasks play ``k`` episodes per example (``echo2_sdk.runtime.rollout.episodes``): avg@k is the
    mean return, and the play statistics of ``summarize_rollouts`` (legal-action rate, ...) are added.

    Returns the metrics of ``avg_at_k`` plus ``split``, ``statuses`` (count of each reward status),
    ``mean_completion_tokens``, ``truncated_fraction`` (samples that hit ``max_new_tokens``) and
    ``version`` (the backend's policy version).
    """
    if k < 1:
        raise ValueError(f"evaluate needs k >= 1 samples per example, got k={k}")
    if batch_size < 1:
        raise ValueError(f"evaluate needs batch_size >= 1, got {batch_size}")
    if guard is not None and max_chars is not None and guard.max_chars != max_chars:
        raise ValueError(f"evaluate got max_chars={max_chars} but its guard scores with max_chars={guard.max_chars}; "
                         "build the guard with the same limit (or pass max_chars=None)")
    examples = list(adapter.examples(split))
    if limit is not None:
        examples = examples[:limit]
    if not examples:
        raise ValueError(
            f"task {adapter.name!r} has no examples in split {split!r} (limit={limit}); "
            "evaluate another split or check the task options"
        )
    if isinstance(adapter, MultiTurnTaskAdapter):  # play episodes: the reward is the trajectory return
        from echo2_sdk.runtime.rollout.episodes import evaluate_episodes

        returns, play = evaluate_episodes(adapter, backend, tokenizer, examples, k=k, params=params,
                                          batch_size=batch_size)
        return {**avg_at_k(returns, max_reward=adapter.max_reward, pass_ks=pass_ks), "split": split,
                **play, "version": getattr(backend, "version", None)}
    rewards: list[list[float]] = []
    statuses: Counter = Counter()
    num_tokens = num_truncated = 0
    for batch_index, start in enumerate(range(0, len(examples), batch_size)):
        batch = examples[start : start + batch_size]
        prompts = [render_prompt_ids(adapter, tokenizer, example) for example in batch]
        batch_params = params
        if params.seed is not None:
            batch_params = dataclasses.replace(params, seed=params.seed + batch_index)
        outputs = backend.generate(prompts, k, batch_params)
        if len(outputs) != len(batch) or any(len(samples) != k for samples in outputs):
            raise RuntimeError(
                f"{type(backend).__name__}.generate returned {[len(s) for s in outputs]} samples for "
                f"{len(batch)} prompts x n={k}; a backend must return a [len(prompts)][n] nested list"
            )
        items = []
        for example, samples in zip(batch, outputs):
            for completion in samples:
                num_tokens += len(completion.token_ids)
                num_truncated += completion.finish_reason == FINISH_LENGTH
                text = tokenizer.decode(list(completion.token_ids), skip_special_tokens=True)
                items.append((example, text))
        if guard is not None:
            results = guard.score_many(items)
        else:
            results = [score_directly(adapter, example, text, max_chars=max_chars) for example, text in items]
        statuses.update(result.status for result in results)
        rewards.extend(
            [result.reward for result in results[i * k : (i + 1) * k]] for i in range(len(batch))
        )
    num_samples = len(examples) * k
    return {
        **avg_at_k(rewards, max_reward=adapter.max_reward, pass_ks=pass_ks),
        "split": split,
        "statuses": dict(statuses),
        "mean_completion_tokens": num_tokens / num_samples,
        "truncated_fraction": num_truncated / num_samples,
        "version": getattr(backend, "version", None),
    }
