"""Held-out play: its interval (the k episodes of one example are one draw: they share its deal or game seed) and
the second, sampled evaluation at the rollout temperature (``train.eval_sampled_samples``)."""

from __future__ import annotations

import math
import statistics

import pytest

from echo2_sdk.config import ConfigError, load_config
from echo2_sdk.records import Omega, Rollout
from echo2_sdk.runtime.rollout.backends.base import Completion, GenerationBackend
from echo2_sdk.runtime.rollout.episodes import clustered_ci95, summarize_rollouts


def _record(key: str, reward: float) -> Rollout:
    return Rollout(prompt_ids=(1, 2), completion_ids=(3,), reward=reward, version=0,
                   omega=Omega(loss_mask=(1,), group=key), sampler_logprobs=(-0.5,), prompt_key=key,
                   meta={"turns": 1})


def test_one_episode_per_example_gives_the_plain_interval():
    returns = [0.0, 1.0, 0.5, 0.25, 1.0, 0.0]
    low, high = clustered_ci95([(f"e{i}", r) for i, r in enumerate(returns)])
    half = 1.96 * statistics.stdev(returns) / math.sqrt(len(returns))
    assert (low, high) == pytest.approx((statistics.fmean(returns) - half, statistics.fmean(returns) + half))


def test_the_interval_examples_in_the_docstring_hold():
    import doctest

    from echo2_sdk.runtime.rollout import episodes

    assert doctest.testmod(episodes).failed == 0


def test_repeated_episodes_of_an_example_do_not_narrow_the_interval():
    # 8 examples, each returning the same value in all 8 of its episodes: 8 draws, not 64.
    values = [0.0, 1.0, 0.5, 0.25, 1.0, 0.0, 0.75, 0.5]
    summary = summarize_rollouts([_record(f"e{i}", v) for i, v in enumerate(values) for _ in range(8)])
    assert summary["episodes"] == 64 and summary["examples"] == 8
    per_example = 1.96 * statistics.stdev(values) / math.sqrt(8)
    low, high = summary["return_ci95"]
    assert (high - low) / 2 == pytest.approx(per_example)
    naive = 1.96 * statistics.stdev([v for v in values for _ in range(8)]) / 8
    assert (high - low) / 2 > 2.5 * naive


def test_unequal_cluster_sizes_and_a_single_example():
    keyed = [("a", 1.0), ("a", 0.0), ("a", 1.0), ("b", 0.0), ("c", 0.5), ("c", 0.5)]
    low, high = clustered_ci95(keyed)
    mean = 3.0 / 6
    assert (low + high) / 2 == pytest.approx(mean)
    # residual totals around the mean, scaled by the mean cluster size 2: (2 - 1.5)/2, (0 - 0.5)/2, (1 - 1)/2
    residuals = [0.25, -0.25, 0.0]
    assert (high - low) / 2 == pytest.approx(1.96 * math.sqrt(sum(e * e for e in residuals) / 2 / 3))
    assert clustered_ci95([("a", 0.2), ("a", 0.6)]) == pytest.approx((0.4, 0.4))


class RecordingBackend(GenerationBackend):
    """Answers ``hold`` to every prompt and records the sampling parameters of every call."""

    version = 0

    def __init__(self, tokenizer) -> None:
        self.ids = tuple(tokenizer.encode("hold", add_special_tokens=False)) + (tokenizer.eos_token_id,)
        self.calls: list[tuple[int, float]] = []

    def generate(self, prompts, n, params):
        self.calls.append((n, params.temperature))
        return [[Completion(self.ids, (-0.5,) * len(self.ids), "stop") for _ in range(n)] for _ in prompts]

    def load_weights(self, state_dict, version):
        pass


def _score(tiny_tokenizer, overrides):
    from echo2_sdk.registry import make_task
    from echo2_sdk.runtime.driver.evaluation import HeldOutEvaluation, format_eval
    from echo2_sdk.runtime.driver.reward_failures import RewardFailures

    cfg = load_config(None, ["task.name=moba", "task.options.num_sft=0", "task.options.num_eval=3",
                             "rollout.temperature=0.8", *overrides])
    backend = RecordingBackend(tiny_tokenizer)
    held_out = HeldOutEvaluation(cfg, make_task("moba", dict(cfg.task.options)), tiny_tokenizer, RewardFailures(print))
    try:
        result = held_out.score(backend, step=0)
    finally:
        held_out.close()
    return result, backend.calls, format_eval(result)


def test_the_sampled_evaluation_plays_at_the_rollout_temperature_beside_the_greedy_one(tiny_tokenizer):
    result, calls, line = _score(tiny_tokenizer, ["train.eval_sampled_samples=4"])
    assert result["episodes"] == 3 and result["sampled"]["episodes"] == 12 and result["sampled"]["examples"] == 3
    assert result["sampled"]["temperature"] == 0.8
    temperatures = [t for _, t in calls]  # the greedy evaluation first (k = 1), then the sampled one (k = 4)
    assert temperatures == sorted(temperatures) and set(temperatures) == {0.0, 0.8}
    assert calls[0] == (1, 0.0) and (4, 0.8) in calls and (4, 0.0) not in calls
    assert " | sampled at T=0.8: episodes=12, mean_return=" in line
    alone, calls, line = _score(tiny_tokenizer, [])
    assert "sampled" not in alone and {t for _, t in calls} == {0.0} and "sampled" not in line


def test_a_negative_sample_count_is_refused_in_one_line():
    with pytest.raises(ConfigError, match=r"train.eval_sampled_samples=-1 must be >= 0"):
        load_config(None, ["train.eval_sampled_samples=-1"])
