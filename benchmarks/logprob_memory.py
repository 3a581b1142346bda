"""Peak memory of the learner's log-prob pass: full [B, T, V] logits against the chunked output head.

Each mode runs in its own process (a fresh peak RSS), on a random Qwen3-architecture model with
Qwen3's real vocabulary size (151,936) and a small body, forward + backward, CPU, one thread:

    python benchmarks/logprob_memory.py [--tokens 4096] [--vocab 151936] [--chunk-tokens 1024]

Prints JSON: per mode the peak RSS increase over the loaded model (MB), wall seconds, and the ratio.
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import time


def run_one(mode: str, tokens: int, vocab: int, chunk_tokens: int) -> dict:
    import torch
    from transformers import Qwen3Config, Qwen3ForCausalLM

    from echo2_sdk.runtime.models.logprobs import sequence_logprobs

    torch.set_num_threads(1)
    torch.manual_seed(0)
    config = Qwen3Config(vocab_size=vocab, hidden_size=128, intermediate_size=256, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, head_dim=32,
                         max_position_embeddings=tokens, tie_word_embeddings=True)
    model = Qwen3ForCausalLM(config)
    ids = torch.randint(0, vocab, (1, tokens))
    mask = torch.ones_like(ids)
    base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    t0 = time.perf_counter()
    logprobs = sequence_logprobs(model, ids, mask, 1.0, chunk_tokens=None if mode == "full" else chunk_tokens)
    logprobs.sum().backward()
    wall = time.perf_counter() - t0
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    return {"mode": mode, "peak_increase_mb": round(peak - base, 1), "wall_s": round(wall, 3),
            "logprob_sum": round(float(logprobs.sum()), 3)}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--tokens", type=int, default=4096)
    p.add_argument("--vocab", type=int, default=151936)
    p.add_argument("--chunk-tokens", type=int, default=1024)
    p.add_argument("--mode", choices=("full", "chunked"), help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.mode:
        print(json.dumps(run_one(args.mode, args.tokens, args.vocab, args.chunk_tokens)))
        return
    rows = {}
    for mode in ("full", "chunked"):
        out = subprocess.run([sys.executable, __file__, "--mode", mode, "--tokens", str(args.tokens),
                              "--vocab", str(args.vocab), "--chunk-tokens", str(args.chunk_tokens)],
                             check=True, capture_output=True, text=True).stdout
        rows[mode] = json.loads(out.strip().splitlines()[-1])
    print(json.dumps({
        "tokens": args.tokens, "vocab": args.vocab, "chunk_tokens": args.chunk_tokens, **rows,
        "peak_ratio_chunked_over_full": round(rows["chunked"]["peak_increase_mb"] / rows["full"]["peak_increase_mb"], 3),
        "same_values": abs(rows["full"]["logprob_sum"] - rows["chunked"]["logprob_sum"]) < 1e-2 * max(1.0, abs(rows["full"]["logprob_sum"])),
    }, indent=1))


if __name__ == "__main__":
    main()
