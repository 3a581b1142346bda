"""``PokerEnv``: No-Limit Texas Hold'em as a text environment, pokerkit underneath.

One seat (``agent_seat``) is played through ``step(action_text)``; the other seats are players
from :mod:`echo2_sdk.envs.poker.players` (rule-based styles or LLM policies). Heads-up by default,
up to 6 seats; integer chips; stacks reset every hand; the button moves one seat per hand.

Episode: ``hands_per_episode`` hands *in which the agent acts*. A hand the agent never acts in (a
walk: everyone folds to its big blind) is still played and its chips count, but it does not use
up the episode's hand budget — otherwise an episode could end before the model said a word.

Determinism: everything random derives from the episode seed (``TextEnv.reset``): the deck of
hand k from ``"{seed}:deal:{k}"``, the first button from ``"{seed}:button"``, seat s's player from
``"{seed}:seat:{s}"``. Same seed + same actions → same observations, rewards and info.

Rewards: the reward of a step is the agent's chip change realized during it (hands settle when
they end, so mid-hand steps earn 0). Chips of walks settled during ``reset`` are added to the
first step's reward, so the episode return always equals the agent's total chip result; with
``all_in_equity`` a hand all-in before the river counts its expected chips over the unseen cards
instead (``info["all_in_value"]`` sums them, ``info["chips"]`` is still the dealt result; ``info["all_in_hands"]``
counts such hands either way).

Hooks a derived env overrides (what ``echo2 new-task poker`` writes out to edit): ``make_opponent``
(who sits in each other seat), ``rules_text`` (the system message), ``observation_text`` (what the
agent reads) and ``step_reward`` (r_t from the chips settled in a step).

Invalid actions: an unparsable or illegal action is answered with the same decision point,
prefixed by the reason (pokerkit's where it has one); after ``max_invalid_actions`` refusals in a
row the table checks (if free) or folds for the agent. ``info`` counts both.
"""

from __future__ import annotations

import dataclasses
import random
from dataclasses import dataclass
from typing import Any, Callable, Sequence

from echo2_sdk.env import Policy, TextEnv, sanitize_text
from echo2_sdk.envs.poker.actions import parse_action
from echo2_sdk.envs.poker.hand import Hand, SeatView, TableConfig
from echo2_sdk.envs.poker.play import Player, describe_result, take_turn
from echo2_sdk.envs.poker.players import make_player
from echo2_sdk.envs.poker.strength import hand_bucket
from echo2_sdk.envs.poker.text import render_observation, system_prompt
from echo2_sdk.envs.seats import build_config

# A hand lasts at most a few dozen decisions; this only stops a runaway loop of walks.
_MAX_WALKS_IN_A_ROW = 100


@dataclass(frozen=True)
class PokerConfig:
    seats: int = 2
    small_blind: int = 5
    big_blind: int = 10
    starting_stack: int = 1000
    """Chips per seat at the start of every hand (100 big blinds by default)."""
    hands_per_episode: int = 1
    agent_seat: int = 0
    opponents: tuple[str, ...] = ("rule:tag",)
    """One spec for every other seat, or one per other seat in seat order (``rule:tag``, ``llm:NAME``)."""
    max_invalid_actions: int = 2
    """Refusals tolerated per decision; one more and the table checks or folds for the agent."""
    show_history: bool = True
    """Include this hand's action history in observations."""
    button_seat: int | None = None
    """Button of the first hand; ``None`` draws it from the episode seed."""
    max_steps: int | None = None
    """Truncate after this many steps (default: 64 per hand times the attempts per decision)."""
    all_in_equity: bool = False
    """Reward a hand that two players are all-in in before the river with its expected chips over the
    unseen board cards (all-in equity) instead of the dealt runout's: the same expectation, without the
    luck of the cards nobody acted on. ``info["chips"]`` stays the dealt result."""

    def __post_init__(self) -> None:
        table = self.table  # validates seats, blinds, stack
        if not 0 <= self.agent_seat < table.seats:
            raise ValueError(f"agent_seat={self.agent_seat} must be in 0..{table.seats - 1}")
        if self.hands_per_episode < 1:
            raise ValueError(f"hands_per_episode={self.hands_per_episode} must be >= 1")
        if self.max_invalid_actions < 0:
            raise ValueError(f"max_invalid_actions={self.max_invalid_actions} must be >= 0")
        if isinstance(self.opponents, str):
            object.__setattr__(self, "opponents", (self.opponents,))
        if len(self.opponents) not in (1, table.seats - 1):
            raise ValueError(f"opponents={list(self.opponents)}: give one spec for all {table.seats - 1} other "
                             "seats or one per other seat")
        if self.button_seat is not None and not 0 <= self.button_seat < table.seats:
            raise ValueError(f"button_seat={self.button_seat} must be in 0..{table.seats - 1} or None")

    @property
    def table(self) -> TableConfig:
        return TableConfig(self.seats, self.small_blind, self.big_blind, self.starting_stack)

    @property
    def step_limit(self) -> int:
        if self.max_steps is not None:
            return self.max_steps
        return 64 * self.hands_per_episode * (self.max_invalid_actions + 1)

    @classmethod
    def build(cls, **overrides: Any) -> "PokerConfig":
        """``PokerConfig(**overrides)`` with a "did you mean" for misspelled fields."""
        return build_config(cls, overrides, tuple_fields=("opponents",))


