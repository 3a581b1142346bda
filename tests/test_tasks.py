"""Built-in tasks (arith, aime24) and the math-verify reward."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from echo2_sdk.adapter import SPLITS
from echo2_sdk.adapters.aime24 import DEFAULT_PROMPT_SUFFIX, Aime24Adapter
from echo2_sdk.adapters.arith import ArithAdapter
from echo2_sdk.adapters.math_reward import last_boxed_content, math_verify_reward, parse_completion
from echo2_sdk.registry import get_task_class, make_task

# The shared/ folder sits next to the checkout (…/main/tests -> …/shared); the project ships no copy.
SHARED_AIME24 = Path(__file__).resolve().parents[2] / "shared" / "data" / "aime24.jsonl"
needs_shared_aime24 = pytest.mark.skipif(
    not SHARED_AIME24.exists(),
    reason=f"shared AIME24 file {SHARED_AIME24} is absent (the project does not ship it); "
    "these tests only run where the shared/ folder is present",
)


# ----- math_verify_reward -------------------------------------------------------------------------
@pytest.mark.parametrize(
    "gold, completion, expected",
    [
        ("204", "\\boxed{204}", 1.0),
        ("204", "The answer is 204", 1.0),
        ("204", "204", 1.0),
        ("\\boxed{204}", "204", 1.0),
        ("204", "The answer is $\\boxed{204}$.", 1.0),
        ("204", "\\boxed{203}", 0.0),
        ("12", "12", 1.0),
        ("12", "13", 0.0),
        ("-3", "-3", 1.0),
        ("\\frac{1}{2}", "0.5", 1.0),
        ("5", "first \\boxed{3}, finally \\boxed{5}", 1.0),  # the last box is the answer
        ("3", "first \\boxed{3}, finally \\boxed{5}", 0.0),
        ("5", "\\boxed{5} then a truncated \\boxed{3", 1.0),  # an unclosed box does not count
        ("12", "", 0.0),
        ("12", "no number here", 0.0),
    ],
)
def test_math_verify_reward(gold, completion, expected):
    assert math_verify_reward(gold, completion) == expected


def test_bare_number_parses():
    assert parse_completion("12")  # the arith model answers bare numbers
    assert last_boxed_content("a \\boxed{\\frac{1}{2}} b") == "\\frac{1}{2}"


def test_math_verify_reward_works_off_the_main_thread():
    # math-verify's own signal.alarm timeouts would raise here; ours are disabled.
    results = []
    thread = threading.Thread(target=lambda: results.append(math_verify_reward("204", "\\boxed{204}")))
    thread.start()
    thread.join(30)
    assert results == [1.0]


def test_unparseable_gold_raises_with_the_value():
    with pytest.raises(ValueError, match="gold answer"):
        math_verify_reward("", "12")


# ----- arith ------------------------------------------------------------------------------------
def test_arith_is_registered_and_defaults_are_learnable_size():
    assert get_task_class("arith") is ArithAdapter
    adapter = make_task("arith")
    sizes = {split: len(adapter.examples(split)) for split in SPLITS}
    assert sizes["train"] >= 100, sizes
    assert sum(sizes.values()) == adapter.problem_space_size() == 1000


def test_arith_splits_are_a_disjoint_partition_and_deterministic():
    first, second = make_task("arith", seed=3), make_task("arith", seed=3)
    ids = {split: [ex.id for ex in first.examples(split)] for split in SPLITS}
    assert ids == {split: [ex.id for ex in second.examples(split)] for split in SPLITS}
    flat = [i for split in SPLITS for i in ids[split]]
    assert len(flat) == len(set(flat)) == 1000
    other_seed = make_task("arith", seed=4)
    assert ids["eval"] != [ex.id for ex in other_seed.examples("eval")]


def test_arith_examples_and_reward():
    adapter = make_task("arith")
    example = adapter.examples("train")[0]
    a, op, b = example.meta["a"], example.meta["op"], example.meta["b"]
    assert example.id == f"arith:{a}{op}{b}" and example.prompt == f"{a}{op}{b}="
    assert adapter.reward(example, example.answer) == 1.0
    assert adapter.reward(example, f" {example.answer}\n") == 1.0
    assert adapter.reward(example, str(int(example.answer) + 1)) == 0.0
    # math-verify evaluates expressions: echoing the prompt must not earn the reward.
    assert adapter.reward(example, f"{a}{op}{b}") == 0.0
    assert adapter.reward(example, "") == 0.0
    assert adapter.build_messages(example) == [{"role": "user", "content": example.prompt}]


def test_arith_options_from_a_mapping():
    adapter = make_task(
        "arith",
        {"operators": ["-", "*"], "first_operand": [-3, 3], "second_operand": [-3, 3], "max_train": 10,
         "system_prompt": "Compute."},
    )
    assert len(adapter.examples("train")) == 10
    for example in adapter.examples("eval"):
        a, op, b = example.meta["a"], example.meta["op"], example.meta["b"]
        assert int(example.answer) == (a - b if op == "-" else a * b)
        assert adapter.reward(example, example.answer) == 1.0
    assert adapter.build_messages(example)[0] == {"role": "system", "content": "Compute."}


@pytest.mark.parametrize(
    "options, message",
    [
        ({"operators": ["/"]}, "operators"),
        ({"first_operand": [5, 1]}, "first_operand"),
        ({"sft_fraction": 0.5, "eval_fraction": 0.5}, "leaves no train problems"),
        ({"prompt_template": "{x}="}, "prompt_template"),
        ({"max_train": 0}, "max_train"),
    ],
)
def test_arith_rejects_bad_options(options, message):
    with pytest.raises(ValueError, match=message):
        make_task("arith", options)


# ----- aime24 -----------------------------------------------------------------------------------
@needs_shared_aime24
def test_aime24_loads_the_shared_file_and_gold_answers_score_one():
    adapter = make_task("aime24", {"path": str(SHARED_AIME24)})
    assert isinstance(adapter, Aime24Adapter)
    examples = adapter.examples("eval")
    assert len(examples) == 30
    assert [ex.id for ex in adapter.examples("train")] == [ex.id for ex in examples]
    assert len({ex.id for ex in examples}) == 30
    assert adapter.examples("sft") == []
    assert examples[0].prompt.endswith(DEFAULT_PROMPT_SUFFIX)
    for example in examples:
        assert adapter.reward(example, f"So the answer is \\boxed{{{example.answer}}}.") == 1.0
        assert adapter.reward(example, f"\\boxed{{{int(example.answer) + 1}}}") == 0.0


def test_aime24_local_jsonl_without_ids(tmp_path):
    path = tmp_path / "mini.jsonl"
    rows = [{"problem": "What is 1+1?", "answer": "2"}, {"problem": "Half of 1?", "answer": "\\frac{1}{2}"}]
    path.write_text("\n".join(json.dumps(row) for row in rows))
    adapter = make_task("aime24", {"path": str(path), "prompt_suffix": ""})
    examples = adapter.examples("train")
    assert [ex.id for ex in examples] == ["aime24:0", "aime24:1"]
    assert examples[0].prompt == "What is 1+1?"
    assert adapter.reward(examples[1], "\\boxed{0.5}") == 1.0
    assert adapter.examples("eval") is adapter.examples("train")  # loaded once per instance


def test_aime24_local_file_errors(tmp_path):
    with pytest.raises(FileNotFoundError, match="task.options.path"):
        make_task("aime24", {"path": str(tmp_path / "missing.jsonl")}).examples("eval")
    with pytest.raises(ValueError, match="unsupported extension"):
        make_task("aime24", {"path": str(tmp_path / "data.csv")}).examples("eval")
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps({"question": "?", "answer": "1"}))
    with pytest.raises(ValueError, match="lacks field"):
        make_task("aime24", {"path": str(bad)}).examples("eval")


def test_aime24_without_network_or_path_says_how_to_fix():
    # A subprocess with the Hub forced offline: the real datasets code path fails at once
    # (online-but-unreachable retries for ~25 s before failing the same way).
    code = (
        "from echo2_sdk.registry import make_task\n"
        "try:\n"
        "    make_task('aime24').examples('eval')\n"
        "except RuntimeError as exc:\n"
        "    print(exc)\n"
    )
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1"}
    out = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120
    ).stdout
    assert "HuggingFaceH4/aime_2024" in out, out
    assert "task.options.path" in out, out
