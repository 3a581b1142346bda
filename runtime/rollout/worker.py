"""Rollout worker: generates under its installed version v̂, scores rewards locally, returns groups.

The class is plain Python (testable without Ray); the runtime wraps it with ``ray.remote``. ``install``
runs on a control thread so that a snapshot is received the moment it is published and applied
before the next generation batch starts. Two ``generate`` calls may run at once: the generation
stage is serialized by a lock, while reward scoring (in the guard's subprocess) and record building
of one call overlap with the generation of the next, so the sampler never waits for rewards.
"""

from __future__ import annotations

import dataclasses
import threading
import time
from typing import Any, Sequence

import torch

from echo2_sdk.adapter import Example, MultiTurnTaskAdapter
from echo2_sdk.chat import chat_token_ids
from echo2_sdk.records import Rollout, RolloutGroup, group_to_wire
from echo2_sdk.registry import make_task
from echo2_sdk.rewards import RewardGuard
from echo2_sdk.config import VLLMOptions
from echo2_sdk.runtime.broadcast.endpoints import BroadcastReceiverMixin
from echo2_sdk.runtime.rollout.base import GenerationResult, WorkerSettings


class RolloutWorker(BroadcastReceiverMixin):
    hand_over_gil: bool = True
    """Yield the GIL as soon as the generation lock is released (``_hand_over``). The benchmark turns it off
    to measure what it saves (``benchmarks/rollout_overhead.py``, variant ``actor_no_handover``)."""

    def __init__(self, name: str, settings: WorkerSettings, *, model_files: Any = None) -> None:
        """``model_files``: the base model folder packed by ``models.files.pack``, for a Ray node that
        lacks ``settings.model_path`` (it never travels to a worker outside Ray)."""
        torch.set_num_threads(settings.threads)
        import transformers

        transformers.utils.logging.disable_progress_bar()
        torch.manual_seed(settings.seed)
        self.name = name
        self.node_id = current_node_id()
        model_path = settings.model_path
        if model_files is not None:  # the base model folder lives on the learner's node only
            from echo2_sdk.runtime.models.files import materialize

            model_path = materialize(model_path, model_files)
        self.sampling = settings.sampling
        self.n = settings.samples_per_prompt
        self.max_tokens_per_s = settings.max_tokens_per_s
        task_options = dict(settings.task_options)
        self.adapter = make_task(settings.task_name, task_options, seed=settings.seed)
        self.guard = RewardGuard(settings.task_name, task_options, settings.seed, timeout_s=settings.reward_timeout_s,
                                 max_chars=settings.max_answer_chars, local=self.adapter)
        self.backend, self.tokenizer = _make_backend(settings.backend, model_path, settings.dtype, settings.device,
                                                     seed=settings.seed, vllm_options=settings.vllm_options)
        self.league = _make_league(self.adapter, settings, model_path)
        self.version = 0
        self._lock = threading.Lock()
        self._pending: tuple[dict, int] | None = None
        self._generate_lock = threading.Lock()
        self._prompt_cache: dict[str, list[int]] = {}
        self._installed: dict[int, float] = {}
        self._calls = 0
        self._closing = False

    # ---- control plane -----------------------------------------------------------------------
    def install(self, state_dict: dict, version: int) -> int:
        """Stage snapshot ``version``; it is applied before the next generation batch."""
        with self._lock:
            if self._pending is None or version > self._pending[1]:
                self._pending = (state_dict, version)
        return version

    def ping(self) -> str:
        return self.name

    def _apply_pending(self) -> None:
        with self._lock:
            pending, self._pending = self._pending, None
        if pending is not None and pending[1] > self.version:
            self.backend.load_weights(pending[0], pending[1])
            self.version = pending[1]
            if self.league is not None:
                self.league.offer(pending[1], pending[0])
            self._installed[self.version] = time.time()

    # ---- data plane --------------------------------------------------------------------------
    def generate(self, examples: Sequence[Example]) -> GenerationResult:
        """Generate n samples for each example under the installed version; score; build groups."""
        if isinstance(self.adapter, MultiTurnTaskAdapter):
            return self._generate_episodes(examples)
        with self._generate_lock:
            self._apply_pending()
            version = self.version
            t0 = time.perf_counter()
            prompts = [self._prompt_ids(ex) for ex in examples]
            seed = None if self.sampling.seed is None else self.sampling.seed + self._calls
            self._calls += 1
            params = dataclasses.replace(self.sampling, seed=seed)
            outputs = self.backend.generate(prompts, self.n, params)
            t_gen = time.perf_counter() - t0
            # Decoding stays under the lock: HF tokenizers are not safe to share across threads.
            flat = [c for outs in outputs for c in outs]
            texts = self.tokenizer.batch_decode([list(c.token_ids) for c in flat], skip_special_tokens=True)
            num_tokens = sum(len(c.token_ids) for c in flat)
            # The cap models a slower generator, so it holds the generation stage (not scoring).
            t_throttle = self._throttle(num_tokens, time.perf_counter() - t0)
            installed, self._installed = self._installed, {}
        self._hand_over()

        t1 = time.perf_counter()
        owners = [ex for ex, outs in zip(examples, outputs) for _ in outs]
        try:
            results = self.guard.score_many(list(zip(owners, texts)))
        except RuntimeError:
            if not self._closing:
                raise
            # The pool is shutting down (a run's end or stop) with this request in flight: nobody reads
            # the reply, and an error here would only be printed by Ray as an unhandled traceback.
            return GenerationResult(worker=self.name, groups=[], version=version, num_tokens=0, t_generate_s=t_gen,
                                    t_reward_s=0.0, t_throttle_s=t_throttle, node=self.node_id)
        t_reward = time.perf_counter() - t1

        groups, k = [], 0
        status: dict[str, int] = {}
        detail: dict[str, str] = {}
        for ex, prompt_ids, outs in zip(examples, prompts, outputs):
            rollouts = []
            for comp in outs:
                res = results[k]
                k += 1
                status[res.status] = status.get(res.status, 0) + 1
                if res.status != "ok":
                    detail.setdefault(res.status, res.detail)
                rollouts.append(
                    Rollout(
                        prompt_ids=prompt_ids,
                        completion_ids=comp.token_ids,
                        reward=res.reward,
                        version=version,
                        omega=self.adapter.materialize(ex, prompt_ids, comp.token_ids),
                        sampler_logprobs=comp.logprobs,
                        prompt_key=ex.id,
                        meta={"worker": self.name, "node": self.node_id, "finish": comp.finish_reason,
                              "reward_status": res.status},
                    )
                )
            groups.append(group_to_wire(
                RolloutGroup(ex.id, version, tuple(rollouts), worker_id=self.name, t_generated=time.time())
            ))
        return GenerationResult(
            worker=self.name,
            groups=groups,
            version=version,
            num_tokens=num_tokens,
            t_generate_s=t_gen,
            t_reward_s=t_reward,
            t_throttle_s=t_throttle,
            reward_status=status,
            installed=installed,
            node=self.node_id,
            reward_detail=detail,
        )

    def generate_wire(self, examples: Sequence[dict]) -> bytes:
        """What the pool calls: examples as JSON-able dicts in, the result as a JSON document out.

        Nothing on the worker → learner path is pickled (``echo2_sdk.runtime.rollout.codec``)."""
        from echo2_sdk.runtime.rollout.codec import example_from_dict, result_to_json

        return result_to_json(self.generate([example_from_dict(e) for e in examples]))

    def _generate_episodes(self, examples: Sequence[Example]) -> GenerationResult:
        """Multi-turn tasks: n episodes per example in lock-step (``echo2_sdk.runtime.rollout.episodes``).

        The reward is the trajectory return, computed while playing: no reward subprocess, so the
        whole call holds the generation stage (the environment steps between sampled turns).
        """
        from echo2_sdk.runtime.rollout.episodes import run_episodes

        with self._generate_lock:
            self._apply_pending()
            version = self.version
            t0 = time.perf_counter()
            seed = None if self.sampling.seed is None else self.sampling.seed + self._calls
            self._calls += 1
            params = dataclasses.replace(self.sampling, seed=seed)
            if self.league is not None:
                self.league.draw(seed)  # one member for the whole request: a deal's n episodes meet the same one
            batch = run_episodes(self.adapter, self.backend, self.tokenizer, examples, self.n, params,
                                 version=version, worker=self.name, node=self.node_id)
            if self.league is not None:
                batch.groups = [self.league.tag(group) for group in batch.groups]
            t_gen = time.perf_counter() - t0
            t_throttle = self._throttle(batch.num_tokens, t_gen)
            installed, self._installed = self._installed, {}
        self._hand_over()
        return GenerationResult(
            worker=self.name, groups=[group_to_wire(g) for g in batch.groups], version=version,
            num_tokens=batch.num_tokens, t_generate_s=t_gen, t_reward_s=0.0, t_throttle_s=t_throttle,
            reward_status=batch.reward_status, installed=installed, node=self.node_id,
        )

    def _hand_over(self) -> None:
        # A request queued on the generation lock wakes holding no GIL; this thread, about to score and encode,
        # would keep it for up to Python's switch interval (5 ms) while the engine sat idle. sleep(0) yields it.
        if self.hand_over_gil:
            time.sleep(0)

    def _prompt_ids(self, example: Example) -> list[int]:
        # Rendering the chat template is slow next to a tiny model's generation; prompts repeat.
        ids = self._prompt_cache.get(example.id)
        if ids is None:
            ids = self._prompt_cache[example.id] = chat_token_ids(self.tokenizer, self.adapter.build_messages(example))
        return ids

    def _throttle(self, num_tokens: int, elapsed_s: float) -> float:
        """Simulated throughput cap: sleep so that tokens/elapsed ≤ max_tokens_per_s."""
        if not self.max_tokens_per_s:
            return 0.0
        wait = num_tokens / self.max_tokens_per_s - elapsed_s
        if wait > 0:
            time.sleep(wait)
            return wait
        return 0.0

    def stats(self) -> dict[str, Any]:
        return {"name": self.name, "version": self.version, "reward": self.guard.stats()}

    def close(self) -> None:
        self._closing = True
        self.broadcast_close()
        self.guard.close()
        getattr(self.backend, "close", lambda: None)()  # a vLLM engine holds a process and memory


