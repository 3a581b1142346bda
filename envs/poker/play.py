"""Playing hands with players: the :class:`Player` contract, one turn with re-asks on refusal, and a whole
hand played to its :class:`HandRecord` (what evaluation, self-play benchmarks and the env's opponents use)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol, Sequence

from pokerkit import Card

from echo2_sdk.envs.poker.hand import ActionRecord, Hand, SeatView, TableConfig, card_text


class Player(Protocol):
    """Anything that can sit at the table (rule-based styles, LLM policies)."""

    name: str

    def begin(self, seed: int) -> None:
        """A new episode (or evaluation hand) starts; reseed any randomness from ``seed``."""

    def act(self, view: SeatView, feedback: str | None) -> str:
        """Action text for ``view``; ``feedback`` is why the previous attempt was refused."""
        ...

    def hand_over(self, view_result: str) -> None:
        """The hand ended; ``view_result`` describes it from this seat (LLM players remember it)."""


def take_turn(hand: Hand, player: Player, max_invalid: int) -> tuple[ActionRecord, int]:
    """Ask ``player`` for the acting seat's action, re-asking with the reason on refusal.

    After ``max_invalid`` refusals the table checks (or folds). Returns (record, refusals).
    """
    seat = hand.actor_seat
    assert seat is not None
    feedback = None
    for attempt in range(max_invalid + 1):
        record, feedback = hand.apply(player.act(hand.view(seat), feedback))
        if record is not None:
            return record, attempt
    return hand.apply_fallback(), max_invalid + 1


@dataclass(frozen=True)
class HandRecord:
    """A finished hand: who sat where, the deal, every action and the chip result by seat."""

    deal_seed: int | str
    button_seat: int
    players: tuple[str, ...]
    positions: tuple[str, ...]
    holes: tuple[tuple[Card, ...], ...]
    board: tuple[Card, ...]
    actions: tuple[ActionRecord, ...]
    payoffs: tuple[int, ...]
    invalid: tuple[int, ...] = field(default=())
    forced: tuple[int, ...] = field(default=())
    all_in_values: tuple[float | None, ...] = field(default=())
    """By seat, with ``play_hand(all_in_equity=True)``: :meth:`Hand.all_in_value` (``None``: the payoff stands)."""

    def all_in_adjusted(self, seat: int) -> float:
        """``seat``'s result with an all-in runout counted at its expected value (the payoff otherwise)."""
        value = self.all_in_values[seat] if self.all_in_values else None
        return float(self.payoffs[seat]) if value is None else value


def describe_result(hand: Hand, seat: int, label: str | None = None) -> str:
    """One line for ``seat`` once the hand is over: chips won or lost and how the hand ended."""
    payoff = hand.payoffs()[seat]
    shown = hand.shown_cards()
    if len(shown) >= 2:
        how = "showdown: " + ", ".join(f"{hand.position(s)} {card_text(c)}" for s, c in sorted(shown.items()))
        how += f", board {card_text(hand.board)}"
    else:
        last = hand.history[-1] if hand.history else None
        how = f"{last.position} folded" if last and last.kind == "fold" else "uncontested"
    label = label or f"Hand {hand.hand_number}"
    return f"{label} result: {'+' if payoff >= 0 else ''}{payoff} chips ({how})."


def play_hand(config: TableConfig, players: Sequence[Player], deal_seed: int | str, button_seat: int,
              *, max_invalid: int = 2, all_in_equity: bool = False) -> HandRecord:
    """Play one whole hand with ``players[seat]`` in every seat (players are not reseeded here);
    ``all_in_equity`` also values an all-in runout at its expectation (``HandRecord.all_in_values``)."""
    if len(players) != config.seats:
        raise ValueError(f"{len(players)} players for {config.seats} seats")
    hand = Hand(config, deal_seed, button_seat)
    invalid, forced = [0] * config.seats, [0] * config.seats
    while (seat := hand.actor_seat) is not None:
        record, refused = take_turn(hand, players[seat], max_invalid)
        invalid[seat] += refused
        forced[seat] += record.forced
    for seat, player in enumerate(players):
        player.hand_over(describe_result(hand, seat))
    return HandRecord(
        deal_seed=deal_seed, button_seat=hand.button_seat, players=tuple(p.name for p in players),
        positions=tuple(hand.position(s) for s in range(config.seats)),
        holes=tuple(hand.hole(s) for s in range(config.seats)), board=hand.board,
        actions=tuple(hand.history), payoffs=hand.payoffs(), invalid=tuple(invalid), forced=tuple(forced),
        all_in_values=tuple(hand.all_in_value(s) for s in range(config.seats)) if all_in_equity else (),
    )
