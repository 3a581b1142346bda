"""The interface every rollout generation backend implements (HF transformers, vLLM, ...).

Log-probability convention (shared with the learner, see `echo2_sdk.runtime.models.logprobs`):
`Completion.logprobs[i]` is log_softmax(logits / temperature)[token_ids[i]], i.e. the sampler's
temperature-scaled distribution *before* top-p truncation. The learner recomputes log-probs the
same way, so when sampler and learner hold equal weights the truncated-importance-sampling ratio
pi_learner / pi_sampler is exactly 1 (up to float noise). Top-p only decides which tokens can be
drawn; it is not folded into the reported number. With temperature == 0 (greedy decoding)
the reported log-probs are those of the untempered distribution, log_softmax(logits).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass

import torch

FINISH_STOP = "stop"  # the model emitted its eos token (included in token_ids)
FINISH_LENGTH = "length"  # max_new_tokens reached without eos


@dataclass(frozen=True)
class SamplingParams:
    """How to sample. temperature == 0 means greedy; seed makes a call reproducible."""

    temperature: float = 1.0
    top_p: float = 1.0
    max_new_tokens: int = 32
    seed: int | None = None

    def __post_init__(self):
        if self.temperature < 0:
            raise ValueError(f"temperature must be >= 0 (0 = greedy), got {self.temperature}")
        if not 0.0 < self.top_p <= 1.0:
            raise ValueError(f"top_p must be in (0, 1], got {self.top_p}")
        if self.max_new_tokens < 1:
            raise ValueError(f"max_new_tokens must be >= 1, got {self.max_new_tokens}")


@dataclass(frozen=True)
class Completion:
    """One sampled continuation of a prompt.

    token_ids: generated ids, no padding; ends with the eos id when finish_reason == "stop".
    logprobs: same length as token_ids; see the module docstring for the convention.
    finish_reason: "stop" (eos emitted) or "length" (max_new_tokens reached).
    """

    token_ids: tuple[int, ...]
    logprobs: tuple[float, ...]
    finish_reason: str

    def __post_init__(self):
        if len(self.token_ids) != len(self.logprobs):
            raise ValueError(
                f"Completion has {len(self.token_ids)} token_ids but {len(self.logprobs)} logprobs;"
                " a backend must report one logprob per generated token"
            )
        if self.finish_reason not in (FINISH_STOP, FINISH_LENGTH):
            raise ValueError(
                f"finish_reason must be {FINISH_STOP!r} or {FINISH_LENGTH!r}, "
                f"got {self.finish_reason!r}"
            )


class GenerationBackend(ABC):
    """Generates completions from the currently installed policy weights.

    `version` is the policy version of the installed weights; rollouts are tagged with it so the
    learner can bound staleness. `load_weights` swaps weights in place, without a restart.
    """

    version: int

    @abstractmethod
    def generate(
        self, prompts: list[list[int]], n: int, params: SamplingParams
    ) -> list[list[Completion]]:
        """Sample `n` completions per prompt (prompts are token ids, unpadded).

        Returns a nested list shaped [len(prompts)][n].
        """

    @abstractmethod
    def load_weights(self, state_dict: dict[str, torch.Tensor], version: int) -> None:
        """Copy `state_dict` into the live model and set `self.version = version`."""


def check_generate_args(prompts: list[list[int]], n: int) -> None:
    """The argument checks every backend's ``generate`` starts with (ValueError says what and the value)."""
    if n < 1:
        raise ValueError(f"n (completions per prompt) must be >= 1, got {n}")
    for index, prompt in enumerate(prompts):
        if len(prompt) == 0:
            raise ValueError(f"prompt {index} is empty; every prompt needs at least one token")


def check_state_dict(state_dict: dict[str, torch.Tensor], expected: dict[str, tuple[int, ...]],
                     optional: set[str] = frozenset(), what: str = "the model") -> None:
    """A snapshot must have exactly ``expected``'s keys (``optional`` ones may be absent, e.g. a tied
    alias) with the same shapes; KeyError / ValueError say which keys and shapes differ."""
    missing = sorted(set(expected) - set(state_dict) - set(optional))
    unexpected = sorted(set(state_dict) - set(expected))
    if missing or unexpected:
        raise KeyError(
            f"load_weights: state_dict does not match {what}: missing {missing[:8]}{' ...' if len(missing) > 8 else ''}, "
            f"unexpected {unexpected[:8]}{' ...' if len(unexpected) > 8 else ''}; send model.state_dict() of the "
            "same architecture"
        )
    for key, tensor in state_dict.items():
        if tuple(tensor.shape) != tuple(expected[key]):
            raise ValueError(f"load_weights: {key} has shape {tuple(tensor.shape)}, {what} expects "
                             f"{tuple(expected[key])}; the learner and sampler architectures differ")
