"""echo2's configuration: frozen, typed dataclasses loaded from YAML and overridden with ``--set``.

Every field has a docstring below it; units are in the names. "Batch" sizes say whether they count
prompts or samples: a learner step consumes ``train.prompts_per_step`` prompts × ``rollout.samples_per_prompt``
samples.
"""

from __future__ import annotations

import dataclasses
import difflib
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from echo2_sdk.config_loader import (  # re-exported: the public config API lives here
    ConfigError,
    apply_overrides,
    build_dataclass,
    load_yaml,
    to_dict,
)
from echo2_sdk.broadcast_config import BroadcastConfig
from echo2_sdk.learner_config import LearnerConfig
from echo2_sdk.opponent_sampling import OPPONENT_SAMPLING
from echo2_sdk.rollout_config import (  # re-exported: every config section is importable from here
    RolloutConfig,
    VLLMOptions,
    WorkerSpec,
    check_unique,
    load_pool_file,
    parse_endpoint,
    resolve_workers,
)
from echo2_sdk.runtime_config import RuntimeConfig, resolve_kappa
from echo2_sdk.scheduler_config import (
    PoolSchedulerConfig,
    reject_old_spellings,
    validate_pool,
)

__all__ = [
    "Echo2Config", "ConfigError", "build_dataclass", "load_config", "to_dict", "resolve_kappa", "replace",
    # the sections
    "TaskConfig", "ModelConfig", "TinyModelConfig", "WarmStartConfig", "RolloutConfig", "VLLMOptions", "WorkerSpec",
    "AlgoConfig", "LearnerConfig", "RuntimeConfig", "BroadcastConfig", "TrainConfig", "PoolSchedulerConfig",
    # the workers
    "resolve_workers", "load_pool_file", "parse_endpoint",
]


@dataclass(frozen=True)
class TaskConfig:
    name: str = "arith"
    """Registered task name (``echo2 tasks`` lists them) or an import path ``package.module:AdapterClass``."""
    options: dict = field(default_factory=dict)
    """Task options, validated against the adapter's ``Options`` dataclass."""


@dataclass(frozen=True)
class TinyModelConfig:
    hidden_size: int = 128
    """Width of the tiny Qwen3 model (used only when ``model.name`` is ``tiny-qwen3``)."""
    num_layers: int = 4
    """Number of decoder layers of the tiny model."""
    num_heads: int = 4
    """Attention heads of the tiny model."""
    num_kv_heads: int = 2
    """Key/value heads (grouped-query attention) of the tiny model."""
    intermediate_size: int = 512
    """MLP width of the tiny model."""
    tokenizer: Literal["char", "task"] = "char"
    """``char``: one token per printable-ASCII character (``echo2_sdk/tiny_tokenizer.py``; any task, digits
    stay digits). ``task``: a BPE vocabulary fitted to the task's own text (``echo2_sdk/task_tokenizer.py``,
    the adapter's ``tokenizer_corpus``), so a poker or moba action is 1-3 tokens and an episode 4-5x shorter.
    Each tokenizer gets its own cached model. Like the sizes above, ignored (with a note in the log) when
    ``model.name`` is a real model: it keeps its own tokenizer."""
    task_vocab_size: int = 1024
    """Most tokens of the ``task`` tokenizer, specials included (128-65536; fewer when the corpus has less
    to merge: poker 904, moba 740)."""

    def __post_init__(self) -> None:
        if not 128 <= self.task_vocab_size <= 65536:
            raise ConfigError(f"model.tiny.task_vocab_size={self.task_vocab_size} must be in [128, 65536], "
                              "e.g. 1024")


@dataclass(frozen=True)
class WarmStartConfig:
    enabled: bool = False
    """Run a short supervised warm start (TRL SFT) on the task's ``sft`` split before RL."""
    epochs: float = 3.0
    """Passes over the sft split."""
    lr: float = 1e-3
    """Learning rate of the warm start."""
    batch_size: int = 16
    """Warm-start batch size (samples)."""
    threads: int = 1
    """CPU threads (torch) of the warm start; ``0``: every core this process may use. It runs before the
    rollout workers start, so the cores are otherwise idle (the game examples set ``0``: 16 epochs took
    554 s on one core of the 2-core machine, 256 s on two); the default 1 suits runs sharing a machine,
    e.g. tests."""

    def __post_init__(self) -> None:
        if self.threads < 0:
            raise ConfigError(f"model.warm_start.threads={self.threads} must be >= 0 (0: every core this "
                              "process may use)")


