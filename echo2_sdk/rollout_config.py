"""The ``rollout`` config section: the workers (one by one, from a pool file, or a count) and sampling.

Kept apart from ``config.py`` so that :mod:`echo2_sdk.scheduler_config` (which prices and activates
these workers) can read them without importing the whole run config. ``config.py`` re-exports every
name here.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Literal

from echo2_sdk.config_loader import ConfigError, build_dataclass, read_yaml_file


def check_resources_map(resources: dict, path: str) -> None:
    """Ray resource requests: names are non-empty strings, amounts finite and > 0 (CPU/GPU have their own keys)."""
    for name, amount in resources.items():
        if not isinstance(name, str) or not name:
            raise ConfigError(f"{path}: resource names must be non-empty strings, got {name!r}")
        if name in ("CPU", "GPU", "memory", "object_store_memory"):
            raise ConfigError(f"{path}: {name!r} is not a custom resource; GPUs are set with "
                              "rollout.gpus_per_worker / runtime.require_gpus")
        ok = isinstance(amount, (int, float)) and not isinstance(amount, bool) and math.isfinite(amount) and amount > 0
        if not ok:
            raise ConfigError(f"{path}: {name}={amount!r} must be a number > 0, e.g. {{{name}: 1}}")


# Characters per generated token that the limit ``rollout.max_answer_chars: null`` allows. Decoded text
# averages ~3-5 characters per token (English, LaTeX, code); 16 leaves a wide margin even for completions
# dense in long whitespace/digit/punctuation-run tokens, so every realistic completion that fits in
# max_new_tokens is scored. (Single vocabulary entries can be longer, but only a degenerate completion
# made mostly of them could exceed 16 on average.) The limit exists only to bound verifier cost on
# hostile or huge text (e.g. an untrusted worker's replies), never to judge an answer by its length.
CHARS_PER_TOKEN_BOUND = 16


def answer_char_limit(max_answer_chars: int | None, max_new_tokens: int) -> int:
    """The completion length, in characters, above which a reward is not computed (status ``oversize``).

    ``max_answer_chars`` when set, else ``max_new_tokens × CHARS_PER_TOKEN_BOUND``. The one rule every
    scoring path uses: rollout workers, the learner's reward audit and held-out evaluation.
    """
    if max_answer_chars is not None:
        return max_answer_chars
    return max_new_tokens * CHARS_PER_TOKEN_BOUND


@dataclass(frozen=True)
class VLLMOptions:
    """Engine options of the vLLM rollout backend (``rollout.backend: vllm``)."""

    gpu_memory_utilization: float = 0.85
    """Fraction of the GPU's memory the engine may claim for weights, activations and KV cache (CUDA only)."""
    enforce_eager: bool = False
    """Skip CUDA-graph capture / torch.compile: faster start-up, slower decoding."""
    max_model_len: int | None = None
    """Longest prompt + completion in tokens the KV cache is sized for (None: the model's maximum)."""
    max_num_seqs: int | None = None
    """Sequences decoded at once (None: vLLM's default)."""
    cpu_kv_cache_gib: float = 1.0
    """KV-cache size in GiB on CPU (the environment variable ``VLLM_CPU_KVCACHE_SPACE`` overrides it)."""

    def __post_init__(self) -> None:
        if not 0.0 < self.gpu_memory_utilization <= 1.0:
            raise ConfigError(f"rollout.vllm.gpu_memory_utilization={self.gpu_memory_utilization} must be in (0, 1]")
        for key in ("max_model_len", "max_num_seqs"):
            value = getattr(self, key)
            if value is not None and value < 1:
                raise ConfigError(f"rollout.vllm.{key}={value} must be >= 1 (or null for vLLM's default)")
        if not self.cpu_kv_cache_gib > 0:
            raise ConfigError(f"rollout.vllm.cpu_kv_cache_gib={self.cpu_kv_cache_gib} must be > 0, e.g. 1.0")


def parse_endpoint(text: str) -> tuple[str, int]:
    """``HOST:PORT`` → (host, port); ValueError naming the expected form."""
    host, sep, port = str(text).rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ValueError(f"endpoint {text!r} must be HOST:PORT (e.g. 203.0.113.7:7100)")
    return host, int(port)


