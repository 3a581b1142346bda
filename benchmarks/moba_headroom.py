"""How much a MOBA training window leaves to learn: the best return of every episode, by exhaustive search.

    python benchmarks/moba_headroom.py [--config examples/moba.yaml] [--set task.options.K=V ...]
                                       [--episodes 32] [--split eval]

A training episode of ``moba`` is short (``task.options.max_ticks - warmup_ticks`` decisions, 4 by default)
and deterministic given its seed: the game, the foe bot and the autopilot draw from the episode seed only.
So the best return reachable in it is found by trying every legal action sequence (about 10^4 for four
decisions). Per opponent line-up of the config's pool, over ``--episodes`` episodes of ``--split``, the
script reports that optimum and the returns of the rule bots playing the agent's hero (what the warm start
imitates), each a mean with a 95 % CI (normal approximation). A column whose optimum equals the bots'
return has nothing for RL to find beyond its demonstrators; one where the bots earn far below the optimum
has room, if exploration finds it. Prints JSON.

Refuses windows over 5 decisions (10^5 sequences and more per episode). Cost: ~20-35 s per episode and foe line-up
for 4 decisions on one CPU core (the default 32 episodes x 2 line-ups: ~25-35 min; ``--episodes 8``: ~7-9 min).
"""

from __future__ import annotations

import argparse
import json
import math
import pickle
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
MAX_DECISIONS = 5
BOTS = ("rule:farmer", "rule:pusher")


def clone(env):
    """An independent copy of ``env`` (rule bots, the game, their RNGs): a pickle round trip, which searched one
    episode in 0.7x the time of ``copy.deepcopy`` (best of two each, side by side)."""
    return pickle.loads(pickle.dumps(env, protocol=pickle.HIGHEST_PROTOCOL))


def best_return(env) -> tuple[float, list[str]]:
    """The highest return over every legal action sequence from ``env``'s state, and one sequence reaching it."""
    best, plan = -math.inf, []
    for action in env.legal_actions():
        child = clone(env)
        _, reward, terminated, truncated, _ = child.step(action)
        rest, tail = (0.0, []) if terminated or truncated or child.done else best_return(child)
        if reward + rest > best:
            best, plan = reward + rest, [action, *tail]
    return (0.0, []) if best == -math.inf else (best, plan)


def bot_return(adapter, env, spec: str, seed: int) -> float:
    """The return of rule bot ``spec`` playing the agent's hero from ``env``'s state (seeded as demonstrations are)."""
    from echo2_sdk.envs.moba.players import make_player

    player = make_player(spec)
    player.begin(seed)
    total, feedback = 0.0, None
    while not env.done and env.legal_actions():
        _, reward, terminated, truncated, info = env.step(adapter.bot_reply(player, env, feedback))
        total, feedback = total + reward, info.get("invalid_reason")
        if terminated or truncated:
            break
    return total


def mean_ci(values: list[float]) -> dict:
    """Mean and a normal-approximation 95 % CI.

    >>> mean_ci([0.0, 0.2, 0.4])
    {'mean': 0.2, 'ci95': [-0.026, 0.426], 'n': 3}
    """
    mean = statistics.fmean(values)
    half = 1.96 * statistics.stdev(values) / math.sqrt(len(values)) if len(values) > 1 else 0.0
    return {"mean": round(mean, 3), "ci95": [round(mean - half, 3), round(mean + half, 3)], "n": len(values)}


def measure(adapter, opponent: str, examples) -> dict:
    best, bots, plans = [], {spec: [] for spec in BOTS}, []
    for example in examples:
        env = adapter.make_env(opponent)
        env.begin_episode(example.meta["episode_seed"])
        value, plan = best_return(clone(env))
        best.append(value)
        plans.append(plan)
        for spec in BOTS:
            bots[spec].append(bot_return(adapter, clone(env), spec, example.meta["episode_seed"]))
    above = sum(b > max(bots[s][i] for s in BOTS) + 1e-9 for i, b in enumerate(best))
    return {"best": mean_ci(best), **{f"{spec} as agent": mean_ci(v) for spec, v in bots.items()},
            "episodes_where_best_beats_both_bots": above, "example_best_plan": plans[0]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--config", default=str(ROOT / "examples" / "moba.yaml"))
    ap.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE")
    ap.add_argument("--episodes", type=int, default=32)
    ap.add_argument("--split", choices=("train", "eval"), default="eval")
    args = ap.parse_args()
    from echo2_sdk.config import load_config
    from echo2_sdk.episodic import opponent_pool
    from echo2_sdk.registry import make_task

    cfg = load_config(args.config, args.overrides)
    if cfg.task.name != "moba":
        raise SystemExit(f"moba_headroom: task.name={cfg.task.name!r}; this measures the moba task only")
    adapter = make_task(cfg.task.name, cfg.task.options, seed=cfg.train.seed)
    decisions = adapter.options.max_ticks - adapter.options.warmup_ticks
    if decisions > MAX_DECISIONS or args.episodes < 1:
        raise SystemExit(f"moba_headroom: {decisions} decisions per episode (max_ticks - warmup_ticks) and "
                         f"--episodes={args.episodes}: need at most {MAX_DECISIONS} decisions and >= 1 episode")
    lineups = [lineup for lineup, _ in opponent_pool(adapter.options.opponent)]
    if any("llm:" in lineup for lineup in lineups):
        raise SystemExit(f"moba_headroom: task.options.opponent={adapter.options.opponent!r} seats a model; the "
                         "search needs rule bots only (a model foe would be copied at every node), e.g. "
                         "--set 'task.options.opponent=rule:pusher, rule:farmer'")
    examples = list(adapter.examples(args.split))[: args.episodes]
    started = time.perf_counter()
    columns = {}
    for lineup in lineups:
        print(f"[moba_headroom] {lineup}: {len(examples)} episodes of {decisions} decisions", file=sys.stderr, flush=True)
        columns[lineup] = measure(adapter, lineup, examples)
    print(json.dumps({"config": args.config, "overrides": args.overrides, "split": args.split, "decisions": decisions,
                      "columns": columns, "seconds": round(time.perf_counter() - started, 1)}, indent=1))


if __name__ == "__main__":
    sys.exit(main())
