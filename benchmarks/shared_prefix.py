"""The learner step with and without shared-prefix scoring (``learner.shared_prefix``), side by side.

    python benchmarks/shared_prefix.py [--repeats 6] [--threads 1] [--quick]

For each shape, a batch of G prompts × n answers (every row of a group repeats its prompt, as GRPO
rollouts do) on a random Qwen3-architecture model, fp32, ``num_minibatches=2`` as the quickstart:
two learners from the same weights, one scoring row by row, one packing each prompt once, alternate
``train_step`` calls (so machine noise hits both alike). Shapes:

- ``quickstart``: the quickstart's tiny model (hidden 128, 4 layers, vocab 100), 8 prompts × 16
  answers, prompts of 20-26 tokens (chat template + question), answers of 1-6;
- ``long_prompt``: a game-like turn (hidden 256, 4 layers, vocab 512), 4 prompts × 8 answers,
  prompts of 180-220 tokens, answers of 8-32.

Prints JSON: per shape the real tokens each way, the median step seconds of each learner, their
ratio (packed / row by row), and the largest difference of the two learners' losses over the steps
(they train identically, to float rounding).
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from dataclasses import asdict, dataclass


@dataclass(frozen=True)
class Shape:
    hidden: int
    layers: int
    vocab: int
    prompts: int
    samples: int
    prompt_tokens: tuple[int, int]
    answer_tokens: tuple[int, int]


SHAPES = {
    "quickstart": Shape(128, 4, 100, 8, 16, (20, 26), (1, 6)),
    "long_prompt": Shape(256, 4, 512, 4, 8, (180, 220), (8, 32)),
}


def make_model(shape: Shape):
    import torch
    from transformers import Qwen3Config, Qwen3ForCausalLM

    config = Qwen3Config(vocab_size=shape.vocab, hidden_size=shape.hidden, intermediate_size=4 * shape.hidden,
                         num_hidden_layers=shape.layers, num_attention_heads=4, num_key_value_heads=2,
                         head_dim=shape.hidden // 4, max_position_embeddings=1024, tie_word_embeddings=True)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        return Qwen3ForCausalLM(config).eval()


def make_batch(shape: Shape, model):
    import torch

    from echo2_sdk.runtime.learning.base import TrainBatch
    from echo2_sdk.runtime.models.logprobs import sequence_logprobs

    g = torch.Generator().manual_seed(1)
    draw = lambda lo_hi: int(torch.randint(lo_hi[0], lo_hi[1] + 1, (1,), generator=g))
    rows = []
    for _ in range(shape.prompts):
        prompt = torch.randint(1, shape.vocab, (draw(shape.prompt_tokens),), generator=g)
        rows += [(len(prompt), torch.cat([prompt, torch.randint(1, shape.vocab, (draw(shape.answer_tokens),),
                                                                generator=g)])) for _ in range(shape.samples)]
    width = max(len(r) for _, r in rows)
    ids = torch.zeros(len(rows), width, dtype=torch.long)
    attn = torch.zeros_like(ids)
    loss_mask = torch.zeros(len(rows), width - 1)
    for b, (plen, r) in enumerate(rows):
        ids[b, :len(r)], attn[b, :len(r)] = r, 1
        loss_mask[b, plen - 1:len(r) - 1] = 1
    with torch.no_grad():
        sampler = sequence_logprobs(model, ids, attn, 1.0) * loss_mask
    adv = (torch.randn(len(rows), 1, generator=g).expand(-1, width - 1) * loss_mask).contiguous()
    return TrainBatch(ids, attn, loss_mask, adv, sampler, torch.zeros(len(rows), dtype=torch.long))


def measure(name: str, shape: Shape, repeats: int) -> dict:
    from echo2_sdk.runtime.learning.learner import Learner
    from echo2_sdk.runtime.models.shared_prefix import plan_packing

    batch = make_batch(shape, make_model(shape))
    plan = plan_packing(batch.input_ids, batch.attention_mask, batch.loss_mask)
    learners = {mode: Learner(make_model(shape), lr=1e-5, num_minibatches=2, seed=3, shared_prefix=mode == "packed")
                for mode in ("row_by_row", "packed")}
    times: dict[str, list[float]] = {mode: [] for mode in learners}
    losses: dict[str, list[float]] = {mode: [] for mode in learners}
    for i in range(repeats + 1):
        for mode, learner in learners.items():
            t0 = time.perf_counter()
            metrics = learner.train_step(batch)
            if i:  # the first call of each warms allocator and kernels
                times[mode].append(time.perf_counter() - t0)
            losses[mode].append(metrics["loss"])
    median = {mode: statistics.median(t) for mode, t in times.items()}
    return {
        "shape": {"name": name, **asdict(shape)},
        "rows": len(batch),
        "tokens_row_by_row": int(batch.attention_mask.sum()),
        "tokens_whole_batch_packed": plan.packed_tokens if plan else None,
        "step_s_median": {mode: round(v, 4) for mode, v in median.items()},
        "ratio_packed_over_row_by_row": round(median["packed"] / median["row_by_row"], 3),
        "loss_max_abs_diff": max(abs(a - b) for a, b in zip(losses["row_by_row"], losses["packed"])),
    }


def main(argv: list[str] | None = None) -> None:
    import os

    import torch

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--repeats", type=int, default=6, help="timed train_step calls per learner and shape")
    p.add_argument("--threads", type=int, default=1, help="torch threads (the quickstart learner's: 1)")
    p.add_argument("--quick", action="store_true", help="the quickstart shape only, 2 repeats (a smoke run)")
    args = p.parse_args(argv)
    if args.repeats < 1 or args.threads < 1:
        raise SystemExit(f"shared_prefix: --repeats {args.repeats} and --threads {args.threads} must be >= 1")
    torch.set_num_threads(args.threads)
    names = ["quickstart"] if args.quick else list(SHAPES)
    results = [measure(n, SHAPES[n], 2 if args.quick else args.repeats) for n in names]
    print(json.dumps({"threads": args.threads, "torch": torch.__version__, "load_average": list(os.getloadavg()),
                      "results": results}, indent=1))


if __name__ == "__main__":
    main()
