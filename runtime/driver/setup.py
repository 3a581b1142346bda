"""Run setup: resources check, seeding, base model (with optional warm start), learner, Ray."""

from __future__ import annotations

import os
import random
import time
from typing import Callable, Sequence

import numpy as np
import torch

from echo2_sdk.adapter import BaseTaskAdapter
from echo2_sdk.config import ConfigError, Echo2Config, WorkerSpec, resolve_workers
from echo2_sdk.records import RecordLimits
from echo2_sdk.runtime.driver.rundir import RunDir
from echo2_sdk.runtime.rollout.backends.base import SamplingParams
from echo2_sdk.runtime.rollout.base import WorkerSettings

TINY = "tiny-qwen3"


class ResourceError(RuntimeError):
    """The machine lacks what the config needs (e.g. GPUs for a 4B model)."""


def check_resources(cfg: Echo2Config, address: str | None = None) -> None:
    if cfg.learner.num_ranks > 1 and (address or cfg.runtime.ray_address):
        return  # ranks go to a cluster node that has the GPUs; the placement group refuses if none does
    need = cfg.runtime.require_gpus
    have = torch.cuda.device_count() if torch.cuda.is_available() else 0
    if need > have:
        raise ResourceError(
            f"this config needs {need} GPU(s) (runtime.require_gpus={need}) for model "
            f"{cfg.model.name!r}, but {have} are visible on this machine. Run it on a GPU node "
            "(see README 'Scale out'), or try the CPU quickstart: "
            "echo2 train --config examples/quickstart.yaml"
        )


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)


