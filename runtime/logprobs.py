"""Per-token log-probabilities of a sequence, computed the same way by sampler and learner.

Both sides score token t+1 with log_softmax(logits_t / temperature) and derive position ids from
the attention mask, so a left-padded rollout batch (sampler) and a right-padded training batch
(learner) give identical numbers for the real tokens.
"""

from __future__ import annotations

import torch


def logprob_temperature(temperature: float) -> float:
    """Temperature used for reported log-probs: greedy decoding (0) is scored untempered."""
    return temperature if temperature > 0 else 1.0


def positions_from_mask(attention_mask: torch.Tensor) -> torch.Tensor:
    """Position ids [B, T] that count only real tokens; pad slots get 0 (their value is unused)."""
    return (attention_mask.long().cumsum(-1) - 1).clamp(min=0)


def token_logprobs_from_logits(
    logits: torch.Tensor, targets: torch.Tensor, temperature: float
) -> torch.Tensor:
    """log_softmax(logits / temperature) gathered at `targets`.

    logits: [..., V]; targets: [...] (long). Returns [...] in float32.
    gather - logsumexp avoids materialising a second [..., V] log-softmax tensor.
    """
    scaled = logits.float() / logprob_temperature(temperature)
    picked = scaled.gather(-1, targets.unsqueeze(-1)).squeeze(-1)
    return picked - torch.logsumexp(scaled, dim=-1)


def sequence_logprobs(
    model: torch.nn.Module,
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor,
    temperature: float = 1.0,
) -> torch.Tensor:
    """Log-prob of each next token: out[b, t] = log p(input_ids[b, t+1] | input_ids[b, :t+1]).

    input_ids, attention_mask: [B, T], left or right padded. Returns [B, T-1] float32.
    Entries whose target is padding are set to 0 (padded query rows can produce NaN/inf logits,
    which would poison a masked sum since NaN * 0 = NaN). Gradients flow; wrap the call in
    torch.no_grad() when only scoring.
    """
    if input_ids.shape != attention_mask.shape or input_ids.dim() != 2:
        raise ValueError(
            f"input_ids {tuple(input_ids.shape)} and attention_mask {tuple(attention_mask.shape)} "
            "must both be [batch, time]"
        )
    logits = model(
        input_ids=input_ids,
        attention_mask=attention_mask,
        position_ids=positions_from_mask(attention_mask),
        use_cache=False,
    ).logits[:, :-1]
    logprobs = token_logprobs_from_logits(logits, input_ids[:, 1:], temperature)
    target_is_real = attention_mask[:, 1:].bool()
    return torch.where(target_is_real, logprobs, torch.zeros_like(logprobs))


# The learner imports the function under this name; both names are the one implementation.
token_logprobs = sequence_logprobs
