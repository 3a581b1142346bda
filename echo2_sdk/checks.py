"""``check_adapter``: catch task-adapter bugs before they waste a training run.

Each failure raises :class:`AdapterCheckError` saying what failed, on which example, and the fix.
The reward is called directly (in this thread, no deadline): run checks on a trusted machine.
"""

from __future__ import annotations

import math
import numbers
import re
import time
from typing import Any, Sequence

from echo2_sdk.adapter import SPLITS, BaseTaskAdapter, Example, MultiTurnTaskAdapter, TaskAdapter
from echo2_sdk.chat import chat_markers, chat_token_ids
from echo2_sdk.records import Omega, RecordLimits, Rollout, validate_rollout

REQUIRED_SPLITS = ("train", "eval")
# Answers no sensible reward should give full marks to.
GENERIC_WRONG_ANSWERS = ("", "I don't know.")
_INTEGER = re.compile(r"-?\d+")


class AdapterCheckError(AssertionError):
    """A task adapter broke a contract; the message says what, where, and how to fix it."""


def render_prompt_ids(adapter: BaseTaskAdapter, tokenizer, example: Example) -> list[int]:
    """Token ids of the prompt x: the adapter's chat messages + the assistant generation prompt."""
    return chat_token_ids(tokenizer, adapter.build_messages(example))


def _error(
    adapter: BaseTaskAdapter, what: str, fix: str, example: Example | None = None
) -> AdapterCheckError:
    where = f" on example {example.id!r}" if example is not None else ""
    return AdapterCheckError(f"check_adapter({type(adapter).__name__}): {what}{where}. Fix: {fix}")


def _signature(examples: Sequence[Example]) -> list[tuple]:
    return [(ex.id, ex.prompt, ex.answer) for ex in examples]


def _check_splits(adapter: BaseTaskAdapter) -> dict[str, list[Example]]:
    splits = {}
    for split in SPLITS:
        try:
            examples = list(adapter.examples(split))
        except Exception as exc:
            raise _error(adapter, f"examples({split!r}) raised {type(exc).__name__}: {exc}",
                         f"make examples() return a (possibly empty) list for every split in {SPLITS}")
        if split in REQUIRED_SPLITS and not examples:
            raise _error(adapter, f"split {split!r} is empty",
                         f"examples({split!r}) must return at least one Example (check the task options)")
        seen: set[str] = set()
        for example in examples:
            if not isinstance(example, Example):
                raise _error(adapter, f"examples({split!r}) returned a {type(example).__name__}",
                             "return echo2_sdk.adapter.Example objects")
            if not isinstance(example.id, str) or not example.id:
                raise _error(adapter, f"an example of split {split!r} has id {example.id!r}",
                             "give every Example a non-empty, stable string id", example)
            if example.id in seen:
                raise _error(adapter, f"example id {example.id!r} appears twice in split {split!r}",
                             "make ids unique within a split (they key advantage groups and metrics)",
                             example)
            seen.add(example.id)
        splits[split] = examples
    return splits


def _check_determinism(adapter: BaseTaskAdapter, splits: dict[str, list[Example]]) -> None:
    try:
        twin = type(adapter)(adapter.options, seed=adapter.seed)
    except Exception as exc:
        raise _error(adapter, f"cannot build a second instance: {type(exc).__name__}: {exc}",
                     "adapters are built by name on every worker as Cls(options, seed=seed); "
                     "accept exactly those arguments")
    for split, examples in splits.items():
        again = _signature(twin.examples(split))
        if again != _signature(examples):
            first = next(
                (a for a, b in zip(_signature(examples), again) if a != b),
                f"{len(examples)} vs {len(again)} examples",
            )
            raise _error(adapter, f"two instances with seed={adapter.seed} give different {split!r} "
                         f"examples (first difference: {first})",
                         "derive all randomness from self.seed (e.g. random.Random(self.seed)), never from "
                         "the global RNG, the clock or set iteration order")


def _reward(adapter: TaskAdapter, example: Example, text: str) -> float:
    try:
        value = adapter.reward(example, text)
    except Exception as exc:
        raise _error(adapter, f"reward(example, {text[:60]!r}) raised {type(exc).__name__}: {exc}",
                     "reward() must return a float for any text (0.0 for unparseable answers)", example)
    if not isinstance(value, numbers.Real) or not math.isfinite(value):
        raise _error(adapter, f"reward(example, {text[:60]!r}) returned {value!r}",
                     "return a finite float", example)
    return float(value)


def _check_quick_reward(adapter: TaskAdapter, example: Example, texts: Sequence[str]) -> None:
    """Wherever ``quick_reward`` answers (as the worker uses it), it must give ``reward``'s value."""
    from echo2_sdk.rewards import score_quickly

    for text in texts:
        quick = score_quickly(adapter, example, text)
        if quick is not None and quick.reward != _reward(adapter, example, text):
            raise _error(adapter, f"quick_reward gives {quick.reward} for {text[:60]!r} where reward gives "
                         f"{_reward(adapter, example, text)}",
                         "quick_reward must agree with reward wherever it answers (return None to defer)",
                         example)


