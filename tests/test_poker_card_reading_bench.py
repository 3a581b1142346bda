"""The card-reading benchmark reads what it says: swapped hands reach the model, shares are a distribution,
and the demonstrations it compares against do depend on the cards."""

from __future__ import annotations

import re
import sys

import pytest

from conftest import load_benchmark


@pytest.fixture(scope="module")
def bench():
    yield load_benchmark("poker_card_reading.py", "poker_card_reading_bench")
    del sys.modules["poker_card_reading_bench"]


@pytest.fixture(scope="module")
def adapter():
    from echo2_sdk.registry import make_task

    return make_task("poker", {"num_sft": 256}, seed=0)


def test_the_doctests_and_the_hand_swap(bench, adapter, tiny_tokenizer):
    import doctest

    assert doctest.testmod(bench).failed == 0
    decisions = bench.opening_decisions(adapter, tiny_tokenizer, 3)
    assert len(decisions) == 3
    for messages in decisions:
        swapped = bench.with_hand(messages, "As Ah")[-1]["content"]
        assert "Hand: [As, Ah]," in swapped, swapped
        # only the hole cards change: the rest of the observation is the dealt one
        assert re.sub(r"Hand: \[[^\]]*\]", "", swapped) == re.sub(r"Hand: \[[^\]]*\]", "", messages[-1]["content"])
        assert messages[-1]["content"] != swapped or "[As, Ah]" in messages[-1]["content"]


def test_the_rule_styles_demonstrate_card_dependent_openings(bench, adapter):
    from echo2_sdk.envs.poker.strength import hand_bucket

    # the panel and the demonstrations' split use one definition of a strong hand
    assert all(hand_bucket(bench.parse_cards(h)) in bench.STRONG_BUCKETS for h in bench.STRONG)
    assert not any(hand_bucket(bench.parse_cards(h)) in bench.STRONG_BUCKETS for h in bench.WEAK)
    split = bench.demonstration_split(adapter)
    assert split["strong"]["n"] > 10 and split["weak"]["n"] > 10
    assert split["strong"]["raise"] > split["weak"]["raise"] + 0.3, split
    assert split["weak"]["fold"] > split["strong"]["fold"] + 0.3, split


def test_a_model_report(bench, adapter):
    from echo2_sdk.config import TinyModelConfig
    from echo2_sdk.runtime.models.modeling import ensure_tiny_from_config

    path = ensure_tiny_from_config(TinyModelConfig(tokenizer="task"), adapter)
    report = bench.card_reading(path, adapter, deals=2)
    assert report["decisions"] == 2
    assert set(report["panel"]) == set(bench.STRONG + bench.WEAK)
    for shares in report["panel"].values():
        assert all(0.0 <= p <= 1.0 for p in shares.values()) and sum(shares.values()) <= 1.0 + 1e-6
    # a random-init model's last hidden state still moves a little when the cards change: they reach it
    assert len(report["hidden_state_change_by_layer"]) == 4
    assert all(change > 0 for change in report["hidden_state_change_by_layer"])
