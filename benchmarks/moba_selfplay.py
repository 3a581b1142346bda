"""MOBA acceptance figures between rule-based bots, printed as JSON.

1. Termination: ``--episodes`` games (default 1,000) of ``rule:farmer`` against ``rule:pusher``,
   sides alternating (game k: farmer on team k % 2), on the rules engine with the default config
   (1v1, 300-tick limit). Every game must end (a base falls, or the tick limit); counts both.
2. Reproducibility: the same games played again with the same seed must give identical results
   (winner, ticks, per-hero stats of every game); a different seed must give different ones.
3. Styles: each bot's win rate with a 95 % CI (normal approximation over games; a timeout is no
   win for either); the CIs must not overlap. Also per-bot gold, last hits, kills, deaths.

    python benchmarks/moba_selfplay.py [--episodes 1000] [--seed 0]
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import time


def play(episodes: int, seed: int) -> tuple[list[dict], float]:
    from echo2_sdk.envs.moba import MobaConfig
    from echo2_sdk.envs.moba.evaluation import play_game
    from echo2_sdk.envs.moba.players import make_player

    config = MobaConfig()
    farmer, pusher = make_player("rule:farmer"), make_player("rule:pusher")
    games = []
    started = time.perf_counter()
    for k in range(episodes):
        farmer_side = k % 2
        players = [farmer, pusher] if farmer_side == 0 else [pusher, farmer]
        out = play_game(config, players, f"bench:{seed}:{k}")
        games.append({"farmer_side": farmer_side, **out})
    return games, time.perf_counter() - started


def win_rate(wins: int, n: int) -> dict:
    p = wins / n
    half = 1.96 * math.sqrt(p * (1 - p) / n)
    return {"wins": wins, "win_rate": round(p, 4), "ci95": [round(p - half, 4), round(p + half, 4)]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--episodes", type=int, default=1000)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    games, seconds = play(args.episodes, args.seed)
    again, seconds_again = play(args.episodes, args.seed)
    other, _ = play(min(args.episodes, 200), args.seed + 1)
    n = len(games)
    bases_fell = sum(g["winner"] is not None for g in games)
    farmer_wins = sum(g["winner"] == g["farmer_side"] for g in games)
    pusher_wins = sum(g["winner"] is not None and g["winner"] != g["farmer_side"] for g in games)
    farmer, pusher = win_rate(farmer_wins, n), win_rate(pusher_wins, n)
    overlap = not (farmer["ci95"][1] < pusher["ci95"][0] or pusher["ci95"][1] < farmer["ci95"][0])

    def per_bot(name: str) -> dict:
        rows = [g["stats"][g["farmer_side"] if name == "farmer" else 1 - g["farmer_side"]] for g in games]
        return {key: round(statistics.fmean(r[key] for r in rows), 2)
                for key in ("gold_earned", "last_hits", "kills", "deaths", "structure_damage")}

    ticks = [g["ticks"] for g in games]
    print(json.dumps({
        "episodes": n, "seed": args.seed,
        "termination": {"all_ended": all(g["winner"] is not None or g["ticks"] >= 300 for g in games),
                        "base_fell": bases_fell, "tick_limit": n - bases_fell,
                        "ticks_mean": round(statistics.fmean(ticks), 1), "ticks_max": max(ticks)},
        "reproducible_same_seed": games == again,
        "different_seed_differs": games[:len(other)] != other,
        "rule:farmer": {**farmer, **per_bot("farmer")},
        "rule:pusher": {**pusher, **per_bot("pusher")},
        "win_rate_cis_overlap": overlap,
        "seconds": round(seconds, 2), "episodes_per_second": round(n / seconds, 1),
        "episodes_per_second_rerun": round(n / seconds_again, 1),
    }, indent=1))


if __name__ == "__main__":
    main()
