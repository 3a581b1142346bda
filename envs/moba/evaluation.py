"""MOBA evaluation: agents × opponents → win rate and mean reward per game, with 95 % CIs.

Each game seed is played twice, the agent's hero on either team (duplicate games: the lane is
mirror-symmetric and the game's randomness follows the seed, so side and luck cancel). Games are
played by :func:`play_game` on the rules engine directly; ``llm:PATH`` players render the same text
observations the env gives the agent. A win is the foe base falling (a timeout counts as not a
win: ``draw_rate`` reports them); the reward is the env's shaped return for the agent's hero
(:mod:`echo2_sdk.envs.moba.env`'s table). CIs: normal approximation, 1.96 standard errors.

    python -m echo2_sdk.envs.moba.evaluation --agent rule:farmer --opponents rule:pusher,rule:random --episodes 200
"""

from __future__ import annotations

import argparse
import json
import math
import random
import statistics
import time
from typing import Any, Callable, Mapping, Sequence

from echo2_sdk.env import Policy
from echo2_sdk.evaluation import HeadToHead
from echo2_sdk.envs.moba.env import MobaConfig
from echo2_sdk.envs.moba.game import Game
from echo2_sdk.envs.moba.players import RULE_STYLES, make_player
from echo2_sdk.envs.moba.text import parse, system_prompt


def play_game(config: MobaConfig, players: Sequence[Any], seed: int | str) -> dict[str, Any]:
    """One game, ``players[i]`` playing hero i; returns winner (team or None), ticks and per-hero results."""
    game = Game(config.rules, seed)
    for index, player in enumerate(players):
        player.begin(random.Random(f"{seed}:seat:{index}").getrandbits(62))
    invalid = [0] * len(players)
    while game.winner is None and game.tick < config.max_ticks:
        actions = {}
        for index, player in enumerate(players):
            hero, feedback = game.heroes[index], None
            if not hero.alive:
                continue
            for _ in range(config.max_invalid_actions + 1):
                action, feedback, _ = parse(game, hero, player.act(game, hero, feedback))
                if action is not None:
                    break
                invalid[index] += 1
            actions[index] = action or ("hold",)
        game.tick_once(actions)
    rewards = []
    for hero in game.heroes:
        s = hero.stats
        r = config.gold_reward * s["gold_earned"] + config.structure_reward * s["structure_damage"]
        r -= config.death_penalty * s["deaths"]
        if game.winner is not None:
            r += config.win_reward if game.winner == hero.side else -config.win_reward
        rewards.append(r)
    return {"winner": game.winner, "ticks": game.tick, "rewards": rewards, "invalid": invalid,
            "stats": [dict(h.stats) for h in game.heroes]}


def mean_ci(samples: Sequence[float]) -> tuple[float, list[float]]:
    """Mean and its 95 % CI (normal approximation; unbounded for one sample)."""
    mean = statistics.fmean(samples)
    half = 1.96 * statistics.stdev(samples) / math.sqrt(len(samples)) if len(samples) > 1 else math.inf
    return mean, [mean - half, mean + half]


def play_matchup(agent: Any, opponent: Any, games: int, seed: int, *, config: MobaConfig = MobaConfig(),
                 make: Callable[[Any], Any] | None = None) -> dict[str, Any]:
    """``games`` duplicate games (2 × games played) of ``agent`` against ``opponent`` heroes; one cell."""
    make = make or (lambda spec: make_player(spec, max_ticks=config.max_ticks))
    n = config.team_size
    hero, allies = make(agent), [make(config.allies[0]) for _ in range(n - 1)]
    foes = [make(opponent) for _ in range(n)]
    wins, draws, rewards, ticks, invalid = [], 0, [], [], 0
    for g in range(games):
        results = []
        for side in (0, 1):  # the agent on team 0, then on team 1
            mine, theirs = [hero, *allies], foes
            players = mine + theirs if side == 0 else theirs + mine
            out = play_game(config, players, f"eval:{seed}:{g}")
            me = 0 if side == 0 else n
            results.append((out["winner"] == side, out["rewards"][me]))
            draws += out["winner"] is None
            ticks.append(out["ticks"])
            invalid += out["invalid"][me]
        wins.append(statistics.fmean(float(w) for w, _ in results))
        rewards.append(statistics.fmean(r for _, r in results))
    win_rate, win_ci = mean_ci(wins)
    reward, reward_ci = mean_ci(rewards)
    return {"win_rate": win_rate, "win_rate_ci95": win_ci, "reward": reward, "reward_ci95": reward_ci,
            "games": 2 * games, "draw_rate": draws / (2 * games), "mean_ticks": statistics.fmean(ticks),
            "invalid_actions": invalid}