def usable_cores() -> int:
    """Cores this process may run on (its CPU affinity where the OS tells it)."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def learner_device(cfg: Echo2Config) -> str:
    if cfg.runtime.device == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    return cfg.runtime.device


def prepare_base_model(
    cfg: Echo2Config, adapter: BaseTaskAdapter, run: RunDir, log: Callable[[str], None]
) -> str:
    """Path of the RL base policy: the configured model, optionally after a supervised warm start.

    The warm start trains on the task's ``sft`` split only, which tasks keep disjoint from the RL
    prompts (``train``) and the held-out prompts (``eval``). A resumed run reuses its warm start.
    """
    if cfg.model.name == TINY:
        from echo2_sdk.runtime.models.modeling import ensure_tiny_from_config

        t0 = time.perf_counter()
        path = ensure_tiny_from_config(cfg.model.tiny, adapter)
        if cfg.model.tiny.tokenizer == "task":
            log(f"tokenizer: fitted to task {cfg.task.name!r} in {time.perf_counter() - t0:.1f}s -> {path}")
    else:
        path = cfg.model.name
        if cfg.model.tiny.tokenizer == "task":
            log(f"model.tiny.tokenizer=task ignored: {cfg.model.name!r} keeps its own tokenizer")
    ws = cfg.model.warm_start
    if not ws.enabled:
        return path
    out = run.base_model
    if (out / "config.json").exists():
        log(f"warm start: reusing {out}")
        return str(out)
    examples = list(adapter.examples("sft"))
    pairs = [(adapter.build_messages(ex), adapter.reference_answer(ex)) for ex in examples]
    pairs = [(m, a) for m, a in pairs if a is not None]
    if not pairs:
        raise ConfigError(
            f"model.warm_start.enabled=true but task {cfg.task.name!r} has no sft examples with "
            "reference answers; set model.warm_start.enabled=false"
        )
    from echo2_sdk.runtime.learning.warmstart import sft_warm_start

    t0 = time.perf_counter()
    threads = torch.get_num_threads()
    torch.set_num_threads(ws.threads or usable_cores())
    try:
        sft_warm_start(
            path, pairs, str(out), epochs=ws.epochs, lr=ws.lr, batch_size=ws.batch_size, seed=cfg.train.seed
        )
    finally:
        warm_threads = torch.get_num_threads()
        torch.set_num_threads(threads)  # the learner's own (runtime.learner_threads) from here on
    log(f"warm start: {len(pairs)} sft examples, {ws.epochs:g} epochs, {warm_threads} thread(s), "
        f"{time.perf_counter() - t0:.1f}s -> {out}")
    return str(out)


def learner_spec(cfg: Echo2Config, base_path: str):
    """The learner of ``cfg`` as one plain value (built here, or by each rank actor)."""
    from echo2_sdk.runtime.learning.schedule import LrSchedule
    from echo2_sdk.runtime.learning.spec import LearnerSpec

    a, ln = cfg.algo, cfg.learner
    return LearnerSpec(
        base_path=base_path, rollout_dtype=cfg.model.dtype, with_reference=a.kl_coef > 0,
        lr=a.lr, lr_schedule=LrSchedule(a.lr, a.lr_schedule, total_steps=cfg.train.steps,
                                         warmup_steps=a.lr_warmup_steps, min_ratio=a.lr_min_ratio),
        weight_decay=a.weight_decay, max_grad_norm=a.max_grad_norm, num_minibatches=a.num_minibatches,
        loss_name=a.loss,
        loss_kwargs={"clip_eps_low": a.clip_eps_low, "clip_eps_high": a.clip_eps_high, "tis_cap": a.tis_cap,
                     "kl_coef": a.kl_coef, "loss_agg": a.loss_agg, "correction": a.correction,
                     "is_low": a.is_low, "is_high": a.is_high},
        temperature=cfg.rollout.temperature if cfg.rollout.temperature > 0 else 1.0, seed=cfg.train.seed,
        micro_batch_tokens=ln.micro_batch_tokens, precision=ln.precision,
        gradient_checkpointing=ln.gradient_checkpointing, shared_prefix=ln.shared_prefix, num_ranks=ln.num_ranks,
        check_memory=ln.check_memory,
        memory_headroom_frac=ln.memory_headroom_frac,
    )


def build_learner(cfg: Echo2Config, base_path: str, log: Callable[[str], None] = print):
    """(learner, tokenizer): in this process for one rank, else ``learner.num_ranks`` Ray rank actors.

    A frozen reference is loaded only if kl_coef > 0. Several ranks need Ray to be initialised first.
    """
    from echo2_sdk.runtime.models.modeling import load_tokenizer

    spec = learner_spec(cfg, base_path)
    if cfg.learner.num_ranks == 1:
        return spec.build(learner_device(cfg), log=log)
    from echo2_sdk.runtime.learning.ranks import RankedLearner

    ln = cfg.learner
    learner = RankedLearner(spec, gpus_per_rank=ln.gpus_per_rank, resources=dict(cfg.runtime.learner_resources),
                            backend=ln.backend, timeout_s=ln.rank_timeout_s, threads=cfg.runtime.learner_threads,
                            log=log)
    return learner, load_tokenizer(base_path)


def init_ray(cfg: Echo2Config, address: str | None) -> bool:
    """Start or join Ray; return True if this process started (and must stop) the cluster."""
    import ray

    if ray.is_initialized():
        return False
    address = address or cfg.runtime.ray_address
    # Workers set their own torch threads; keep BLAS pools from oversubscribing the cores.
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    quiet = {"TRANSFORMERS_VERBOSITY": "error", "HF_HUB_DISABLE_PROGRESS_BARS": "1", "TOKENIZERS_PARALLELISM": "false"}
    os.environ.update({k: os.environ.get(k, v) for k, v in quiet.items()})
    kwargs = dict(include_dashboard=False, logging_level="WARNING", log_to_driver=True,
                  runtime_env={"env_vars": {**quiet, "OMP_NUM_THREADS": "1"}})
    if address:
        try:
            ray.init(address=address, **kwargs)
        except (ConnectionError, RuntimeError) as exc:
            raise ResourceError(
                f"could not join the Ray cluster at {address!r} ({type(exc).__name__}: {str(exc).splitlines()[0][:300]}). "
                "Check that `ray start --head` runs there and the port is reachable; if the head uses token "
                "authentication (Ray's default when ~/.ray/auth_token exists), export RAY_AUTH_MODE=token here "
                "and copy the head's token (`ray get-auth-token`) to ~/.ray/auth_token (README 'Scale out')"
            ) from exc
        return True
    num_cpus = cfg.runtime.ray_num_cpus or max(2, cfg.num_workers + 1)
    listen_on_loopback_only()
    global _reaper
    from echo2_sdk.runtime.driver.reaper import start_reaper

    _reaper = _reaper or start_reaper()  # before ray.init: every process Ray starts for this run is watched
    # "local": without it Ray joins the newest cluster on this machine (`ray start`, another run's, a test's)
    # and then refuses num_cpus with a traceback; a run given no address always starts its own.
    ray.init(address="local", num_cpus=num_cpus, **kwargs)
    return True


_reaper = None
"""The watcher of the local Ray cluster this process started (reaper.py); ended by :func:`shutdown_ray`."""


def shutdown_ray() -> None:
    """Stop the Ray this process started, then end whatever of it is left (the reaper)."""
    import ray

    global _reaper
    try:
        ray.shutdown()
    finally:
        if _reaper is not None:
            _reaper.close()
            _reaper = None


def listen_on_loopback_only() -> None:
    """Make the single-machine Ray cluster this run starts bind loopback, not every interface.

    Ray resolves "127.0.0.1" to the machine's routable address, and its GCS, raylet and worker gRPC
    servers then listen on 0.0.0.0 — open to the network for a run that never leaves the machine. With
    cluster mode off (``RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0``, its switch for single-machine platforms)
    Ray takes loopback as the node address and every server binds 127.0.0.1. The environment variable
    reaches Ray's own processes; the module flag covers a Ray already imported in this one."""
    os.environ["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = "0"
    from ray._private import ray_constants

    ray_constants.ENABLE_RAY_CLUSTER = False


def joined_cluster(cfg: Echo2Config, address: str | None = None) -> bool:
    """True when the run uses a Ray cluster it did not start itself (an address was given) or one
    with more than one node: the broadcast must then listen beyond loopback."""
    import ray

    if address or cfg.runtime.ray_address:
        return True
    return sum(1 for n in ray.nodes() if n.get("Alive")) > 1


def node_offers(node: dict, requested: dict[str, float]) -> bool:
    """Whether a ``ray.nodes()`` entry has at least the ``requested`` resources."""
    have = node.get("Resources", {})
    return all(have.get(k, 0.0) >= v for k, v in requested.items())


def check_placement(cfg: Echo2Config, specs: Sequence[WorkerSpec]) -> None:
    """Fail fast (instead of waiting forever for an infeasible actor) when no alive node of the
    cluster offers the custom resources a rollout worker requests."""
    import ray

    nodes = [n for n in ray.nodes() if n.get("Alive")]
    base = dict(cfg.rollout.worker_resources)
    for spec in specs:
        if spec.endpoint:
            continue  # outside Ray: no placement
        want = {**base, **spec.resources}
        if cfg.rollout.gpus_per_worker > 0:
            want["GPU"] = cfg.rollout.gpus_per_worker
        if want and not any(node_offers(n, want) for n in nodes):
            offered = sorted({k for n in nodes for k in n.get("Resources", {}) if not k.startswith("node:")})
            raise ResourceError(
                f"rollout worker {spec.name!r} requests Ray resources {want} (rollout.worker_resources "
                f"{base or '{}'} + its own resources {spec.resources or '{}'}), but no node of the "
                f"cluster offers them (resources there: {', '.join(offered)}). Start a rollout node with "
                f"`ray start --address=HEAD:6379 --resources='{{\"{next(iter(want))}\": 4}}'` or change the config"
            )


def worker_specs(cfg: Echo2Config) -> tuple[WorkerSpec, ...]:
    """The rollout workers (``rollout.workers``, ``rollout.pool_file`` or ``num_workers`` of them)."""
    return resolve_workers(cfg)


def worker_settings(cfg: Echo2Config, model_path: str) -> WorkerSettings:
    """What every rollout worker of the run starts with (the pool sets each one's seed and throughput cap)."""
    r = cfg.rollout
    return WorkerSettings(
        model_path=model_path, task_name=cfg.task.name, task_options=dict(cfg.task.options),
        sampling=SamplingParams(r.temperature, r.top_p, r.max_new_tokens, cfg.train.seed),
        samples_per_prompt=r.samples_per_prompt, seed=cfg.train.seed, dtype=cfg.model.dtype,
        threads=r.threads_per_worker, reward_timeout_s=r.reward_timeout_s,
        max_answer_chars=r.effective_max_answer_chars,  # the limit the reward audit and evaluation apply too
        backend=r.backend, device="cuda" if r.gpus_per_worker > 0 else "cpu", vllm_options=r.vllm,
        league_size=r.league_size, league_every_versions=r.league_every_versions,
    )


def broadcast_bind_host(cfg: Echo2Config, address: str | None = None) -> str:
    """``broadcast.bind_host``, or when null: all interfaces on a joined / multi-node cluster, else loopback."""
    if cfg.broadcast.bind_host is not None:
        return cfg.broadcast.bind_host
    return "0.0.0.0" if joined_cluster(cfg, address) or _remote_workers_off_loopback(cfg) else "127.0.0.1"


def _remote_workers_off_loopback(cfg: Echo2Config) -> bool:
    """An ``echo2 worker serve`` on another machine must reach the learner's broadcast ports."""
    from echo2_sdk.config import parse_endpoint

    hosts = [parse_endpoint(w.endpoint)[0] for w in resolve_workers(cfg) if w.endpoint]
    return any(h not in ("127.0.0.1", "localhost", "::1", "[::1]") for h in hosts)


def build_transport(cfg: Echo2Config, address: str | None = None):
    """The snapshot transport named by ``broadcast.transport`` (P2P striped chains by default)."""
    b = cfg.broadcast
    if b.transport == "object_store":
        from echo2_sdk.runtime.broadcast.object_store import ObjectStoreTransport

        return ObjectStoreTransport()
    from echo2_sdk.runtime.broadcast.ray_transport import P2PSnapshotTransport

    bind = broadcast_bind_host(cfg, address)
    advertise = b.advertise_host
    if advertise is None and bind == "0.0.0.0":  # workers on other nodes must dial a real address
        import ray

        advertise = ray.util.get_node_ip_address()
    return P2PSnapshotTransport(
        topology=b.topology, uplink_mbps=b.uplink_mbps, worker_mbps=b.worker_mbps, latency_ms=b.latency_ms,
        chunk_kb=b.chunk_kb, bind_host=bind, advertise_host=advertise,
        worker_bind_host=bind, receive_timeout_s=b.receive_timeout_s, emulate_worker_links=b.emulate_links,
        port_range=b.port_range, delta=delta_policy(cfg),
    )


def delta_policy(cfg: Echo2Config):
    """``broadcast.delta*`` as the broadcaster's policy (None: always full snapshots); ``delta: null``
    means on for 16-bit snapshots only (float32 ones change in every value: a delta never pays)."""
    b = cfg.broadcast
    if not (b.delta if b.delta is not None else cfg.model.dtype != "float32"):
        return None
    from echo2_sdk.runtime.broadcast.delta_plan import DeltaPolicy

    return DeltaPolicy(max_fraction=b.delta_max_fraction, keyframe_every=b.delta_keyframe_every,
                       level=b.delta_zstd_level)


def record_limits(cfg: Echo2Config, adapter, tokenizer) -> RecordLimits:
    """What a record from a worker may hold: token ids in the vocabulary and, for single-turn tasks, no
    completion longer than the sampler's ``max_new_tokens`` (a multi-turn completion holds env turns too)."""
    from echo2_sdk.adapter import MultiTurnTaskAdapter

    single_turn = not isinstance(adapter, MultiTurnTaskAdapter)
    return RecordLimits(vocab_size=len(tokenizer),
                        max_completion_tokens=cfg.rollout.max_new_tokens if single_turn else None)


def reward_audit(cfg: Echo2Config, adapter, tokenizer, specs: Sequence[WorkerSpec], log: Callable[[str], None]):
    """The learner's reward audit of worker replies, with the workers' own reward deadline and limits."""
    from echo2_sdk.rewards import RewardGuard
    from echo2_sdk.runtime.admission.reward_audit import RewardAudit, audited_workers

    r = cfg.rollout
    return RewardAudit(
        adapter, tokenizer,
        lambda: RewardGuard(cfg.task.name, dict(cfg.task.options), cfg.train.seed, timeout_s=r.reward_timeout_s,
                            max_chars=r.effective_max_answer_chars, local=adapter),
        fraction=r.reward_audit_fraction, audited=audited_workers(specs, r.reward_audit_ray_workers),
        evict_after=r.reward_audit_evict_after, seed=cfg.train.seed, log=log)

