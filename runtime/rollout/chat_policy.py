"""A model checkpoint as a chat policy ``policy(messages) -> str`` (LLM seats, ``echo2 eval``).

``resolve_policy_path`` accepts what a user has at hand and finds the weights and the tokenizer:

- a Hugging Face model folder or Hub id with its tokenizer, or ``tiny-qwen3``;
- a training run's checkpoint, ``runs/NAME/checkpoints/step_K`` (weights and ``config.json`` only;
  the tokenizer comes from the run's base model, read from ``runs/NAME/config.yaml``);
- a training run directory ``runs/NAME`` (its latest checkpoint) or its ``base_model`` folder.
"""

from __future__ import annotations

import functools
from pathlib import Path

from echo2_sdk.chat import chat_token_ids
from echo2_sdk.runtime.rollout.backends.base import SamplingParams

TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "tokenizer.model", "vocab.json")


def _has_tokenizer(folder: Path) -> bool:
    return any((folder / name).exists() for name in TOKENIZER_FILES)


def _is_run(folder: Path) -> bool:
    """A training run directory: its config.yaml and a checkpoints folder."""
    return (folder / "config.yaml").is_file() and (folder / "checkpoints").is_dir()


def _run_base_model(run: Path) -> str:
    """The base policy a run started from (where its tokenizer lives), from the run's config.yaml."""
    if (run / "base_model" / "config.json").exists():
        return str(run / "base_model")
    from echo2_sdk.config import load_config
    from echo2_sdk.registry import make_task
    from echo2_sdk.runtime.models.modeling import TINY_MODEL_NAME, ensure_tiny_from_config

    cfg = load_config(str(run / "config.yaml"), [])
    if cfg.model.name == TINY_MODEL_NAME:
        # The run's own task: a task-fitted tokenizer is rebuilt from it (the same corpus, the same folder).
        fitted = cfg.model.tiny.tokenizer == "task"
        task = make_task(cfg.task.name, cfg.task.options, seed=cfg.train.seed) if fitted else None
        return ensure_tiny_from_config(cfg.model.tiny, task)
    return cfg.model.name


def resolve_policy_path(spec: str) -> tuple[str, str]:
    """(weights path, tokenizer path) of a model name, model folder, run checkpoint or run directory."""
    from echo2_sdk.runtime.models.modeling import TINY_MODEL_NAME, ensure_tiny_qwen3
    from echo2_sdk.runtime.models.files import CHECKPOINT_RE, latest_checkpoint

    if spec == TINY_MODEL_NAME:
        path = ensure_tiny_qwen3()
        return path, path
    folder = Path(spec)
    if not folder.exists():
        if spec.startswith((".", "/", "runs")) or spec.count("/") != 1:
            raise FileNotFoundError(f"policy {spec!r} is neither an existing folder nor a Hub id like "
                                    "'Qwen/Qwen3-0.6B'; give a model folder, runs/NAME/checkpoints/step_K or runs/NAME")
        return spec, spec  # a Hub id
    if _is_run(folder):
        latest = latest_checkpoint(folder / "checkpoints")
        if latest is None:
            raise FileNotFoundError(f"run directory {folder} has no checkpoints yet (expected "
                                    f"{folder}/checkpoints/step_K); give its base_model folder instead")
        folder = latest
    if not (folder / "config.json").exists():
        raise FileNotFoundError(f"{folder} holds no model (config.json missing); give a model folder, "
                                "runs/NAME/checkpoints/step_K or runs/NAME")
    if _has_tokenizer(folder):
        return str(folder), str(folder)
    if CHECKPOINT_RE.match(folder.name) and _is_run(folder.parent.parent):
        return str(folder), _run_base_model(folder.parent.parent)
    raise FileNotFoundError(f"{folder} has weights but no tokenizer, and is not inside a run directory "
                            "(runs/NAME/checkpoints/step_K with runs/NAME/config.yaml); copy a tokenizer into it")


class ChatPolicy:
    """``policy(messages) -> str``: one sampled assistant reply per call (greedy by default)."""

    def __init__(self, spec: str, *, temperature: float = 0.0, max_new_tokens: int = 16, seed: int = 0,
                 device: str = "cpu", dtype: str = "float32") -> None:
        from transformers import AutoModelForCausalLM, AutoTokenizer

        from echo2_sdk.runtime.rollout.backends.hf import HFBackend
        from echo2_sdk.runtime.models.modeling import quiet_libraries, resolve_dtype

        quiet_libraries()  # weight-loading progress bars would break the evaluation table
        self.spec = spec
        weights, tokenizer_path = resolve_policy_path(spec)
        self.tokenizer = AutoTokenizer.from_pretrained(tokenizer_path)
        self.tokenizer.padding_side = "left"
        if self.tokenizer.pad_token is None:
            self.tokenizer.pad_token = self.tokenizer.eos_token
        model = AutoModelForCausalLM.from_pretrained(weights, dtype=resolve_dtype(dtype)).to(device).eval()
        if model.generation_config.pad_token_id is None:
            model.generation_config.pad_token_id = self.tokenizer.pad_token_id
        self.backend = HFBackend(model, self.tokenizer, device=device)
        self.params = SamplingParams(temperature=temperature, max_new_tokens=max_new_tokens, seed=seed)
        self.calls = 0

    def __call__(self, messages: list[dict[str, str]]) -> str:
        params = self.params
        if params.seed is not None and params.temperature > 0:
            params = SamplingParams(params.temperature, params.top_p, params.max_new_tokens, params.seed + self.calls)
        self.calls += 1
        [[completion]] = self.backend.generate([chat_token_ids(self.tokenizer, messages)], 1, params)
        return self.tokenizer.decode(list(completion.token_ids), skip_special_tokens=True)


def run_of(spec: str) -> Path | None:
    """The training run a policy path belongs to (``runs/NAME``, its ``base_model`` or a checkpoint), or None."""
    from echo2_sdk.runtime.models.files import CHECKPOINT_RE

    folder = Path(spec)
    candidates = [folder]
    if folder.name == "base_model":
        candidates.append(folder.parent)
    elif CHECKPOINT_RE.match(folder.name):
        candidates.append(folder.parent.parent)
    return next((c for c in candidates if _is_run(c)), None)


def reply_tokens(spec: str, default: int) -> int:
    """The reply length limit a policy plays with when none is given: its run's ``rollout.max_new_tokens`` (the
    length it was trained to answer in), else ``default``."""
    run = run_of(spec)
    if run is None:
        return default
    from echo2_sdk.config import load_config

    return load_config(str(run / "config.yaml"), []).rollout.max_new_tokens


@functools.lru_cache(maxsize=8)
def cached_chat_policy(spec: str, temperature: float = 0.0, max_new_tokens: int = 16) -> ChatPolicy:
    """One loaded :class:`ChatPolicy` per (spec, temperature, max_new_tokens) in this process."""
    return ChatPolicy(spec, temperature=temperature, max_new_tokens=max_new_tokens)
