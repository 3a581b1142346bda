"""Who sits at the table: three rule-based styles, a random player, and an LLM seat.

Rule-based styles (``rule:NAME``), all deterministic given the seed passed to ``begin``:

``rule:calling`` — **calling station**: never folds and never raises; calls any bet (all-in
    included) and checks when free. VPIP ~100 %, aggression factor 0. Exploitable by value bets.
``rule:tag`` — **tight-aggressive**: plays about one hand in five. Preflop it opens (raise to
    3 BB) hands with a Chen score >= 7 (the top 18 %), re-raises (3x) with >= 11, calls a raise
    with >= 8 when the call costs <= 10 % of its stack (>= 10 facing a re-raise), and folds the rest. Postflop it estimates its hand strength
    (Monte Carlo over random opponent holdings, pokerkit's ranking); it bets 2/3 pot with strength
    >= 0.6, raises (3x) with >= 0.85, calls when strength exceeds the pot odds by 0.15, and folds
    otherwise.
``rule:lag`` — **loose-aggressive**: plays about three hands in five and raises with most of
    them. Preflop it opens with Chen >= 4 (and any hand 10 % of the time), re-raises with >= 9,
    calls a raise with >= 5. Postflop it bets 3/4 pot with strength >= 0.45 and bluffs half of the
    other checked-to spots, raises with >= 0.7 (and bluff-raises 10 % of weak hands), calls
    with >= 0.35, and folds the rest.
``rule:random`` — uniform over the concrete legal actions (a fuzzer, not a style).

``llm:NAME`` seats an :class:`LLMPlayer`, which renders the same observations the agent sees and
calls ``policy(messages) -> str``; its refusals are fed back and counted like the agent's.
"""

from __future__ import annotations

import difflib
import random
from typing import Callable, Mapping

from echo2_sdk.env import Policy
from echo2_sdk.envs.poker.hand import SeatView, TableConfig
from echo2_sdk.envs.poker.play import Player
from echo2_sdk.envs.poker.strength import chen_score, hand_strength
from echo2_sdk.envs.poker.text import render_observation, system_prompt
from echo2_sdk.envs.seats import ChatSeat, llm_policy, rule_style


class RuleBasedPlayer:
    """Base of the rule-based styles: a seeded RNG and sizing helpers."""

    name = "rule"

    def __init__(self) -> None:
        self.rng = random.Random(0)
        self._strength_cache: dict[tuple, float] = {}

    def begin(self, seed: int) -> None:
        self.rng = random.Random(seed)
        self._strength_cache.clear()

    def hand_over(self, view_result: str) -> None:
        self._strength_cache.clear()

    def act(self, view: SeatView, feedback: str | None) -> str:
        raise NotImplementedError

    # ----- helpers ----------------------------------------------------------------------------
    def strength(self, view: SeatView) -> float:
        """Postflop hand strength, cached per (cards, opponents) within a hand."""
        key = (view.hole, view.board, view.live_opponents)
        if key not in self._strength_cache:
            self._strength_cache[key] = hand_strength(view.hole, view.board, self.rng,
                                                      opponents=view.live_opponents)
        return self._strength_cache[key]

    @staticmethod
    def passive(view: SeatView) -> str:
        return "call" if view.legal.to_call else "check"

    @staticmethod
    def give_up(view: SeatView) -> str:
        return "fold" if view.legal.to_call else "check"

    @staticmethod
    def wager(view: SeatView, total: float) -> str:
        """Bet/raise to ``total`` clamped to the legal range; calls (or checks) when raising is closed."""
        legal = view.legal
        if not legal.can_raise:
            return "call" if legal.to_call else "check"
        assert legal.min_raise_to is not None and legal.max_raise_to is not None
        amount = min(max(int(total), legal.min_raise_to), legal.max_raise_to)
        return "all-in" if amount >= legal.max_raise_to else f"{legal.raise_word} {amount}"

    @staticmethod
    def current_bet(view: SeatView) -> int:
        return view.bet + view.legal.to_call

    @staticmethod
    def pot_odds(view: SeatView) -> float:
        return view.legal.to_call / (view.pot + view.legal.to_call) if view.legal.to_call else 0.0


class CallingStation(RuleBasedPlayer):
    name = "rule:calling"

    def act(self, view: SeatView, feedback: str | None) -> str:
        return self.passive(view)


class TightAggressive(RuleBasedPlayer):
    name = "rule:tag"

    def act(self, view: SeatView, feedback: str | None) -> str:
        if view.street == 0:
            return self._preflop(view, chen_score(view.hole))
        strength = self.strength(view)
        if not view.legal.to_call:
            return self.wager(view, view.pot * 2 / 3) if strength >= 0.6 else "check"
        if strength >= 0.85:
            return self.wager(view, 3 * self.current_bet(view))
        return "call" if strength >= self.pot_odds(view) + 0.15 else "fold"

    def _preflop(self, view: SeatView, chen: float) -> str:
        bb, raises = view.big_blind, view.raises_this_street
        if raises == 0:
            return self.wager(view, 3 * bb) if chen >= 7 else self.give_up(view)
        if chen >= 11:
            return self.wager(view, 3 * self.current_bet(view))
        affordable = view.legal.to_call <= 0.1 * (view.stack + view.bet)
        if (chen >= 8 and affordable) or chen >= 10:
            return "call"
        return self.give_up(view)


