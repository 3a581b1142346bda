"""Learner ranks: the process group, FSDP2 sharding, mixed precision, and full state dicts.

Ranks shard parameters, gradients and optimizer state with FSDP2 (``fully_shard`` per decoder layer,
then the root), over NCCL on GPUs and ``gloo`` on CPU, so the sharded path runs in CPU tests. Precision:

- ``fp32``: float32 weights, optimizer and compute.
- ``bf16-mixed``: float32 master weights and optimizer state, bf16 compute (FSDP's
  ``MixedPrecisionPolicy(param_dtype=bf16, reduce_dtype=fp32)`` when sharded, ``torch.autocast`` on an
  unsharded single rank). This is what large-model RL runs need: at lr 1e-6, pure-bf16 AdamW leaves
  ~98 % of the weights unchanged (the update is below bf16's resolution).
- ``bf16``: weights and optimizer state in bf16 (explicit opt-in; warned about at low learning rates).

State dicts leave this module as full (unsharded) CPU tensors under Hugging Face keys, on rank 0, so
checkpoints and snapshots do not depend on the number of ranks.
"""

from __future__ import annotations

import contextlib
import datetime
from dataclasses import dataclass
from typing import Iterator, Sequence

import torch
import torch.distributed as dist
from torch import Tensor

PRECISIONS = ("fp32", "bf16-mixed", "bf16")


@dataclass(frozen=True)
class RankGroup:
    """This process's place among the learner ranks."""

    rank: int
    world_size: int

    @property
    def is_main(self) -> bool:
        return self.rank == 0


SINGLE = RankGroup(0, 1)


def init_rank_group(rank: int, world_size: int, master_addr: str, master_port: int, *,
                    backend: str | None = None, timeout_s: float = 600.0) -> RankGroup:
    """Join the learner's process group (NCCL when CUDA is visible, else gloo)."""
    backend = backend or ("nccl" if torch.cuda.is_available() else "gloo")
    if backend == "nccl":
        torch.cuda.set_device(torch.cuda.current_device())
    dist.init_process_group(backend, init_method=f"tcp://{master_addr}:{master_port}", rank=rank,
                            world_size=world_size, timeout=datetime.timedelta(seconds=timeout_s))
    return RankGroup(rank, world_size)


def current_group() -> RankGroup:
    """The initialised process group's rank and size (a single rank when none is initialised)."""
    if dist.is_available() and dist.is_initialized():
        return RankGroup(dist.get_rank(), dist.get_world_size())
    return SINGLE


def decoder_layers(model: torch.nn.Module) -> Sequence[torch.nn.Module]:
    """The repeated blocks FSDP wraps one by one (every HF decoder-only LM keeps them in ``.layers``)."""
    decoder = model.get_decoder() if hasattr(model, "get_decoder") else None
    layers = getattr(decoder, "layers", None)
    if layers is None:
        raise TypeError(f"{type(model).__name__} exposes no decoder layers (model.get_decoder().layers); "
                        "FSDP sharding needs a Hugging Face decoder-only causal LM")
    return layers


def shard_model(model: torch.nn.Module, precision: str) -> torch.nn.Module:
    """``fully_shard`` each decoder layer, then a log-prob root; bf16-mixed computes in bf16, reduces in fp32.

    Returns the root: a :class:`SequenceLogprobs` around ``model`` whose forward gives per-token
    log-probs (the chunked head runs inside the root's hooks). ``model`` itself keeps its names, so its
    state dict has the Hugging Face keys.
    """
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

    from echo2_sdk.runtime.models.logprobs import SequenceLogprobs

    policy = (MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
              if precision == "bf16-mixed" else MixedPrecisionPolicy())
    for layer in decoder_layers(model):
        fully_shard(layer, mp_policy=policy)
    root = SequenceLogprobs(model)
    fully_shard(root, mp_policy=policy)
    return root


def master_dtype(precision: str) -> torch.dtype:
    """dtype the learner keeps its weights and optimizer state in."""
    if precision not in PRECISIONS:
        raise ValueError(f"precision={precision!r} is not one of {PRECISIONS}")
    return torch.bfloat16 if precision == "bf16" else torch.float32