@dataclass(frozen=True)
class WorkerSpec:
    name: str
    """Worker name (shown in metrics and logs)."""
    max_tokens_per_s: float | None = None
    """Simulated throughput cap in generated tokens per second (None = as fast as the hardware)."""
    usd_per_hour: float | None = None
    """c_i: what the worker costs, US dollars per hour (None: ``scheduler.prices[gpu]``, or 0 with the scheduler off)."""
    gpu: str = "cpu"
    """Device class label (reported; the price-table key when ``usd_per_hour`` is None)."""
    rollouts_per_s: float | None = None
    """μ_i prior: samples per second the worker is expected to deliver (None: estimated from
    ``max_tokens_per_s`` / ``rollout.max_new_tokens``); the scheduler replaces it with measurements."""
    uplink_mbps: float | None = None
    """Upload bandwidth in Mbit/s (reported; as in ``echo2 plan`` pool files)."""
    downlink_mbps: float | None = None
    """Download bandwidth in Mbit/s (reported; as in ``echo2 plan`` pool files)."""
    endpoint: str | None = None
    """``HOST:PORT`` of an ``echo2 worker serve`` process on a machine outside the Ray cluster (untrusted
    rollout machines); None: a Ray actor. See README "Trust model"."""
    token_env: str = "ECHO2_WORKER_TOKEN"
    """Environment variable (on the learner) holding the token shared with that remote worker."""
    resources: dict[str, float] = field(default_factory=dict)
    """Ray custom resources this worker's actor requests, on top of (and overriding keys of)
    ``rollout.worker_resources``; e.g. ``{node_a: 1}`` pins it to the node started with that resource."""

    def __post_init__(self) -> None:
        if self.endpoint is not None:
            try:
                parse_endpoint(self.endpoint)
            except ValueError as exc:
                raise ConfigError(f"worker {self.name!r}: {exc}, of an `echo2 worker serve` process") from None
        if not self.name:
            raise ConfigError("rollout.workers: a worker name must be a non-empty string")
        check_resources_map(self.resources, f"worker {self.name!r}: resources")
        for key, minimum in (("max_tokens_per_s", "> 0"), ("usd_per_hour", "≥ 0"), ("rollouts_per_s", "≥ 0"),
                             ("uplink_mbps", "> 0"), ("downlink_mbps", "> 0")):
            value = getattr(self, key)
            ok = value is None or (value > 0 if minimum == "> 0" else value >= 0) and math.isfinite(value)
            if not ok:
                raise ConfigError(f"worker {self.name!r}: {key}={value!r} must be a finite number {minimum} (or omitted)")


