"""Learner checkpoints: weights (safetensors + HF config), optimizer, version, every RNG, and extras.

A resumed run continues bit-for-bit on CPU: the global torch/numpy/python RNGs and the learner's
mini-batch generator are restored with the weights and the optimizer state.
"""

from __future__ import annotations

import io
import json
import os
import random
import re
import shutil
import tempfile
from pathlib import Path

import numpy as np
import torch
from safetensors.torch import load_model, save_model

CHECKPOINT_FORMAT = "echo2-learner-checkpoint/1"
_MODEL_FILE = "model.safetensors"
_OPTIMIZER_FILE = "optimizer.pt"
_STATE_FILE = "trainer_state.pt"
_META_FILE = "meta.json"


def save_learner_checkpoint(learner, path: str, extra: dict | None = None) -> None:
    """Write weights, optimizer, version, RNG states and `extra` to directory `path`.

    Layout: model.safetensors (+ config.json when the model has an HF config, so the folder
    also loads with `from_pretrained`), optimizer.pt, trainer_state.pt, meta.json. Written
    to a temporary sibling directory and renamed into place; an existing checkpoint at
    `path` is replaced. `extra` (e.g. the data position) may hold None/bool/int/float/str,
    lists, tuples, dicts and tensors.
    """
    extra = {} if extra is None else extra
    if not isinstance(extra, dict):
        raise TypeError(f"extra must be a dict, got {type(extra)}")
    _check_reloadable(extra)
    final = Path(path)
    if final.exists() and not final.is_dir():
        raise FileExistsError(f"checkpoint path {final} is a file; pick a directory path")
    final.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{final.name}.tmp-", dir=final.parent))
    try:
        save_model(learner.model, str(tmp / _MODEL_FILE))
        config = getattr(learner.model, "config", None)
        if config is not None and hasattr(config, "to_json_file"):
            config.to_json_file(str(tmp / "config.json"))
        torch.save(learner.optimizer.state_dict(), tmp / _OPTIMIZER_FILE)
        state = {
            "format": CHECKPOINT_FORMAT,
            "version": learner.version,
            "num_optimizer_steps": learner.num_optimizer_steps,
            "rng": _capture_rng(learner.generator),
            "extra": extra,
        }
        torch.save(state, tmp / _STATE_FILE)
        meta = {key: state[key] for key in ("format", "version", "num_optimizer_steps")}
        (tmp / _META_FILE).write_text(json.dumps(meta, indent=2) + "\n")
        for file in tmp.iterdir():
            with open(file, "rb") as handle:
                os.fsync(handle.fileno())
        old = None
        if final.exists():
            old = Path(tempfile.mkdtemp(prefix=f".{final.name}.old-", dir=final.parent))
            os.rename(final, old / final.name)
        os.rename(tmp, final)
        if old is not None:
            shutil.rmtree(old, ignore_errors=True)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise

def load_learner_checkpoint(learner, path: str) -> dict:
    """Restore weights, optimizer, version and all RNG states from `path`; return `extra`."""
    folder = Path(path)
    required = (_MODEL_FILE, _OPTIMIZER_FILE, _STATE_FILE)
    missing = [name for name in required if not (folder / name).is_file()]
    if missing:
        raise FileNotFoundError(
            f"{folder} is not a complete learner checkpoint (missing {missing}); "
            "pass a directory written by Learner.save_checkpoint"
        )
    state = torch.load(folder / _STATE_FILE, map_location="cpu", weights_only=True)
    if state.get("format") != CHECKPOINT_FORMAT:
        raise ValueError(
            f"{folder} has checkpoint format {state.get('format')!r}, "
            f"this learner reads {CHECKPOINT_FORMAT!r}"
        )
    load_model(learner.model, str(folder / _MODEL_FILE), strict=True, device=str(learner.device))
    optimizer_file = folder / _OPTIMIZER_FILE
    learner.optimizer.load_state_dict(
        torch.load(optimizer_file, map_location=learner.device, weights_only=True)
    )
    learner.version = int(state["version"])
    learner.num_optimizer_steps = int(state["num_optimizer_steps"])
    _restore_rng(state["rng"], learner.generator)
    return state["extra"]


def _capture_rng(generator: torch.Generator) -> dict:
    np_name, np_keys, np_pos, np_has_gauss, np_gauss = np.random.get_state()
    return {
        "torch": torch.get_rng_state(),
        "cuda": torch.cuda.get_rng_state_all() if torch.cuda.is_initialized() else [],
        "numpy": {
            "name": np_name,
            "keys": torch.from_numpy(np_keys.astype(np.int64)),
            "pos": int(np_pos),
            "has_gauss": int(np_has_gauss),
            "cached_gaussian": float(np_gauss),
        },
        "python": random.getstate(),
        "minibatch_generator": generator.get_state(),
    }


def _restore_rng(rng: dict, generator: torch.Generator) -> None:
    torch.set_rng_state(rng["torch"])
    if rng["cuda"] and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(rng["cuda"])
    npk = rng["numpy"]
    keys = npk["keys"].numpy().astype(np.uint32)
    np.random.set_state((npk["name"], keys, npk["pos"], npk["has_gauss"], npk["cached_gaussian"]))
    random.setstate(rng["python"])
    generator.set_state(rng["minibatch_generator"])


def _check_reloadable(extra: dict) -> None:
    """`extra` must reload under torch.load(weights_only=True), as load_checkpoint does."""
    buffer = io.BytesIO()
    try:
        torch.save(extra, buffer)
        buffer.seek(0)
        torch.load(buffer, weights_only=True)
    except Exception as exc:
        found = re.search(r"Unsupported global: GLOBAL (\S+)", str(exc))
        reason = f"it holds a `{found.group(1)}`" if found else f"{type(exc).__name__}: {exc}"
        raise TypeError(
            f"extra cannot be stored in a checkpoint ({reason}); use only None/bool/int/float/"
            "str, lists, tuples, dicts and tensors (e.g. float(x) for numpy scalars)"
        ) from None
