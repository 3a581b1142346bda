"""Poker evaluation with duplicate deals: agents × opponents → chips won per hand, with 95 % CIs.

Each *deal* (deck order from ``"eval:{seed}:{deal}"``, button ``deal % seats``) is played once
per seat rotation: heads-up, the agent plays the deal from both seats, so both players hold each
hand once and card luck cancels. With more seats the agent sits in every seat in turn, the other
seats held by copies of the opponent. The per-deal mean over rotations is one independent
sample; cells report its mean (chips per hand and big blinds per 100 hands) with a normal 95 %
confidence interval (1.96 standard errors). Everything is seeded: the same call gives the same table.
With ``all_in_adjusted`` (``--all-in-adjusted``) each cell also gives the same hands *all-in adjusted*
(``all_in_adjusted_bb_per_100``): a hand whose board was dealt after the betting closed counts the agent's
expected pot share over the unseen cards (:mod:`echo2_sdk.envs.poker.equity`). It keeps the expectation and
removes each runout's luck, but it is not always the tighter figure: duplicate deals already cancel a
runout's luck when both rotations go all-in on the same street, and adjusting one rotation but not the
other undoes that (the random player against the calling station: wider, not narrower).

Also computes the agent's style statistics per cell: VPIP (share of hands it voluntarily put
chips in preflop), PFR (share it raised preflop), AF (postflop (bets + raises) / calls; undefined
against an opponent that never bets, e.g. the calling station) and AFq (postflop
(bets + raises) / (bets + raises + calls + folds), always defined once it acts postflop).

CLI (rule-based players; the echo2 CLI adds ``llm:PATH`` through ``llm_policy_factory``)::

    python -m echo2_sdk.envs.poker.evaluation --agents rule:tag,rule:lag --opponents rule:calling,rule:tag --hands 2000
"""

from __future__ import annotations

import argparse
import json
import math
import random
import statistics
import time
from typing import Any, Callable, Iterable, Mapping, Sequence

from echo2_sdk.env import Policy
from echo2_sdk.evaluation import HeadToHead
from echo2_sdk.envs.poker.hand import TableConfig
from echo2_sdk.envs.poker.play import HandRecord, play_hand
from echo2_sdk.envs.poker.players import make_player

PlayerSpec = Any  # "rule:NAME" | "llm:NAME" | Player | policy callable


def style_stats(hands: Iterable[tuple[HandRecord, int]]) -> dict[str, Any]:
    """VPIP, PFR and AF of the seat given with each hand record."""
    dealt = vpip = pfr = aggressive = calls = folds = 0
    for record, seat in hands:
        mine = [a for a in record.actions if a.seat == seat and not a.forced]
        preflop = [a for a in mine if a.street == 0]
        if not preflop:
            continue  # a walk: no decision to count
        dealt += 1
        vpip += any(a.kind in ("call", "bet", "raise") for a in preflop)
        pfr += any(a.kind in ("bet", "raise") for a in preflop)
        postflop = [a for a in mine if a.street > 0]
        aggressive += sum(a.kind in ("bet", "raise") for a in postflop)
        calls += sum(a.kind == "call" for a in postflop)
        folds += sum(a.kind == "fold" for a in postflop)
    return {
        "hands": dealt,
        "vpip": vpip / dealt if dealt else None,
        "pfr": pfr / dealt if dealt else None,
        "af": aggressive / calls if calls else None,  # undefined without postflop calls
        "afq": aggressive / (aggressive + calls + folds) if aggressive + calls + folds else None,
        "postflop_bets_raises_per_hand": aggressive / dealt if dealt else None,
        "postflop_bets_raises": aggressive,
        "postflop_calls": calls,
        "postflop_folds": folds,
    }


def _mean_ci(samples: Sequence[float]) -> tuple[float, float, float]:
    mean = statistics.fmean(samples)
    half = 1.96 * statistics.stdev(samples) / math.sqrt(len(samples)) if len(samples) > 1 else math.inf
    return mean, mean - half, mean + half