@dataclass(frozen=True)
class RolloutConfig:
    num_workers: int = 2
    """Rollout worker actors (ignored when ``workers`` lists them one by one)."""
    workers: tuple[WorkerSpec, ...] = ()
    """Optional per-worker specs (simulated throughput caps and prices) for heterogeneous pools."""
    pool_file: str | None = None
    """A YAML list of worker entries (the keys of ``workers``; ``echo2 plan`` pool files work as they
    are), used instead of ``workers``."""
    samples_per_prompt: int = 8
    """n: samples generated per prompt; one group = n samples of one prompt under one version."""
    prompts_per_request: int = 4
    """Prompts a worker generates in one backend call (so one call yields this many groups)."""
    temperature: float = 1.0
    """Sampling temperature (the learner recomputes logprobs at the same temperature)."""
    top_p: float = 1.0
    """Nucleus sampling threshold."""
    max_new_tokens: int = 16
    """Generation length limit per sample, in tokens."""
    backend: Literal["hf", "vllm"] = "hf"
    """Generation backend."""
    vllm: VLLMOptions = field(default_factory=VLLMOptions)
    """Engine options when ``backend`` is ``vllm``."""
    reward_timeout_s: float = 5.0
    """Deadline of one reward computation; a hang or crash scores 0 and is counted."""
    league_size: int = 4
    """Members of the self-play league a worker keeps when the task seats ``llm:league`` (earlier snapshots,
    one copy of the weights each in the worker's host memory); the oldest leaves when one more arrives."""
    league_every_versions: int = 25
    """Policy versions (learner steps) between two league members, counted from the warm start (version 0):
    at the default 25, a 100-step run's league grows to versions 0, 25, 50, 75."""
    max_answer_chars: int | None = None
    """Completions longer than this many characters score 0 (``oversize``) without calling the reward;
    null (the default): ``max_new_tokens`` × 16, room for any realistic completion of that many tokens
    (:func:`answer_char_limit`; held-out evaluation follows ``train.eval_max_new_tokens`` when larger)."""
    logprob_tolerance: float | None = 0.1
    """Flag a worker whose sampler log-probs differ from the learner's recomputation by more than this
    mean |Δ log-prob| per token on the same snapshot (staleness-0 samples); null: report, never flag."""
    logprob_check_min_tokens: int = 64
    """Same-snapshot tokens a worker must deliver before the tolerance is checked (in async runs only the
    few samples trained at their own version count: ~190 per worker in a 400-step quickstart)."""
    reward_audit_fraction: float = 0.05
    """Fraction of samples from ``echo2 worker serve`` workers (outside Ray, untrusted) whose reward the
    learner recomputes; a group with a mismatch is rejected. 0 disables (README "Trust model")."""
    reward_audit_ray_workers: bool = False
    """Audit Ray workers too (they are trusted cluster members; useful to test a custom reward)."""
    reward_audit_evict_after: int = 3
    """Evict a worker from the pool after this many mismatching groups (0: never, only reject and flag)."""
    threads_per_worker: int = 1
    """torch threads in each worker process."""
    gpus_per_worker: float = 0.0
    """GPUs each worker actor reserves through Ray (0: the worker generates on CPU)."""
    worker_resources: dict[str, float] = field(default_factory=dict)
    """Ray custom resources every worker actor requests, e.g. ``{rollout: 1}`` to place workers only on
    nodes started with ``ray start --resources='{"rollout": 4}'`` (at most 4 workers there); a worker's
    own ``resources`` add to these and win on shared keys. Empty: anywhere in the cluster."""
    worker_restarts: int = 5
    """With ``scheduler.enabled: false``: how many times in a row a dead or hung worker is restarted
    without finishing a request in between (a restart that delivers work resets the count, so churn
    is survived indefinitely while a worker that can never start stops being retried). 0: never
    restart. The run fails, with its summary, once no worker is alive and none may restart."""
    worker_restart_backoff_s: float = 1.0
    """Seconds before the first restart of a worker; doubled for each further restart in a row (capped at 60)."""
    worker_stall_timeout_s: float | None = 30.0
    """A running worker with requests queued that finishes none for this long is hung (e.g. a stopped
    process whose actor Ray still sees alive): it is killed and restarted (scheduler off) or declared
    lost and replaced (scheduler on). Never below 5× the slowest request that worker finished, so a
    slow model does not read as hung. In sync mode, a worker that has not installed a snapshot this
    long after its peers did is hung too (with one worker, ``broadcast.receive_timeout_s`` bounds the
    wait). Null: only dead workers are noticed."""
    worker_start_timeout_s: float = 600.0
    """A worker whose actor has not started (model loaded, latest snapshot installed) this many seconds
    after it was launched is hung while starting: killed and restarted like a dead one (scheduler off) or
    declared lost (scheduler on). Generous by default: a Qwen3-8B load plus an engine warm-up takes minutes."""

    def __post_init__(self) -> None:
        check_resources_map(self.worker_resources, "rollout.worker_resources")
        if not (self.temperature > 0 and math.isfinite(self.temperature)):
            raise ConfigError(f"rollout.temperature={self.temperature} must be a finite number > 0, e.g. 1.0 (0 would be "
                              "greedy: every sample of a prompt alike, so every advantage 0)")
        if not 0 < self.top_p <= 1:
            raise ConfigError(f"rollout.top_p={self.top_p} must be in (0, 1], e.g. 1.0 (no nucleus cut)")
        if not self.reward_timeout_s > 0:
            raise ConfigError(f"rollout.reward_timeout_s={self.reward_timeout_s} must be > 0 seconds, e.g. 5")
        if self.logprob_tolerance is not None and not (self.logprob_tolerance > 0 and math.isfinite(self.logprob_tolerance)):
            raise ConfigError(f"rollout.logprob_tolerance={self.logprob_tolerance!r} must be a finite number > 0 "
                              "(nats per token, e.g. 0.1) or null to never flag")
        if not 0.0 <= self.reward_audit_fraction <= 1.0:
            raise ConfigError(f"rollout.reward_audit_fraction={self.reward_audit_fraction} must be in [0, 1] "
                              "(0 disables the audit)")
        if self.reward_audit_evict_after < 0:
            raise ConfigError(f"rollout.reward_audit_evict_after={self.reward_audit_evict_after} must be >= 0 (0: never)")
        if self.max_answer_chars is not None and self.max_answer_chars < 1:
            raise ConfigError(f"rollout.max_answer_chars={self.max_answer_chars} must be >= 1 (characters), "
                              "or null to follow max_new_tokens")
        if self.worker_restarts < 0:
            raise ConfigError(f"rollout.worker_restarts={self.worker_restarts} must be >= 0 (0: never restart)")
        if not (self.worker_restart_backoff_s >= 0 and math.isfinite(self.worker_restart_backoff_s)):
            raise ConfigError(f"rollout.worker_restart_backoff_s={self.worker_restart_backoff_s} must be a finite "
                              "number >= 0 seconds, e.g. 1.0")
        if self.worker_stall_timeout_s is not None and not self.worker_stall_timeout_s > 0:
            raise ConfigError(f"rollout.worker_stall_timeout_s={self.worker_stall_timeout_s} must be > 0 seconds "
                              "(e.g. 30), or null to never treat a live worker as hung")
        if not (self.worker_start_timeout_s > 0 and math.isfinite(self.worker_start_timeout_s)):
            raise ConfigError(f"rollout.worker_start_timeout_s={self.worker_start_timeout_s} must be a finite number > 0 "
                              "seconds, e.g. 600")
        if self.league_size < 1 or self.league_every_versions < 1:
            raise ConfigError(f"rollout.league_size={self.league_size} and rollout.league_every_versions="
                              f"{self.league_every_versions} must be >= 1, e.g. 4 and 25")
        if self.logprob_check_min_tokens < 1:
            raise ConfigError(f"rollout.logprob_check_min_tokens={self.logprob_check_min_tokens} must be >= 1, e.g. 64")

    @property
    def effective_max_answer_chars(self) -> int:
        """The ``max_answer_chars`` rollout scoring applies: this one resolved by :func:`answer_char_limit`."""
        return answer_char_limit(self.max_answer_chars, self.max_new_tokens)




