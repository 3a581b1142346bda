"""Math answer checking with math-verify, usable off the main thread.

math-verify guards ``parse`` and ``verify`` with ``signal.alarm``, which raises outside the main
thread (threaded Ray actors, thread pools). Here both timeouts are disabled; the caller provides the
deadline — on rollout workers that is :class:`echo2_sdk.rewards.RewardGuard`, which runs rewards in a
child process and kills it on a hang.

The gold answer is a plain number or expression (``"204"``, ``"\\frac{1}{2}"``) or already boxed.
In the completion, the *last* ``\\boxed{...}`` is the answer when there is one; otherwise
math-verify picks the rightmost answer-looking span ("The answer is 204", a bare "204", ``$x=5$``).
"""

from __future__ import annotations

import logging
import re

from math_verify import ExprExtractionConfig, LatexExtractionConfig, parse, verify

# math-verify logs "Timeout is disabled ... you must provide the logic for timeout interruption"
# the first time a timeout is None. We do provide it (RewardGuard), so the warning is noise that
# every rollout worker would print once.
for _module_name in ("math_verify.parser", "math_verify.grader"):
    logging.getLogger(_module_name).addFilter(
        lambda record: "Timeout is disabled" not in record.getMessage()
    )

_BOXED_COMMANDS = ("\\boxed", "\\fbox")
# Only what sits inside the chosen box is parsed, so plain LaTeX + expression extraction is enough.
_EXTRACTION = (LatexExtractionConfig(), ExprExtractionConfig())


def last_boxed_content(text: str) -> str | None:
    """Content of the last ``\\boxed{...}`` (or ``\\fbox{...}``) in ``text``, braces balanced.

    Returns None when there is no complete box (an unclosed box at the end of a truncated
    completion does not count).
    """
    best_start = -1
    for command in _BOXED_COMMANDS:
        best_start = max(best_start, text.rfind(command + "{"))
    while best_start >= 0:
        open_brace = text.index("{", best_start)
        depth = 0
        for position in range(open_brace, len(text)):
            char = text[position]
            if char == "{":
                depth += 1
            elif char == "}":
                depth -= 1
                if depth == 0:
                    return text[open_brace + 1 : position]
        # The last box is unclosed (truncated generation): fall back to the box before it.
        best_start = max(text.rfind(command + "{", 0, best_start) for command in _BOXED_COMMANDS)
    return None


_INTEGER = re.compile(r"-?[0-9]{1,50}")


def integer_answers(gold: str, completion: str) -> tuple[int, int] | None:
    r"""(gold, answer) as integers when both are bare integers — the final ``\boxed{}`` content, else the
    whole completion — so that equality is integer equality; None when math-verify must decide.

    math-verify reads a bare integer as that integer, so this decides exactly as it would, about a
    thousand times faster (rewards of small-integer tasks cost as much CPU as generating them otherwise).

    >>> integer_answers("12", " 12 "), integer_answers("204", "so \\boxed{-7}"), integer_answers("1/2", "1")
    ((12, 12), (204, -7), None)
    >>> integer_answers("12", "The answer is 12") is None
    True
    """
    gold = str(gold).strip()
    boxed = last_boxed_content(gold)
    gold = (boxed if boxed is not None else gold).strip()
    answer = last_boxed_content(completion)
    answer = (answer if answer is not None else completion).strip()
    if _INTEGER.fullmatch(gold) and _INTEGER.fullmatch(answer):
        return int(gold), int(answer)
    return None


def _parse(text: str) -> list:
    return parse(text, extraction_config=_EXTRACTION, parsing_timeout=None)


def parse_gold(gold: str) -> list:
    """Parse a gold answer given as a plain number/expression (or already boxed / in ``$...$``)."""
    gold = str(gold).strip()
    boxed = last_boxed_content(gold)
    if boxed is not None:
        gold = boxed
    # Wrapping in a box makes math-verify read the whole string as one answer instead of picking
    # the rightmost number out of it (e.g. "1,2" or "x+1").
    parsed = _parse("\\boxed{" + gold + "}")
    return parsed or _parse(gold)


def parse_completion(completion: str) -> list:
    """Parse the completion's final answer: the last ``\\boxed{}`` if any, else the rightmost answer."""
    boxed = last_boxed_content(completion)
    if boxed is not None:
        parsed = _parse("\\boxed{" + boxed + "}")
        if parsed:
            return parsed
    return _parse(completion)


def math_verify_reward(gold: str, completion: str) -> float:
    """1.0 if the completion's final answer equals ``gold`` according to math-verify, else 0.0.

    No deadline of its own (see the module docstring): run it under ``RewardGuard``. Two bare integers
    are compared directly (:func:`integer_answers`).
    """
    integers = integer_answers(gold, completion)
    if integers is not None:
        return 1.0 if integers[0] == integers[1] else 0.0
    gold_parsed = parse_gold(gold)
    if not gold_parsed:
        raise ValueError(
            f"math-verify could not parse the gold answer {gold!r}; gold answers must be a number "
            "or a LaTeX expression (e.g. '204', '\\frac{1}{2}')"
        )
    answer_parsed = parse_completion(completion)
    if not answer_parsed:
        return 0.0
    return 1.0 if verify(gold_parsed, answer_parsed, timeout_seconds=None) else 0.0
