"""check_adapter: passes for the built-in tasks, names the problem for broken adapters."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from echo2_sdk.adapter import Example, TaskAdapter
from echo2_sdk.checks import AdapterCheckError, check_adapter
from echo2_sdk.records import Omega
from echo2_sdk.registry import make_task

SHARED_AIME24 = Path(__file__).resolve().parents[2] / "shared" / "data" / "aime24.jsonl"


@pytest.fixture
def tokenizer(tiny_tokenizer):  # session fixture from conftest.py
    return tiny_tokenizer


def test_arith_passes(tokenizer):
    adapter = make_task("arith")
    report = check_adapter(adapter, tokenizer)
    assert report["task"] == "arith"
    assert report["splits"] == {s: len(adapter.examples(s)) for s in ("sft", "train", "eval")}
    assert min(report["splits"].values()) > 0
    assert report["checked"] == report["with_reference"] == 8


def test_arith_with_all_operators_and_system_prompt_passes(tokenizer):
    adapter = make_task("arith", {"operators": ["+", "-", "*"], "system_prompt": "Compute."})
    assert check_adapter(adapter, tokenizer, max_examples=4)["checked"] == 4


def test_poker_passes(tokenizer):
    adapter = make_task("poker", {"num_train": 8, "num_eval": 4, "num_sft": 4})
    report = check_adapter(adapter, tokenizer)
    assert report["task"] == "poker" and report["splits"] == {"sft": 4, "train": 8, "eval": 4}
    assert report["with_reference"] == 0  # episodes have no gold answer; the env is checked by check_env


@pytest.mark.skipif(
    not SHARED_AIME24.exists(),
    reason=f"shared AIME24 file {SHARED_AIME24} is absent (the project does not ship it)",
)
def test_aime24_from_shared_file_passes(tokenizer):
    adapter = make_task("aime24", {"path": str(SHARED_AIME24)})
    report = check_adapter(adapter, tokenizer, max_examples=30)
    assert report["splits"] == {"sft": 0, "train": 30, "eval": 30}
    assert report["checked"] == 30  # train and eval overlap: each problem checked once


# ----- broken adapters: each breaks one contract ----------------------------------------------------
class GoodAdapter(TaskAdapter):
    name = "good"

    def examples(self, split):
        return [Example(id=f"good:{i}", prompt=f"{i}+0=", answer=str(i)) for i in range(3)]

    def reward(self, example, completion_text):
        return 1.0 if completion_text.strip() == example.answer else 0.0


class EmptyTrain(GoodAdapter):
    def examples(self, split):
        return [] if split == "train" else super().examples(split)


class DuplicateIds(GoodAdapter):
    def examples(self, split):
        return [Example(id="same", prompt=f"{i}+0=", answer=str(i)) for i in range(3)]


class Nondeterministic(GoodAdapter):
    def examples(self, split):
        return [Example(id=f"r:{i}", prompt=f"{random.random()}", answer="1") for i in range(3)]


class RejectsGold(GoodAdapter):
    def reward(self, example, completion_text):
        return 0.0


class AcceptsAnything(GoodAdapter):
    def reward(self, example, completion_text):
        return 1.0


class NanReward(GoodAdapter):
    def reward(self, example, completion_text):
        return float("nan")


class RaisingReward(GoodAdapter):
    def reward(self, example, completion_text):
        raise KeyError("no parser for this answer")


class ShortMask(GoodAdapter):
    def materialize(self, example, prompt_ids, completion_ids):
        return Omega(loss_mask=(1,) * (len(completion_ids) - 1), group=example.id)


class NonBinaryMask(GoodAdapter):
    def materialize(self, example, prompt_ids, completion_ids):
        return Omega(loss_mask=(2,) * len(completion_ids), group=example.id)


class EmptyMask(GoodAdapter):
    def materialize(self, example, prompt_ids, completion_ids):
        return Omega(loss_mask=(0,) * len(completion_ids), group=example.id)


class QuickDisagrees(GoodAdapter):
    def quick_reward(self, example, completion_text):
        return 0.0  # reward gives the gold answer 1.0


def test_good_adapter_passes(tokenizer):
    assert check_adapter(GoodAdapter(), tokenizer)["checked"] == 3


@pytest.mark.parametrize(
    "adapter_cls, message",
    [
        (EmptyTrain, "split 'train' is empty"),
        (DuplicateIds, "example id 'same' appears twice"),
        (Nondeterministic, "two instances with seed=0 give different"),
        (RejectsGold, "reference answer '0' earns 0.0, below max_reward=1.0"),
        (AcceptsAnything, "wrong answer '' earns max_reward"),
        (NanReward, "returned nan"),
        (RaisingReward, "raised KeyError"),
        (ShortMask, "loss_mask of 1 entries for 2 completion tokens"),
        (NonBinaryMask, "loss_mask entries [2]"),
        (EmptyMask, "fails validation (bad_mask"),
        (QuickDisagrees, "quick_reward gives 0.0 for"),
    ],
)
def test_broken_adapter_fails_with_a_clear_message(tokenizer, adapter_cls, message):
    with pytest.raises(AdapterCheckError) as info:
        check_adapter(adapter_cls(), tokenizer)
    text = str(info.value)
    assert message in text, text
    assert adapter_cls.__name__ in text and "Fix:" in text


def test_failure_names_the_example(tokenizer):
    with pytest.raises(AdapterCheckError, match="on example 'good:0'"):
        check_adapter(RejectsGold(), tokenizer)
