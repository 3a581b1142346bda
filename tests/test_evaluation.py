"""avg@k / pass@k metrics and the evaluate loop (with a scripted backend, no model)."""

from __future__ import annotations

import math

import pytest

from echo2_sdk.checks import render_prompt_ids
from echo2_sdk.evaluation import avg_at_k, pass_at_k_unbiased
from echo2_sdk.registry import make_task
from echo2_sdk.rewards import RewardGuard
from echo2_sdk.runtime.rollout.backends.base import Completion, GenerationBackend, SamplingParams
from echo2_sdk.runtime.driver.evaluation import evaluate


def test_avg_at_k_and_pass_at_k():
    metrics = avg_at_k([[1, 0, 0, 0], [0, 0, 0, 0], [1, 1, 1, 1]], pass_ks=[1, 2, 4])
    assert metrics["k"] == 4 and metrics["num_examples"] == 3
    assert metrics["avg_at_k"] == pytest.approx((0.25 + 0 + 1) / 3)
    assert metrics["accuracy"] == pytest.approx(5 / 12)
    assert metrics["pass_at_k"] == pytest.approx(2 / 3)
    # pass@1 equals avg@k for 0/1 rewards; pass@k (all samples) equals the any-correct share.
    assert metrics["pass_at"][1] == pytest.approx(metrics["avg_at_k"])
    assert metrics["pass_at"][4] == pytest.approx(metrics["pass_at_k"])
    # one correct of 4, 2 drawn: 1 - C(3,2)/C(4,2) = 1/2
    assert metrics["pass_at"][2] == pytest.approx((0.5 + 0 + 1) / 3)


def test_pass_at_k_unbiased_matches_binomials():
    for n, c, k in [(10, 3, 1), (10, 3, 5), (16, 1, 8), (5, 0, 2), (5, 5, 5)]:
        expected = 1 - math.comb(n - c, k) / math.comb(n, k)
        assert pass_at_k_unbiased(n, c, k) == pytest.approx(expected)


def test_partial_rewards_count_as_correct_only_at_max_reward():
    metrics = avg_at_k([[0.5, 1.0]], max_reward=1.0)
    assert metrics["avg_at_k"] == 0.75 and metrics["accuracy"] == 0.5 and metrics["pass_at_k"] == 1.0


@pytest.mark.parametrize(
    "rewards, message",
    [([], "at least one example"), ([[1, 0], [1]], "same k"), ([[float("nan")]], "not finite")],
)
def test_avg_at_k_rejects_bad_input(rewards, message):
    with pytest.raises(ValueError, match=message):
        avg_at_k(rewards)


class ScriptedBackend(GenerationBackend):
    """Answers the first `num_correct` samples of each prompt with the gold answer, then "0"."""

    def __init__(self, tokenizer, gold_by_prompt: dict[tuple, str], num_correct: int):
        self.tokenizer, self.gold_by_prompt, self.num_correct = tokenizer, gold_by_prompt, num_correct
        self.version = 3
        self.seeds = []

    def generate(self, prompts, n, params):
        self.seeds.append(params.seed)
        out = []
        for prompt in prompts:
            samples = []
            for j in range(n):
                text = self.gold_by_prompt[tuple(prompt)] if j < self.num_correct else "0"
                ids = tuple(self.tokenizer.encode(text, add_special_tokens=False)) + (
                    self.tokenizer.eos_token_id,
                )
                samples.append(Completion(ids, (-0.5,) * len(ids), "stop"))
            out.append(samples)
        return out

    def load_weights(self, state_dict, version):
        self.version = version


@pytest.fixture(scope="module")
def arith_setup(tiny_tokenizer):  # tiny_tokenizer: session fixture from conftest.py
    tokenizer = tiny_tokenizer
    adapter = make_task("arith", {"first_operand": [1, 19], "second_operand": [1, 19]})  # no 0 answers, so "0" is always wrong
    gold = {
        tuple(render_prompt_ids(adapter, tokenizer, ex)): ex.answer for ex in adapter.examples("eval")
    }
    return adapter, tokenizer, gold


def test_evaluate_computes_avg_and_pass_at_k(arith_setup):
    adapter, tokenizer, gold = arith_setup
    backend = ScriptedBackend(tokenizer, gold, num_correct=1)
    params = SamplingParams(temperature=1.0, max_new_tokens=4, seed=10)
    result = evaluate(adapter, backend, tokenizer, k=4, params=params, limit=20, batch_size=8)
    assert result["num_examples"] == 20 and result["k"] == 4
    assert result["avg_at_k"] == pytest.approx(0.25) and result["pass_at_k"] == 1.0
    assert result["statuses"] == {"ok": 80} and result["truncated_fraction"] == 0.0
    assert result["version"] == 3
    assert backend.seeds == [10, 11, 12]  # one seed per batch of 8 prompts


def test_evaluate_through_a_guard_gives_the_same_numbers(arith_setup):
    adapter, tokenizer, gold = arith_setup
    backend = ScriptedBackend(tokenizer, gold, num_correct=2)
    params = SamplingParams(temperature=0.0, max_new_tokens=4)
    with RewardGuard("arith", {"first_operand": [1, 19], "second_operand": [1, 19]}, 0) as guard:
        guarded = evaluate(adapter, backend, tokenizer, k=3, params=params, guard=guard, limit=10)
    direct = evaluate(adapter, backend, tokenizer, k=3, params=params, limit=10)
    assert guarded["avg_at_k"] == direct["avg_at_k"] == pytest.approx(2 / 3)


def test_evaluate_rejects_an_empty_split(arith_setup):
    adapter, tokenizer, gold = arith_setup
    with pytest.raises(ValueError, match="no examples in split 'eval'"):
        evaluate(adapter, ScriptedBackend(tokenizer, gold, 1), tokenizer,
                 params=SamplingParams(), limit=0)