def compute_context(precision: str, device: torch.device, sharded: bool) -> contextlib.AbstractContextManager:
    """bf16 autocast for an unsharded bf16-mixed rank (FSDP's policy does the casting when sharded)."""
    if precision == "bf16-mixed" and not sharded:
        return torch.autocast(device_type=device.type, dtype=torch.bfloat16)
    return contextlib.nullcontext()


def scalar(value: Tensor) -> float:
    """A (possibly DTensor) scalar as a Python float."""
    full = value.full_tensor() if hasattr(value, "full_tensor") else value
    return float(full)


def all_reduce(values: list[float], group: RankGroup, op: str = "sum") -> list[float]:
    """Element-wise sum (or max) of ``values`` over ranks; the identity on a single rank."""
    if group.world_size == 1 or not values:
        return list(values)
    tensor = torch.tensor(values, dtype=torch.float64, device=_collective_device())
    dist.all_reduce(tensor, op=dist.ReduceOp.MAX if op == "max" else dist.ReduceOp.SUM)
    return tensor.cpu().tolist()


def all_reduce_tensor(tensor: Tensor, group: RankGroup) -> Tensor:
    """Sum of a CPU tensor over ranks (per-sequence statistics that each rank fills for its own rows)."""
    if group.world_size == 1:
        return tensor
    moved = tensor.to(_collective_device(), dtype=torch.float64)
    dist.all_reduce(moved)
    return moved.to("cpu", dtype=tensor.dtype)


def _collective_device() -> torch.device:
    return torch.device("cuda", torch.cuda.current_device()) if dist.get_backend() == "nccl" else torch.device("cpu")


def aliases(model: torch.nn.Module) -> dict[str, str]:
    """Parameter names that are another name's tensor (tied embeddings): alias -> first name."""
    first: dict[int, str] = {}
    out: dict[str, str] = {}
    for name, param in model.named_parameters(remove_duplicate=False):
        if id(param) in first:
            out[name] = first[id(param)]
        else:
            first[id(param)] = name
    return out


def full_model_state(model: torch.nn.Module, sharded: bool, tied: dict[str, str]) -> dict[str, Tensor]:
    """Full CPU state dict under HF keys (collective when sharded; ranks other than 0 get ``{}``).

    Tied names share one tensor, as they do in the model.
    """
    if sharded:
        from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict

        state = get_model_state_dict(model, options=StateDictOptions(full_state_dict=True, cpu_offload=True))
    else:
        state = {name: tensor.detach().to("cpu", copy=True) for name, tensor in model.state_dict().items()}
    for alias, name in tied.items():
        if alias in state and name in state:
            state[alias] = state[name]
    return state


def full_optimizer_state(model: torch.nn.Module, optimizer: torch.optim.Optimizer, sharded: bool) -> dict:
    """Optimizer state keyed by parameter name (independent of the number of ranks; collective if sharded)."""
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_optimizer_state_dict

    options = StateDictOptions(full_state_dict=True, cpu_offload=True) if sharded else None
    return get_optimizer_state_dict(model, optimizer, options=options)


def load_model_state(model: torch.nn.Module, state: dict[str, Tensor], sharded: bool) -> None:
    """Load a full state dict (every rank passes the same one; each keeps its shard)."""
    from torch.distributed.checkpoint.state_dict import StateDictOptions, set_model_state_dict

    if sharded:
        set_model_state_dict(model, state, options=StateDictOptions(full_state_dict=True))
    else:
        model.load_state_dict(state, strict=True)


def load_optimizer_state(model: torch.nn.Module, optimizer: torch.optim.Optimizer, state: dict,
                         sharded: bool) -> None:
    """Load an optimizer state written by :func:`full_optimizer_state`, whatever its number of ranks."""
    from torch.distributed.checkpoint.state_dict import StateDictOptions, set_optimizer_state_dict

    options = StateDictOptions(full_state_dict=True) if sharded else None
    set_optimizer_state_dict(model, optimizer, state, options=options)


def trainable(model: torch.nn.Module) -> Iterator[torch.nn.Parameter]:
    return (p for p in model.parameters() if p.requires_grad)
