"""Turn validated rollout records into the learner's plain tensors (task-blind).

Advantages are computed here, over the whole step's samples, because a grouping may span several
prompt groups (``batch`` grouping, or a task key such as a poker hand bucket).
"""

from __future__ import annotations

from typing import Sequence

import torch

from echo2_sdk.records import Rollout
from echo2_sdk.signals import (broadcast_to_tokens, compute_advantages, grouping_keys, turn_advantages, turn_spans,
                               turn_state_keys)
from echo2_sdk.runtime.learning.base import TrainBatch


def collate(
    records: Sequence[Rollout],
    *,
    pad_id: int,
    grouping: str = "prompt",
    estimator: str = "grpo",
    turn_advantage_weight: float = 0.0,
    turn_states: Sequence[Sequence[int]] | None = None,
) -> tuple[TrainBatch, torch.Tensor]:
    """Right-pad records into a ``TrainBatch`` and return it with the [B] sequence advantages.

    Layout: sequence b is prompt (P tokens) + completion (C tokens). Target position j predicts
    token j+1, so completion token i sits at target P − 1 + i; ``loss_mask``, ``advantages`` and
    ``sampler_logprobs`` ([B, T-1]) are filled there and are 0 elsewhere. With ``turn_advantage_weight``
    ω > 0 each assistant turn's tokens get A_episode + ω·A_turn (:func:`echo2_sdk.signals.turn_advantages`);
    ``turn_states``: the records' :func:`record_turn_states`, when the caller has them already.
    """
    if not records:
        raise ValueError("collate needs at least one record")
    keys = grouping_keys([r.prompt_key for r in records], [r.omega.group for r in records], grouping)
    seq_adv = compute_advantages([r.reward for r in records], keys, estimator)
    lengths = [r.num_tokens for r in records]
    B, T = len(records), max(lengths)
    input_ids = torch.full((B, T), pad_id, dtype=torch.long)
    attention_mask = torch.zeros((B, T), dtype=torch.long)
    loss_mask = torch.zeros((B, T - 1), dtype=torch.float32)
    sampler_lp = torch.zeros((B, T - 1), dtype=torch.float32)
    for b, rec in enumerate(records):
        P, C = len(rec.prompt_ids), len(rec.completion_ids)
        input_ids[b, : P + C] = torch.tensor(rec.prompt_ids + rec.completion_ids, dtype=torch.long)
        attention_mask[b, : P + C] = 1
        loss_mask[b, P - 1 : P - 1 + C] = torch.tensor(rec.omega.loss_mask, dtype=torch.float32)
        sampler_lp[b, P - 1 : P - 1 + C] = torch.tensor(rec.sampler_logprobs, dtype=torch.float32)
    advantages = broadcast_to_tokens(seq_adv, loss_mask)
    if turn_advantage_weight:
        states = record_turn_states(records) if turn_states is None else turn_states
        per_turn = turn_advantages([r.reward for r in records], keys, states, estimator)
        for b, (rec, adv) in enumerate(zip(records, per_turn)):
            rec_spans = turn_spans(rec.omega.loss_mask)
            offset = len(rec.prompt_ids) - 1
            for (start, end), a in zip(rec_spans, adv):
                advantages[b, offset + start: offset + end] += turn_advantage_weight * a
    batch = TrainBatch(
        input_ids=input_ids,
        attention_mask=attention_mask,
        loss_mask=loss_mask,
        advantages=advantages,
        sampler_logprobs=sampler_lp * loss_mask,
        versions=torch.tensor([r.version for r in records], dtype=torch.long),
    )
    return batch, seq_adv


def record_turn_states(records: Sequence[Rollout]) -> list[list[int]]:
    """Each record's per-turn state keys (:func:`echo2_sdk.signals.turn_state_keys`): a hash of the history
    before every assistant turn."""
    return [turn_state_keys(r.prompt_ids, r.completion_ids, turn_spans(r.omega.loss_mask)) for r in records]
