"""The ``learner:`` config section: ranks, micro-batches, precision, activation checkpointing."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from echo2_sdk.config_loader import ConfigError


@dataclass(frozen=True)
class LearnerConfig:
    num_ranks: int = 1
    """Data-parallel learner ranks. 1: the learner runs in the driver process. ≥ 2: Ray actors placed
    together on one node (one GPU each with ``learner.gpus_per_rank``), sharding parameters, gradients and
    optimizer state with FSDP2 over NCCL (GPUs) or gloo (CPU); rank 0 gathers snapshots and checkpoints,
    which load under any other ``num_ranks``."""
    micro_batch_tokens: int | None = None
    """Most padded tokens (rows × longest row) one forward/backward holds. Each optimizer update is split
    across ranks and then into micro-batches of at most this many tokens (sequences sorted by length, so
    little padding); gradients accumulate with the whole mini-batch's normalisation. A sequence longer
    than the budget gets a micro-batch of its own. null: each rank's share of a mini-batch in one pass."""
    precision: Literal["fp32", "bf16-mixed", "bf16"] = "fp32"
    """``fp32``; ``bf16-mixed``: float32 master weights and AdamW state, bf16 compute (FSDP mixed precision
    with float32 gradient reduction, or autocast on one rank) — what GPU runs use; ``bf16``: weights and
    optimizer in bf16 (loses most updates at RL learning rates; warned below lr 1e-4). Snapshots reach the
    workers in ``model.dtype`` whatever this is."""
    gradient_checkpointing: bool = False
    """Recompute each decoder layer's activations in backward (HF activation checkpointing): activations
    shrink to one layer input per token and layer, at about a third more compute."""
    shared_prefix: bool = False
    """Score the untrained prefix the samples of a group share (the prompt; for games, the system prompt and
    first observation) once per micro-batch instead of once per sample: each prefix is one packed row
    followed by all its continuations under a block attention mask (``runtime/models/shared_prefix.py``).
    The same log-probs on every trained token, to float rounding; n · (P + A) tokens become P + n · A.
    Costs a [L, L] boolean mask per packed row and needs ``sdpa`` or ``eager`` attention, so it is off by
    default; worth it when prompts are long next to the answers (the quickstart's learner step: 0.34× the
    time, ``benchmarks/shared_prefix.py``)."""
    gpus_per_rank: float = 0
    """GPUs each rank actor reserves (``num_ranks`` ≥ 2); 0 on CPU. GPU configs set 1."""
    backend: Literal["auto", "nccl", "gloo"] = "auto"
    """Collective backend of the ranks: ``auto`` is NCCL when the rank sees a GPU, else gloo."""
    memory_headroom_frac: float = 0.1
    """Share of the device the memory plan must leave free (allocator slack, communication buffers);
    a plan that needs more refuses to start and names the knob to change."""
    check_memory: bool = True
    """Refuse a plan whose estimate does not fit the visible device memory (false: only print it)."""
    rank_timeout_s: float = 1800.0
    """How long a rank waits in a collective before giving up (a dead peer must not hang the run)."""

    def __post_init__(self) -> None:
        if self.num_ranks < 1:
            raise ConfigError(f"learner.num_ranks={self.num_ranks} must be ≥ 1 (1: the learner in the driver process)")
        if self.micro_batch_tokens is not None and self.micro_batch_tokens < 2:
            raise ConfigError(f"learner.micro_batch_tokens={self.micro_batch_tokens} must be ≥ 2 tokens, "
                              "or null for one pass per mini-batch")
        if self.gpus_per_rank < 0:
            raise ConfigError(f"learner.gpus_per_rank={self.gpus_per_rank} must be ≥ 0 (1 on GPU nodes)")
        if not 0 <= self.memory_headroom_frac < 1:
            raise ConfigError(f"learner.memory_headroom_frac={self.memory_headroom_frac} must be in [0, 1), e.g. 0.1")
        if not self.rank_timeout_s > 0:
            raise ConfigError(f"learner.rank_timeout_s={self.rank_timeout_s} must be > 0 seconds")
