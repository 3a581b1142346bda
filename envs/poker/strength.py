"""Hand strength for rule-based players and the private-hand buckets used as advantage groups.

Hand *ranking* is pokerkit's (``StandardHighHand.lookup``); this module only estimates how good a
holding is, cheaply enough to run inside 10,000-hand simulations:

- preflop: the Chen formula (Bill Chen's hand-scoring rule, -1..20), no simulation needed;
- postflop: a seeded Monte-Carlo *hand strength* — the share of random opponent holdings the hero
  beats on the current board (ties count half), raised to the number of live opponents. It ignores
  draws on purpose: an equity runout costs ~20x more pokerkit lookups per decision.

Buckets (``hand_bucket``) classify the two private cards, so that ``grouping: key`` normalizes
advantages among hands of similar value (see ``BUCKETS`` for the definitions).
"""

from __future__ import annotations

import itertools
import math
import random
from typing import Sequence

from pokerkit import Card, Deck, StandardHighHand

RANK_VALUE = {r: v for v, r in enumerate("23456789TJQKA", start=2)}
_LOOKUP = StandardHighHand.lookup
DECK = tuple(Deck.STANDARD)
"""The 52 cards in pokerkit's standard order."""

BUCKETS: dict[str, str] = {
    "pair-high": "a pair of tens or better (TT-AA)",
    "pair-low": "a pair below tens (22-99)",
    "broadway-suited": "two suited cards, both ten or higher (e.g. KQs, AJs)",
    "broadway-offsuit": "two offsuit cards, both ten or higher (e.g. AK, QT)",
    "ace-suited": "an ace with a suited card below ten (A2s-A9s)",
    "suited-connected": "other suited cards at most two ranks apart (e.g. 98s, 75s)",
    "suited-other": "other suited cards",
    "offsuit-connected": "other offsuit cards at most two ranks apart, both six or higher (e.g. 98, T8)",
    "offsuit-high": "other offsuit cards with one card ten or higher (e.g. A7, K4)",
    "offsuit-low": "everything else: offsuit, unconnected, both below ten (e.g. 72, 93)",
}
"""Private-hand buckets, in order of checking; every two-card holding falls in exactly one."""


def card_ranks(cards: Sequence[Card]) -> list[int]:
    return [RANK_VALUE[card.rank.value] for card in cards]


def hand_bucket(hole: Sequence[Card]) -> str:
    """The :data:`BUCKETS` name of a two-card holding."""
    if len(hole) != 2:
        raise ValueError(f"hand_bucket expects two hole cards, got {list(hole)}")
    high, low = sorted(card_ranks(hole), reverse=True)
    suited = hole[0].suit == hole[1].suit
    gap = high - low
    if gap == 0:
        return "pair-high" if high >= 10 else "pair-low"
    if low >= 10:
        return "broadway-suited" if suited else "broadway-offsuit"
    if suited:
        if high == 14:
            return "ace-suited"
        return "suited-connected" if gap <= 2 else "suited-other"
    if gap <= 2 and low >= 6:
        return "offsuit-connected"
    return "offsuit-high" if high >= 10 else "offsuit-low"


def chen_score(hole: Sequence[Card]) -> float:
    """Bill Chen's preflop score: AA = 20, 72o = -1; about 10+ is a premium hand.

    Highest card A=10, K=8, Q=7, J=6, else rank/2; pairs double it (minimum 5); +2 suited;
    -1/-2/-4/-5 for gaps of 1/2/3/4+; +1 for connected or one-gap cards below a queen;
    half points are rounded up.
    """
    high, low = sorted(card_ranks(hole), reverse=True)
    base = {14: 10.0, 13: 8.0, 12: 7.0, 11: 6.0}.get(high, high / 2)
    if high == low:
        score = max(base * 2, 5.0)
    else:
        score = base + (2 if hole[0].suit == hole[1].suit else 0)
        gap = high - low - 1
        score -= {0: 0, 1: 1, 2: 2, 3: 4}.get(gap, 5)
        if gap <= 1 and high < 12:
            score += 1
    return float(math.ceil(score))  # half points round up


# A five-card hand's value depends only on its ranks and on whether it is a flush, so pokerkit's
# answer is cached under that key (at most ~8,800 keys): a cached lookup is ~10x cheaper than
# ``get_entry``, which re-validates the cards on every call.
_CARD_KEYS = {card: (RANK_VALUE[card.rank.value], card.suit.value, card) for card in DECK}
_ENTRY_CACHE: dict[tuple, object] = {}


def _entry(five: tuple) -> object:
    key = (tuple(sorted(k[0] for k in five)), five[0][1] == five[1][1] == five[2][1] == five[3][1] == five[4][1])
    entry = _ENTRY_CACHE.get(key)
    if entry is None:
        entry = _ENTRY_CACHE[key] = _LOOKUP.get_entry(tuple(k[2] for k in five))
    return entry


def best_entry(cards: Sequence[Card]):
    """pokerkit's lookup entry of the best five-card hand among ``cards`` (5 to 7 cards)."""
    keys = tuple(_CARD_KEYS[card] for card in cards)
    if len(keys) == 5:
        return _entry(keys)
    return max(_entry(five) for five in itertools.combinations(keys, 5))


def hand_strength(hole: Sequence[Card], board: Sequence[Card], rng: random.Random, *,
                  samples: int = 32, opponents: int = 1) -> float:
    """P(hero's current hand beats ``opponents`` random holdings on ``board``), by Monte Carlo.

    ``board`` must hold 3 to 5 cards. Deterministic given ``rng``'s state.
    """
    if not 3 <= len(board) <= 5:
        raise ValueError(f"hand_strength needs a flop, turn or river board, got {list(board)}")
    dead = set(hole) | set(board)
    live = [card for card in DECK if card not in dead]
    hero = best_entry(tuple(hole) + tuple(board))
    score = 0.0
    for _ in range(samples):
        villain = best_entry(tuple(rng.sample(live, 2)) + tuple(board))
        score += 1.0 if hero > villain else 0.5 if hero == villain else 0.0
    share = score / samples
    return share ** max(1, opponents)