class PokerEnv(TextEnv):
    """See the module docstring. ``PokerEnv(seats=6, opponents=("rule:lag",))`` or ``PokerEnv(config)``.

    ``players`` overrides the opponent specs with ready Player objects (one per other seat, or one
    factory call per seat via ``llm_policies`` / ``llm_policy_factory`` for ``llm:NAME`` specs).
    """

    def __init__(self, config: PokerConfig | None = None, *, players: Sequence[Player] | None = None,
                 llm_policies: dict[str, Policy] | None = None,
                 llm_policy_factory: Callable[[str], Policy] | None = None,
                 render_mode: str | None = None, **overrides: Any) -> None:
        super().__init__(render_mode=render_mode)
        if config is None:
            config = PokerConfig.build(**overrides)
        elif overrides:
            config = PokerConfig.build(**{**dataclasses.asdict(config), **overrides})
        self.config = config
        self.table = config.table
        self.llm_policies, self.llm_policy_factory = llm_policies, llm_policy_factory
        others = [s for s in range(config.seats) if s != config.agent_seat]
        if players is not None:
            if len(players) != len(others):
                raise ValueError(f"{len(players)} players for the {len(others)} seats besides the agent's")
            chosen = list(players)
        else:
            specs = config.opponents * len(others) if len(config.opponents) == 1 else config.opponents
            chosen = [self.make_opponent(seat, spec) for seat, spec in zip(others, specs)]
        self.players: dict[int, Player] = dict(zip(others, chosen))
        self.system_prompt = self.rules_text()
        self.hand: Hand | None = None

    # ----- hooks: what a task derived from poker (``echo2 new-task poker``) overrides --------------
    def make_opponent(self, seat: int, spec: str) -> Player:
        """The player in ``seat`` (not the agent's) for its spec from ``config.opponents``."""
        return make_player(spec, table=self.table, hands_per_episode=self.config.hands_per_episode,
                           llm_policies=self.llm_policies, llm_policy_factory=self.llm_policy_factory)

    def rules_text(self) -> str:
        """The system message: the rules, once per conversation."""
        return system_prompt(self.table, self.config.hands_per_episode)

    def observation_text(self, view: SeatView, notes: list[str]) -> str:
        """What the agent reads at a decision: ``view`` of the table, after ``notes`` (hand results,
        refusal reasons)."""
        return render_observation(view, show_history=self.config.show_history, prefix="\n".join(notes))

    def step_reward(self, chips: float, info: dict[str, Any]) -> float:
        """r_t of one step: ``chips`` is the agent's chip change settled during it (0 mid-hand; a refused
        action settles nothing, ``info["invalid_reason"]`` says why; under ``all_in_equity`` an all-in hand
        settles at its expected value, not always whole chips). The adapter divides by its
        ``reward_scale`` (the big blind by default)."""
        return float(chips)

    # ----- TextEnv ----------------------------------------------------------------------------
    def _reset_episode(self, episode_seed: int, options: dict[str, Any]) -> tuple[str, dict[str, Any]]:
        unknown = set(options) - {"button_seat"}
        if unknown:
            raise ValueError(f"unknown reset options {sorted(unknown)}; PokerEnv accepts 'button_seat'")
        n = self.table.seats
        self._seed = episode_seed
        button = options.get("button_seat", self.config.button_seat)
        self._button = random.Random(f"{episode_seed}:button").randrange(n) if button is None else int(button) % n
        for seat, player in self.players.items():
            player.begin(random.Random(f"{episode_seed}:seat:{seat}").getrandbits(62))
        self._dealt = self._played = self._walks = 0
        self._steps = self._attempts = 0
        self._invalid = self._forced = self._opponent_invalid = 0
        self._invalid_by_kind = {"unparsable": 0, "illegal": 0}
        self._pending_reward = self._chips = 0
        self._all_in_hands, self._all_in_value = 0, 0.0
        self._results: list[int] = []
        self._buckets: list[str] = []
        self._finished = False
        self._agent_acted = False
        self._start_hand()
        notes = self._advance()
        return self._observation_text(notes), self._info(None, None)

    def _step_text(self, action: str):
        assert self.hand is not None and not self._finished
        self._steps += 1
        record, reason = self.hand.apply(action)
        notes: list[str] = []
        if record is None:
            self._invalid += 1
            self._invalid_by_kind["unparsable" if parse_action(action)[0] is None else "illegal"] += 1
            self._attempts += 1
            if self._attempts <= self.config.max_invalid_actions:
                obs = self._observation_text([f"Invalid action '{sanitize_text(action)}': {reason}."])
                info = self._info(reason, None)
                return obs, self.step_reward(0, info), False, self._truncate(), info
            record = self.hand.apply_fallback()
            self._forced += 1
            notes.append(f"Invalid action '{sanitize_text(action)}': {reason}. "
                         f"Out of attempts: you {record.kind}.")
        self._attempts = 0
        self._agent_acted = True
        notes += self._advance()
        chips, self._pending_reward = self._pending_reward, 0
        terminated = self._finished
        truncated = not terminated and self._truncate()
        if terminated:
            obs = "\n".join(notes + [f"Episode over: {self._played} hand(s) played, total "
                                     f"{'+' if self._chips >= 0 else ''}{self._chips} chips."])
        else:
            obs = self._observation_text(notes)
        info = self._info(reason, record.text())
        return obs, self.step_reward(chips, info), terminated, truncated, info

    def legal_actions(self) -> list[str]:
        if self._finished or self.hand is None or self.hand.actor_seat != self.config.agent_seat:
            return []
        return self.hand.legal().examples()

    # ----- internals --------------------------------------------------------------------------
    def _start_hand(self) -> None:
        self._dealt += 1
        self.hand = Hand(self.table, f"{self._seed}:deal:{self._dealt}", self._button + self._dealt - 1,
                         hand_number=self._played + 1, hands_total=self.config.hands_per_episode)
        self._agent_acted = False

    def _advance(self) -> list[str]:
        """Let the other seats act until the agent must decide or the episode ends; notes for the agent."""
        notes: list[str] = []
        walks_in_a_row = 0
        agent = self.config.agent_seat
        while True:
            hand = self.hand
            assert hand is not None
            while (seat := hand.actor_seat) is not None and seat != agent:
                record, refused = take_turn(hand, self.players[seat], self.config.max_invalid_actions)
                self._opponent_invalid += refused
            if not hand.over:
                if not self._agent_acted and len(self._buckets) == self._played:
                    self._buckets.append(hand_bucket(hand.hole(agent)))
                return notes
            payoff = hand.payoffs()[agent]
            value = None
            if hand.in_runout(agent):
                self._all_in_hands += 1
                value = hand.all_in_value(agent) if self.config.all_in_equity else None
                self._all_in_value += payoff if value is None else value
            self._pending_reward += payoff if value is None else value
            self._chips += payoff
            for seat, player in self.players.items():
                player.hand_over(describe_result(hand, seat))
            if self._agent_acted:
                self._played += 1
                self._results.append(payoff)
                line = describe_result(hand, agent)
            else:
                self._walks += 1
                walks_in_a_row += 1
                line = describe_result(hand, agent, "Walk (you did not act, not counted)")
                if walks_in_a_row > _MAX_WALKS_IN_A_ROW:
                    raise RuntimeError("the agent has not had a decision in 100 hands; check the table setup")
            notes.append(line)
            if self._played >= self.config.hands_per_episode:
                self._finished = True
                return notes
            self._start_hand()

    def _truncate(self) -> bool:
        return self._steps >= self.config.step_limit

    def _observation_text(self, notes: list[str]) -> str:
        assert self.hand is not None
        return self.observation_text(self.hand.view(self.config.agent_seat), notes)

    def _info(self, invalid_reason: str | None, applied: str | None) -> dict[str, Any]:
        hand = self.hand
        agent = self.config.agent_seat
        return {
            "invalid_reason": invalid_reason,
            "applied_action": applied,
            "hands_played": self._played,
            "hands_dealt": self._dealt,
            "walks": self._walks,
            "chips": self._chips,
            "hand_results": list(self._results),
            "invalid_actions": self._invalid,
            "invalid_by_kind": dict(self._invalid_by_kind),
            "forced_actions": self._forced,
            "opponent_invalid_actions": self._opponent_invalid,
            "hand_buckets": list(self._buckets),
            "all_in_hands": self._all_in_hands,
            "all_in_value": self._all_in_value,
            "position": hand.position(agent) if hand is not None and not self._finished else None,
        }

    @property
    def hand_bucket(self) -> str | None:
        """Bucket of the agent's private cards in the first hand it acts in (the advantage group)."""
        return self._buckets[0] if getattr(self, "_buckets", None) else None
