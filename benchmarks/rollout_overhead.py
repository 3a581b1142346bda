"""Rollout-plane overhead against the bare engine, and the learner step time, printed as JSON.

What the rollout path adds to ``HFBackend.generate``: decoding, guarded reward scoring (in the reward
child process), record building, the JSON reply, Ray's transfer and the pool's decode. On this shared
machine two identical back-to-back ``generate`` calls differ by up to 25%, more than the overhead, so
the benchmark measures it two ways that machine noise cannot fake:

  accounting — inside every worker call, the share of its wall time spent outside the engine
               (``1 - t_generate_s / t_call``, serial), and for the actor driven as the runtime drives
               it (two requests queued, so scoring one overlaps generating the next) the share of the
               stream's wall time during which the engine was not generating (``1 - Σ t_generate_s / wall``);
  paired A/B — the engine alone and the full path on the *same* prompts and sampling seeds (so the same
               tokens: checked), in the same process, alternated in rotating order for ``--rounds``
               rounds; the ratio of each round's times, median and a bootstrap 95% CI.

Variants: ``engine`` (backend.generate in this process), ``worker`` (RolloutWorker.generate +
the JSON reply, in this process), ``actor_engine`` (backend.generate inside the Ray actor),
``actor`` (generate_wire on the actor, two in flight, decoded by the driver as the pool does),
``actor_serial`` (the same, but the actor serves one whole request at a time: no scoring beside generation),
``actor_child_rewards`` (``actor`` with every reward sent to the guard's child process: no ``quick_reward``),
``actor_stdlib_json`` (``actor`` with the reply encoded by the stdlib's ``json``, as before orjson),
``actor_no_handover`` (``actor`` without yielding the GIL when the generation lock is released, as before),
``actor_engine_calls`` (the bare engine in the actor, one Ray call per request, one at a time: what Ray's
per-call machinery costs the engine, with none of the worker's own work), ``actor_engine_pipelined`` (the same
calls two in flight, as the pool sends them, handing the GIL over as the worker does: ``actor`` against it is the
worker's own work alone).

    python benchmarks/rollout_overhead.py [--rounds 20] [--requests 4] [--prompts 16] [--n 8]
                                          [--max-new-tokens 16] [--variants actor_engine,actor] [--quick]
    python benchmarks/rollout_overhead.py --pool run1.json run2.json   # one interval over saved runs
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import random
import statistics
import threading
import time
from pathlib import Path
from typing import Any, Sequence

import torch


def bootstrap_ci(values: Sequence[float], *, draws: int = 2000, seed: int = 0) -> tuple[float, float]:
    """95% percentile-bootstrap interval of the median.

    >>> bootstrap_ci([1.0, 1.0, 1.0])
    (1.0, 1.0)
    """
    rng = random.Random(seed)
    medians = sorted(statistics.median(rng.choices(values, k=len(values))) for _ in range(draws))
    return medians[int(0.025 * draws)], medians[int(0.975 * draws) - 1]


def summarize(values: Sequence[float]) -> dict[str, Any]:
    lo, hi = bootstrap_ci(values)
    return {"median": round(statistics.median(values), 4), "ci95": [round(lo, 4), round(hi, 4)],
            "min": round(min(values), 4), "max": round(max(values), 4), "n": len(values)}


def pooled_overhead(reports: Sequence[dict], path_name: str, engine_name: str) -> dict[str, Any] | None:
    """``1 - t_engine / t_path`` over the rounds of several runs' JSON reports (their ``seconds_per_round``), one
    interval for all: each run is a different draw of the machine's state, which one run's interval does not cover.

    >>> pooled_overhead([{"seconds_per_round": {"e": [1.0, 1.0], "p": [1.0, 2.0]}},
    ...                  {"seconds_per_round": {"e": [2.0], "p": [4.0]}}], "p", "e")["median"]
    0.5
    """
    values = [1 - a / b for report in reports
              for a, b in zip(report["seconds_per_round"].get(engine_name, []),
                              report["seconds_per_round"].get(path_name, []))]
    return summarize(values) if values else None


def make_bench_worker_class() -> type:
    from echo2_sdk.runtime.rollout.worker import RolloutWorker

    class BenchWorker(RolloutWorker):
        """The product worker plus benchmark hooks: rewind its seed counter, run the bare engine, serve serially."""

        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            self._serial = threading.Lock()

        def rewind(self) -> None:
            self._calls = 0

        def use_quick_reward(self, on: bool) -> None:
            """Off: every reward goes through the guard's child process, as before ``quick_reward``."""
            self.guard.local = self.adapter if on else None

        def set_hand_over(self, on: bool) -> None:
            """Off: the GIL is not yielded when the generation lock is released (the worker before it was)."""
            self.hand_over_gil = on

        def generate_wire_stdlib(self, examples_wire: list[dict]) -> bytes:
            """generate_wire with the reply encoded by the stdlib's json (the encoder before orjson)."""
            from echo2_sdk.runtime.rollout.codec import example_from_dict, result_document

            result = self.generate([example_from_dict(e) for e in examples_wire])
            return json.dumps(result_document(result), separators=(",", ":")).encode()

        def generate_wire_serial(self, examples_wire: list[dict]) -> bytes:
            """generate_wire, one request at a time: scoring no longer overlaps the next generation."""
            with self._serial:
                return self.generate_wire(examples_wire)

        def engine_call(self, examples_wire: list[dict], request: int) -> int:
            """One request's bare generation, with the seed the worker's call number ``request`` uses; tokens.
            Under the worker's generation lock, as ``generate`` is: two calls in flight take turns."""
            with self._generate_lock:
                tokens = self.engine_stream(examples_wire, 1, first=request)[0]
            self._hand_over()  # as ``generate`` does: the queued call starts generating without waiting for the GIL
            return tokens

        def engine_stream(self, examples_wire: list[dict], requests: int, first: int = 0) -> tuple[int, float]:
            from echo2_sdk.runtime.rollout.codec import example_from_dict

            prompts = [self._prompt_ids(example_from_dict(e)) for e in examples_wire]
            return run_engine(self.backend, prompts, self.n, self.sampling, requests, first=first)

    return BenchWorker


