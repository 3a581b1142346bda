"""The learning plane's contract: the plain, task-blind training tensors a learner consumes."""

from __future__ import annotations

from dataclasses import dataclass, fields

import torch
from torch import Tensor


@dataclass
class TrainBatch:
    """One training step's samples. B sequences of T tokens (prompt + completion).

    input_ids:        [B, T] long, full sequences, right or left padded.
    attention_mask:   [B, T] long, 1 on real tokens.
    loss_mask:        [B, T-1] float 0/1, target-aligned: 1 at j trains the token at j+1
                      (the completion tokens); must be 0 where that token is padding.
    advantages:       [B, T-1] float, target-aligned per-token advantages.
    sampler_logprobs: [B, T-1] float, target-aligned log-probs reported by the sampler.
    versions:         [B] long, policy version that generated each sample.

    Non-float masks/advantages/log-probs are converted to float32 on construction.
    """

    input_ids: Tensor
    attention_mask: Tensor
    loss_mask: Tensor
    advantages: Tensor
    sampler_logprobs: Tensor
    versions: Tensor

    def __post_init__(self) -> None:
        for name in ("loss_mask", "advantages", "sampler_logprobs"):
            value = getattr(self, name)
            if isinstance(value, Tensor) and not value.is_floating_point():
                setattr(self, name, value.float())
        if isinstance(self.attention_mask, Tensor):
            self.attention_mask = self.attention_mask.long()
        self.validate()

    def __len__(self) -> int:
        return self.input_ids.shape[0]

    def validate(self) -> None:
        """Raise ValueError/TypeError naming the first field whose shape, dtype or values is off."""
        for f in fields(self):
            if not isinstance(getattr(self, f.name), Tensor):
                kind = type(getattr(self, f.name)).__name__
                raise TypeError(f"TrainBatch.{f.name} must be a torch.Tensor, got {kind}")
        if self.input_ids.dim() != 2 or self.input_ids.is_floating_point():
            raise ValueError(
                "TrainBatch.input_ids must be an integer [B, T] tensor, got "
                f"{self.input_ids.dtype} {tuple(self.input_ids.shape)}"
            )
        batch_size, seq_len = self.input_ids.shape
        if seq_len < 2:
            raise ValueError(f"TrainBatch needs T >= 2 tokens per sequence, got T={seq_len}")
        expected = {
            "attention_mask": (batch_size, seq_len),
            "loss_mask": (batch_size, seq_len - 1),
            "advantages": (batch_size, seq_len - 1),
            "sampler_logprobs": (batch_size, seq_len - 1),
            "versions": (batch_size,),
        }
        for name, shape in expected.items():
            got = tuple(getattr(self, name).shape)
            if got != shape:
                raise ValueError(
                    f"TrainBatch.{name} has shape {got}, expected {shape} for input_ids of shape "
                    f"{(batch_size, seq_len)} (per-token fields are target-aligned: T-1 columns)"
                )
        if not bool(((self.loss_mask == 0) | (self.loss_mask == 1)).all()):
            raise ValueError("TrainBatch.loss_mask must contain only 0 and 1")
        kept = self.loss_mask > 0
        on_padding = int((kept & (self.attention_mask[:, 1:] == 0)).sum())
        if on_padding:
            raise ValueError(
                f"TrainBatch.loss_mask is 1 on {on_padding} position(s) whose target token is "
                "padding (attention_mask[:, 1:] == 0); zero the loss mask there"
            )
        for name in ("advantages", "sampler_logprobs"):
            bad = int((~torch.isfinite(getattr(self, name)) & kept).sum())
            if bad:
                raise ValueError(
                    f"TrainBatch.{name} has {bad} non-finite value(s) on loss-masked tokens; "
                    "only positions with loss_mask == 0 may hold NaN/inf"
                )

    def select(self, index: Tensor) -> "TrainBatch":
        """Rows `index` (a 1-D long tensor) of every field (not re-validated)."""
        return self._map(lambda value: value[index])

    def to(self, device: str | torch.device) -> "TrainBatch":
        """Every field moved to `device` (not re-validated)."""
        return self._map(lambda value: value.to(device))

    def window(self, index: Tensor, start: int, stop: int) -> "TrainBatch":
        """Rows ``index`` and token columns ``[start, stop)`` (targets ``[start, stop - 1)``): a micro-batch
        cut to the span its real tokens occupy, so right- or left-padding beyond it costs no compute."""
        out = self.select(index)
        for name in ("input_ids", "attention_mask"):
            setattr(out, name, getattr(out, name)[:, start:stop])
        for name in ("loss_mask", "advantages", "sampler_logprobs"):
            setattr(out, name, getattr(out, name)[:, start:stop - 1])
        return out

    def _map(self, fn) -> "TrainBatch":
        out = object.__new__(TrainBatch)  # skips __post_init__: the source batch was validated
        for f in fields(self):
            setattr(out, f.name, fn(getattr(self, f.name)))
        return out
