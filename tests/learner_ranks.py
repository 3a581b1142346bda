"""Helpers for learner tests that run several ranks: a ragged batch, a tiny model, spawned gloo ranks."""

from __future__ import annotations

import os
import socket
import sys
from pathlib import Path

import torch
import torch.multiprocessing as mp
from transformers import Qwen3Config, Qwen3ForCausalLM

from echo2_sdk.runtime.learning.base import TrainBatch
from echo2_sdk.runtime.learning.learner import Learner


def tiny_model(seed: int = 0, *, hidden: int = 64, layers: int = 2, vocab: int = 96) -> Qwen3ForCausalLM:
    config = Qwen3Config(vocab_size=vocab, hidden_size=hidden, intermediate_size=2 * hidden, num_hidden_layers=layers,
                         num_attention_heads=4, num_key_value_heads=2, head_dim=hidden // 4,
                         max_position_embeddings=256, tie_word_embeddings=True)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        return Qwen3ForCausalLM(config).eval()


def ragged_batch(rows: int = 12, width: int = 40, seed: int = 0, vocab: int = 96) -> TrainBatch:
    """Right-padded rows of 6..width tokens; completions (loss mask) from token 4 on; random advantages."""
    g = torch.Generator().manual_seed(seed)
    lengths = torch.randint(6, width + 1, (rows,), generator=g)
    attn = (torch.arange(width)[None] < lengths[:, None]).long()
    ids = torch.randint(1, vocab, (rows, width), generator=g) * attn
    loss_mask = torch.zeros(rows, width - 1)
    for b in range(rows):
        loss_mask[b, 3:int(lengths[b]) - 1] = 1
    adv = (torch.randn(rows, 1, generator=g).expand(rows, width - 1) * loss_mask).contiguous()
    sampler = -torch.rand(rows, width - 1, generator=g) * 3 * loss_mask
    return TrainBatch(ids, attn, loss_mask, adv, sampler, torch.zeros(rows, dtype=torch.long))


def make_learner(loss_agg: str = "token-mean", *, lr: float = 1e-3, **kwargs) -> Learner:
    return Learner(tiny_model(), lr=lr, num_minibatches=2, loss_kwargs={"loss_agg": loss_agg}, seed=3, **kwargs)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def spawn(fn, world_size: int, *args) -> None:
    """Run ``fn(rank, world_size, port, *args)`` in ``world_size`` fresh processes (gloo ranks)."""
    tests = str(Path(__file__).resolve().parent)
    if tests not in sys.path:
        sys.path.insert(0, tests)
    mp.spawn(_rank_main, args=(fn, world_size, free_port(), *args), nprocs=world_size, join=True)


def _rank_main(rank: int, fn, world_size: int, port: int, *args) -> None:
    fn(rank, world_size, port, *args)
    # Leave together and tear the group down before the interpreter exits: a rank that exits while
    # gloo's threads still run (its peer still saving) can abort with "terminate called without an
    # active exception" (seen once in CI, SIGABRT of rank 1).
    import torch.distributed as dist

    if dist.is_initialized():
        dist.barrier()
        dist.destroy_process_group()
    # ...and skip the interpreter's exit: C++ static destructors there can still find a joinable gloo thread and
    # abort the same way (seen again with the barrier in place). Whatever a rank writes is closed by now.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)