@dataclass(frozen=True)
class ModelConfig:
    name: str = "tiny-qwen3"
    """``tiny-qwen3`` (built offline, random init, cached) or any Hugging Face causal LM name or path."""
    dtype: Literal["float32", "bfloat16", "float16"] = "float32"
    """dtype of the rollout workers' weights and of the snapshots they receive. The learner keeps its own
    master dtype (``learner.precision``): ``bfloat16`` here no longer means a bf16 optimizer."""
    tiny: TinyModelConfig = field(default_factory=TinyModelConfig)
    """Size of the tiny model."""
    warm_start: WarmStartConfig = field(default_factory=WarmStartConfig)
    """Supervised warm start that makes a base policy for RL (off by default)."""


@dataclass(frozen=True)
class AlgoConfig:
    loss: str = "grpo"
    """Registered policy loss."""
    advantage: str = "grpo"
    """Registered advantage estimator (``grpo``: (r-mean)/std of the group; ``dr_grpo``: r-mean;
    ``grpo_pooled_std``: (r-mean)/one pooled within-group std for the whole step)."""
    grouping: Literal["prompt", "key", "batch"] = "prompt"
    """Advantage groups: by prompt, by the task's Ω.group key, or the whole batch."""
    turn_advantage_weight: float = 0.0
    """ω of GiGPO's step-level term, for multi-turn tasks: each assistant turn's advantage becomes the
    episode's plus ω × its advantage among the group's turns taken from the same state (identical history;
    ``echo2_sdk.signals.turn_advantages``). 0 (default): one advantage per episode. A single-turn task's
    one turn shares its state with the whole group, so there ω only scales the advantage by 1 + ω."""
    lr: float = 1e-4
    """AdamW learning rate (the peak, with ``lr_schedule``)."""
    lr_schedule: Literal["constant", "linear", "cosine"] = "constant"
    """How the lr moves over ``train.steps`` learner steps after the warm-up: ``constant``, or a ``linear`` /
    ``cosine`` decay towards ``lr * lr_min_ratio``, reached one step past the last (Hugging Face's counting, so
    no step trains at the floor). It is a function of the learner's step, so ``--resume`` continues on the
    same curve."""
    lr_warmup_steps: int = 0
    """Learner steps of linear warm-up from lr / lr_warmup_steps up to lr (0: none)."""
    lr_min_ratio: float = 0.0
    """Where a decaying schedule ends, as a fraction of ``lr``."""
    weight_decay: float = 0.0
    """AdamW weight decay."""
    max_grad_norm: float = 1.0
    """Gradient-norm clip."""
    num_minibatches: int = 2
    """Optimizer updates per learner step (the step's samples are split this many ways)."""
    clip_eps_low: float = 0.2
    """Lower clip of the token ratio π_θ/π_θold (1 - eps)."""
    clip_eps_high: float = 0.2
    """Upper clip of the token ratio (1 + eps)."""
    tis_cap: float | None = 2.0
    """C in the truncated importance weight min(π_θold/π_sampler, C); null disables TIS."""
    kl_coef: float = 0.0
    """Coefficient of the k3 KL to the frozen reference; 0 loads no reference model."""
    loss_agg: Literal["token-mean", "seq-mean-token-mean"] = "token-mean"
    """Loss aggregation over tokens."""
    correction: Literal["tis", "none", "icepop", "seq_mask_tis"] = "tis"
    """Off-policy correction of stale samples (``echo2_sdk.corrections``): ``tis`` (min(ρ, tis_cap)),
    ``none``, ``icepop`` (token ρ kept only inside [is_low, is_high]) or ``seq_mask_tis`` (sequences whose
    geometric-mean ρ leaves [is_low, is_high] are dropped, TIS on the rest)."""
    is_low: float = 0.5
    """Lower edge of the importance-ratio band of the masking corrections."""
    is_high: float = 2.0
    """Upper edge of that band."""

    def __post_init__(self) -> None:
        # These fail late otherwise (a NaN loss, an optimizer error) or train away from the reward.
        if not (self.lr > 0 and math.isfinite(self.lr)):
            raise ConfigError(f"algo.lr={self.lr} must be a finite number > 0, e.g. 1e-6 for a 7B model or 3e-4 "
                              "for the tiny one")
        for name in ("weight_decay", "clip_eps_low", "clip_eps_high", "kl_coef", "turn_advantage_weight"):
            value = getattr(self, name)
            if not (value >= 0 and math.isfinite(value)):
                raise ConfigError(f"algo.{name}={value} must be a finite number >= 0")
        if self.lr_warmup_steps < 0:
            raise ConfigError(f"algo.lr_warmup_steps={self.lr_warmup_steps} must be >= 0 (0: no warm-up)")
        if not 0.0 <= self.lr_min_ratio <= 1.0:
            raise ConfigError(f"algo.lr_min_ratio={self.lr_min_ratio} must be in [0, 1], e.g. 0.1")
        if not self.max_grad_norm > 0:
            raise ConfigError(f"algo.max_grad_norm={self.max_grad_norm} must be > 0 (e.g. 1.0); use a large value "
                              "to clip rarely")
        if not 0 < self.is_low <= 1 <= self.is_high:
            raise ConfigError(f"algo.is_low={self.is_low}, algo.is_high={self.is_high} must satisfy "
                              "0 < is_low <= 1 <= is_high, e.g. 0.5 and 2.0")
        if self.tis_cap is not None and not self.tis_cap > 0:
            raise ConfigError(f"algo.tis_cap={self.tis_cap} must be > 0 (e.g. 2.0), or null to disable TIS")


