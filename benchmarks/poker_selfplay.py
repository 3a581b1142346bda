"""Poker acceptance figures between rule-based players, printed as text (or JSON with --json).

1. Conservation and termination: ``--hands`` hands (default 10,000) across heads-up pairings of
   every style (random included) and 3- and 6-handed tables with random styles, blinds and stacks.
   Every hand must end with payoffs summing to exactly zero; reports hands per second.
2. Styles: VPIP / PFR / AF / AFq of each style against the field (pooled over all its hands).
3. Duplicate-deal evaluation tables (round robin of calling/tag/lag) for two seeds, with the
   head-to-head ranking (pairwise wins, ties broken by mean bb/100 against the field) of each
   seed, the pairs won with 95 % confidence, and whether the two rankings agree.

    python benchmarks/poker_selfplay.py [--hands 10000] [--eval-hands 2000] [--seeds 0 1] [--json]
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import time
from collections import defaultdict


def conservation(hands: int, seed: int) -> dict:
    from echo2_sdk.envs.poker.evaluation import style_stats
    from echo2_sdk.envs.poker.hand import TableConfig
    from echo2_sdk.envs.poker.play import play_hand
    from echo2_sdk.envs.poker.players import make_player

    styles = ["rule:calling", "rule:tag", "rule:lag", "rule:random"]
    rng = random.Random(seed)
    by_style = defaultdict(list)
    by_table: dict[str, list[float]] = defaultdict(list)
    max_actions = 0
    started = time.perf_counter()
    for hand in range(hands):
        if hand % 2 == 0:  # heads-up, every ordered pairing in turn
            names = [styles[(hand // 2) % 4], styles[(hand // 8) % 4]]
            table = TableConfig()
        else:
            seats = rng.choice([3, 6])
            names = [rng.choice(styles) for _ in range(seats)]
            table = TableConfig(seats, rng.choice([1, 5]), 10, rng.choice([40, 200, 1000, 5000]))
        players = [make_player(name, table=table) for name in names]
        for s, player in enumerate(players):
            player.begin(rng.getrandbits(62))
        t0 = time.perf_counter()
        record = play_hand(table, players, f"bench:{seed}:{hand}", rng.randrange(table.seats))
        by_table[f"{table.seats}-handed"].append(time.perf_counter() - t0)
        if sum(record.payoffs) != 0:
            raise AssertionError(f"hand {hand}: payoffs {record.payoffs} do not sum to zero")
        max_actions = max(max_actions, len(record.actions))
        for seat, name in enumerate(names):
            by_style[name].append((record, seat))
    seconds = time.perf_counter() - started
    return {
        "hands": hands, "zero_sum_violations": 0, "all_terminated": True, "max_actions_in_a_hand": max_actions,
        "seconds": round(seconds, 1), "hands_per_second": round(hands / seconds, 1),
        "hands_per_second_by_table": {k: round(len(v) / sum(v), 1) for k, v in sorted(by_table.items())},
        "styles": {name: style_stats(records) for name, records in sorted(by_style.items())},
    }


def evaluation(hands: int, seeds: list[int]) -> dict:
    from echo2_sdk.envs.poker.evaluation import render_table, run_eval

    styles = ["rule:calling", "rule:tag", "rule:lag"]
    out = {"tables": {}, "text": {}, "rankings": {}}
    for seed in seeds:
        table = run_eval(styles, styles, hands, seed)
        cells = table["cells"]
        field = {a: statistics.fmean(cells[a][o]["bb_per_100"] for o in styles if o != a) for a in styles}
        # Head-to-head (Copeland) ranking: pairwise wins first, the mean against the field breaks ties.
        wins = {a: sum(cells[a][o]["chips_per_hand"] > 0 for o in styles if o != a) for a in styles}
        out["tables"][seed] = table
        out["text"][seed] = render_table(table)
        out["rankings"][seed] = sorted(styles, key=lambda a: (wins[a], field[a]), reverse=True)
        out.setdefault("field_bb_per_100", {})[seed] = {k: round(v, 1) for k, v in field.items()}
        out.setdefault("significant_pairs", {})[seed] = [
            f"{a} > {o}" for a in styles for o in styles if cells[a][o]["ci95"][0] > 0]
    out["ranking_consistent"] = len({tuple(r) for r in out["rankings"].values()}) == 1
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--hands", type=int, default=10_000)
    ap.add_argument("--eval-hands", type=int, default=4000, help="hands per evaluation cell")
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1])
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()

    result = {"conservation": conservation(args.hands, args.seeds[0]),
              "evaluation": evaluation(args.eval_hands, args.seeds)}
    if args.json:
        print(json.dumps(result, indent=2, default=str))
        return
    c = result["conservation"]
    print(f"{c['hands']} hands: zero-sum in every hand, all terminated (max {c['max_actions_in_a_hand']} actions); "
          f"{c['hands_per_second']} hands/s overall, by table {c['hands_per_second_by_table']}")
    for name, s in c["styles"].items():
        af = "-" if s["af"] is None else f"{s['af']:.2f}"
        print(f"  {name:13s} hands {s['hands']:5d}  VPIP {s['vpip']:.2f}  PFR {s['pfr']:.2f}  AF {af}  "
              f"AFq {s['afq']:.2f}  postflop bets+raises/hand {s['postflop_bets_raises_per_hand']:.2f}")
    e = result["evaluation"]
    for seed, text in e["text"].items():
        print(f"\nseed {seed}: ranking {e['rankings'][seed]}; bb/100 vs the field {e['field_bb_per_100'][seed]}; "
              f"significant: {e['significant_pairs'][seed]}")
        print(text)
    print(f"\nranking consistent across seeds: {e['ranking_consistent']}")


if __name__ == "__main__":
    main()
