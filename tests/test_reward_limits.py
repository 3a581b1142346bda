"""``rollout.max_answer_chars``: one effective limit for every scoring path (rollout workers, the learner's
reward audit, held-out evaluation), derived from the token budget unless set."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import pytest

from echo2_sdk.config import ConfigError, load_config
from echo2_sdk.registry import make_task
from echo2_sdk.rewards import RewardGuard
from echo2_sdk.rollout_config import CHARS_PER_TOKEN_BOUND, answer_char_limit
from echo2_sdk.runtime.driver.evaluation import eval_answer_char_limit, evaluate
from echo2_sdk.runtime.driver.setup import worker_settings
from echo2_sdk.runtime.rollout.backends.base import Completion, GenerationBackend, SamplingParams
from echo2_sdk.runtime.rollout.codec import settings_from_dict, settings_to_dict

AIME24_YAML = str(Path(__file__).resolve().parent.parent / "examples" / "aime24.yaml")

# AIME 2024 I, problem 1 (answer 204).
PROBLEM = (
    "Every morning Aya goes for a $9$-kilometer-long walk and stops at a coffee shop afterwards. When she "
    "walks at a constant speed of $s$ kilometers per hour, the walk takes her 4 hours, including $t$ minutes "
    "spent in the coffee shop. When she walks $s+2$ kilometers per hour, the walk takes her 2 hours and 24 "
    "minutes, including $t$ minutes spent in the coffee shop. Suppose Aya walks at $s+\\frac{1}{2}$ kilometers "
    "per hour. Find the number of minutes the walk takes her, including the $t$ minutes spent in the coffee shop."
)
SOLUTION = (
    "Let the walking time at speed $s$ be $9/s$ hours. Then $9/s + t/60 = 4$ and $9/(s+2) + t/60 = 2.4$.\n"
    "Subtracting: $9/s - 9/(s+2) = 1.6$, so $18/(s(s+2)) = 1.6$, i.e. $s^2 + 2s - 11.25 = 0$.\n"
    "The positive root is $s = 2.5$, so $9/2.5 = 3.6$ hours and $t/60 = 0.4$, hence $t = 24$ minutes.\n"
    "At $s + 1/2 = 3$ km/h the walk takes $9/3 = 3$ hours = 180 minutes; with the coffee shop, "
    "$180 + 24 = 204$ minutes.\n"
)


def long_reasoning(min_chars: int) -> str:
    """A correct AIME-style solution of at least ``min_chars`` characters, ending in ``\\boxed{204}``."""
    lines = ["We need the total time at speed $s + 1/2$, including the $t$ minutes in the coffee shop.\n", SOLUTION]
    candidate = 1
    while sum(map(len, lines)) < min_chars:
        # Checking candidate speeds one by one, as a long chain of thought does.
        walk = 9 / candidate
        lines.append(f"Check $s = {candidate}$: the walk alone takes $9/{candidate} = {walk:.4f}$ hours, "
                     f"so $t/60 = 4 - {walk:.4f} = {4 - walk:.4f}$; at $s + 2 = {candidate + 2}$ the walk takes "
                     f"$9/{candidate + 2} = {9 / (candidate + 2):.4f}$ hours, and the two values of $t$ "
                     f"{'agree' if candidate == 2.5 else 'disagree'}.\n")
        candidate += 0.5
    lines.append("Both equations hold only for $s = 2.5$ and $t = 24$, so the answer is $180 + 24 = 204$.\n")
    lines.append("\\boxed{204}")
    return "".join(lines)


class ScriptedBackend(GenerationBackend):
    """Answers every prompt with the same text."""

    def __init__(self, tokenizer, text: str):
        self.ids = tuple(tokenizer.encode(text, add_special_tokens=False)) + (tokenizer.eos_token_id,)
        self.version = 0

    def generate(self, prompts, n, params):
        return [[Completion(self.ids, (-0.5,) * len(self.ids), "stop") for _ in range(n)] for _ in prompts]

    def load_weights(self, state_dict, version):
        self.version = version


# ----- the config --------------------------------------------------------------------------------
def test_default_limit_follows_max_new_tokens():
    assert CHARS_PER_TOKEN_BOUND == 16 and answer_char_limit(None, 10) == 160
    cfg = load_config(None)
    assert cfg.rollout.max_answer_chars is None
    assert cfg.rollout.effective_max_answer_chars == cfg.rollout.max_new_tokens * CHARS_PER_TOKEN_BOUND
    cfg = load_config(AIME24_YAML)
    assert cfg.rollout.max_new_tokens == 8192 and cfg.rollout.effective_max_answer_chars == 8192 * 16
    assert eval_answer_char_limit(cfg) == 8192 * 16


def test_explicit_limit_is_honored_everywhere():
    cfg = load_config(AIME24_YAML, ["rollout.max_answer_chars=4000", "train.eval_max_new_tokens=16384"])
    assert cfg.rollout.effective_max_answer_chars == 4000 and answer_char_limit(4000, 8192) == 4000
    assert eval_answer_char_limit(cfg) == 4000


@pytest.mark.parametrize("value", [0, -5])
def test_non_positive_limit_is_rejected(value):
    with pytest.raises(ConfigError, match=rf"rollout\.max_answer_chars={value} must be >= 1.*null"):
        load_config(None, [f"rollout.max_answer_chars={value}"])


def test_evaluation_limit_follows_a_larger_evaluation_budget_never_a_smaller_one():
    larger = load_config(AIME24_YAML, ["train.eval_max_new_tokens=16384"])
    assert larger.rollout.effective_max_answer_chars == 8192 * 16 and eval_answer_char_limit(larger) == 16384 * 16
    smaller = load_config(AIME24_YAML, ["train.eval_max_new_tokens=1024"])
    assert eval_answer_char_limit(smaller) == smaller.rollout.effective_max_answer_chars == 8192 * 16


@pytest.mark.parametrize("overrides, expected", [([], 8192 * 16), (["rollout.max_answer_chars=4000"], 4000)])
def test_workers_get_the_resolved_limit_over_the_wire(overrides, expected):
    settings = worker_settings(load_config(AIME24_YAML, overrides), "Qwen/Qwen3-4B")
    assert settings.max_answer_chars == expected
    assert settings_from_dict(json.loads(json.dumps(settings_to_dict(settings)))).max_answer_chars == expected


def test_reward_audit_uses_the_workers_limit(monkeypatch):
    from echo2_sdk.runtime.driver import setup

    built = []
    monkeypatch.setattr("echo2_sdk.rewards.RewardGuard", lambda *args, **kwargs: built.append(kwargs))
    cfg = load_config(AIME24_YAML)
    audit = setup.reward_audit(cfg, make_task("aime24", dict(cfg.task.options)), None, (), print)
    audit._guard_factory()
    assert built[0]["max_chars"] == worker_settings(cfg, "m").max_answer_chars == 8192 * 16


# ----- a long correct answer scores alike on the workers and in held-out evaluation ---------------------
@pytest.fixture(scope="module")
def aime_data(tmp_path_factory) -> str:
    path = tmp_path_factory.mktemp("aime") / "aime24.jsonl"  # offline: one problem, no dataset download
    path.write_text(json.dumps({"id": "2024-I-1", "problem": PROBLEM, "answer": "204"}) + "\n")
    return str(path)


def _worker_result(cfg, text: str):
    """Score as a rollout worker does: the settings the learner sends, then the worker's RewardGuard."""
    settings = settings_from_dict(settings_to_dict(worker_settings(cfg, "Qwen/Qwen3-4B")))
    adapter = make_task(settings.task_name, dict(settings.task_options))
    example = adapter.examples("train")[0]
    with RewardGuard(settings.task_name, dict(settings.task_options), settings.seed,
                     timeout_s=settings.reward_timeout_s, max_chars=settings.max_answer_chars) as guard:
        return guard.score_many([(example, text)])[0]