GROUP_RELATIVE = ("grpo", "dr_grpo", "grpo_pooled_std")
"""Built-in advantage estimators that compare a sample with the others of its group (0 for a group of one)."""

REPORT_TO = ("tensorboard", "wandb")
"""Experiment trackers ``train.report_to`` accepts."""


@dataclass(frozen=True)
class TrainConfig:
    steps: int = 100
    """Learner steps (each = ``algo.num_minibatches`` optimizer updates; the version +1 per step); ≥ 1."""
    prompts_per_step: int = 16
    """Prompts (groups) consumed per learner step; samples per step = this × samples_per_prompt."""
    seed: int = 0
    """Seed of data order, sampling and initialization."""
    checkpoint_every: int = 50
    """Checkpoint every K learner steps (and at the end, or when SIGINT/SIGTERM stops the run); 0 disables
    periodic checkpoints."""
    keep_checkpoints: int | None = None
    """Keep only the newest K checkpoints of the run (older ``checkpoints/step_*`` folders are deleted once a
    newer one is complete); null keeps them all. K ≥ 1; 2 or more leaves a fallback should the newest
    one be damaged."""
    opponent_sampling: str = "fixed"
    """How training deals meet a pooled ``task.options.opponent`` (two or more line-ups): ``fixed`` (each
    example keeps the line-up it drew at the pool's shares) or ``prioritized`` (PFSP: each dispatched deal
    re-draws its line-up at shares tilted toward those the policy's running training return is worst
    against; ``echo2_sdk/opponent_sampling.py``). Held-out evaluation always keeps the fixed draws."""
    opponent_priority: float = 2.0
    """With ``prioritized``: the tilt's strength, per standard deviation of the episode return by which a
    line-up's running mean return trails the best one (share ∝ base share · exp(strength · gap)); ≥ 0."""
    opponent_floor: float = 0.25
    """With ``prioritized``: every line-up keeps at least this fraction of its base share; 0 to 1."""
    eval_every: int = 0
    """Evaluate on the held-out split every K steps (and before/after training); 0: only before/after."""
    eval_max_examples: int | None = 100
    """Held-out examples per evaluation (null: all)."""
    eval_samples: int = 1
    """k of avg@k in evaluation."""
    eval_temperature: float = 0.0
    """Evaluation temperature (0 = greedy)."""
    eval_sampled_samples: int = 0
    """Also evaluate every held-out example this many times at ``rollout.temperature`` (the policy GRPO trains
    and whose expected return it raises, which greedy decoding need not show), reported as ``sampled`` inside
    each evaluation; 0: only the evaluation above. Its interval counts an example's samples as one draw."""
    eval_max_new_tokens: int | None = None
    """Evaluation generation limit (null: rollout.max_new_tokens)."""
    plots: bool = True
    """Write PNG plots into the run directory at the end."""
    report_to: tuple[str, ...] = ()
    """Experiment trackers that receive every step's metrics besides metrics.jsonl: ``tensorboard``
    (event files under ``<run dir>/tensorboard``) and/or ``wandb`` (``WANDB_MODE=offline`` works without an
    account). Each needs its extra: ``pip install 'echo2[tensorboard]'`` / ``'echo2[wandb]'``."""
    wandb_project: str = "echo2"
    """W&B project of the run (with ``report_to: [wandb]``)."""

    def __post_init__(self) -> None:
        if self.steps < 1:
            raise ConfigError(f"train.steps={self.steps} must be >= 1 (learner steps); to only evaluate a model "
                              "use `echo2 eval`, to continue a run `echo2 train --resume RUN_DIR`")
        for name in ("checkpoint_every", "eval_every"):
            if getattr(self, name) < 0:
                raise ConfigError(f"train.{name}={getattr(self, name)} must be >= 0 (0 disables it)")
        if self.keep_checkpoints is not None and self.keep_checkpoints < 1:
            raise ConfigError(f"train.keep_checkpoints={self.keep_checkpoints} must be >= 1 (checkpoints kept), "
                              "or null to keep every checkpoint")
        if self.opponent_sampling not in OPPONENT_SAMPLING:
            close = difflib.get_close_matches(str(self.opponent_sampling), OPPONENT_SAMPLING, n=1)
            hint = f" Did you mean {close[0]!r}?" if close else ""
            raise ConfigError(f"train.opponent_sampling={self.opponent_sampling!r}; use one of "
                              f"{list(OPPONENT_SAMPLING)}.{hint}")
        if not (math.isfinite(self.opponent_priority) and self.opponent_priority >= 0):
            raise ConfigError(f"train.opponent_priority={self.opponent_priority!r} must be a finite number >= 0 "
                              "(0 keeps the pool's shares); use e.g. 2.0")
        if not 0.0 <= self.opponent_floor <= 1.0:
            raise ConfigError(f"train.opponent_floor={self.opponent_floor!r} must be in [0, 1] (the fraction of its "
                              "base share every line-up keeps); use e.g. 0.25")
        if self.eval_samples < 1:
            raise ConfigError(f"train.eval_samples={self.eval_samples} must be >= 1 (k of avg@k)")
        if not self.eval_temperature >= 0:
            raise ConfigError(f"train.eval_temperature={self.eval_temperature} must be >= 0 (0 = greedy)")
        if self.eval_sampled_samples < 0:
            raise ConfigError(f"train.eval_sampled_samples={self.eval_sampled_samples} must be >= 0 (held-out samples "
                              "per example at rollout.temperature; 0 turns the sampled evaluation off)")
        for name in self.report_to:
            if name not in REPORT_TO:
                close = difflib.get_close_matches(str(name), REPORT_TO, n=1)
                hint = f" Did you mean {close[0]!r}?" if close else ""
                raise ConfigError(f"train.report_to: unknown tracker {name!r}; use any of {list(REPORT_TO)}.{hint}")


