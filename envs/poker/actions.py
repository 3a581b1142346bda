"""Poker action text: parsing what a model writes, and describing what is legal.

Grammar (case-insensitive, surrounding quotes/backticks/asterisks and a final period ignored; if
the text has a line starting with ``Action:``, only what follows the last such prefix counts):

=====================  ==================================================================
``fold``               give up the hand (refused when checking is free)
``check``              pass when nothing is owed
``call`` [N]           match the current bet; N, if given, must be the amount owed or the
                       total it brings the bet to (``call`` with nothing owed checks)
``raise N`` / ``bet N`` raise (or bet) *to* a total of N chips on this street; ``to`` optional
``all-in``             (also ``allin``, ``all in``, ``shove``, ``jam``) bet everything, or call
                       when raising is not possible
=====================  ==================================================================

Amounts are whole chips (``1,000`` accepted). Everything else is refused with a reason, and a
"did you mean" when a verb is close, so the reason can be fed back to the model.
"""

from __future__ import annotations

import difflib
import re
from dataclasses import dataclass

from echo2_sdk.env import sanitize_text

MAX_ACTION_CHARS = 200
"""Longer action texts are refused before parsing (a model that rambles gets told to be brief)."""

VERBS = ("fold", "check", "call", "bet", "raise", "all-in")
_ALL_IN_WORDS = {"all-in", "allin", "all in", "all_in", "shove", "jam", "push"}
_ACTION_PREFIX = re.compile(r"^\s*action\s*:", re.IGNORECASE | re.MULTILINE)
_STRIP_CHARS = " \t\r\n*`'\"_"
_AMOUNT = r"(\d{1,3}(?:,\d{3})+|\d+)"
_PATTERNS = (
    (re.compile(r"fold"), "fold"),
    (re.compile(r"check"), "check"),
    (re.compile(r"call(?: " + _AMOUNT + r")?"), "call"),
    (re.compile(r"(?:bet|raise)(?: to)? " + _AMOUNT), "raise"),
)


@dataclass(frozen=True)
class ParsedAction:
    """A syntactically valid action. ``verb`` is one of fold/check/call/raise/all-in."""

    verb: str
    amount: int | None = None
    said_bet: bool = False
    """The text said ``bet`` (kept only to echo the model's own word back)."""


def extract_action_text(text: str) -> str:
    """The part of a reply that should hold the action, normalized (lowercase, single spaces)."""
    matches = list(_ACTION_PREFIX.finditer(text))
    if matches:
        text = text[matches[-1].end():]
    text = text.strip(_STRIP_CHARS).rstrip(".!").strip(_STRIP_CHARS)
    return " ".join(text.lower().split())


def parse_action(text: str) -> tuple[ParsedAction | None, str | None]:
    """``(ParsedAction, None)`` or ``(None, reason)``; never raises."""
    if len(text) > 20 * MAX_ACTION_CHARS:
        # Do not even normalize megabytes of model output.
        return None, f"the reply is {len(text)} characters long; answer with one short action such as 'call'"
    body = extract_action_text(text)
    if not body:
        return None, "empty action; answer with one action such as 'call'"
    if len(body) > MAX_ACTION_CHARS:
        return None, f"the action is {len(body)} characters long; answer with one short action such as 'call'"
    if body in _ALL_IN_WORDS:
        return ParsedAction("all-in"), None
    for pattern, verb in _PATTERNS:
        match = pattern.fullmatch(body)
        if match:
            amount = match.group(1) if match.groups() else None
            value = int(amount.replace(",", "")) if amount else None
            return ParsedAction(verb, value, said_bet=body.startswith("bet")), None
    return None, _explain(body)


def _explain(body: str) -> str:
    words = body.split()
    first = words[0]
    shown = sanitize_text(body)
    if first in ("bet", "raise"):
        rest = " ".join(words[1:]).removeprefix("to").strip()
        if not rest:
            return f"'{first}' needs an amount: '{first} N' raises the total bet to N chips"
        return f"'{shown}': the amount must be a whole number of chips, e.g. '{first} 40'"
    if first == "call" or first in VERBS:
        return f"unrecognized action '{shown}'; write just '{first}'" + (" or 'call N'" if first == "call" else "")
    close = difflib.get_close_matches(first, [*VERBS, "allin"], n=1, cutoff=0.6)
    hint = f"; did you mean '{'all-in' if close[0] == 'allin' else close[0]}'?" if close else ""
    return f"unrecognized action '{shown}'{hint} (use fold, check, call, bet N, raise N or all-in)"


@dataclass(frozen=True)
class LegalActions:
    """What the acting seat may do now (amounts are totals for this street, like ``raise N``)."""

    can_fold: bool
    to_call: int
    """Chips owed to continue (0: checking is free)."""
    min_raise_to: int | None
    """Smallest total a bet/raise may reach (``None``: raising is impossible)."""
    max_raise_to: int | None
    """Largest total (the seat's all-in, or what the covered opponents can match)."""
    facing_bet: bool
    """Someone has bet on this street (so a wager is a raise, not a bet)."""

    @property
    def can_raise(self) -> bool:
        return self.min_raise_to is not None

    @property
    def raise_word(self) -> str:
        return "raise" if self.facing_bet else "bet"

    def summary(self) -> str:
        """``fold | call 20 | raise 40..980`` (the ``Legal:`` line of an observation)."""
        parts = ["fold"] if self.can_fold else []
        parts.append(f"call {self.to_call}" if self.to_call else "check")
        if self.can_raise:
            if self.min_raise_to == self.max_raise_to:
                parts.append(f"{self.raise_word} {self.max_raise_to} (all-in)")
            else:
                parts.append(f"{self.raise_word} {self.min_raise_to}..{self.max_raise_to}")
        return " | ".join(parts)

    def examples(self) -> list[str]:
        """Concrete legal action texts: fold, check/call, min raise, a middle raise, all-in."""
        out = ["fold"] if self.can_fold else []
        out.append(f"call {self.to_call}" if self.to_call else "check")
        if self.can_raise:
            assert self.min_raise_to is not None and self.max_raise_to is not None
            amounts = sorted({self.min_raise_to, (self.min_raise_to + self.max_raise_to) // 2})
            out += [f"{self.raise_word} {a}" for a in amounts if a < self.max_raise_to]
            out.append("all-in")
        return out
