"""All-in equity: what a hand all-in before the river is worth on average over the cards still to come.

Once two players are all-in (or the betting has otherwise closed) before the river, the rest of the board
is luck nobody acted on. Settling such a hand at its expectation, the pot share over every possible
runout, keeps the expected result and removes that luck: poker trackers call it "all-in adjusted", and
it is the simplest case of the control variates (AIVAT) used to evaluate poker agents. The env uses it
for rewards on request (``PokerConfig.all_in_equity``), ``echo2 eval --all-in-adjusted`` for a second table
(not always tighter than the plain one: see :mod:`echo2_sdk.envs.poker.evaluation`).
"""

from __future__ import annotations

import functools
import itertools
import math
import random
from dataclasses import dataclass
from typing import Sequence

from pokerkit import Card

from echo2_sdk.envs.poker.strength import DECK, best_entry

RUNOUT_SAMPLES = 1000
"""Runouts drawn for a pot share when more than two board cards are unseen (a preflop all-in: C(48, 5) is
1.7 million boards); with two or fewer every runout is counted (at most 990)."""


def pot_share(hero: Sequence[Card], villain: Sequence[Card], board: Sequence[Card], rng: random.Random, *,
              samples: int = RUNOUT_SAMPLES) -> float:
    """Hero's expected share of a heads-up pot over the board cards still to come (ties count half).

    Exact when at most two cards are missing (every runout), else the mean over ``samples`` runouts drawn
    from ``rng``. A complete board is the showdown itself:

    >>> from pokerkit import Card
    >>> cards = lambda text: tuple(Card.parse(text))
    >>> pot_share(cards("AsAh"), cards("KsKh"), cards("2c7d9hJcQd"), random.Random(0))
    1.0
    >>> pot_share(cards("AsAh"), cards("KsKh"), cards("2c7d9hJc"), random.Random(0))  # kings need Kd or Kc: 2 of 44
    0.9545454545454546
    >>> pot_share(cards("AsAh"), cards("AdAc"), cards("2c7d9h"), random.Random(0))
    0.5
    """
    hero, villain, board = tuple(hero), tuple(villain), tuple(board)
    if len(hero) != 2 or len(villain) != 2 or not 0 <= len(board) <= 5:
        raise ValueError(f"pot_share needs two holdings of two cards and 0-5 board cards, got {hero}, {villain}, {board}")
    dead = set(hero) | set(villain) | set(board)
    live = [card for card in DECK if card not in dead]
    missing = 5 - len(board)
    if missing <= 2:
        runouts = itertools.combinations(live, missing)
        count = math.comb(len(live), missing)
    else:
        runouts = (tuple(rng.sample(live, missing)) for _ in range(samples))
        count = samples
    score = 0.0
    for extra in runouts:
        full = board + extra
        mine, theirs = best_entry(hero + full), best_entry(villain + full)
        score += 1.0 if mine > theirs else 0.5 if mine == theirs else 0.0
    return score / count


@functools.lru_cache(maxsize=1024)
def runout_share(hero: tuple[Card, ...], villain: tuple[Card, ...], board: tuple[Card, ...], seed: str) -> float:
    # The n episodes of a deal that reach the same all-in ask the same question (0.1 s preflop): ask once.
    return pot_share(hero, villain, board, random.Random(f"{seed}:{len(board)}"))


@dataclass(frozen=True)
class Runout:
    """Two players all-in (or the betting otherwise closed) before the river: the board they knew, the two
    pokerkit players still in, and what every player had put in when the betting closed."""

    board: tuple[Card, ...]
    players: tuple[int, int]
    paid: tuple[int, ...]

    def value(self, player: int, share: float) -> float | None:
        """``player``'s chip result when it takes ``share`` of the pot (1 wins, 0.5 splits, 0 loses).

        The two players' matched amount m each, plus what folded players left in (dead money), make one pot;
        the rest of a bigger stack comes back. ``None`` where a folded player put in more than m (a side
        pot the two do not both contest).

        >>> Runout((), (0, 1), (300, 1000)).value(0, 1.0), Runout((), (0, 1), (300, 1000)).value(1, 0.25)
        (300.0, -150.0)
        >>> Runout((), (0, 2), (200, 20, 200)).value(2, 0.5)  # a folded big blind's 20 split
        10.0
        """
        matched = min(self.paid[p] for p in self.players)
        dead = [paid for p, paid in enumerate(self.paid) if p not in self.players]
        if any(amount > matched for amount in dead):
            return None
        return share * (2 * matched + sum(dead)) - matched