@dataclass(frozen=True)
class Echo2Config:
    task: TaskConfig = field(default_factory=TaskConfig)
    """Which task and its options."""
    model: ModelConfig = field(default_factory=ModelConfig)
    """Policy model."""
    rollout: RolloutConfig = field(default_factory=RolloutConfig)
    """Rollout plane: workers and sampling."""
    algo: AlgoConfig = field(default_factory=AlgoConfig)
    """Learning plane: loss and optimizer."""
    learner: LearnerConfig = field(default_factory=LearnerConfig)
    """Learning plane: ranks (FSDP2), token-budget micro-batches, precision, activation checkpointing."""
    runtime: RuntimeConfig = field(default_factory=RuntimeConfig)
    """Async/sync runtime, staleness, Ray."""
    broadcast: BroadcastConfig = field(default_factory=BroadcastConfig)
    """How snapshots reach the rollout workers."""
    train: TrainConfig = field(default_factory=TrainConfig)
    """Steps, batch sizes, checkpoints, evaluation."""
    scheduler: PoolSchedulerConfig = field(default_factory=PoolSchedulerConfig)
    """Cost-aware pool: closed-loop activation of ``rollout.workers`` and dollar accounting (off by default)."""

    def __post_init__(self) -> None:
        if self.runtime.mode == "async":
            resolve_kappa(self.runtime.staleness, self.runtime.kappa)
        for name, value in (
            ("rollout.samples_per_prompt", self.rollout.samples_per_prompt),
            ("train.prompts_per_step", self.train.prompts_per_step),
            ("rollout.prompts_per_request", self.rollout.prompts_per_request),
            ("algo.num_minibatches", self.algo.num_minibatches),
            ("rollout.max_new_tokens", self.rollout.max_new_tokens),
        ):
            if value < 1:
                raise ConfigError(f"{name} must be ≥ 1, got {value}")
        if self.rollout.workers and self.rollout.pool_file:
            raise ConfigError(f"rollout.workers and rollout.pool_file={self.rollout.pool_file!r} are both set; "
                              "list the workers in one of them")
        check_unique([w.name for w in self.rollout.workers], "rollout.workers")
        if not self.rollout.workers and self.rollout.num_workers < 1:
            raise ConfigError(f"rollout.num_workers must be ≥ 1, got {self.rollout.num_workers}")
        if self.rollout.samples_per_prompt == 1 and self.algo.grouping == "prompt" and self.algo.advantage in GROUP_RELATIVE:
            raise ConfigError(
                f"rollout.samples_per_prompt=1 with algo.grouping=prompt and algo.advantage={self.algo.advantage}: "
                "each group holds one sample, so every advantage is 0 and nothing is learned; set "
                "rollout.samples_per_prompt >= 2 (e.g. 8), or algo.grouping=batch")
        samples = self.train.prompts_per_step * self.rollout.samples_per_prompt
        if samples < self.algo.num_minibatches:
            raise ConfigError(
                f"a step has {samples} samples, fewer than algo.num_minibatches={self.algo.num_minibatches}"
            )

    @property
    def num_workers(self) -> int:
        return len(self.rollout.workers) or self.rollout.num_workers