def _wrong_answers(reference: str) -> list[str]:
    wrong = list(GENERIC_WRONG_ANSWERS)
    if _INTEGER.fullmatch(reference.strip()):
        wrong.append(str(int(reference) + 1))  # catches rewards that accept any number
    return wrong


def _check_rollout(adapter: TaskAdapter, tokenizer, example: Example, reference: str, reward: float) -> None:
    prompt_ids = render_prompt_ids(adapter, tokenizer, example)
    # A reply ends with the token that closes its turn, as a sampled one does.
    completion_ids = list(tokenizer.encode(reference, add_special_tokens=False)) + [chat_markers(tokenizer).turn_end_id]
    try:
        omega = adapter.materialize(example, prompt_ids, completion_ids)
    except Exception as exc:
        raise _error(adapter, f"materialize raised {type(exc).__name__}: {exc}",
                     "materialize(example, prompt_ids, completion_ids) must return an Omega", example)
    if not isinstance(omega, Omega):
        raise _error(adapter, f"materialize returned {type(omega).__name__}, not Omega",
                     "return echo2_sdk.records.Omega(loss_mask=..., group=...)", example)
    mask = list(omega.loss_mask)
    if len(mask) != len(completion_ids):
        raise _error(adapter, f"materialize returned a loss_mask of {len(mask)} entries for "
                     f"{len(completion_ids)} completion tokens",
                     "the loss mask is aligned to completion_ids: one 0/1 entry per completion token",
                     example)
    if any(m not in (0, 1) for m in mask):
        raise _error(adapter, f"materialize returned loss_mask entries {sorted(set(mask) - {0, 1})!r}",
                     "loss_mask entries must be 0 or 1", example)
    rollout = Rollout(
        prompt_ids=prompt_ids,
        completion_ids=completion_ids,
        reward=reward,
        version=0,
        omega=omega,
        sampler_logprobs=[-1.0 if m else 0.0 for m in mask],
        prompt_key=example.id,
    )
    reason = validate_rollout(rollout, newest_version=0, limits=RecordLimits(vocab_size=len(tokenizer)))
    if reason is not None:
        raise _error(adapter, f"a Rollout of the gold answer fails validation ({reason})",
                     "see echo2_sdk.records.validate_rollout for the rules the learner enforces", example)


def check_adapter(adapter: BaseTaskAdapter, tokenizer, *, max_examples: int = 8) -> dict[str, Any]:
    """Check an adapter's data, determinism, reward and Ω on up to ``max_examples`` examples.

    Checks: ``train`` and ``eval`` are non-empty; ids are unique strings within each split; a
    second instance with the same seed gives the same examples; the reference answer earns
    ``max_reward`` and obviously wrong answers do not; rewards are finite; ``quick_reward``, where it
    answers, agrees with ``reward`` on those answers; ``materialize`` gives
    a 0/1 mask aligned to the completion; a Rollout of prompt + reference + the turn's closing
    token passes ``validate_rollout``. Examples without a reference answer skip the reward and Ω
    checks, and so do multi-turn adapters (their reward and Ω come from playing an episode; see
    ``echo2_sdk.task_check.check_task`` and ``check_env``).

    Returns ``{"task", "splits": {split: count}, "checked": n, "with_reference": n, "seconds"}``.
    """
    started = time.perf_counter()
    splits = _check_splits(adapter)
    _check_determinism(adapter, splits)
    # Half from train, half from eval (both feed the learner), without checking one example twice
    # when the splits overlap (e.g. aime24 trains on its eval set).
    half = max(1, max_examples // 2)
    candidates = splits["train"][:half] + splits["eval"] + splits["train"][half:]
    sample = list({example.id: example for example in candidates}.values())[:max_examples]
    with_reference = 0
    for example in sample:
        reference = adapter.reference_answer(example)
        if reference is None:
            continue
        with_reference += 1
        if isinstance(adapter, MultiTurnTaskAdapter):
            continue
        gold_reward = _reward(adapter, example, reference)
        if gold_reward < adapter.max_reward - 1e-9:
            raise _error(adapter, f"the reference answer {reference[:80]!r} earns {gold_reward}, below "
                         f"max_reward={adapter.max_reward}",
                         "make reward() accept the gold answer (check answer parsing) or lower "
                         "max_reward to the best achievable value", example)
        for wrong in _wrong_answers(reference):
            if wrong.strip() == reference.strip():
                continue
            if _reward(adapter, example, wrong) >= adapter.max_reward - 1e-9:
                raise _error(adapter, f"the wrong answer {wrong!r} earns max_reward={adapter.max_reward} "
                             f"(reference {reference[:80]!r})",
                             "the reward must compare the answer with the gold answer", example)
        _check_quick_reward(adapter, example, [reference, *_wrong_answers(reference)])
        _check_rollout(adapter, tokenizer, example, reference, gold_reward)
    return {
        "task": adapter.name or type(adapter).__name__,
        "splits": {split: len(examples) for split, examples in splits.items()},
        "checked": len(sample),
        "with_reference": with_reference,
        "seconds": round(time.perf_counter() - started, 3),
    }
