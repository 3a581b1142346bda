"""What a language model reads at the poker table: the rules prompt and one observation per decision.

Observations are short (every character is a token for a char-level model) and use only printable
ASCII. Example (heads-up, flop)::

    Hand 1/1. You are SB. Street: flop.
    Hand: [Ah, Kd], Board: [Qs, Th, 2c], Pot: 100, To call: 20
    Stacks: BB 940, SB 960 (you)
    History: preflop SB raise 30, BB call; flop BB bet 20
    Legal: fold | call 20 | raise 40..960
"""

from __future__ import annotations

from echo2_sdk.envs.poker.hand import STREETS, SeatView, TableConfig, card_text


def system_prompt(config: TableConfig, hands_per_episode: int = 1) -> str:
    """The rules, once per conversation."""
    table = "heads-up" if config.seats == 2 else f"{config.seats}-handed"
    return (
        f"You play No-Limit Texas Hold'em, {table}, blinds {config.small_blind}/{config.big_blind}, "
        f"{config.starting_stack} chips per seat at the start of each of {hands_per_episode} hand(s). "
        "Win chips. Reply with exactly one action: fold, check, call, bet N, raise N or all-in. "
        "N is the total you bet on this street (raise 60 = make it 60). "
        "The Legal line lists what you may do now."
    )


def render_observation(view: SeatView, *, show_history: bool = True, prefix: str = "") -> str:
    """The observation text of ``view`` (``prefix`` lines, e.g. a refusal reason, come first)."""
    players = ", ".join(
        f"{name} {stack}" + (" (you)" if me else "" if live else " (folded)")
        for name, stack, live, me in view.players
    )
    lines = [prefix] if prefix else []
    lines += [
        f"Hand {view.hand_number}/{view.hands_total}. You are {view.position}. Street: {STREETS[view.street]}.",
        f"Hand: {card_text(view.hole)}, Board: {card_text(view.board)}, Pot: {view.pot}, "
        f"To call: {view.legal.to_call}",
        f"Stacks: {players}",
    ]
    if show_history and view.history:
        streets: dict[int, list[str]] = {}
        for record in view.history:
            streets.setdefault(record.street, []).append(record.text())
        lines.append("History: " + "; ".join(f"{STREETS[s]} " + ", ".join(acts) for s, acts in streets.items()))
    lines.append(f"Legal: {view.legal.summary()}")
    return "\n".join(lines)