def load_config(path: str | None = None, overrides: list[str] | tuple[str, ...] = ()) -> Echo2Config:
    """Load YAML (or defaults when ``path`` is None), apply ``--set`` overrides, validate everything.

    Task options are validated against the task adapter's ``Options`` here, so a typo in
    ``task.options`` fails at load time, not on a worker.
    """
    data = load_yaml(path) if path else {}
    if path:  # a task file named in the YAML is relative to the YAML's folder
        _absolute_task_file(data, Path(path).resolve().parent)
    apply_overrides(data, list(overrides))
    _absolute_task_file(data, Path.cwd())  # ... and one given with --set to the current folder
    reject_old_spellings(data)
    cfg = build_dataclass(Echo2Config, data)
    validate_task_options(cfg)
    validate_pool(cfg)
    return cfg


def _absolute_task_file(data: dict, base: Path) -> None:
    """Make a ``task.name`` of the form ``file.py:Class`` absolute, so that Ray workers, reward
    subprocesses and ``--resume`` (which reads the saved config) find the same file from any folder."""
    from echo2_sdk.registry import is_file_spec

    task = data.get("task")
    name = task.get("name") if isinstance(task, dict) else None
    if isinstance(name, str) and is_file_spec(name):
        file, _, attr = name.rpartition(":")
        task["name"] = f"{(base / Path(file).expanduser()).resolve()}:{attr}"


def validate_task_options(cfg: Echo2Config) -> None:
    from echo2_sdk.registry import get_task_class

    try:
        cls = get_task_class(cfg.task.name)
    except ImportError as exc:  # a missing or broken task file, a missing package: the user's to fix
        raise ConfigError(f"task.name={cfg.task.name!r}: {exc}") from exc
    build_dataclass(cls.Options, dict(cfg.task.options), path="task.options")


def replace(cfg: Echo2Config, **sections) -> Echo2Config:
    """``dataclasses.replace`` for nested sections: ``replace(cfg, train={"steps": 2})``."""
    new = {}
    for name, changes in sections.items():
        new[name] = dataclasses.replace(getattr(cfg, name), **changes)
    return dataclasses.replace(cfg, **new)