def current_node_id() -> str:
    """The Ray node id of this process when it runs inside Ray (an actor, a task or a connected
    driver), else the hostname: ``RolloutWorker`` stays usable without Ray."""
    import sys

    if "ray" in sys.modules:  # never import Ray just to ask
        try:
            import ray

            if ray.is_initialized():
                return ray.get_runtime_context().get_node_id()
        except Exception:  # an unusual Ray state must not stop a worker from starting
            pass
    import socket

    return socket.gethostname()


def _make_league(adapter, settings: WorkerSettings, model_path: str):
    """The worker's league of earlier snapshots when its task seats ``llm:league`` (else None), installed
    in the adapter's seat factory; its second model is an HF one on the worker's device, whatever the
    rollout backend (it plays batch-1 opponent decisions)."""
    from echo2_sdk.runtime.rollout.league import SnapshotLeague, seats_league
    from echo2_sdk.runtime.rollout.mirror import SeatPolicies

    if not seats_league(adapter):
        return None
    league = SnapshotLeague(lambda: _make_backend("hf", model_path, settings.dtype, settings.device, seed=settings.seed),
                            size=settings.league_size, every_versions=settings.league_every_versions,
                            max_new_tokens=settings.sampling.max_new_tokens)
    adapter.llm_policy_factory = SeatPolicies(league=league)  # run_episodes binds the mirror beside it
    return league


def _make_backend(kind: str, model_path: str, dtype: str, device: str, *, seed: int = 0,
                  vllm_options: VLLMOptions | None = None):
    """(backend, tokenizer) for ``rollout.backend``."""
    from echo2_sdk.runtime.models.modeling import TINY_MODEL_NAME, ensure_tiny_qwen3, load_policy

    if kind == "hf":
        from echo2_sdk.runtime.rollout.backends.hf import HFBackend

        model, tokenizer = load_policy(model_path, dtype=dtype, device=device)
        return HFBackend(model, tokenizer, device=device), tokenizer
    if kind == "vllm":
        from echo2_sdk.runtime.rollout.backends.vllm import VLLMBackend
        from echo2_sdk.runtime.models.modeling import load_tokenizer

        path = ensure_tiny_qwen3() if model_path == TINY_MODEL_NAME else model_path
        tokenizer = load_tokenizer(path)  # the tokenizer alone: the weights live only in the engine
        backend = VLLMBackend(path, tokenizer, dtype=dtype, device=device, seed=seed, options=vllm_options)
        return backend, tokenizer
    raise ValueError(f"rollout.backend={kind!r} is not a backend; use 'hf' or 'vllm'")
