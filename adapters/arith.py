"""``arith``: seeded synthetic arithmetic (``7+5=`` → ``12``), small enough for a tiny char-level model.

The problem space is every ``a op b`` with ``a`` in ``first_operand``, ``b`` in ``second_operand``
(inclusive ranges) and ``op`` in ``operators``. The default — two-digit plus one-digit sums, 1,000
problems — shares structure across problems (copy the tens digit, add the units, carry), so a warm
start on 30% of them generalizes partly to the rest and leaves RL a real gap to close. It is shuffled with the adapter's seed and cut into three disjoint splits: ``sft``
(warm start), ``eval`` (held out) and ``train`` (the rest, for RL). The defaults live only in
:class:`ArithAdapter.Options`, so tuning them after a learnability experiment is a one-place change.

Reward: 1.0 when the completion is a bare integer equal to the result (checked with
:func:`math_verify_reward`), else 0.0. The bare-integer gate matters: math-verify evaluates
expressions, so without it a model that echoes the prompt (``7+5``) would be rewarded.
"""

from __future__ import annotations

import operator
import random
import re
from dataclasses import dataclass
from typing import Callable, Sequence

from echo2_sdk.adapter import Example, TaskAdapter
from echo2_sdk.adapters.math_reward import integer_answers, math_verify_reward
from echo2_sdk.registry import register_task

OPERATIONS: dict[str, Callable[[int, int], int]] = {
    "+": operator.add,
    "-": operator.sub,
    "*": operator.mul,
}
_BARE_INTEGER = re.compile(r"\s*-?\d+\s*")
# Building millions of Example objects would stall worker start-up for no learning benefit.
MAX_PROBLEMS = 1_000_000


@register_task("arith")
class ArithAdapter(TaskAdapter):
    """Single-turn arithmetic; see the module docstring."""

    name = "arith"

    @dataclass(frozen=True)
    class Options:
        first_operand: tuple[int, int] = (0, 99)
        """Inclusive range of the first operand a; may be negative."""
        second_operand: tuple[int, int] = (0, 9)
        """Inclusive range of the second operand b."""
        operators: tuple[str, ...] = ("+",)
        """Operators to draw from, any of '+', '-', '*'."""
        prompt_template: str = "{a}{op}{b}="
        """User message; placeholders {a}, {op}, {b}. Short prompts keep a char-level model fast."""
        sft_fraction: float = 0.3
        """Share of the problem space reserved for the supervised warm start."""
        eval_fraction: float = 0.1
        """Share of the problem space held out for evaluation (never trained on)."""
        max_train: int | None = None
        """Cap on the number of train problems (None: all that remain after sft and eval)."""
        system_prompt: str | None = None
        """Optional system message; none by default (every prompt char costs a forward step)."""

    def __init__(self, options=None, *, seed: int = 0) -> None:
        super().__init__(options, seed=seed)
        self._validate_options()
        self._splits: dict[str, list[Example]] | None = None

    def _validate_options(self) -> None:
        opts = self.options
        for name in ("first_operand", "second_operand"):
            low, high = getattr(opts, name)
            if low > high:
                raise ValueError(
                    f"task.options.{name}=[{low}, {high}] is empty; give [low, high] with low <= high"
                )
        unknown = [op for op in opts.operators if op not in OPERATIONS]
        if unknown or not opts.operators:
            raise ValueError(
                f"task.options.operators={list(opts.operators)!r} must be a non-empty list drawn "
                f"from {list(OPERATIONS)}"
            )
        try:
            opts.prompt_template.format(a=1, op="+", b=2)
        except (KeyError, IndexError, ValueError) as exc:
            raise ValueError(
                f"task.options.prompt_template={opts.prompt_template!r} cannot be formatted ({exc}); "
                "use only the placeholders {a}, {op} and {b}, e.g. '{a}{op}{b}='"
            ) from None
        for name in ("sft_fraction", "eval_fraction"):
            value = getattr(opts, name)
            if not 0.0 <= value < 1.0:
                raise ValueError(f"task.options.{name}={value} must be in [0, 1)")
        if opts.sft_fraction + opts.eval_fraction >= 1.0:
            raise ValueError(
                f"task.options.sft_fraction + eval_fraction = "
                f"{opts.sft_fraction + opts.eval_fraction} leaves no train problems; keep the sum < 1"
            )
        if opts.max_train is not None and opts.max_train < 1:
            raise ValueError(f"task.options.max_train={opts.max_train} must be >= 1 or null")
        size = self.problem_space_size()
        if size > MAX_PROBLEMS:
            raise ValueError(
                f"arith problem space has {size} problems (> {MAX_PROBLEMS}); narrow "
                "first_operand/second_operand or the operators"
            )

    def problem_space_size(self) -> int:
        (a0, a1), (b0, b1) = self.options.first_operand, self.options.second_operand
        return (a1 - a0 + 1) * (b1 - b0 + 1) * len(set(self.options.operators))

    # ----- data -------------------------------------------------------------------------------
    def _problem(self, a: int, op: str, b: int) -> Example:
        return Example(
            id=f"arith:{a}{op}{b}",
            prompt=self.options.prompt_template.format(a=a, op=op, b=b),
            answer=str(OPERATIONS[op](a, b)),
            meta={"a": a, "op": op, "b": b},
        )

    def _build_splits(self) -> dict[str, list[Example]]:
        opts = self.options
        first = range(opts.first_operand[0], opts.first_operand[1] + 1)
        second = range(opts.second_operand[0], opts.second_operand[1] + 1)
        operators = sorted(set(opts.operators))  # canonical order: the shuffle alone decides splits
        problems = [(a, op, b) for op in operators for a in first for b in second]
        random.Random(self.seed).shuffle(problems)
        num_sft = round(len(problems) * opts.sft_fraction)
        num_eval = round(len(problems) * opts.eval_fraction)
        train = problems[num_sft + num_eval :]
        if opts.max_train is not None:
            train = train[: opts.max_train]
        return {
            "sft": [self._problem(*p) for p in problems[:num_sft]],
            "eval": [self._problem(*p) for p in problems[num_sft : num_sft + num_eval]],
            "train": [self._problem(*p) for p in train],
        }

    def examples(self, split: str) -> Sequence[Example]:
        if self._splits is None:
            self._splits = self._build_splits()
        if split not in self._splits:
            raise ValueError(f"unknown split {split!r}; arith has {sorted(self._splits)}")
        return self._splits[split]

    def build_messages(self, example: Example) -> list[dict[str, str]]:
        messages = []
        if self.options.system_prompt:
            messages.append({"role": "system", "content": self.options.system_prompt})
        messages.append({"role": "user", "content": example.prompt})
        return messages

    # ----- reward -----------------------------------------------------------------------------
    def reward(self, example: Example, completion_text: str) -> float:
        if not _BARE_INTEGER.fullmatch(completion_text):
            return 0.0
        return math_verify_reward(example.answer, completion_text)

    def quick_reward(self, example: Example, completion_text: str) -> float | None:
        """``reward`` without math-verify where it is not needed: nearly every answer of this task.

        >>> task = ArithAdapter(seed=0)
        >>> example = Example(id="a", prompt="7+5=", answer="12")
        >>> task.quick_reward(example, " 12"), task.quick_reward(example, "7+5"), task.quick_reward(example, "13")
        (1.0, 0.0, 0.0)
        """
        if not _BARE_INTEGER.fullmatch(completion_text):
            return 0.0
        integers = integer_answers(example.answer, completion_text)
        return None if integers is None else float(integers[0] == integers[1])