def run_eval(agents: Sequence[str] | Mapping[str, Any], opponents: Sequence[str] | Mapping[str, Any], episodes: int,
             seed: int = 0, *, config: MobaConfig = MobaConfig(), llm_policies: Mapping[str, Policy] | None = None,
             llm_policy_factory: Callable[[str], Policy] | None = None) -> dict[str, Any]:
    """Every agent against every opponent over about ``episodes`` games each (duplicate pairs)."""
    agents = dict(agents) if isinstance(agents, Mapping) else {str(a): a for a in agents}
    opponents = dict(opponents) if isinstance(opponents, Mapping) else {str(o): o for o in opponents}
    pairs = max(1, math.ceil(episodes / 2))
    prompt = system_prompt(config.rules, config.max_ticks)

    def make(spec: Any):
        return make_player(spec, system=prompt, max_ticks=config.max_ticks, llm_policies=llm_policies,
                           llm_policy_factory=llm_policy_factory)

    started = time.perf_counter()
    cells = {a: {o: play_matchup(agents[a], opponents[o], pairs, seed, config=config, make=make) for o in opponents}
             for a in agents}
    seconds = time.perf_counter() - started
    played = sum(c["games"] for row in cells.values() for c in row.values())
    return {"task": "moba", "seed": seed, "team_size": config.team_size, "max_ticks": config.max_ticks,
            "agents": list(agents), "opponents": list(opponents), "games_per_cell": 2 * pairs, "cells": cells,
            "seconds": round(seconds, 2), "games_per_second": round(played / seconds, 1)}


def render_table(table: Mapping[str, Any]) -> str:
    """Markdown: rows = agents, columns = opponents, cells = win rate ± CI (mean reward ± CI)."""
    lines = ["| agent \\ opponent (win rate; reward) | " + " | ".join(table["opponents"]) + " |",
             "|" + "---|" * (len(table["opponents"]) + 1)]
    for agent in table["agents"]:
        cells = []
        for opponent in table["opponents"]:
            c = table["cells"][agent][opponent]
            w, r = c["win_rate_ci95"], c["reward_ci95"]
            cells.append(f"{c['win_rate']:.2f} ± {(w[1] - w[0]) / 2:.2f}; {c['reward']:+.1f} ± {(r[1] - r[0]) / 2:.1f}")
        lines.append(f"| {agent} | " + " | ".join(cells) + " |")
    lines.append(f"\n{table['games_per_cell']} games per cell (duplicate pairs, both sides), seed {table['seed']}, "
                 f"95% CI; timeouts count as not won; {table['games_per_second']} games/s.")
    return "\n".join(lines)


def parse_player_list(text: str) -> list[str]:
    specs = [part.strip() for part in text.split(",") if part.strip()]
    if not specs:
        raise ValueError(f"no player specs in {text!r}; e.g. 'rule:farmer,rule:pusher'")
    return specs


def _add_game_arguments(parser: argparse.ArgumentParser) -> None:
    """The game of ``echo2 eval --task moba``."""
    parser.add_argument("--team-size", type=int, default=1, help="heroes per team: 1 (1v1, default) or 2 (2v2)")


def eval_from_args(args: argparse.Namespace, llm_policy_factory: Callable[[str], Policy] | None = None) -> str:
    """``echo2 eval --task moba``: the table of :func:`run_eval` for the parsed arguments."""
    config = MobaConfig(team_size=args.team_size)
    result = run_eval(parse_player_list(args.agents), parse_player_list(args.opponents), args.episodes, args.seed,
                      config=config, llm_policy_factory=llm_policy_factory)
    return json.dumps(result, indent=2) if args.json else render_table(result)


HEAD_TO_HEAD = HeadToHead(
    run=eval_from_args, default_agents="rule:farmer", default_opponents="rule:farmer,rule:pusher,rule:random",
    games_arg="episodes", default_games=200, games_help="games per agent/opponent cell, half on each side",
    add_arguments=_add_game_arguments,
    description="MOBA: duplicate games (each seed from both sides); cells report the win rate and mean reward "
                f"with 95% CIs (a timeout is not a win). Rule players: rule:{'|'.join(RULE_STYLES)}.",
)
"""What ``echo2 eval --task moba`` runs (the moba task's ``head_to_head()`` returns it)."""


def main(argv: Sequence[str] | None = None) -> None:
    HEAD_TO_HEAD.main(argv)


if __name__ == "__main__":
    main()
