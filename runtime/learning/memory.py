"""What a learner rank will hold, estimated before it holds it, and a refusal when it cannot fit.

Per rank: float32 master weights, gradients and AdamW's two moments, each divided by the number of
ranks (FSDP2 shards all three); the bf16 compute copies mixed precision adds (FSDP gathers about two
layers at a time; an unsharded rank's autocast caches a bf16 copy of every weight); a sharded frozen
reference when the KL term needs one; and the activations of one micro-batch of ``micro_batch_tokens``
tokens. Activations per token and layer follow from what a Qwen3/Llama decoder layer saves for backward
(the norm inputs and outputs, q/k/v before and after the head norm and rotary embedding, the attention
output, the MLP's gate, up and product): about ``10·h + 4·kv + 4·i`` values; with gradient checkpointing
only each layer's input stays, plus one layer recomputed at a time. The chunked head holds one chunk of
``[chunk, V]`` logits. It is an estimate (allocator slack, NCCL buffers and fragmentation come on top),
so a plan must leave ``headroom_frac`` of the device free.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

GIB = 1024 ** 3


@dataclass(frozen=True)
class ModelShapes:
    """The sizes of a decoder-only LM that memory depends on."""

    num_params: int
    hidden: int
    intermediate: int
    layers: int
    kv_dim: int
    vocab: int

    @classmethod
    def of(cls, model: torch.nn.Module) -> "ModelShapes":
        c = model.config
        head_dim = getattr(c, "head_dim", None) or c.hidden_size // c.num_attention_heads
        kv_heads = getattr(c, "num_key_value_heads", None) or c.num_attention_heads
        unique = {id(p): p.numel() for p in model.parameters()}
        return cls(sum(unique.values()), c.hidden_size, c.intermediate_size, c.num_hidden_layers,
                   kv_heads * head_dim, c.vocab_size)


@dataclass(frozen=True)
class MemoryPlan:
    """Bytes one learner rank holds (estimated)."""

    weights: int
    gradients: int
    optimizer: int
    compute_copies: int
    reference: int
    activations: int
    head: int

    @property
    def total(self) -> int:
        return (self.weights + self.gradients + self.optimizer + self.compute_copies + self.reference
                + self.activations + self.head)

    def describe(self) -> str:
        parts = [("weights", self.weights), ("grads", self.gradients), ("optimizer", self.optimizer),
                 ("compute copies", self.compute_copies), ("reference", self.reference),
                 ("activations", self.activations), ("logit head", self.head)]
        body = ", ".join(f"{name} {value / GIB:.2f}" for name, value in parts if value)
        return f"{body}; total {self.total / GIB:.2f} GiB"


def estimate(shapes: ModelShapes, *, num_ranks: int, precision: str, micro_batch_tokens: int,
             gradient_checkpointing: bool, with_reference: bool, chunk_tokens: int = 1024) -> MemoryPlan:
    """The per-rank :class:`MemoryPlan` of a learner over ``num_ranks`` ranks (see the module docstring).

    >>> s = ModelShapes(num_params=1_000_000, hidden=128, intermediate=512, layers=4, kv_dim=64, vocab=73)
    >>> p = estimate(s, num_ranks=2, precision="fp32", micro_batch_tokens=1000, gradient_checkpointing=False,
    ...              with_reference=False)
    >>> p.weights, p.optimizer, p.activations
    (2000000, 4000000, 58880000)
    """
    master = 2 if precision == "bf16" else 4
    compute = 2 if precision in ("bf16", "bf16-mixed") else 4
    p = shapes.num_params
    sharded = num_ranks > 1
    weights = master * p // num_ranks
    head_params = shapes.vocab * shapes.hidden
    layer_params = (p - head_params) // max(shapes.layers, 1)
    if sharded:  # FSDP gathers about two layers at a time, plus the embedding/head, in the compute dtype
        copies = compute * (2 * layer_params + head_params)
    else:  # one rank: autocast caches a bf16 cast of every weight it touches
        copies = 2 * p if precision == "bf16-mixed" else 0
    per_token_layer = 10 * shapes.hidden + 4 * shapes.kv_dim + 4 * shapes.intermediate
    if gradient_checkpointing:
        activations = micro_batch_tokens * compute * (shapes.hidden * shapes.layers + per_token_layer)
    else:
        activations = micro_batch_tokens * compute * per_token_layer * shapes.layers
    activations += micro_batch_tokens * 4 * 3 * shapes.hidden  # final hidden states, fp32 norm, their grads
    head = min(chunk_tokens, micro_batch_tokens) * shapes.vocab * (compute + 4 + 4) * 2
    return MemoryPlan(weights=weights, gradients=weights, optimizer=2 * 4 * p // num_ranks,
                      compute_copies=copies, reference=weights if with_reference else 0,
                      activations=activations, head=head)


def device_memory(device: torch.device, ranks_on_host: int) -> int | None:
    """Bytes free on ``device`` for one rank (CUDA: free now; CPU: physical memory / ranks), None if unknown."""
    if device.type == "cuda":
        free, _ = torch.cuda.mem_get_info(device)
        return int(free)
    try:
        import os

        return os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE") // max(ranks_on_host, 1)
    except (ValueError, OSError, AttributeError):
        return None


def check_fits(plan: MemoryPlan, available: int | None, *, num_ranks: int, micro_batch_tokens: int,
               gradient_checkpointing: bool, where: str, headroom_frac: float = 0.1) -> None:
    """Raise MemoryError naming the knobs when ``plan`` needs more than ``available`` minus headroom."""
    if available is None or plan.total <= available * (1 - headroom_frac):
        return
    knobs = [f"more ranks (learner.num_ranks={num_ranks})",
             f"a smaller learner.micro_batch_tokens (now {micro_batch_tokens})"]
    if not gradient_checkpointing:
        knobs.append("learner.gradient_checkpointing=true")
    raise MemoryError(f"the learner plan needs {plan.total / GIB:.1f} GiB per rank on {where} "
                      f"({plan.describe()}) but {available / GIB:.1f} GiB is available "
                      f"(keeping {headroom_frac:.0%} headroom); use " + ", ".join(knobs))