def play_matchup(agent: PlayerSpec, opponent: PlayerSpec, deals: int, seed: int, *,
                 table: TableConfig = TableConfig(), max_invalid: int = 2,
                 make: Callable[[PlayerSpec], Any] | None = None, all_in_adjusted: bool = False) -> dict[str, Any]:
    """Play ``deals`` duplicate deals of ``agent`` against ``opponent`` copies; one result cell."""
    make = make or (lambda spec: make_player(spec, table=table))
    n = table.seats
    hero = make(agent)
    villains = [make(spec) for spec in seat_specs(opponent, n - 1)]
    per_deal: list[float] = []
    per_deal_adjusted: list[float] = []
    all_in_hands = 0
    records: list[tuple[HandRecord, int]] = []
    invalid = forced = accepted = 0
    for deal in range(deals):
        deal_seed = f"eval:{seed}:{deal}"
        results, adjusted = [], []
        for seat in range(n):  # the agent's seat in this rotation
            players = villains[: seat] + [hero] + villains[seat:]
            # Randomness belongs to the seat, not the player: a mirror match replays identically.
            for s, player in enumerate(players):
                player.begin(random.Random(f"{deal_seed}:seat:{s}").getrandbits(62))
            record = play_hand(table, players, deal_seed, deal % n, max_invalid=max_invalid,
                               all_in_equity=all_in_adjusted)
            if sum(record.payoffs) != 0:
                raise AssertionError(f"chips not conserved in deal {deal}: payoffs {record.payoffs}")
            results.append(record.payoffs[seat])
            if all_in_adjusted:
                adjusted.append(record.all_in_adjusted(seat))
                all_in_hands += record.all_in_values[seat] is not None
            records.append((record, seat))
            invalid += record.invalid[seat]
            forced += record.forced[seat]
            accepted += sum(a.seat == seat and not a.forced for a in record.actions)
        per_deal.append(statistics.fmean(results))
        if adjusted:
            per_deal_adjusted.append(statistics.fmean(adjusted))
    mean, low, high = _mean_ci(per_deal)
    bb = table.big_blind
    extra: dict[str, Any] = {}
    if all_in_adjusted:
        adjusted_mean, adjusted_low, adjusted_high = _mean_ci(per_deal_adjusted)
        extra = {"all_in_adjusted_bb_per_100": adjusted_mean / bb * 100, "all_in_hands": all_in_hands,
                 "all_in_adjusted_bb_per_100_ci95": [adjusted_low / bb * 100, adjusted_high / bb * 100]}
    return {
        "chips_per_hand": mean, "ci95": [low, high],
        "bb_per_100": mean / bb * 100, "bb_per_100_ci95": [low / bb * 100, high / bb * 100],
        **extra,
        "deals": deals, "hands": deals * n, "invalid_actions": invalid, "forced_actions": forced,
        # Share of the agent's replies the table accepted (refused replies are re-prompted, then forced).
        "accepted_actions": accepted,
        "legal_action_rate": accepted / (accepted + invalid) if accepted + invalid else None,
        "agent_style": style_stats(records),
    }


def seat_specs(opponent: PlayerSpec, others: int) -> list[PlayerSpec]:
    """The players of the ``others`` seats besides the agent's for one opponent column: copies of one
    spec, or ``A+B`` for one spec per seat in seat order (the mixed table a task trains at).

    >>> seat_specs("rule:tag", 2)
    ['rule:tag', 'rule:tag']
    >>> seat_specs("rule:tag+rule:lag", 2)
    ['rule:tag', 'rule:lag']
    """
    if not isinstance(opponent, str) or "+" not in opponent:
        return [opponent] * others
    specs = [part.strip() for part in opponent.split("+")]
    if len(specs) != others:
        raise ValueError(f"opponent {opponent!r} names {len(specs)} seats but the table has {others} besides "
                         f"the agent's; give one spec (copied into every seat) or {others} joined by '+'")
    return specs


