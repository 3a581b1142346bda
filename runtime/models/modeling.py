"""Policy models: a tiny offline Qwen3 for CPU runs and tests, or any Hugging Face causal LM.

`load_policy("tiny-qwen3")` builds (once, cached on disk) a randomly initialised ~1M-parameter
Qwen3 with a character-level tokenizer and a Qwen-style chat template, so the whole pipeline runs
offline on a laptop CPU; `ensure_tiny_from_config` builds it with a tokenizer fitted to the task
instead when `model.tiny.tokenizer` is `task`. Any other name goes through
`AutoModelForCausalLM.from_pretrained`, so `load_policy("Qwen/Qwen3-4B", dtype="bfloat16",
device="cuda")` runs the same code on a GPU box.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

import torch
from transformers import (
    AutoModelForCausalLM,
    AutoTokenizer,
    GenerationConfig,
    PreTrainedTokenizerFast,
    Qwen3Config,
    Qwen3ForCausalLM,
)

# The tiny tokenizer lives in the SDK (its checks build it offline); re-exported for the runtime.
from echo2_sdk.tiny_tokenizer import (  # noqa: F401
    IM_END,
    IM_START,
    MODEL_MAX_LENGTH,
    PAD_TOKEN,
    QWEN_STYLE_CHAT_TEMPLATE,
    UNK_TOKEN,
    build_tiny_tokenizer,
)
from echo2_sdk.task_tokenizer import fit_task_tokenizer, tokenizer_fingerprint

TINY_MODEL_NAME = "tiny-qwen3"
DEFAULT_TINY_SIZE = dict(
    hidden_size=128, num_layers=4, num_heads=4, num_kv_heads=2, intermediate_size=512, seed=0
)
# Bump when the model recipe (or what is saved with it) changes so stale cache folders are not reused.
# The tokenizer needs no bump: the folder name carries its fingerprint (tokenizer_fingerprint).
_TINY_RECIPE_VERSION = 1

_DTYPES = {
    "float32": torch.float32,
    "fp32": torch.float32,
    "bfloat16": torch.bfloat16,
    "bf16": torch.bfloat16,
    "float16": torch.float16,
    "fp16": torch.float16,
}


def build_tiny_model(
    tokenizer: PreTrainedTokenizerFast,
    *,
    hidden_size: int = 128,
    num_layers: int = 4,
    num_heads: int = 4,
    num_kv_heads: int = 2,
    intermediate_size: int = 512,
    seed: int = 0,
) -> Qwen3ForCausalLM:
    """Randomly initialised Qwen3 sized for CPU (defaults: ~1M parameters), deterministic in `seed`."""
    if hidden_size % num_heads or num_heads % num_kv_heads:
        raise ValueError(
            f"hidden_size={hidden_size} must divide by num_heads={num_heads}, and num_heads by "
            f"num_kv_heads={num_kv_heads}; pick e.g. hidden_size=128, num_heads=4, num_kv_heads=2"
        )
    pad_id = tokenizer.pad_token_id
    eos_id = tokenizer.eos_token_id
    config = Qwen3Config(
        vocab_size=len(tokenizer),
        hidden_size=hidden_size,
        intermediate_size=intermediate_size,
        num_hidden_layers=num_layers,
        num_attention_heads=num_heads,
        num_key_value_heads=num_kv_heads,
        head_dim=hidden_size // num_heads,
        max_position_embeddings=MODEL_MAX_LENGTH,
        tie_word_embeddings=True,
        # Like Qwen: no BOS is prepended; <|endoftext|> doubles as bos for configs that need one.
        pad_token_id=pad_id,
        bos_token_id=pad_id,
        eos_token_id=eos_id,
    )
    # Seed a private RNG state so building a model does not perturb the caller's global RNG.
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = Qwen3ForCausalLM(config)
    model.generation_config = GenerationConfig(
        pad_token_id=pad_id, bos_token_id=pad_id, eos_token_id=eos_id
    )
    return model.eval()


def _default_cache_dir() -> Path:
    return Path(os.environ.get("ECHO2_CACHE") or Path.home() / ".cache" / "echo2")


def ensure_tiny_qwen3(cache_dir: str | None = None, *, tokenizer: PreTrainedTokenizerFast | None = None,
                      **size) -> str:
    """Build the tiny model + tokenizer once and return the folder they are saved in.

    `tokenizer` defaults to the char-level one (`build_tiny_tokenizer`); the folder name carries its
    fingerprint, so models of different vocabularies never share a folder. `size` takes the keyword
    arguments of `build_tiny_model` (hidden_size, num_layers, num_heads, num_kv_heads,
    intermediate_size, seed). Safe against concurrent callers: each writes into its own temporary
    folder and renames it into place; a loser of the race discards its copy.
    """
    unknown = set(size) - set(DEFAULT_TINY_SIZE)
    if unknown:
        raise TypeError(
            f"ensure_tiny_qwen3 got unknown size keys {sorted(unknown)}; "
            f"allowed: {sorted(DEFAULT_TINY_SIZE)}"
        )
    params = {**DEFAULT_TINY_SIZE, **size}
    tokenizer = tokenizer if tokenizer is not None else build_tiny_tokenizer()
    root = Path(cache_dir) if cache_dir else _default_cache_dir()
    folder_name = (
        f"tiny-qwen3-v{_TINY_RECIPE_VERSION}-h{params['hidden_size']}-l{params['num_layers']}"
        f"-a{params['num_heads']}-kv{params['num_kv_heads']}-i{params['intermediate_size']}"
        f"-s{params['seed']}-t{tokenizer_fingerprint(tokenizer)}"
    )
    final = root / folder_name
    if (final / "config.json").exists():
        return str(final)
    root.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{folder_name}.", dir=root))
    try:
        model = build_tiny_model(tokenizer, **params)
        model.save_pretrained(staging)
        tokenizer.save_pretrained(staging)
        try:
            os.rename(staging, final)  # atomic on one filesystem; fails if `final` already exists
        except OSError:
            if not (final / "config.json").exists():
                raise
    finally:
        if staging.exists():
            shutil.rmtree(staging, ignore_errors=True)
    return str(final)


def ensure_tiny_from_config(tiny, task=None, cache_dir: str | None = None) -> str:
    """Folder of the tiny model that `tiny` (an `echo2_sdk.config.TinyModelConfig`) describes.

    With `tiny.tokenizer == "task"` its tokenizer is fitted to `task` (a task adapter, whose
    `tokenizer_corpus()` it reads; under a second for poker or moba), and the folder is keyed by that
    tokenizer's fingerprint: a changed corpus, vocabulary size or recipe builds a new model.
    """
    size = {name: getattr(tiny, name) for name in DEFAULT_TINY_SIZE if hasattr(tiny, name)}
    tokenizer = None
    if tiny.tokenizer == "task":
        if task is None:
            raise ValueError("model.tiny.tokenizer=task fits the tokenizer to the task, but no task adapter was "
                             "given to ensure_tiny_from_config")
        tokenizer = fit_task_tokenizer(task, vocab_size=tiny.task_vocab_size)
    return ensure_tiny_qwen3(cache_dir, tokenizer=tokenizer, **size)


def resolve_dtype(dtype: str | torch.dtype) -> torch.dtype:
    """Map "float32"/"bf16"/... (or a torch.dtype) to a torch.dtype."""
    if isinstance(dtype, torch.dtype):
        return dtype
    if dtype not in _DTYPES:
        raise ValueError(f"unknown dtype {dtype!r}; use one of {sorted(_DTYPES)}")
    return _DTYPES[dtype]


def load_tokenizer(path: str):
    """The policy's tokenizer, padding on the left (for generation), with a pad token."""
    tokenizer = AutoTokenizer.from_pretrained(path)
    tokenizer.padding_side = "left"
    if tokenizer.pad_token is None:
        # Many base checkpoints ship without a pad token; eos is the conventional stand-in.
        tokenizer.pad_token = tokenizer.eos_token
    return tokenizer