def _evaluation_result(cfg, tokenizer, text: str, monkeypatch) -> dict:
    """Score as the trainer's held-out evaluation does (its reward guard included), with a backend that
    answers ``text``."""
    from echo2_sdk.runtime.driver.evaluation import HeldOutEvaluation
    from echo2_sdk.runtime.driver.reward_failures import RewardFailures

    monkeypatch.setattr("echo2_sdk.runtime.rollout.backends.hf.HFBackend",
                        lambda *args, **kwargs: ScriptedBackend(tokenizer, text))
    model = SimpleNamespace(eval=lambda: None)
    learner = SimpleNamespace(evaluation_model=lambda: model, device="cpu", version=0)
    held_out = HeldOutEvaluation(cfg, make_task(cfg.task.name, dict(cfg.task.options)), tokenizer,
                                 RewardFailures(lambda line: None))
    try:
        return held_out.run(learner, step=0)
    finally:
        held_out.close()


@pytest.mark.parametrize("overrides, status, reward", [
    ([], "ok", 1.0),                                       # the default limit follows max_new_tokens=8192
    (["rollout.max_answer_chars=4000"], "oversize", 0.0),  # an explicit limit: the same verdict on both paths
])
def test_long_correct_aime_answer_scores_alike_in_training_and_evaluation(
    aime_data, tiny_tokenizer, monkeypatch, overrides, status, reward
):
    cfg = load_config(AIME24_YAML, [f"task.options.path={aime_data}", *overrides])
    text = long_reasoning(4037)
    assert 4037 <= len(text) < 8192 and text.endswith("\\boxed{204}")

    worker = _worker_result(cfg, text)
    assert (worker.status, worker.reward) == (status, reward)
    evaluated = _evaluation_result(cfg, tiny_tokenizer, text, monkeypatch)
    k = cfg.train.eval_samples
    assert evaluated["statuses"] == {status: k} and evaluated["avg_at_k"] == reward


def test_text_over_the_effective_limit_is_oversize_on_both_paths(aime_data, tiny_tokenizer, monkeypatch):
    cfg = load_config(AIME24_YAML, [f"task.options.path={aime_data}", "train.eval_samples=1"])
    limit = cfg.rollout.effective_max_answer_chars
    text = long_reasoning(limit + 1)
    assert len(text) > limit == eval_answer_char_limit(cfg)

    worker = _worker_result(cfg, text)
    assert (worker.status, worker.reward) == ("oversize", 0.0)
    evaluated = _evaluation_result(cfg, tiny_tokenizer, text, monkeypatch)
    assert evaluated["statuses"] == {"oversize": 1} and evaluated["avg_at_k"] == 0.0


def test_evaluate_refuses_a_guard_with_another_limit(aime_data, tiny_tokenizer):
    adapter = make_task("aime24", {"path": aime_data})
    guard = SimpleNamespace(max_chars=4000)  # checked before anything is scored
    with pytest.raises(ValueError, match="max_chars=131072 but its guard scores with max_chars=4000"):
        evaluate(adapter, ScriptedBackend(tiny_tokenizer, "\\boxed{204}"), tiny_tokenizer,
                 params=SamplingParams(), guard=guard, max_chars=131072)
