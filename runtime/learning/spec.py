"""Everything needed to build a learner, as one value: the driver builds it in-process, rank actors remotely."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

import torch

from echo2_sdk.runtime.learning import memory, sharding
from echo2_sdk.runtime.learning.schedule import LrSchedule


@dataclass(frozen=True)
class LearnerSpec:
    """A learner's model, optimizer and loss settings (plain values: it travels to rank actors)."""

    base_path: str
    """Folder (or hub id) of the base policy."""
    rollout_dtype: str = "float32"
    """dtype of snapshots handed to the workers (``model.dtype``)."""
    with_reference: bool = False
    """Load a frozen reference copy (only when the KL term needs it)."""
    lr: float = 1e-4
    lr_schedule: LrSchedule | None = None
    """Per-step lr (None: ``lr`` throughout)."""
    weight_decay: float = 0.0
    max_grad_norm: float | None = 1.0
    num_minibatches: int = 2
    loss_name: str = "grpo"
    loss_kwargs: dict = field(default_factory=dict)
    temperature: float = 1.0
    seed: int = 0
    micro_batch_tokens: int | None = None
    precision: str = "fp32"
    gradient_checkpointing: bool = False
    shared_prefix: bool = False
    """Score each group's shared untrained prefix once (``learner.shared_prefix``)."""
    num_ranks: int = 1
    check_memory: bool = True
    memory_headroom_frac: float = 0.1

    def build(self, device: str | torch.device, group: sharding.RankGroup | None = None,
              log: Callable[[str], None] = print):
        """(Learner, tokenizer) on ``device``, after printing its memory plan and refusing one that cannot fit."""
        from echo2_sdk.runtime.learning.learner import Learner
        from echo2_sdk.runtime.models.modeling import load_policy, resolve_dtype

        group = group or sharding.current_group()
        device = torch.device(device)
        master = sharding.master_dtype(self.precision)
        model, tokenizer = load_policy(self.base_path, dtype=master, device="cpu")
        plan = self.memory_plan(model)
        where = f"{device.type} (rank {group.rank} of {group.world_size})"
        if group.is_main:
            budget = (f"micro_batch_tokens={self.micro_batch_tokens}" if self.micro_batch_tokens else
                      f"micro_batch_tokens=null (estimated at the model's context, {self.budget_tokens(model)})")
            log(f"learner plan per rank, {self.num_ranks} rank(s), {self.precision}, {budget}: {plan.describe()}")
        if self.check_memory:
            memory.check_fits(plan, memory.device_memory(device, self.num_ranks if device.type == "cpu" else 1),
                              num_ranks=self.num_ranks, micro_batch_tokens=self.budget_tokens(model),
                              gradient_checkpointing=self.gradient_checkpointing, where=where,
                              headroom_frac=self.memory_headroom_frac)
        ref = load_policy(self.base_path, dtype=master, device="cpu")[0] if self.with_reference else None
        learner = Learner(
            model, ref_model=ref, lr=self.lr, lr_schedule=self.lr_schedule, weight_decay=self.weight_decay,
            max_grad_norm=self.max_grad_norm,
            num_minibatches=self.num_minibatches, loss_name=self.loss_name, loss_kwargs=dict(self.loss_kwargs),
            temperature=self.temperature, device=device, seed=self.seed,
            gradient_checkpointing=self.gradient_checkpointing, micro_batch_tokens=self.micro_batch_tokens,
            precision=self.precision, rollout_dtype=resolve_dtype(self.rollout_dtype), group=group,
            shard=group.world_size > 1, shared_prefix=self.shared_prefix,
        )
        return learner, tokenizer

    def budget_tokens(self, model: torch.nn.Module) -> int:
        """The micro-batch budget the plan assumes (without one: the model's longest context)."""
        return self.micro_batch_tokens or int(getattr(model.config, "max_position_embeddings", 4096))

    def memory_plan(self, model: torch.nn.Module) -> memory.MemoryPlan:
        return memory.estimate(memory.ModelShapes.of(model), num_ranks=self.num_ranks, precision=self.precision,
                               micro_batch_tokens=self.budget_tokens(model),
                               gradient_checkpointing=self.gradient_checkpointing,
                               with_reference=self.with_reference)
