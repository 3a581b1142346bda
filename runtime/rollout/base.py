"""Contracts of the rollout plane: what a worker is started with, and what it returns to the driver."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping

from echo2_sdk.adapter import Example
from echo2_sdk.config import VLLMOptions
from echo2_sdk.runtime.rollout.backends.base import SamplingParams


@dataclass(frozen=True)
class WorkerSettings:
    """Everything one rollout worker is started with, besides its name (and, on Ray nodes that lack the
    base model, the model's files). The pool derives each worker's settings from the run's: its own seed
    per start and its own throughput cap."""

    model_path: str
    """Base model: a local folder or a hub name (a remote worker loads it itself)."""
    task_name: str
    """Registered task (or task file) whose prompts the worker samples and whose reward it scores."""
    task_options: Mapping[str, Any]
    """The task's options, as in ``task.options`` of the config (JSON-able values)."""
    sampling: SamplingParams
    """How to sample; its seed advances with every generate call."""
    samples_per_prompt: int
    """n: completions per prompt (one group)."""
    seed: int
    """Seeds the worker's torch RNG, the task and the reward guard."""
    dtype: str = "float32"
    """Weight dtype of the generation backend."""
    threads: int = 1
    """torch threads in the worker process."""
    reward_timeout_s: float = 5.0
    """Deadline of one reward computation; a hang or crash scores 0."""
    max_answer_chars: int = 4000
    """Completions longer than this score 0 without calling the reward."""
    backend: str = "hf"
    """Generation backend: "hf" or "vllm"."""
    device: str = "cpu"
    """Device of the generation backend."""
    vllm_options: VLLMOptions | None = None
    """Engine options when ``backend`` is "vllm" (None: the defaults)."""
    max_tokens_per_s: float | None = None
    """Simulated throughput cap of this worker in generated tokens per second (None: no cap)."""
    league_size: int = 4
    """Snapshots kept for ``llm:league`` seats (``rollout.league_size``)."""
    league_every_versions: int = 25
    """Versions between two league members (``rollout.league_every_versions``)."""


@dataclass(frozen=True)
class SentRequest:
    """What the pool asked one worker for in one generate call. The reply comes from a machine the
    learner may not trust, so the admission gate checks it against this, never against what the reply
    says about itself: one group per example asked, of exactly ``samples_per_prompt`` records."""

    examples: tuple[Example, ...]
    """The examples sent, in order (an example may appear twice when the prompt stream wraps)."""
    samples_per_prompt: int
    """n: the records each group must hold (the worker's ``WorkerSettings.samples_per_prompt``)."""


@dataclass
class GenerationResult:
    """What one ``generate`` call returns to the driver."""

    worker: str
    """Name of the worker that answered (the admission gate trusts the pool's, not this one)."""
    groups: list[dict]
    """Rollout groups in the wire format of ``echo2_sdk.records.group_to_wire``."""
    version: int
    """The policy version installed when generation started."""
    num_tokens: int
    """Generated tokens."""
    t_generate_s: float
    """Seconds spent generating."""
    t_reward_s: float
    """Seconds spent scoring rewards (overlapping the next call's generation)."""
    t_throttle_s: float
    """Seconds slept to honour the worker's simulated throughput cap."""
    reward_status: dict[str, int] = field(default_factory=dict)
    """Reward outcomes (``ok``, ``timeout``, ...): samples by status."""
    installed: dict[int, float] = field(default_factory=dict)
    """Versions installed since the last call → wall time (time.time()) of the install."""
    node: str = ""
    """Where it was generated: the Ray node id of the worker's actor (the hostname outside Ray)."""
    reward_detail: dict[str, str] = field(default_factory=dict)
    """For each reward status but ``ok`` in this reply: the text of its first occurrence (the exception,
    the deadline), so that the driver can show why rewards failed, not only how often."""

    @property
    def num_rollouts(self) -> int:
        """Samples the reply claims to carry; a group without a rollout list counts none (the admission
        gate rejects it), so counting never fails on a malformed reply."""
        return sum(len(g["rollouts"]) for g in self.groups if isinstance(g.get("rollouts"), list))
