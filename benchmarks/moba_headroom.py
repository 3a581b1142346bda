"""How much a MOBA training window leaves to learn: the best return of every episode, by exhaustive search.

    python benchmarks/moba_headroom.py [--config examples/moba.yaml] [--set task.options.K=V ...]
                                       [--episodes 32] [--split eval] [--bots rule:farmer,rule:pusher]
                                       [--no-search] [--model RUN/base_model --samples 32 --temperature 1.0]

A training episode of ``moba`` is short (``task.options.max_ticks - warmup_ticks`` decisions, 4 by default)
and deterministic given its seed: the game, the foe bot and the autopilot draw from the episode seed only.
So the best return reachable in it is found by trying every legal action sequence (about 10^4 for four
decisions). Per opponent line-up of the config's pool, over ``--episodes`` episodes of ``--split``, the
script reports that optimum and the returns of the rule bots playing the agent's hero (what the warm start
imitates), each a mean with a 95 % CI (normal approximation). A column whose optimum equals the bots'
return has nothing for RL to find beyond its demonstrators; one where the bots earn far below the optimum
has room, if exploration finds it. ``--bots`` names the bots (any ``rule:`` style, e.g. ``rule:grinder``);
``--no-search`` reports the bots' returns alone (seconds instead of minutes). ``--model DIR`` (a model folder with
its tokenizer, e.g. a run's ``base_model``; pass that run's ``config.yaml`` as ``--config``) also samples
``--samples`` episodes of each episode from the model, at ``--temperature`` with seed 0, and reports their returns
and how many beat every bot on their own episode (and reach its optimum, when searched): RL can raise what the
model samples, not what it never does. Prints JSON.

Refuses windows over 5 decisions (10^5 sequences and more per episode). Cost: ~15 s per episode and foe line-up
for 4 decisions on one idle CPU core (``--episodes 2``: 58 s; the default 32 episodes x 2 line-ups: ~16 min).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import pickle
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


def rounded_ci(values: list[float]) -> dict:
    """The moba evaluation's mean and 95 % CI, rounded for the report.

    >>> rounded_ci([0.0, 0.2, 0.4])
    {'mean': 0.2, 'ci95': [-0.026, 0.426], 'n': 3}
    """
    from echo2_sdk.envs.moba.evaluation import mean_ci

    mean, (low, high) = mean_ci(values)
    return {"mean": round(mean, 3), "ci95": [round(low, 3), round(high, 3)], "n": len(values)}


def measure(adapter, lineup: str, examples, bot_specs: tuple[str, ...] = BOTS, search: bool = True,
            sampler=None) -> dict:
    """One column: the optimum (unless ``search`` is off) and each bot's return (``play_episode``, as the
    demonstrations are played) over ``examples`` replayed against ``lineup``, in the adapter's reward unit;
    with ``sampler`` (example -> the returns of the model's sampled episodes of it), what the model samples."""
    best, bots, plans, sampled = [], {spec: [] for spec in bot_specs}, [], []
    for example in (dataclasses.replace(e, meta={**e.meta, "opponent": lineup}) for e in examples):
        if search:
            env = adapter.env_for(example)
            env.begin_episode(example.meta["episode_seed"])
            value, plan = best_return(env)  # it steps copies only: env stays at the start
            best.append(value / adapter.reward_scale)
            plans.append(plan)
        for spec in bot_specs:
            bots[spec].append(adapter.play_episode(example, spec).reward)
        if sampler is not None:
            sampled.append(sampler(example))
    column = {f"{spec} as agent": rounded_ci(v) for spec, v in bots.items()}
    bots_best = [max(returns) for returns in zip(*bots.values())]  # per episode, the best bot's return
    if sampler is not None:
        column["model sampled"] = sampled_report(sampled, bots_best, best if search else None)
    if not search:
        return column
    above = sum(b > bot + 1e-9 for b, bot in zip(best, bots_best))
    return {"best": rounded_ci(best), **column, "episodes_where_best_beats_every_bot": above,
            "example_best_plan": plans[0]}


def sampled_report(sampled: list[list[float]], bots_best: list[float], best: list[float] | None) -> dict:
    """The model's sampled returns (``sampled[i]``: its episodes of episode i) against each episode's best bot and,
    when searched, its optimum: fractions of all sampled episodes.

    >>> sampled_report([[0.0, 0.2], [0.4, 0.4]], [0.2, 0.2], [0.4, 0.4])["share_beating_every_bot"]
    0.5
    >>> sampled_report([[0.0, 0.2], [0.4, 0.4]], [0.2, 0.2], [0.4, 0.4])["share_reaching_best"]
    0.5
    """
    flat = [r for returns in sampled for r in returns]
    report = {**rounded_ci(flat), "max": round(max(flat), 3),
              "share_beating_every_bot": round(sum(r > b + 1e-9 for returns, b in zip(sampled, bots_best)
                                                   for r in returns) / len(flat), 3)}
    if best is not None:
        report["share_reaching_best"] = round(sum(r >= b - 1e-9 for returns, b in zip(sampled, best)
                                                  for r in returns) / len(flat), 3)
    return report


def model_sampler(cfg, model_dir: str, samples: int, temperature: float):
    """example -> the returns of ``samples`` episodes the model at ``model_dir`` plays of it (the rollout worker's
    episode loop, seed 0: reproducible). On an adapter of its own: the episode loop binds the model to its adapter
    for ``llm:self`` seats, and the search's copies of envs made by that adapter would then copy the model too."""
    from echo2_sdk.registry import make_task
    from echo2_sdk.runtime.models.modeling import load_policy
    from echo2_sdk.runtime.rollout.backends.base import SamplingParams
    from echo2_sdk.runtime.rollout.backends.hf import HFBackend
    from echo2_sdk.runtime.rollout.episodes import run_episodes

    adapter = make_task(cfg.task.name, cfg.task.options, seed=cfg.train.seed)
    model, tokenizer = load_policy(model_dir)
    backend = HFBackend(model, tokenizer)
    params = SamplingParams(temperature=temperature, top_p=1.0, max_new_tokens=cfg.rollout.max_new_tokens, seed=0)

    def sample(example) -> list[float]:
        batch = run_episodes(adapter, backend, tokenizer, [example], samples, params, version=0)
        return [rollout.reward for group in batch.groups for rollout in group.rollouts]

    return sample


def bot_problem(spec: str) -> str | None:
    """Why ``spec`` cannot be played as the agent here (None: it can): the search copies rule bots only.

    >>> bot_problem("rule:grinder") is None, bot_problem("llm:runs/x")
    (True, "'llm:runs/x' is not a rule bot")
    """
    from echo2_sdk.envs.moba.players import make_player

    if not spec.startswith("rule:"):
        return f"{spec!r} is not a rule bot"
    try:
        make_player(spec)
    except ValueError as exc:
        return str(exc)
    return None


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--config", default=str(ROOT / "examples" / "moba.yaml"))
    ap.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE")
    ap.add_argument("--episodes", type=int, default=32)
    ap.add_argument("--split", choices=("train", "eval"), default="eval")
    ap.add_argument("--bots", default=",".join(BOTS), help="comma-separated rule bots played as the agent")
    ap.add_argument("--no-search", action="store_true", help="the bots' returns only, no exhaustive search")
    ap.add_argument("--model", help="also sample episodes from this model folder (e.g. RUN/base_model)")
    ap.add_argument("--samples", type=int, default=32, help="--model: sampled episodes per episode")
    ap.add_argument("--temperature", type=float, default=1.0, help="--model: sampling temperature")
    args = ap.parse_args()
    from echo2_sdk.config import load_config
    from echo2_sdk.episodic import opponent_pool
    from echo2_sdk.registry import make_task

    cfg = load_config(args.config, args.overrides)
    if cfg.task.name != "moba":
        raise SystemExit(f"moba_headroom: task.name={cfg.task.name!r}; this measures the moba task only")
    adapter = make_task(cfg.task.name, cfg.task.options, seed=cfg.train.seed)
    decisions = adapter.options.max_ticks - adapter.options.warmup_ticks
    if decisions > MAX_DECISIONS and not args.no_search:
        raise SystemExit(f"moba_headroom: {decisions} decisions per episode (task.options.max_ticks - warmup_ticks); "
                         f"the search takes at most {MAX_DECISIONS}: lower max_ticks or raise warmup_ticks")
    if args.episodes < 2:
        raise SystemExit(f"moba_headroom: --episodes={args.episodes}; a CI needs at least 2")
    lineups = [lineup for lineup, _ in opponent_pool(adapter.options.opponent)]
    if any("llm:" in lineup for lineup in lineups):
        raise SystemExit(f"moba_headroom: task.options.opponent={adapter.options.opponent!r} seats a model; the "
                         "search needs rule bots only (a model foe would be copied at every node), e.g. "
                         "--set 'task.options.opponent=rule:pusher, rule:farmer'")
    bot_specs = tuple(spec.strip() for spec in args.bots.split(",") if spec.strip())
    problem = next(filter(None, map(bot_problem, bot_specs)), None) if bot_specs else "names no bot"
    if problem:
        raise SystemExit(f"moba_headroom: --bots={args.bots!r}: {problem}; e.g. --bots rule:farmer,rule:grinder")
    sampler = None
    if args.model:
        lacking = [f for f in ("config.json", "tokenizer_config.json") if not (Path(args.model) / f).is_file()]
        if lacking:  # a run's checkpoints/step_K holds the weights but not the tokenizer
            raise SystemExit(f"moba_headroom: --model={args.model!r} is not a model folder with its tokenizer (no "
                             f"{', '.join(lacking)}); e.g. --model runs/NAME/base_model with --config runs/NAME/config.yaml")
        if args.samples < 1 or not args.temperature > 0:
            raise SystemExit(f"moba_headroom: --samples={args.samples} --temperature={args.temperature}; need "
                             "samples >= 1 and temperature > 0 (greedy play is one episode: train.eval_* reports it)")
        sampler = model_sampler(cfg, args.model, args.samples, args.temperature)
    examples = list(adapter.examples(args.split))[: args.episodes]
    started = time.perf_counter()
    columns = {}
    for lineup in lineups:
        print(f"[moba_headroom] {lineup}: {len(examples)} episodes of {decisions} decisions", file=sys.stderr, flush=True)
        columns[lineup] = measure(adapter, lineup, examples, bot_specs, search=not args.no_search, sampler=sampler)
    print(json.dumps({"config": args.config, "overrides": args.overrides, "split": args.split, "decisions": decisions,
                      "searched": not args.no_search, "bots": list(bot_specs), "model": args.model,
                      "samples": args.samples if args.model else None, "temperature": args.temperature if args.model else None,
                      "columns": columns, "seconds": round(time.perf_counter() - started, 1)}, indent=1))


if __name__ == "__main__":
    sys.exit(main())
