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
from echo2_sdk.rewards import RewardGuard, RewardWorkerError, score_directly
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
    ``reward_detail`` (the first failure text of each status but ``ok``),
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
    details: dict[str, str] = {}
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
        for result in results:
            if result.status != "ok":
                details.setdefault(result.status, result.detail)
        rewards.extend(
            [result.reward for result in results[i * k : (i + 1) * k]] for i in range(len(batch))
        )
    num_samples = len(examples) * k
    return {
        **avg_at_k(rewards, max_reward=adapter.max_reward, pass_ks=pass_ks),
        "split": split,
        "statuses": dict(statuses),
        "reward_detail": details,
        "mean_completion_tokens": num_tokens / num_samples,
        "truncated_fraction": num_truncated / num_samples,
        "version": getattr(backend, "version", None),
    }


class HeldOutEvaluation:
    """A run's held-out evaluation: the learner's current weights, the task's reward under the workers'
    deadline (``rollout.reward_timeout_s``, in a :class:`RewardGuard` child process) so that a slow reward
    costs at most the deadline per sample and a hung one scores 0 as ``timeout`` instead of hanging the
    run. Failures go to ``failures`` (a ``RewardFailures``). Multi-turn tasks score while playing."""

    def __init__(self, cfg, adapter: BaseTaskAdapter, tokenizer, failures) -> None:
        self.cfg, self.adapter, self.tokenizer, self.failures = cfg, adapter, tokenizer, failures
        self.guard: RewardGuard | None = None
        self.unguarded = False

    def run(self, learner, step: int) -> dict:
        """Evaluate the learner's current weights (``step``: where the run is, for the failure report)."""
        from echo2_sdk.runtime.rollout.backends.hf import HFBackend

        model = learner.evaluation_model()
        try:
            return self.score(HFBackend(model, self.tokenizer, device=learner.device, version=learner.version), step)
        finally:
            model.eval()

    def score(self, backend: GenerationBackend, step: int) -> dict:
        """Generate with ``backend`` and score under the guard."""
        t = self.cfg.train
        params = SamplingParams(temperature=t.eval_temperature, top_p=1.0,
                                max_new_tokens=t.eval_max_new_tokens or self.cfg.rollout.max_new_tokens, seed=t.seed)
        if self.guard is None and not self.unguarded and not isinstance(self.adapter, MultiTurnTaskAdapter):
            try:
                self.guard = RewardGuard(self.cfg.task.name, dict(self.cfg.task.options), t.seed,
                                         timeout_s=self.cfg.rollout.reward_timeout_s,
                                         max_chars=eval_answer_char_limit(self.cfg), local=self.adapter)
            except RewardWorkerError as exc:  # e.g. a script without `if __name__ == "__main__":` (spawn)
                self.unguarded = True
                self.failures.log(f"held-out evaluation: the reward process did not start, so rewards are scored "
                                  f"here without rollout.reward_timeout_s ({str(exc).splitlines()[0][:300]})")
        result = self._evaluate(backend, t.eval_samples, params, step, "held-out evaluation")
        if t.eval_sampled_samples:
            sampled = dataclasses.replace(params, temperature=self.cfg.rollout.temperature)
            result["sampled"] = {"temperature": sampled.temperature,
                                 **self._evaluate(backend, t.eval_sampled_samples, sampled, step,
                                                  "held-out evaluation (sampled)")}
        return result

    def _evaluate(self, backend: GenerationBackend, k: int, params: SamplingParams, step: int, what: str) -> dict:
        result = evaluate(self.adapter, backend, self.tokenizer, split="eval", k=k, params=params, guard=self.guard,
                          limit=self.cfg.train.eval_max_examples, max_chars=eval_answer_char_limit(self.cfg))
        self.failures.note(what, result.get("statuses", {}), result.get("reward_detail", {}), step)
        return result

    def close(self) -> None:
        guard, self.guard = self.guard, None
        if guard is not None:
            guard.close()


def format_eval(ev: dict) -> str:
    """One line of an evaluation's headline figures (for the run log)."""
    if "legal_action_rate" in ev:  # multi-turn: "accuracy" would only be the share of winning episodes
        keys = [k for k in ("episodes", "mean_return", "chips_per_hand", "legal_action_rate") if ev.get(k) is not None]
    else:
        keys = [k for k in ev if k.startswith("avg@") or k in ("accuracy", "num_examples")]
    line = ", ".join(f"{k}={ev[k]:.3f}" if isinstance(ev[k], float) else f"{k}={ev[k]}" for k in keys)
    line += "".join(f"; vs {o}: return {v['mean_return']:.3f}, legal {v['legal_action_rate'] or 0:.3f}"
                    for o, v in (ev.get("by_opponent") or {}).items())
    if isinstance(ev.get("sampled"), dict):
        line += f" | sampled at T={ev['sampled']['temperature']:g}: {format_eval(ev['sampled'])}"
    return line