def run_eval(agents: Mapping[str, PlayerSpec] | Sequence[str], opponents: Mapping[str, PlayerSpec] | Sequence[str],
             hands: int, seed: int = 0, *, table: TableConfig = TableConfig(), max_invalid: int = 2,
             llm_policies: Mapping[str, Policy] | None = None,
             llm_policy_factory: Callable[[str], Policy] | None = None, all_in_adjusted: bool = False) -> dict[str, Any]:
    """Evaluate every agent against every opponent over about ``hands`` hands each (duplicate deals).

    ``agents``/``opponents``: specs (``rule:tag``, ``llm:NAME``) or a mapping label → spec/Player/
    policy callable. Returns a JSON-ready table: ``cells[agent][opponent]`` holds chips per hand
    and bb/100 with 95 % CIs, hand counts, refused/forced actions and the agent's VPIP/PFR/AF.
    """
    agents = _labelled(agents)
    opponents = _labelled(opponents)
    deals = max(1, math.ceil(hands / table.seats))

    def make(spec: PlayerSpec):
        return make_player(spec, table=table, llm_policies=llm_policies, llm_policy_factory=llm_policy_factory)

    started = time.perf_counter()
    cells = {a: {o: play_matchup(agents[a], opponents[o], deals, seed, table=table, max_invalid=max_invalid, make=make,
                                 all_in_adjusted=all_in_adjusted)
                 for o in opponents} for a in agents}
    seconds = time.perf_counter() - started
    played = sum(cell["hands"] for row in cells.values() for cell in row.values())
    return {
        "seed": seed, "table": {"seats": table.seats, "small_blind": table.small_blind,
                                "big_blind": table.big_blind, "starting_stack": table.starting_stack},
        "agents": list(agents), "opponents": list(opponents), "deals": deals, "hands_per_cell": deals * table.seats,
        "cells": cells, "seconds": round(seconds, 2), "hands_per_second": round(played / seconds, 1),
    }


def _labelled(specs: Mapping[str, PlayerSpec] | Sequence[str]) -> dict[str, PlayerSpec]:
    if isinstance(specs, Mapping):
        return dict(specs)
    if isinstance(specs, str):
        specs = parse_player_list(specs)
    return {str(spec): spec for spec in specs}


def parse_player_list(text: str) -> list[str]:
    """``"rule:calling, rule:tag"`` → ``["rule:calling", "rule:tag"]``."""
    specs = [part.strip() for part in text.split(",") if part.strip()]
    if not specs:
        raise ValueError(f"no player specs in {text!r}; e.g. 'rule:calling,rule:tag,rule:lag'")
    return specs


UNITS = ("bb_per_100", "chips_per_hand", "all_in_adjusted_bb_per_100")


def render_table(table: Mapping[str, Any], unit: str = "bb_per_100") -> str:
    """A Markdown table: rows = agents, columns = opponents, cells = mean ± CI half-width."""
    if unit not in UNITS:
        raise ValueError(f"unit={unit!r}; use one of {UNITS}")
    ci_key = "ci95" if unit == "chips_per_hand" else f"{unit}_ci95"
    header = f"| agent \\ opponent ({unit}) | " + " | ".join(table["opponents"]) + " | VPIP | PFR | AF | AFq | legal |"
    lines = [header, "|" + "---|" * (len(table["opponents"]) + 6)]
    for agent in table["agents"]:
        row = table["cells"][agent]
        cells = []
        for opponent in table["opponents"]:
            cell = row[opponent]
            low, high = cell[ci_key]
            cells.append(f"{cell[unit]:+.1f} ± {(high - low) / 2:.1f}")
        style = _pooled_style([row[o]["agent_style"] for o in table["opponents"]])
        lines.append(f"| {agent} | " + " | ".join(cells) + f" | {style} | {_pooled_legal(row.values())} |")
    hands = table["hands_per_cell"]
    lines.append(f"\n{hands} hands per cell ({table['deals']} duplicate deals), seed {table['seed']}, "
                 f"95% CI; {table['hands_per_second']} hands/s.")
    return "\n".join(lines)


def _pooled_legal(cells: Iterable[Mapping[str, Any]]) -> str:
    """Share of the agent's replies accepted by the table, pooled over all its cells."""
    cells = list(cells)
    accepted = sum(c["accepted_actions"] for c in cells)
    attempts = accepted + sum(c["invalid_actions"] for c in cells)
    return f"{accepted / attempts:.2f}" if attempts else "-"


