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


DEFAULT_CHUNK_TOKENS = 1024
"""Tokens whose [V]-wide logits exist at once in the chunked path (Qwen3's V = 151,936: 0.6 GB fp32)."""


def sequence_logprobs(
    model: torch.nn.Module,
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor,
    temperature: float = 1.0,
    *,
    chunk_tokens: int | None = DEFAULT_CHUNK_TOKENS,
) -> torch.Tensor:
    """Log-prob of each next token: out[b, t] = log p(input_ids[b, t+1] | input_ids[b, :t+1]).

    input_ids, attention_mask: [B, T], left or right padded. Returns [B, T-1] float32.
    Entries whose target is padding are set to 0 (padded query rows can produce NaN/inf logits,
    which would poison a masked sum since NaN * 0 = NaN). Gradients flow; wrap the call in
    torch.no_grad() when only scoring.

    Memory: the full path materializes [B, T, V] logits (and a float32 copy): 4.9 GB per 8k-token
    sequence of a 151k vocabulary. With ``chunk_tokens`` (default) and a model that exposes its
    decoder and output head (every HF causal LM without logit soft-capping), the head runs on
    ``chunk_tokens`` real target positions at a time, recomputed in backward (activation
    checkpointing), so at most one chunk of logits is alive; padded targets are never scored.
    Both paths give the same numbers (tested); ``chunk_tokens=None`` forces the full one.
    """
    if input_ids.shape != attention_mask.shape or input_ids.dim() != 2:
        raise ValueError(
            f"input_ids {tuple(input_ids.shape)} and attention_mask {tuple(attention_mask.shape)} "
            "must both be [batch, time]"
        )
    target_is_real = attention_mask[:, 1:].bool()
    kwargs = dict(input_ids=input_ids, attention_mask=attention_mask,
                  position_ids=positions_from_mask(attention_mask), use_cache=False)
    head = _chunkable_head(model) if chunk_tokens else None
    if head is None:
        logits = model(**kwargs).logits[:, :-1]
        logprobs = token_logprobs_from_logits(logits, input_ids[:, 1:], temperature)
        return torch.where(target_is_real, logprobs, torch.zeros_like(logprobs))
    hidden = model.get_decoder()(**kwargs).last_hidden_state[:, :-1]  # [B, T-1, H]
    rows = target_is_real.nonzero(as_tuple=True)
    states, targets = hidden[rows], input_ids[:, 1:][rows]  # [N, H], [N]
    out = torch.zeros(target_is_real.shape, dtype=torch.float32, device=hidden.device)
    if targets.numel():
        out = out.index_put(rows, chunked_head_logprobs(head, states, targets, temperature, chunk_tokens))
    return out


def chunked_head_logprobs(head: torch.nn.Module, states: torch.Tensor, targets: torch.Tensor, temperature: float,
                          chunk_tokens: int) -> torch.Tensor:
    """Log-probs of ``targets`` [N] under ``head(states)`` ([N, H]), ``chunk_tokens`` rows of logits at a time."""
    pieces = []
    for start in range(0, targets.numel(), chunk_tokens):
        h, t = states[start:start + chunk_tokens], targets[start:start + chunk_tokens]
        if torch.is_grad_enabled():  # recomputed in backward: one chunk of [V]-wide logits alive at a time
            pieces.append(torch.utils.checkpoint.checkpoint(_head_logprobs, head, h, t, temperature,
                                                            use_reentrant=False))
        else:
            pieces.append(_head_logprobs(head, h, t, temperature))
    return torch.cat(pieces)


def _head_logprobs(head: torch.nn.Module, states: torch.Tensor, targets: torch.Tensor,
                   temperature: float) -> torch.Tensor:
    return token_logprobs_from_logits(head(states), targets, temperature)


def _chunkable_head(model: torch.nn.Module) -> torch.nn.Module | None:
    """The output head if logits = head(decoder(x).last_hidden_state) exactly, else None."""
    config = getattr(model, "config", None)
    if getattr(config, "final_logit_softcapping", None) or getattr(config, "logit_scale", None):
        return None
    get_decoder, get_head = getattr(model, "get_decoder", None), getattr(model, "get_output_embeddings", None)
    if get_decoder is None or get_head is None:
        return None
    try:
        decoder, head = get_decoder(), get_head()
    except (AttributeError, NotImplementedError):
        return None
    return head if decoder is not None and head is not None and decoder is not model else None


# The learner imports the function under this name; both names are the one implementation.
token_logprobs = sequence_logprobs


class SequenceLogprobs(torch.nn.Module):
    """``sequence_logprobs`` of ``lm`` as a module's forward.

    The chunked path calls the decoder and the output head directly, bypassing the causal LM's own
    forward; sharded with FSDP, the root's hooks (which gather the embedding, final norm and head, and
    reduce their gradients) would never fire. Made the FSDP root, this module's forward wraps both.
    """

    def __init__(self, lm: torch.nn.Module) -> None:
        super().__init__()
        self.lm = lm

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor, temperature: float = 1.0,
                pack=None) -> torch.Tensor:
        """[B, T-1] log-probs; with ``pack`` (a ``shared_prefix.PackPlan`` of these rows) each shared prefix
        runs once."""
        head = _chunkable_head(self.lm) if pack is not None else None
        if head is None:
            return sequence_logprobs(self.lm, input_ids, attention_mask, temperature)
        from echo2_sdk.runtime.models.shared_prefix import shared_prefix_logprobs

        def head_logprobs(states: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
            return chunked_head_logprobs(head, states, targets, temperature, DEFAULT_CHUNK_TOKENS)

        return shared_prefix_logprobs(self.lm.get_decoder(), head_logprobs, pack, input_ids.shape,
                                      attention_implementation(self.lm), input_ids.device)


def attention_implementation(model: torch.nn.Module) -> str:
    """The Hugging Face attention implementation ``model`` runs (``sdpa``, ``eager``, ``flash_attention_2``, …)."""
    config = getattr(model, "config", None)
    return str(getattr(config, "_attn_implementation", None) or "eager")
