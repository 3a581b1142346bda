"""Rollout throughput of the HF backend vs the vLLM backend on the same model and batch; prints JSON.

Per backend: new tokens/s and samples/s over `--repeats` timed calls (a warm-up call excluded),
agreement of the sampler's log-probs with the learner's recompute (`sequence_logprobs` on the HF
model in the same dtype: mean/max |Δlogprob| and the TIS ratio exp(Δ) mean/min/max) and the seconds
one in-place weight reload takes. The backends run one after the other, never concurrently.

    python benchmarks/backend_throughput.py                          # tiny 1M model, float32
    python benchmarks/backend_throughput.py --hidden 384 --layers 6 --dtype bfloat16   # ~10M
"""

from __future__ import annotations

import argparse
import json
import os
import time

import torch

from echo2_sdk.chat import chat_token_ids
from echo2_sdk.registry import make_task
from echo2_sdk.runtime.rollout.backends.base import SamplingParams
from echo2_sdk.runtime.rollout.backends.hf import HFBackend
from echo2_sdk.runtime.models.logprobs import sequence_logprobs
from echo2_sdk.runtime.models.modeling import ensure_tiny_qwen3, load_policy


def parse_args():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--hidden", type=int, default=128, help="tiny-model width (128: ~1M parameters)")
    parser.add_argument("--layers", type=int, default=4, help="tiny-model decoder layers")
    parser.add_argument("--heads", type=int, default=4, help="attention heads")
    parser.add_argument("--kv-heads", type=int, default=2, help="key/value heads")
    parser.add_argument("--model", default=None, help="a HF model folder or hub name instead of the tiny model")
    parser.add_argument("--dtype", default="float32", choices=["float32", "bfloat16", "float16"])
    parser.add_argument("--batch", type=int, default=16, help="prompts per call")
    parser.add_argument("--n", type=int, default=4, help="samples per prompt")
    parser.add_argument("--max-new-tokens", type=int, default=32)
    parser.add_argument("--temperature", type=float, default=1.0)
    parser.add_argument("--top-p", type=float, default=1.0)
    parser.add_argument("--repeats", type=int, default=3, help="timed calls per backend")
    parser.add_argument("--threads", type=int, default=min(os.cpu_count() or 1, 2),
                        help="CPU threads of either backend (vLLM binds cores 0..threads-1)")
    parser.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    parser.add_argument("--backends", default="hf,vllm", help="comma-separated subset of hf,vllm")
    parser.add_argument("--enforce-eager", action="store_true", help="vLLM without torch.compile")
    parser.add_argument("--out", default=None, help="also write the JSON report here (vLLM logs to stdout)")
    return parser.parse_args()


def model_path(args) -> str:
    if args.model:
        return args.model
    return ensure_tiny_qwen3(hidden_size=args.hidden, num_layers=args.layers, num_heads=args.heads,
                             num_kv_heads=args.kv_heads, intermediate_size=4 * args.hidden)


def agreement(learner, prompts, groups, temperature) -> dict:
    """Learner recompute − sampler log-prob over every generated token of `groups`."""
    pairs = [(p, c) for p, group in zip(prompts, groups) for c in group]
    rows = [p + list(c.token_ids) for p, c in pairs]
    ids = torch.zeros((len(rows), max(map(len, rows))), dtype=torch.long)
    mask = torch.zeros_like(ids)
    for i, row in enumerate(rows):
        ids[i, :len(row)], mask[i, :len(row)] = torch.tensor(row), 1
    device = next(learner.parameters()).device
    with torch.no_grad():
        scored = sequence_logprobs(learner, ids.to(device), mask.to(device), temperature or 1.0).cpu()
    delta = torch.cat([scored[i, len(p) - 1:len(p) - 1 + len(c.token_ids)] - torch.tensor(c.logprobs)
                       for i, (p, c) in enumerate(pairs)]).double()
    ratio = delta.exp()
    return {"tokens": delta.numel(), "mean_abs_dlogprob": delta.abs().mean().item(),
            "max_abs_dlogprob": delta.abs().max().item(), "tis_ratio_mean": ratio.mean().item(),
            "tis_ratio_min": ratio.min().item(), "tis_ratio_max": ratio.max().item()}


def measure(backend, learner, prompts, args) -> dict:
    params = SamplingParams(args.temperature, args.top_p, args.max_new_tokens, seed=0)
    backend.generate(prompts, args.n, params)  # warm-up: first-call allocations, lazy compiles
    tokens, samples, seconds, first = 0, 0, 0.0, None
    for repeat in range(args.repeats):
        start = time.perf_counter()
        groups = backend.generate(prompts, args.n, SamplingParams(
            args.temperature, args.top_p, args.max_new_tokens, seed=1 + repeat))
        seconds += time.perf_counter() - start
        first = first or groups
        tokens += sum(len(c.token_ids) for g in groups for c in g)
        samples += sum(len(g) for g in groups)
    state = {k: v.clone() for k, v in learner.state_dict().items()}
    start = time.perf_counter()
    backend.load_weights(state, version=1)  # same values: times the transfer, changes nothing
    reload_s = time.perf_counter() - start
    return {"tokens_per_s": tokens / seconds, "samples_per_s": samples / seconds,
            "mean_new_tokens": tokens / samples, "timed_s": seconds, "reload_s": reload_s,
            "logprob_agreement": agreement(learner, prompts, first, args.temperature)}


def main():
    args = parse_args()
    os.environ.setdefault("VLLM_CPU_OMP_THREADS_BIND", f"0-{args.threads - 1}")
    os.environ.setdefault("VLLM_CPU_NUM_OF_RESERVED_CPU", "0")
    os.environ.setdefault("VLLM_LOGGING_LEVEL", "WARNING")
    torch.set_num_threads(args.threads)
    path = model_path(args)
    learner, tokenizer = load_policy(path, dtype=args.dtype, device=args.device)
    adapter = make_task("arith")
    examples = list(adapter.examples("train"))[:args.batch]
    prompts = [chat_token_ids(tokenizer, adapter.build_messages(ex)) for ex in examples]  # as workers do
    report = {"model": path, "parameters_M": sum(p.numel() for p in learner.parameters()) / 1e6,
              "dtype": args.dtype, "device": args.device, "threads": args.threads, "batch": len(prompts),
              "n": args.n, "max_new_tokens": args.max_new_tokens, "temperature": args.temperature,
              "top_p": args.top_p, "repeats": args.repeats}
    kinds = args.backends.split(",")
    if "hf" in kinds:
        hf_model, _ = load_policy(path, dtype=args.dtype, device=args.device)
        report["hf"] = measure(HFBackend(hf_model, tokenizer, device=args.device), learner, prompts, args)
        del hf_model
    if "vllm" in kinds:
        from echo2_sdk.runtime.rollout.backends.vllm import VLLMBackend, VLLMOptions

        start = time.perf_counter()
        backend = VLLMBackend(path, tokenizer, dtype=args.dtype, device=args.device,
                              options=VLLMOptions(enforce_eager=args.enforce_eager, max_model_len=1024))
        startup_s = time.perf_counter() - start
        report["vllm"] = {"startup_s": startup_s, "enforce_eager": args.enforce_eager,
                          **measure(backend, learner, prompts, args)}
        backend.close()
    if "hf" in report and "vllm" in report:
        report["vllm_over_hf_tokens_per_s"] = report["vllm"]["tokens_per_s"] / report["hf"]["tokens_per_s"]
    print(json.dumps(report, indent=2))
    if args.out:
        with open(args.out, "w") as handle:
            json.dump(report, handle, indent=2)


if __name__ == "__main__":
    main()