def resolve_workers(cfg) -> tuple[WorkerSpec, ...]:
    """The rollout workers of ``cfg`` (an ``Echo2Config``): ``rollout.workers``, the entries of ``rollout.pool_file``, or
    ``rollout.num_workers`` unnamed ones (``worker0``, ``worker1``, …)."""
    if cfg.rollout.workers:
        return cfg.rollout.workers
    if cfg.rollout.pool_file:
        return load_pool_file(cfg.rollout.pool_file)
    return tuple(WorkerSpec(f"worker{i}") for i in range(cfg.rollout.num_workers))


def load_pool_file(path: str) -> tuple:
    """``rollout.pool_file``: a YAML list of worker entries with the keys of ``rollout.workers``
    (``echo2 plan`` pool files qualify as they are). Returns ``WorkerSpec``s; names must be unique."""
    data = read_yaml_file(path, "rollout.pool_file", "examples/pools/small.yaml")
    if not isinstance(data, list) or not data:
        raise ConfigError(f"rollout.pool_file {path!r}: expected a non-empty YAML list of workers "
                          f"(- {{name: a, max_tokens_per_s: 300, usd_per_hour: 0.3}}), got {type(data).__name__}")
    specs = tuple(build_dataclass(WorkerSpec, e, path=f"{path}[{i}]") for i, e in enumerate(data))
    check_unique([s.name for s in specs], path)
    return specs


def check_unique(names: list[str], source: str) -> None:
    """Refuse a worker name that appears twice in ``source``."""
    seen: set[str] = set()
    for name in names:
        if name in seen:
            raise ConfigError(f"{source}: worker name {name!r} appears twice; worker names must be unique")
        seen.add(name)