class LooseAggressive(RuleBasedPlayer):
    name = "rule:lag"

    def act(self, view: SeatView, feedback: str | None) -> str:
        if view.street == 0:
            return self._preflop(view, chen_score(view.hole))
        strength = self.strength(view)
        if not view.legal.to_call:
            bluff = self.rng.random() < 0.5
            return self.wager(view, view.pot * 3 / 4) if strength >= 0.45 or bluff else "check"
        if strength >= 0.7 or (strength < 0.35 and self.rng.random() < 0.1):
            return self.wager(view, 3 * self.current_bet(view))
        return "call" if strength >= 0.35 else "fold"

    def _preflop(self, view: SeatView, chen: float) -> str:
        bb, raises = view.big_blind, view.raises_this_street
        if raises == 0:
            if chen >= 4 or self.rng.random() < 0.1:
                return self.wager(view, 3 * bb)
            return self.give_up(view)
        if chen >= 9:
            return self.wager(view, 3 * self.current_bet(view))
        return "call" if chen >= 5 else self.give_up(view)


class RandomPlayer(RuleBasedPlayer):
    name = "rule:random"

    def act(self, view: SeatView, feedback: str | None) -> str:
        return self.rng.choice(view.legal.examples())


class LLMPlayer:
    """A seat played by a chat policy ``policy(messages) -> str``.

    The conversation (system rules, one user message per decision, one assistant message per
    reply) lasts one episode (``begin``); refusal reasons and hand results are prepended to the
    next user message, exactly as the agent sees them in :class:`~echo2_sdk.envs.poker.PokerEnv`.
    Exceptions raised by the policy propagate (they are bugs, not model output).
    """

    def __init__(self, policy: Policy, *, name: str = "llm", system: str | None = None,
                 show_history: bool = True) -> None:
        self.seat = ChatSeat(policy, system=system)
        self.policy, self.name, self.system, self.show_history = policy, name, system, show_history
        self._notes: list[str] = []

    @property
    def messages(self) -> list[dict[str, str]]:
        return self.seat.messages

    def begin(self, seed: int) -> None:
        self.seat.begin()
        self._notes = []

    def hand_over(self, view_result: str) -> None:
        self._notes.append(view_result)

    def act(self, view: SeatView, feedback: str | None) -> str:
        notes = self._notes + ([f"Invalid action: {feedback}."] if feedback else [])
        self._notes = []
        return self.seat.reply(render_observation(view, show_history=self.show_history, prefix="\n".join(notes)))


RULE_STYLES: dict[str, type[RuleBasedPlayer]] = {
    "calling": CallingStation, "tag": TightAggressive, "lag": LooseAggressive, "random": RandomPlayer,
}
_ALIASES = {"calling-station": "calling", "station": "calling", "call": "calling",
            "tight-aggressive": "tag", "loose-aggressive": "lag"}


def make_player(spec: str | Player | Callable, *, table: TableConfig = TableConfig(), hands_per_episode: int = 1,
                llm_policy_factory: Callable[[str], Policy] | None = None,
                llm_policies: Mapping[str, Policy] | None = None) -> Player:
    """A player from ``rule:calling|tag|lag|random``, ``llm:NAME``, a Player, or a policy callable.

    ``llm:NAME`` takes its policy from ``llm_policies[NAME]`` or ``llm_policy_factory(NAME)`` (the
    CLI's factory loads a checkpoint at path NAME and generates with it).
    """
    if hasattr(spec, "act") and hasattr(spec, "begin"):
        return spec  # type: ignore[return-value]
    system = system_prompt(table, hands_per_episode)
    if callable(spec):
        return LLMPlayer(spec, name=getattr(spec, "__name__", "llm"), system=system)
    if not isinstance(spec, str):
        raise TypeError(f"player spec {spec!r} must be 'rule:NAME', 'llm:NAME', a Player or a policy callable")
    kind, _, arg = spec.partition(":")
    if kind == "rule":
        return rule_style(spec, RULE_STYLES, _ALIASES, "rule-based style")()
    if kind == "llm" and arg:
        return LLMPlayer(llm_policy(spec, llm_policies, llm_policy_factory), name=spec, system=system)
    if not arg and _ALIASES.get(kind, kind) in RULE_STYLES:
        hint = f" Did you mean 'rule:{_ALIASES.get(kind, kind)}'?"
    else:
        close = difflib.get_close_matches(kind, ["rule", "llm"], n=1)
        hint = f" Did you mean '{close[0]}:{arg}'?" if close and arg else ""
    raise ValueError(f"player spec {spec!r} must look like 'rule:tag' or 'llm:PATH'.{hint}")