def run_engine(backend: Any, prompts: list[list[int]], n: int, sampling: Any, requests: int,
               first: int = 0) -> tuple[int, float]:
    """The engine alone, with the seeds the worker's calls ``first`` .. ``first + requests - 1`` use;
    (tokens, seconds)."""
    t0, tokens = time.perf_counter(), 0
    for r in range(first, first + requests):
        params = dataclasses.replace(sampling, seed=None if sampling.seed is None else sampling.seed + r)
        tokens += sum(len(c.token_ids) for outs in backend.generate(prompts, n, params) for c in outs)
    return tokens, time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=20, help="paired rounds (each runs every variant once)")
    ap.add_argument("--requests", type=int, default=4, help="requests per variant per round")
    ap.add_argument("--prompts", type=int, default=16, help="prompts per request")
    ap.add_argument("--n", type=int, default=8, help="samples per prompt")
    ap.add_argument("--max-new-tokens", type=int, default=16)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--quick", action="store_true", help="a smoke run: 2 rounds, 2 requests, 4 prompts")
    ap.add_argument("--variants", default="", help="comma-separated variants to run (default: all); fewer "
                    "variants give more rounds in the same time, e.g. actor_engine,actor")
    ap.add_argument("--pool", nargs="+", metavar="REPORT", help="no run: pool the rounds of earlier runs' JSON "
                    "reports (saved stdout) into one interval per comparison, e.g. --pool run1.json run2.json")
    args = ap.parse_args()
    if args.pool:
        try:
            reports = [json.loads(Path(p).read_text()) for p in args.pool]
        except (OSError, ValueError) as exc:
            ap.error(f"--pool: cannot read a report ({exc}); pass the JSON files earlier runs printed")
        missing = [p for p, r in zip(args.pool, reports) if not isinstance(r, dict) or "seconds_per_round" not in r]
        if missing:
            ap.error(f"--pool: {missing} carry no seconds_per_round (reports from before --pool existed); rerun them")
        pairs = [("actor", "actor_engine"), ("actor", "actor_engine_pipelined"),
                 ("actor_engine_pipelined", "actor_engine"), ("actor", "actor_no_handover")]
        pooled = {f"{a}_vs_{b}": pooled_overhead(reports, a, b) for a, b in pairs}
        print(json.dumps({"reports": args.pool, "pooled_overhead": {k: v for k, v in pooled.items() if v}}, indent=2))
        return
    if args.quick:
        args.rounds, args.requests, args.prompts = 2, 2, 4
    torch.set_num_threads(args.threads)

    import ray

    from echo2_sdk.records import group_from_wire
    from echo2_sdk.registry import make_task
    from echo2_sdk.runtime.learning.batching import collate
    from echo2_sdk.runtime.learning.learner import Learner
    from echo2_sdk.runtime.models.modeling import ensure_tiny_qwen3, load_policy
    from echo2_sdk.runtime.rollout.backends.base import SamplingParams
    from echo2_sdk.runtime.rollout.base import WorkerSettings
    from echo2_sdk.runtime.rollout.codec import example_to_dict, result_from_json, result_to_json

    path = ensure_tiny_qwen3()
    task = make_task("arith", {}, seed=0)
    examples = list(task.examples("train"))[: args.prompts]
    wire_examples = [example_to_dict(ex) for ex in examples]
    sampling = SamplingParams(temperature=1.0, top_p=1.0, max_new_tokens=args.max_new_tokens, seed=0)
    settings = WorkerSettings(model_path=path, task_name="arith", task_options={}, sampling=sampling,
                              samples_per_prompt=args.n, seed=0, threads=args.threads)

    bench_worker = make_bench_worker_class()
    worker = bench_worker("bench", settings)
    prompts = [worker._prompt_ids(ex) for ex in examples]
    ray.init(num_cpus=2, include_dashboard=False, logging_level="ERROR")
    actor = ray.remote(bench_worker).options(num_cpus=0, max_concurrency=2).remote("bench-actor", settings)
    ray.get(actor.ping.remote())

    serial_outside: list[float] = []
    idle: dict[str, list[float]] = {"generate_wire": [], "generate_wire_serial": [], "child_rewards": [],
                                    "generate_wire_stdlib": [], "no_handover": []}

    def run_worker() -> tuple[int, float]:
        worker.rewind()
        t0, tokens = time.perf_counter(), 0
        for _ in range(args.requests):
            t_call = time.perf_counter()
            result = worker.generate(examples)
            result_to_json(result)  # the reply the actor would send
            serial_outside.append(1 - result.t_generate_s / (time.perf_counter() - t_call))
            tokens += result.num_tokens
        return tokens, time.perf_counter() - t0

    def run_actor_engine() -> tuple[int, float]:
        return ray.get(actor.engine_stream.remote(wire_examples, args.requests))

    def run_actor_engine_calls() -> tuple[int, float]:
        t0 = time.perf_counter()
        tokens = sum(ray.get(actor.engine_call.remote(wire_examples, r)) for r in range(args.requests))
        return tokens, time.perf_counter() - t0

    def two_in_flight(submit):
        """``args.requests`` calls ``submit(r)``, two in flight as the pool sends them; each reply as it lands."""
        inflight, submitted = [], 0
        while submitted < args.requests or inflight:
            while len(inflight) < 2 and submitted < args.requests:
                inflight.append(submit(submitted))
                submitted += 1
            done, inflight = ray.wait(inflight, num_returns=1)
            yield ray.get(done[0])

    def run_actor_engine_pipelined() -> tuple[int, float]:
        ray.get(actor.set_hand_over.remote(True))  # actor_no_handover may have run just before
        t0 = time.perf_counter()
        tokens = sum(two_in_flight(lambda r: actor.engine_call.remote(wire_examples, r)))
        return tokens, time.perf_counter() - t0

    def run_actor_stream(method: str, quick_reward: bool = True, hand_over: bool = True) -> tuple[int, float]:
        ray.get([actor.rewind.remote(), actor.use_quick_reward.remote(quick_reward), actor.set_hand_over.remote(hand_over)])
        t0, tokens, t_gen = time.perf_counter(), 0, 0.0
        for reply in two_in_flight(lambda r: getattr(actor, method).remote(wire_examples)):
            result = result_from_json(reply)  # the pool's JSON path, decode included
            tokens += result.num_tokens
            t_gen += result.t_generate_s
        wall = time.perf_counter() - t0
        key = method if quick_reward else "child_rewards"
        idle[key if hand_over else "no_handover"].append(1 - t_gen / wall)
        return tokens, wall

    variants = {
        "engine": lambda: run_engine(worker.backend, prompts, args.n, sampling, args.requests),
        "worker": run_worker,
        "actor_engine": run_actor_engine,
        "actor_engine_calls": run_actor_engine_calls,
        "actor_engine_pipelined": run_actor_engine_pipelined,
        "actor": lambda: run_actor_stream("generate_wire"),
        "actor_serial": lambda: run_actor_stream("generate_wire_serial"),
        "actor_child_rewards": lambda: run_actor_stream("generate_wire", quick_reward=False),
        "actor_stdlib_json": lambda: run_actor_stream("generate_wire_stdlib"),
        "actor_no_handover": lambda: run_actor_stream("generate_wire", hand_over=False),
    }
    if args.variants:
        chosen = [v.strip() for v in args.variants.split(",") if v.strip()]
        unknown = sorted(set(chosen) - set(variants))
        if unknown:
            ap.error(f"--variants: unknown {unknown}; choose from {', '.join(variants)}")
        variants = {k: variants[k] for k in chosen}
    for fn in variants.values():  # warm-up: caches, allocator, the reward guard's child process
        fn()
    serial_outside.clear()
    for values in idle.values():
        values.clear()

    seconds: dict[str, list[float]] = {k: [] for k in variants}
    tokens: dict[str, list[int]] = {k: [] for k in variants}
    names = list(variants)
    for r in range(args.rounds):
        for name in names[r % len(names):] + names[: r % len(names)]:  # rotate the order: drift hits all alike
            toks, secs = variants[name]()
            seconds[name].append(secs)
            tokens[name].append(toks)

    def ratio(path_name: str, engine_name: str) -> dict[str, Any] | None:
        if path_name not in seconds or engine_name not in seconds:
            return None  # a variant not run
        return summarize([1 - a / b for a, b in zip(seconds[engine_name], seconds[path_name])])

    def share(values: list[float]) -> dict[str, Any] | None:
        return summarize(values) if values else None

    last = worker.generate(examples)
    records = [x for g in last.groups for x in group_from_wire(g).rollouts]
    batch, _ = collate(records, pad_id=worker.tokenizer.pad_token_id)
    learner = Learner(load_policy(path)[0], lr=1e-4, num_minibatches=2)
    step_times = []
    for _ in range(3):
        t0 = time.perf_counter()
        learner.train_step(batch)
        step_times.append(time.perf_counter() - t0)

    all_tokens = {t for per_round in tokens.values() for t in per_round}
    report = {
        "model": "tiny-qwen3",
        "params": sum(p.numel() for p in learner.model.parameters()),
        "prompts": args.prompts, "n": args.n, "max_new_tokens": args.max_new_tokens,
        "requests_per_round": args.requests, "rounds": args.rounds, "threads": args.threads,
        "same_tokens_every_variant": len(all_tokens) == 1,
        "tokens_per_round": sorted(all_tokens),
        "tokens_per_s_median": {k: round(statistics.median(t / s for t, s in zip(tokens[k], v)), 1)
                                for k, v in seconds.items()},
        "accounting": {
            "worker_time_outside_engine": share(serial_outside),
            "actor_engine_idle_share": share(idle["generate_wire"]),
            "actor_serial_engine_idle_share": share(idle["generate_wire_serial"]),
            "actor_child_rewards_engine_idle_share": share(idle["child_rewards"]),
            "actor_stdlib_json_engine_idle_share": share(idle["generate_wire_stdlib"]),
            "actor_no_handover_engine_idle_share": share(idle["no_handover"]),
        },
        "paired_overhead": {  # 1 - t_engine / t_path per round: the throughput the path loses
            "worker_vs_engine": ratio("worker", "engine"),
            "actor_vs_actor_engine": ratio("actor", "actor_engine"),
            "actor_serial_vs_actor_engine": ratio("actor_serial", "actor_engine"),
            "actor_child_rewards_vs_actor_engine": ratio("actor_child_rewards", "actor_engine"),
            "actor_vs_actor_child_rewards": ratio("actor", "actor_child_rewards"),
            "actor_stdlib_json_vs_actor_engine": ratio("actor_stdlib_json", "actor_engine"),
            "actor_vs_actor_stdlib_json": ratio("actor", "actor_stdlib_json"),
            "actor_no_handover_vs_actor_engine": ratio("actor_no_handover", "actor_engine"),
            "actor_vs_actor_no_handover": ratio("actor", "actor_no_handover"),
            "actor_engine_calls_vs_actor_engine": ratio("actor_engine_calls", "actor_engine"),
            "actor_serial_vs_actor_engine_calls": ratio("actor_serial", "actor_engine_calls"),
            "actor_engine_pipelined_vs_actor_engine": ratio("actor_engine_pipelined", "actor_engine"),
            "actor_vs_actor_engine_pipelined": ratio("actor", "actor_engine_pipelined"),
            "actor_engine_vs_engine": ratio("actor_engine", "engine"),
            "actor_vs_engine": ratio("actor", "engine"),
        },
        "seconds_per_round": {k: [round(x, 5) for x in v] for k, v in seconds.items()},  # to pool runs: 1 - a/b
        "learner_step_s_median": round(statistics.median(step_times[1:]), 4),
        "learner_samples_per_step": len(records),
    }
    ray.get(actor.close.remote())  # its reward child process goes with it
    worker.close()
    ray.shutdown()
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
