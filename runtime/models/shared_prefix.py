"""Shared-prefix scoring: the samples of a GRPO group repeat one untrained prefix; run it once.

The n samples of a group start with the same tokens (system prompt, question, first observation) that
the loss never trains on. Scored row by row, the decoder runs that prefix n times. Packed, each distinct
prefix becomes one row followed by every suffix that continues it, ``[prefix | suffix_1 | suffix_2 | …]``,
under a block mask in which a suffix token sees the prefix and the earlier tokens of its own suffix,
never another suffix, with position ids that restart at ``len(prefix)`` for each suffix. Every
log-prob a suffix needs (from the prefix's last token on) is the unshared forward's, to float
rounding, on P + Σ|suffix_i| tokens instead of n · (P + |suffix|): a quickstart batch (8 questions of
20-26 tokens, 16 answers of 1-6 each) is 3,286 tokens row by row and 646 packed, and its learner step
takes 0.34× the time (``benchmarks/shared_prefix.py``). The idea is Prefix Grouper's (arXiv 2506.05433).

What it costs: a [L, L] boolean mask per packed row (L = the packed length), and attention through
an explicit mask instead of the causal kernels; hence opt-in (``learner.shared_prefix``), for short
answers to long shared prompts. It needs an attention that takes a 4-D mask (``sdpa``, ``eager``).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

__all__ = ["MASKABLE_ATTENTION", "PackPlan", "plan_packing", "prefix_ends", "require_maskable_attention",
           "shared_prefix_logprobs"]

MASKABLE_ATTENTION = ("sdpa", "eager")
"""Hugging Face attention implementations that honour a custom 4-D mask."""


@dataclass(frozen=True)
class PackPlan:
    """Where each row's tokens go in the packed batch, and where its scored targets come from.

    G packed rows of length L; N scored targets (every real target from a row's prefix end − 1 on).
    """

    input_ids: Tensor
    """[G, L] long: prefix then its suffixes, right-padded."""
    position_ids: Tensor
    """[G, L] long: 0 … P−1 over the prefix, then P, P+1, … again for each suffix."""
    allowed: Tensor
    """[G, L, L] bool: query i may attend key j (padding attends to itself only, so no row is empty)."""
    src_row: Tensor
    """[N] packed row whose hidden state predicts the target."""
    src_pos: Tensor
    """[N] position in that row."""
    dst_row: Tensor
    """[N] original row b of the target."""
    dst_pos: Tensor
    """[N] original target index t (the target is input_ids[b, t + 1])."""
    targets: Tensor
    """[N] long: the target token ids."""
    packed_tokens: int
    """Real tokens the packed batch runs (Σ over groups of P + Σ|suffix|)."""
    unpacked_tokens: int
    """Real tokens the row-by-row forward runs."""


def _real_spans(attention_mask: Tensor) -> tuple[Tensor, Tensor]:
    """(first real column, one past the last) of each row: [B] long each (0, 0 for an empty row)."""
    real = attention_mask.bool()
    first = real.int().argmax(dim=1)
    last = real.shape[1] - real.flip(1).int().argmax(dim=1)
    empty = ~real.any(dim=1)
    return first.masked_fill(empty, 0), last.masked_fill(empty, 0)


def prefix_ends(loss_mask: Tensor, attention_mask: Tensor) -> Tensor:
    """Per row, the end (exclusive, in column coordinates) of its untrained prefix: [B] long.

    loss_mask: [B, T-1] (target t is token t+1); attention_mask: [B, T]. The prefix runs to the token
    that predicts the first trained target; a row with no trained target is all prefix.

    >>> prefix_ends(torch.tensor([[0., 0, 1, 1], [0, 0, 0, 0]]), torch.tensor([[1, 1, 1, 1, 1], [1, 1, 1, 0, 0]]))
    tensor([3, 3])
    """
    trained = loss_mask.bool()
    return torch.where(trained.any(dim=1), trained.int().argmax(dim=1) + 1, _real_spans(attention_mask)[1])


def plan_packing(input_ids: Tensor, attention_mask: Tensor, loss_mask: Tensor) -> PackPlan | None:
    """The packing of rows ``input_ids`` [B, T] (``loss_mask`` [B, T-1] says where each prefix ends); None
    where it cannot pack.

    Rows group by their exact prefix tokens. None when a row's real tokens are not one contiguous run
    (the packed positions would differ from the row's) or when packing would not run fewer tokens.
    """
    first, last = _real_spans(attention_mask)
    if bool(((last - first) != attention_mask.bool().sum(dim=1)).any()) or bool((last == first).any()):
        return None
    ends = torch.minimum(torch.maximum(prefix_ends(loss_mask, attention_mask), first + 1), last)
    spans = list(zip(first.tolist(), ends.tolist(), last.tolist()))
    groups: dict[bytes, list[int]] = {}
    for b, (start, end, _) in enumerate(spans):
        groups.setdefault(input_ids[b, start:end].numpy().tobytes(), []).append(b)
    unpacked = int((last - first).sum())
    lengths = [(spans[rows[0]][1] - spans[rows[0]][0]) + sum(spans[b][2] - spans[b][1] for b in rows)
               for rows in groups.values()]
    if sum(lengths) >= unpacked:
        return None
    width = max(lengths)
    ids = torch.zeros(len(groups), width, dtype=torch.long)
    pos = torch.zeros(len(groups), width, dtype=torch.long)
    seg = torch.full((len(groups), width), -1, dtype=torch.long)  # -1 padding, 0 prefix, k suffix k
    src_row, src_pos, dst_row, dst_pos, targets = [], [], [], [], []
    for g, rows in enumerate(groups.values()):
        start, end, _ = spans[rows[0]]
        plen = end - start
        ids[g, :plen] = input_ids[rows[0], start:end]
        pos[g, :plen] = torch.arange(plen)
        seg[g, :plen] = 0
        cursor = plen
        for k, b in enumerate(rows, start=1):
            _, end, stop = spans[b]
            n = stop - end
            ids[g, cursor:cursor + n] = input_ids[b, end:stop]
            pos[g, cursor:cursor + n] = plen + torch.arange(n)
            seg[g, cursor:cursor + n] = k
            # targets t = end-1 … stop-2: the first from the prefix's last token, the rest from the suffix
            src_pos.append(torch.cat([torch.tensor([plen - 1]), cursor + torch.arange(n - 1)]) if n > 0
                           else torch.zeros(0, dtype=torch.long))
            src_row.append(torch.full((n,), g))
            dst_row.append(torch.full((n,), b))
            dst_pos.append(torch.arange(end - 1, stop - 1))
            targets.append(input_ids[b, end:stop])
            cursor += n
    causal = torch.ones(width, width, dtype=torch.bool).tril()
    same = (seg[:, :, None] == seg[:, None, :]) | (seg[:, None, :] == 0)
    allowed = causal & same & (seg[:, :, None] >= 0) & (seg[:, None, :] >= 0)
    allowed |= torch.eye(width, dtype=torch.bool)  # a padding query attends to itself: no empty softmax row
    return PackPlan(ids, pos, allowed, torch.cat(src_row), torch.cat(src_pos), torch.cat(dst_row),
                    torch.cat(dst_pos), torch.cat(targets), packed_tokens=sum(lengths), unpacked_tokens=unpacked)


def require_maskable_attention(implementation: str) -> None:
    """Refuse an attention implementation that ignores a custom 4-D mask (one line naming the fix)."""
    if implementation not in MASKABLE_ATTENTION:
        raise ValueError(f"shared_prefix=True needs attention in {MASKABLE_ATTENTION}, the model uses "
                         f"{implementation!r}; load it with attn_implementation='sdpa' or set "
                         "learner.shared_prefix=false")


def attention_mask_4d(allowed: Tensor, implementation: str, dtype: torch.dtype) -> Tensor:
    """[G, 1, L, L]: boolean for ``sdpa``, additive (0 / dtype min) for ``eager``."""
    require_maskable_attention(implementation)
    if implementation == "sdpa":
        return allowed[:, None]
    blocked = torch.zeros(allowed.shape, dtype=dtype).masked_fill(~allowed, torch.finfo(dtype).min)
    return blocked[:, None]


def shared_prefix_logprobs(decoder: torch.nn.Module, head_logprobs, plan: PackPlan, shape: torch.Size,
                           implementation: str, device: torch.device) -> Tensor:
    """[B, T-1] float32 log-probs from one packed decoder pass; targets inside a prefix are 0 (unscored).

    ``head_logprobs(states [N, H], targets [N]) -> [N]`` applies the output head (the caller chunks it).
    """
    mask = attention_mask_4d(plan.allowed, implementation, torch.float32).to(device)
    hidden = decoder(input_ids=plan.input_ids.to(device), attention_mask=mask,
                     position_ids=plan.position_ids.to(device), use_cache=False).last_hidden_state
    states = hidden[plan.src_row.to(device), plan.src_pos.to(device)]
    out = torch.zeros(shape[0], shape[1] - 1, dtype=torch.float32, device=hidden.device)
    if plan.targets.numel() == 0:
        return out + hidden.sum() * 0  # keep the graph: every rank's backward must reach the same parameters
    values = head_logprobs(states, plan.targets.to(device))
    return out.index_put((plan.dst_row.to(device), plan.dst_pos.to(device)), values)
