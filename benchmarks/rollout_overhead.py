"""Rollout-plane overhead and learner step time, printed as JSON.

On the same prompts, weights and sampling settings, each variant produces ``--requests`` batches
back to back; the variants alternate for ``--repeats`` rounds so machine noise hits them alike, and
medians are reported:
  raw     — ``HFBackend.generate`` alone: the engine's rollout tokens/s;
  worker  — ``RolloutWorker.generate`` in-process, one call at a time (generation + decoding +
            guarded rewards + record building, serially);
  actor   — the same worker as a Ray actor driven like the runtime drives it (two requests queued, so
            reward scoring of one request overlaps generation of the next), results fetched by the
            driver as JSON documents and decoded as the pool does.
Also the learner's ``train_step`` time on the samples of one request.

    python benchmarks/rollout_overhead.py [--requests 6] [--repeats 3] [--prompts 16] [--n 8] [--max-new-tokens 16]
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import torch


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--requests", type=int, default=6, help="batches per measured stream")
    ap.add_argument("--repeats", type=int, default=3, help="alternating measurement rounds")
    ap.add_argument("--prompts", type=int, default=16, help="prompts per batch")
    ap.add_argument("--n", type=int, default=8, help="samples per prompt")
    ap.add_argument("--max-new-tokens", type=int, default=16)
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)

    import ray

    from echo2_sdk.chat import chat_token_ids
    from echo2_sdk.records import group_from_wire
    from echo2_sdk.registry import make_task
    from echo2_sdk.runtime.rollout.backends.base import SamplingParams
    from echo2_sdk.runtime.rollout.backends.hf import HFBackend
    from echo2_sdk.runtime.learning.batching import collate
    from echo2_sdk.runtime.learning.learner import Learner
    from echo2_sdk.runtime.models.modeling import ensure_tiny_qwen3, load_policy
    from echo2_sdk.runtime.rollout.base import WorkerSettings
    from echo2_sdk.runtime.rollout.worker import RolloutWorker

    path = ensure_tiny_qwen3()
    task = make_task("arith", {}, seed=0)
    examples = list(task.examples("train"))[: args.prompts]
    params = SamplingParams(temperature=1.0, top_p=1.0, max_new_tokens=args.max_new_tokens, seed=0)
    settings = WorkerSettings(model_path=path, task_name="arith", task_options={}, sampling=params,
                              samples_per_prompt=args.n, seed=0, threads=args.threads)

    model, tok = load_policy(path)
    raw = HFBackend(model, tok)
    prompts = [chat_token_ids(tok, task.build_messages(e)) for e in examples]
    worker = RolloutWorker("bench", settings)
    ray.init(num_cpus=2, include_dashboard=False, logging_level="ERROR")
    actor = ray.remote(RolloutWorker).options(num_cpus=0, max_concurrency=2).remote("bench-actor", settings)
    ray.get(actor.ping.remote())

    def run_raw() -> tuple[int, float]:
        t0, toks = time.perf_counter(), 0
        for r in range(args.requests):
            out = raw.generate(prompts, args.n, SamplingParams(1.0, 1.0, args.max_new_tokens, seed=r))
            toks += sum(len(c.token_ids) for o in out for c in o)
        return toks, time.perf_counter() - t0

    def run_worker() -> tuple[int, float]:
        t0, toks = time.perf_counter(), 0
        for _ in range(args.requests):
            toks += worker.generate(examples).num_tokens
        return toks, time.perf_counter() - t0

    from echo2_sdk.runtime.rollout.codec import example_to_dict, result_from_json

    wire_examples = [example_to_dict(ex) for ex in examples]

    def run_actor() -> tuple[int, float]:
        t0, toks, inflight, submitted = time.perf_counter(), 0, [], 0
        while submitted < args.requests or inflight:
            while len(inflight) < 2 and submitted < args.requests:
                inflight.append(actor.generate_wire.remote(wire_examples))
                submitted += 1
            done, inflight = ray.wait(inflight, num_returns=1)
            toks += result_from_json(ray.get(done[0])).num_tokens  # the pool's JSON path, decode included
        return toks, time.perf_counter() - t0

    variants = {"raw": run_raw, "worker": run_worker, "actor": run_actor}
    for fn in variants.values():  # warm-up: caches, allocator, the guard's child process
        fn()
    rates: dict[str, list[float]] = {k: [] for k in variants}
    for _ in range(args.repeats):
        for name, fn in variants.items():
            toks, secs = fn()
            rates[name].append(toks / secs)

    last = worker.generate(examples)
    records = [x for g in last.groups for x in group_from_wire(g).rollouts]
    batch, _ = collate(records, pad_id=tok.pad_token_id)
    learner = Learner(load_policy(path)[0], lr=1e-4, num_minibatches=2)
    step_times = []
    for _ in range(3):
        t0 = time.perf_counter()
        learner.train_step(batch)
        step_times.append(time.perf_counter() - t0)

    med = {k: statistics.median(v) for k, v in rates.items()}
    report = {
        "model": "tiny-qwen3",
        "params": sum(p.numel() for p in model.parameters()),
        "prompts": args.prompts, "n": args.n, "max_new_tokens": args.max_new_tokens,
        "requests_per_stream": args.requests, "repeats": args.repeats, "threads": args.threads,
        "tokens_per_s_median": {k: round(v, 1) for k, v in med.items()},
        "tokens_per_s_all": {k: [round(x, 1) for x in v] for k, v in rates.items()},
        "worker_serial_overhead_vs_raw": round(1 - med["worker"] / med["raw"], 4),
        "actor_pipelined_overhead_vs_raw": round(1 - med["actor"] / med["raw"], 4),
        "learner_step_s_median": round(statistics.median(step_times[1:]), 4),
        "learner_samples_per_step": len(records),
    }
    worker.close()
    ray.shutdown()
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
