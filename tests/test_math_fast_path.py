"""The integer fast path of the math reward decides exactly as math-verify does, without it."""

from __future__ import annotations

import random

import pytest

from echo2_sdk.adapters import math_reward
from echo2_sdk.adapters.math_reward import integer_answers, math_verify_reward


def _slow(gold: str, completion: str) -> float:
    """math-verify alone (the fast path switched off)."""
    gold_parsed = math_reward.parse_gold(gold)
    answer = math_reward.parse_completion(completion)
    return 1.0 if answer and math_reward.verify(gold_parsed, answer, timeout_seconds=None) else 0.0


CASES = [("12", "12"), ("12", "13"), ("12", " 12\n"), ("-3", "-3"), ("0", "-0"), ("204", "\\boxed{204}"),
         ("204", "so the answer is \\boxed{205}"), ("\\boxed{7}", "7"), ("007", "7"), ("12", "012")]


@pytest.mark.parametrize("gold,completion", CASES)
def test_fast_path_agrees_with_math_verify(gold, completion):
    assert integer_answers(gold, completion) is not None
    assert math_verify_reward(gold, completion) == _slow(gold, completion)


def test_fast_path_agrees_on_random_integers_and_leaves_the_rest_to_math_verify():
    rng = random.Random(5)
    for _ in range(200):
        a, b = rng.randint(-999, 999), rng.randint(-999, 999)
        completion = str(b) if rng.random() < 0.5 else f"\\boxed{{{b}}}"
        assert math_verify_reward(str(a), completion) == _slow(str(a), completion) == float(a == b)
    for gold, completion in [("1/2", "0.5"), ("12", "The answer is 12"), ("12", "7+5"), ("x+1", "1+x")]:
        assert integer_answers(gold, completion) is None
        assert math_verify_reward(gold, completion) == _slow(gold, completion)

