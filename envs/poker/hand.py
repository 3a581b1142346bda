"""One No-Limit Texas Hold'em hand on pokerkit's state machine, seen from the table's seats.

pokerkit owns the rules (blinds, betting rounds, minimum raises, side pots, showdown, payoffs);
this module adds what a text environment needs around it:

- a **seeded deck**: pokerkit shuffles with the global ``random`` module (when the state is
  created, and again, unused, whenever a street starts), so the deck order is replaced right after
  creation by one drawn from ``random.Random(deal_seed)``, and every pokerkit call runs with the
  global RNG state saved and restored: callers' random streams are not disturbed. The cards each
  *position* receives depend only on ``deal_seed``, which is what duplicate deals need;
- **table seats vs. pokerkit players**: pokerkit numbers players by position (heads-up: player 0
  is the big blind, player 1 the small blind/button; 3+ seats: 0 = SB, 1 = BB, last = button),
  while a seat keeps its number as the button moves (``seat = (button + 1 + player) % seats``);
- validated **text actions** (:mod:`echo2_sdk.envs.poker.actions`) with pokerkit's reasons;
- the per-seat :class:`SeatView` and a hand history for observations and statistics.
"""

from __future__ import annotations

import functools
import random
from dataclasses import dataclass
from typing import Callable, Sequence, TypeVar

from pokerkit import Automation, Card, Deck, HoleCardsShowingOrMucking, Mode, NoLimitTexasHoldem

from echo2_sdk.envs.poker.actions import LegalActions, ParsedAction, parse_action
from echo2_sdk.envs.poker.equity import Runout, runout_share

# Everything but dealing and showdown is automated: dealing is driven here from the seeded deck, and
# every showdown hand is shown (pokerkit's automatic show-or-muck asks "can this hand still win?",
# which costs ~10 ms per showdown). RUNOUT_COUNT_SELECTION is required: without it an all-in call
# leaves no legal operation.
AUTOMATIONS = (
    Automation.ANTE_POSTING, Automation.BET_COLLECTION, Automation.BLIND_OR_STRADDLE_POSTING,
    Automation.CARD_BURNING, Automation.HAND_KILLING,
    Automation.CHIPS_PUSHING, Automation.CHIPS_PULLING, Automation.RUNOUT_COUNT_SELECTION,
)
STREETS = ("preflop", "flop", "turn", "river")
POSITIONS = {
    2: ("BB", "SB"),
    3: ("SB", "BB", "BTN"),
    4: ("SB", "BB", "CO", "BTN"),
    5: ("SB", "BB", "UTG", "CO", "BTN"),
    6: ("SB", "BB", "UTG", "HJ", "CO", "BTN"),
}
"""Position names by pokerkit player index."""
MAX_SEATS = max(POSITIONS)


_F = TypeVar("_F", bound=Callable)


def _keeps_global_random(method: _F) -> _F:
    """Run ``method`` with the global ``random`` state saved and restored (pokerkit draws from it)."""

    @functools.wraps(method)
    def wrapper(*args, **kwargs):
        saved = random.getstate()
        try:
            return method(*args, **kwargs)
        finally:
            random.setstate(saved)

    return wrapper  # type: ignore[return-value]


@dataclass(frozen=True)
class TableConfig:
    """Table rules. Chips are integers; stacks are reset to ``starting_stack`` every hand."""

    seats: int = 2
    small_blind: int = 5
    big_blind: int = 10
    starting_stack: int = 1000

    def __post_init__(self) -> None:
        if not 2 <= self.seats <= MAX_SEATS:
            raise ValueError(f"seats={self.seats}: poker tables here have 2 to {MAX_SEATS} seats")
        if not 0 < self.small_blind <= self.big_blind:
            raise ValueError(f"blinds {self.small_blind}/{self.big_blind}: need 0 < small_blind <= big_blind")
        if self.starting_stack < self.big_blind:
            raise ValueError(f"starting_stack={self.starting_stack} is below the big blind {self.big_blind}")
        for name in ("seats", "small_blind", "big_blind", "starting_stack"):
            if type(getattr(self, name)) is not int:
                raise TypeError(f"{name}={getattr(self, name)!r} must be an int (chips are whole numbers)")


def card_text(cards: Sequence[Card]) -> str:
    return "[" + ", ".join(repr(card) for card in cards) + "]"


@dataclass(frozen=True)
class ActionRecord:
    """One applied action. ``kind`` is fold/check/call/bet/raise; ``amount`` the call or raise-to total."""

    seat: int
    position: str
    street: int
    kind: str
    amount: int
    all_in: bool
    forced: bool = False
    """Applied by the table after too many invalid attempts (check if free, else fold)."""

    def text(self) -> str:
        words = {"fold": "fold", "check": "check", "call": "call"}.get(self.kind, f"{self.kind} {self.amount}")
        return f"{self.position} {words}" + (" (all-in)" if self.all_in else "") + (" (forced)" if self.forced else "")