def load_policy(
    name_or_path: str,
    *,
    dtype: str | torch.dtype = "float32",
    device: str | torch.device = "cpu",
    tiny_size: dict | None = None,
):
    """Load (model, tokenizer) for a policy; the tokenizer pads on the left, for generation.

    `"tiny-qwen3"` builds/reuses the cached tiny model (`tiny_size` overrides its size keys);
    anything else is a Hub id or local folder for `AutoModelForCausalLM`. The model is returned in
    eval mode on `device`.
    """
    torch_dtype = resolve_dtype(dtype)  # fail on a bad dtype before building or downloading anything
    if name_or_path == TINY_MODEL_NAME:
        path = ensure_tiny_qwen3(**(tiny_size or {}))
    elif tiny_size:
        raise ValueError(
            f"tiny_size={tiny_size} only applies to {TINY_MODEL_NAME!r}, not {name_or_path!r}"
        )
    else:
        path = name_or_path
    tokenizer = load_tokenizer(path)
    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch_dtype)
    if model.generation_config.pad_token_id is None:
        model.generation_config.pad_token_id = tokenizer.pad_token_id
    return model.to(device).eval(), tokenizer


def quiet_libraries() -> None:
    """Progress bars of weight loading drown the training log; keep warnings and errors."""
    import transformers

    transformers.utils.logging.set_verbosity_error()
    transformers.utils.logging.disable_progress_bar()
