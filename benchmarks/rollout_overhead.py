"""Rollout-plane overhead and learner step time, printed as JSON.

Measures, on the same batch of prompts and the same weights, interleaved round by round so that
machine noise hits every variant alike:
  raw      — ``HFBackend.generate`` alone (tokens/s);
  worker   — ``RolloutWorker.generate`` in-process (generation + decoding + guarded rewards + records);
  actor    — the same worker as a Ray actor, called from the driver (adds serialization and IPC);
and the learner's ``train_step`` time on the resulting samples.

    python benchmarks/rollout_overhead.py [--rounds 5] [--prompts 16] [--n 8] [--max-new-tokens 16]
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import torch


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--prompts", type=int, default=16)
    ap.add_argument("--n", type=int, default=8)
    ap.add_argument("--max-new-tokens", type=int, default=16)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--no-actor", action="store_true", help="skip the Ray actor variant")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)

    from echo2_sdk.registry import make_task
    from echo2_sdk.runtime.backends.base import SamplingParams
    from echo2_sdk.runtime.backends.hf import HFBackend
    from echo2_sdk.runtime.batching import collate
    from echo2_sdk.runtime.learner import Learner
    from echo2_sdk.runtime.modeling import ensure_tiny_qwen3, load_policy
    from echo2_sdk.chat import chat_token_ids
    from echo2_sdk.runtime.worker import RolloutWorker

    path = ensure_tiny_qwen3()
    task = make_task("arith", {}, seed=0)
    examples = list(task.examples("train"))[: args.prompts]
    params = SamplingParams(temperature=1.0, top_p=1.0, max_new_tokens=args.max_new_tokens, seed=0)
    worker_kwargs = dict(model_path=path, task_name="arith", task_options={}, sampling=params,
                         samples_per_prompt=args.n, seed=0, threads=args.threads)

    model, tok = load_policy(path)
    raw = HFBackend(model, tok)
    prompts = [chat_token_ids(tok, task.build_messages(e)) for e in examples]
    worker = RolloutWorker("bench", **worker_kwargs)

    actor = None
    if not args.no_actor:
        import ray

        ray.init(num_cpus=2, include_dashboard=False, logging_level="ERROR")
        actor = ray.remote(RolloutWorker).options(num_cpus=0).remote("bench-actor", **worker_kwargs)
        ray.get(actor.ping.remote())

    rates: dict[str, list[float]] = {"raw": [], "worker": [], "actor": []}
    last = None
    for r in range(args.rounds + 1):  # round 0 warms up caches and is discarded
        p = SamplingParams(params.temperature, params.top_p, params.max_new_tokens, seed=r)
        t0 = time.perf_counter()
        out = raw.generate(prompts, args.n, p)
        t_raw = time.perf_counter() - t0
        toks_raw = sum(len(c.token_ids) for o in out for c in o)
        t0 = time.perf_counter()
        res = worker.generate(examples)
        t_worker = time.perf_counter() - t0
        last = res
        if actor is not None:
            t0 = time.perf_counter()
            ares = ray.get(actor.generate.remote(examples))
            t_actor = time.perf_counter() - t0
        if r == 0:
            continue
        rates["raw"].append(toks_raw / t_raw)
        rates["worker"].append(res.num_tokens / t_worker)
        if actor is not None:
            rates["actor"].append(ares.num_tokens / t_actor)

    records = [x for g in last.groups for x in g.rollouts]
    batch, _ = collate(records, pad_id=tok.pad_token_id)
    learner = Learner(load_policy(path)[0], lr=1e-4, num_minibatches=2)
    step_times = []
    for _ in range(max(2, args.rounds)):
        t0 = time.perf_counter()
        learner.train_step(batch)
        step_times.append(time.perf_counter() - t0)

    med = {k: statistics.median(v) for k, v in rates.items() if v}
    report = {
        "model": "tiny-qwen3",
        "params": sum(p.numel() for p in model.parameters()),
        "prompts": args.prompts, "n": args.n, "max_new_tokens": args.max_new_tokens,
        "rounds": args.rounds, "threads": args.threads,
        "tokens_per_s_median": {k: round(v, 1) for k, v in med.items()},
        "worker_overhead_vs_raw": round(1 - med["worker"] / med["raw"], 4),
        "actor_overhead_vs_raw": round(1 - med["actor"] / med["raw"], 4) if "actor" in med else None,
        "learner_step_s_median": round(statistics.median(step_times[1:]), 4),
        "learner_samples_per_step": len(records),
        "reward_status": dict(last.reward_status),
    }
    worker.close()
    if actor is not None:
        ray.shutdown()
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