@dataclass(frozen=True)
class SeatView:
    """Everything one seat may know when it acts (its own cards, public state, history)."""

    seat: int
    position: str
    hand_number: int
    hands_total: int
    street: int
    hole: tuple[Card, ...]
    board: tuple[Card, ...]
    pot: int
    stack: int
    bet: int
    legal: LegalActions
    big_blind: int
    live_opponents: int
    """Opponents still in the hand (not folded)."""
    raises_this_street: int
    players: tuple[tuple[str, int, bool, bool], ...]
    """(position, stack, still in the hand, is this seat) in position order."""
    history: tuple[ActionRecord, ...]


class Hand:
    """One hand in progress. Drive it with :meth:`apply` while :attr:`actor_seat` is not ``None``."""

    @_keeps_global_random
    def __init__(self, config: TableConfig, deal_seed: int | str, button_seat: int, *,
                 hand_number: int = 1, hands_total: int = 1) -> None:
        self.config = config
        self.deal_seed = deal_seed
        self.runout: Runout | None = None
        """Set when the hand ends by dealing board cards nobody bet on (an all-in before the river)."""
        self.button_seat = button_seat % config.seats
        self.hand_number, self.hands_total = hand_number, hands_total
        n = config.seats
        self.state = NoLimitTexasHoldem.create_state(
            AUTOMATIONS, True, 0, (config.small_blind, config.big_blind), config.big_blind,
            (config.starting_stack,) * n, n, mode=Mode.TOURNAMENT,
        )
        self.state.deck_cards.clear()
        self.state.deck_cards.extend(random.Random(deal_seed).sample(Deck.STANDARD, len(Deck.STANDARD)))
        while self.state.can_deal_hole():
            self.state.deal_hole()
        self.holes = tuple(tuple(cards) for cards in self.state.hole_cards)  # by pokerkit player
        self.history: list[ActionRecord] = []
        self._raises_this_street = 0
        self._deal_board()

    # ----- seats ------------------------------------------------------------------------------
    def seat_of(self, player: int) -> int:
        return (self.button_seat + 1 + player) % self.config.seats

    def player_of(self, seat: int) -> int:
        return (seat - self.button_seat - 1) % self.config.seats

    def position(self, seat: int) -> str:
        return POSITIONS[self.config.seats][self.player_of(seat)]

    def hole(self, seat: int) -> tuple[Card, ...]:
        return self.holes[self.player_of(seat)]

    @property
    def actor_seat(self) -> int | None:
        index = self.state.actor_index
        return None if index is None else self.seat_of(index)

    @property
    def over(self) -> bool:
        return not self.state.status

    @property
    def street(self) -> int:
        return self.state.street_index if self.state.street_index is not None else len(STREETS) - 1

    @property
    def board(self) -> tuple[Card, ...]:
        return tuple(cards[0] for cards in self.state.board_cards)

    def payoffs(self) -> tuple[int, ...]:
        """Chip result of each seat (sums to zero); only meaningful once the hand is over."""
        return tuple(self.state.payoffs[self.player_of(seat)] for seat in range(self.config.seats))

    def shown_cards(self) -> dict[int, tuple[Card, ...]]:
        """Seat → hole cards shown at showdown (every hand that reaches showdown is shown)."""
        return {self.seat_of(op.player_index): tuple(op.hole_cards) for op in self.state.operations
                if isinstance(op, HoleCardsShowingOrMucking) and op.hole_cards}

    # ----- decisions --------------------------------------------------------------------------
    def legal(self) -> LegalActions:
        state = self.state
        if state.actor_index is None:
            raise RuntimeError("no seat is to act: the hand is over")
        to_call = state.checking_or_calling_amount or 0
        can_raise = state.can_complete_bet_or_raise_to()
        return LegalActions(
            can_fold=to_call > 0,  # folding for free is refused (pokerkit: "no reason to fold")
            to_call=to_call,
            min_raise_to=state.min_completion_betting_or_raising_to_amount if can_raise else None,
            max_raise_to=state.max_completion_betting_or_raising_to_amount if can_raise else None,
            facing_bet=max(state.bets) > 0,
        )

    def view(self, seat: int) -> SeatView:
        state, me = self.state, self.player_of(seat)
        names = POSITIONS[self.config.seats]
        return SeatView(
            seat=seat, position=names[me], hand_number=self.hand_number, hands_total=self.hands_total,
            street=self.street, hole=self.holes[me], board=self.board, pot=state.total_pot_amount,
            stack=state.stacks[me], bet=state.bets[me], legal=self.legal(), big_blind=self.config.big_blind,
            live_opponents=sum(state.statuses) - 1, raises_this_street=self._raises_this_street,
            players=tuple((names[i], state.stacks[i], bool(state.statuses[i]), i == me)
                          for i in range(self.config.seats)),
            history=tuple(self.history),
        )

    def apply(self, text: str) -> tuple[ActionRecord | None, str | None]:
        """Apply the acting seat's action text: ``(record, None)`` or ``(None, reason)``. Never raises."""
        parsed, reason = parse_action(text)
        if parsed is None:
            return None, reason
        return self._apply_parsed(parsed)

    def apply_fallback(self) -> ActionRecord:
        """What the table does for a seat out of attempts: check if free, else fold."""
        legal = self.legal()
        record, reason = self._apply_parsed(ParsedAction("fold" if legal.to_call else "check"), forced=True)
        assert record is not None, reason
        return record

    @_keeps_global_random
    def _apply_parsed(self, action: ParsedAction, forced: bool = False) -> tuple[ActionRecord | None, str | None]:
        state, legal = self.state, self.legal()
        seat, player = self.actor_seat, state.actor_index
        assert seat is not None and player is not None
        street, stack_before, bet_before = self.street, state.stacks[player], state.bets[player]
        verb, amount = action.verb, action.amount
        if verb == "all-in":
            verb, amount = ("raise", legal.max_raise_to) if legal.can_raise else ("call", None)
        if verb == "check" and legal.to_call:
            return None, f"cannot check: {legal.to_call} to call; answer 'call', 'fold' or a raise"
        if verb == "call" and amount is not None and amount not in (legal.to_call, state.bets[player] + legal.to_call):
            return None, f"the amount to call is {legal.to_call}, not {amount}; answer 'call'"
        if verb == "fold":
            try:
                state.verify_folding()
            except ValueError as exc:
                return None, f"{_trim(str(exc))} (checking is free; answer 'check')"
            state.fold()
            kind = "fold"
        elif verb in ("check", "call"):
            paid = legal.to_call
            state.check_or_call()
            kind, amount = ("call", paid) if paid else ("check", 0)
        else:
            if not legal.can_raise:
                why = _pokerkit_reason(state, amount)
                return None, f"cannot {action.said_bet and 'bet' or 'raise'}: {why}"
            try:
                state.verify_completion_betting_or_raising_to(amount)
            except ValueError as exc:
                return None, f"{_trim(str(exc))} ({legal.raise_word} {legal.min_raise_to}..{legal.max_raise_to})"
            kind = legal.raise_word
            state.complete_bet_or_raise_to(amount)
            self._raises_this_street += 1
        paid = {"call": amount or 0, "bet": (amount or 0) - bet_before, "raise": (amount or 0) - bet_before}
        record = ActionRecord(seat, POSITIONS[self.config.seats][player], street, kind, amount or 0,
                              all_in=paid.get(kind, 0) >= stack_before > 0, forced=forced)
        self.history.append(record)
        self._deal_board()
        if self.street != street:
            self._raises_this_street = 0
        return record, None

    def in_runout(self, seat: int) -> bool:
        """Whether the hand ended with ``seat`` in a runout (board cards dealt after the betting closed)."""
        return self.runout is not None and self.player_of(seat) in self.runout.players

    def all_in_value(self, seat: int) -> float | None:
        """``seat``'s expected chip result over the runout's unseen board cards (what its payoff is on
        average from the moment betting closed), or ``None`` where the dealt result stands: no runout,
        ``seat`` not in it, or a pot :class:`Runout` does not split (see :meth:`Runout.value`)."""
        runout, me = self.runout, self.player_of(seat)
        if runout is None or me not in runout.players:
            return None
        first, second = runout.players  # the share is asked for once per deal, from the same side
        share = runout_share(self.holes[first], self.holes[second], runout.board, f"{self.deal_seed}:runout")
        return runout.value(me, share if me == first else 1.0 - share)

    def _deal_board(self) -> None:
        state = self.state
        known = len(self.board)
        paid = tuple(self.config.starting_stack - stack for stack in state.stacks)
        live = tuple(i for i, in_hand in enumerate(state.statuses) if in_hand)
        while True:
            if state.can_deal_board():
                state.deal_board()
            elif state.can_show_or_muck_hole_cards():
                state.show_or_muck_hole_cards(True)
            else:
                break
        if self.over and len(self.board) > known and len(live) == 2:
            # The hand ended while dealing: nobody acted on these streets, so betting had closed before
            # them with the chips in (an all-in); what the cards dealt now decide is pure luck.
            self.runout = Runout(self.board[:known], live, paid)


def _trim(message: str) -> str:
    # pokerkit's messages sometimes end with advice about its own Python API; the model cannot use it.
    return message.split(" You most likely")[0].rstrip(".")


def _pokerkit_reason(state, amount: int | None) -> str:
    try:
        state.verify_completion_betting_or_raising_to(amount)
    except ValueError as exc:
        return _trim(str(exc))
    return "raising is not possible now"