def _pooled_style(styles: list[dict[str, Any]]) -> str:
    """The agent's VPIP / PFR / AF over all its cells (counts pooled, not cell averages)."""
    hands = sum(s["hands"] for s in styles)
    if not hands:
        return "- | - | - | -"
    vpip = sum((s["vpip"] or 0) * s["hands"] for s in styles) / hands
    pfr = sum((s["pfr"] or 0) * s["hands"] for s in styles) / hands
    calls = sum(s["postflop_calls"] for s in styles)
    aggressive = sum(s["postflop_bets_raises"] for s in styles)
    passive = calls + sum(s["postflop_folds"] for s in styles)
    af = f"{aggressive / calls:.2f}" if calls else ("-" if not aggressive else "no calls")
    afq = f"{aggressive / (aggressive + passive):.2f}" if aggressive + passive else "-"
    return f"{vpip:.2f} | {pfr:.2f} | {af} | {afq}"


def _add_table_arguments(parser: argparse.ArgumentParser) -> None:
    """The table of ``echo2 eval --task poker``."""
    parser.add_argument("--seats", type=int, default=2, help="players at the table (default 2: heads-up)")
    parser.add_argument("--blinds", default="5/10", help="small/big blind in chips (default 5/10)")
    parser.add_argument("--stack", type=int, default=1000, help="chips per seat at the start of every hand (default 1000)")
    parser.add_argument("--all-in-adjusted", action="store_true",
                        help="also report every cell all-in adjusted: an all-in runout counts the agent's expected pot "
                             "share over the unseen cards (about 0.1 s per all-in hand)")


def _table(args: argparse.Namespace) -> TableConfig:
    small, _, big = args.blinds.partition("/")
    try:
        blinds = int(small), int(big or small)
    except ValueError:
        raise ValueError(f"--blinds {args.blinds!r}: give the small/big blind in whole chips, e.g. 5/10") from None
    return TableConfig(args.seats, *blinds, args.stack)


def eval_from_args(args: argparse.Namespace, llm_policy_factory: Callable[[str], Policy] | None = None) -> str:
    """``echo2 eval --task poker``: the table of :func:`run_eval` for the parsed arguments."""
    result = run_eval(parse_player_list(args.agents), parse_player_list(args.opponents), args.hands, args.seed,
                      table=_table(args), llm_policy_factory=llm_policy_factory, all_in_adjusted=args.all_in_adjusted)
    if args.json or not args.all_in_adjusted:
        return json.dumps(result, indent=2, default=str) if args.json else render_table(result)
    all_in = {a: sum(result["cells"][a][o]["all_in_hands"] for o in result["opponents"]) for a in result["agents"]}
    return (render_table(result) + "\n\nAll-in adjusted (each all-in runout at the agent's expected pot share; "
            "all-in hands per agent: " + ", ".join(f"{a} {k}" for a, k in all_in.items()) + "):\n\n"
            + render_table(result, "all_in_adjusted_bb_per_100"))


HEAD_TO_HEAD = HeadToHead(
    run=eval_from_args, default_agents="rule:tag", default_opponents="rule:calling,rule:tag,rule:lag",
    games_arg="hands", default_games=2000, games_help="hands per agent/opponent cell",
    add_arguments=_add_table_arguments,
    description="Poker: duplicate deals (every deal from every seat); cells report chips won per 100 big "
                "blinds with 95% CIs and the agent's VPIP/PFR/AF (--all-in-adjusted: also every all-in runout at "
                "its expected pot share). Rule players: rule:calling|tag|lag|random; "
                "an opponent A+B seats one player per other seat (e.g. rule:tag+rule:lag at --seats 3).",
)
"""What ``echo2 eval --task poker`` runs (the poker task's ``head_to_head()`` returns it)."""


def main(argv: Sequence[str] | None = None) -> None:
    HEAD_TO_HEAD.main(argv)


if __name__ == "__main__":
    main()
