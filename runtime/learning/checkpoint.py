"""Learner checkpoints: weights (safetensors + HF config), optimizer, version, every RNG, and extras.

A resumed run continues bit-for-bit on CPU: the global torch/numpy/python RNGs and the learner's
mini-batch generator are restored with the weights and the optimizer state. Weights and optimizer
state are stored whole (gathered from every rank, optimizer state keyed by parameter name), so a
run resumes with a different number of learner ranks. Saving and loading are collectives when the
learner is sharded: every rank calls them; rank 0 writes.

Crash safety: a checkpoint is written into a temporary sibling folder and renamed into place only when
every file is on disk, with ``manifest.json`` (each file's size and SHA-256) written last. A folder
whose files do not match its manifest is not a checkpoint (:func:`verify_checkpoint`); ``--resume``
skips it for the previous intact one.
"""

from __future__ import annotations

import hashlib
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
from safetensors.torch import load_file, save_file

CHECKPOINT_FORMAT = "echo2-learner-checkpoint/2"
_READABLE_FORMATS = ("echo2-learner-checkpoint/1", CHECKPOINT_FORMAT)  # /1: optimizer keyed by index
_MODEL_FILE = "model.safetensors"
_OPTIMIZER_FILE = "optimizer.pt"
_STATE_FILE = "trainer_state.pt"
_REQUIRED = (_MODEL_FILE, _OPTIMIZER_FILE, _STATE_FILE)
_META_FILE = "meta.json"
MANIFEST_FILE = "manifest.json"
_MANIFEST_FORMAT = "echo2-checkpoint-manifest/1"


class CheckpointError(ValueError):
    """A checkpoint folder is incomplete, damaged or unreadable; the message names the folder and the file."""


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
    weights = learner.full_state_dict()  # collectives first: every rank takes part, rank 0 writes
    optimizer_state = _full_optimizer_state(learner)
    if not learner.group.is_main:
        return
    final.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{final.name}.tmp-", dir=final.parent))
    try:
        tied = getattr(learner, "tied", {})
        save_file({k: v.contiguous() for k, v in weights.items() if k not in tied}, str(tmp / _MODEL_FILE),
                  metadata={"format": "pt"})
        config = getattr(learner.model, "config", None)
        if config is not None and hasattr(config, "to_json_file"):
            config.to_json_file(str(tmp / "config.json"))
        torch.save(optimizer_state, tmp / _OPTIMIZER_FILE)
        state = {
            "format": CHECKPOINT_FORMAT,
            "version": learner.version,
            "num_optimizer_steps": learner.num_optimizer_steps,
            "num_ranks": learner.group.world_size,
            "rng": _capture_rng(learner.generator),
            "extra": extra,
        }
        torch.save(state, tmp / _STATE_FILE)
        meta = {key: state[key] for key in ("format", "version", "num_optimizer_steps", "num_ranks")}
        (tmp / _META_FILE).write_text(json.dumps(meta, indent=2) + "\n")
        # The manifest goes last: a folder holding one was complete when it was written.
        files = {file.name: _describe(file) for file in sorted(tmp.iterdir())}
        (tmp / MANIFEST_FILE).write_text(json.dumps({"format": _MANIFEST_FORMAT, "files": files}, indent=1) + "\n")
        for file in tmp.iterdir():
            with open(file, "rb") as handle:
                os.fsync(handle.fileno())
        _fsync_dir(tmp)
        old = None
        if final.exists():
            old = Path(tempfile.mkdtemp(prefix=f".{final.name}.old-", dir=final.parent))
            os.rename(final, old / final.name)
        os.rename(tmp, final)
        _fsync_dir(final.parent)  # the rename itself survives a power cut
        if old is not None:
            shutil.rmtree(old, ignore_errors=True)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def _describe(file: Path) -> dict:
    digest = hashlib.sha256()
    with open(file, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 22), b""):
            digest.update(block)
    return {"bytes": file.stat().st_size, "sha256": digest.hexdigest()}


def _fsync_dir(folder: Path) -> None:
    fd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(fd)
    except OSError:  # some file systems cannot fsync a directory; the data files are synced anyway
        pass
    finally:
        os.close(fd)


def verify_checkpoint(path: str | os.PathLike) -> None:
    """Raise :class:`CheckpointError` unless ``path`` is a complete checkpoint whose files match its
    manifest (size, then SHA-256). A folder written before manifests existed passes when its required
    files are there; their contents are checked when they load."""
    folder = Path(path)
    missing = [name for name in _REQUIRED if not (folder / name).is_file()]
    manifest_path = folder / MANIFEST_FILE
    if not manifest_path.is_file():
        if missing:
            raise CheckpointError(f"{folder}: incomplete checkpoint (no {MANIFEST_FILE}, missing {missing})")
        return
    try:
        manifest = json.loads(manifest_path.read_text())
        files = manifest["files"]
    except (OSError, ValueError, KeyError, TypeError):
        raise CheckpointError(f"{folder}: {MANIFEST_FILE} is unreadable") from None
    absent = missing or [name for name in _REQUIRED if name not in files]
    if absent:
        raise CheckpointError(f"{folder}: incomplete checkpoint ({', '.join(absent)} missing)")
    for name, want in files.items():
        file = folder / name
        if not file.is_file():
            raise CheckpointError(f"{folder}: {name} is missing")
        size = file.stat().st_size
        if size != want.get("bytes"):
            raise CheckpointError(f"{folder}: {name} has {size} bytes, its manifest says {want.get('bytes')} "
                                  "(truncated or overwritten)")
        if _describe(file)["sha256"] != want.get("sha256"):
            raise CheckpointError(f"{folder}: {name} does not match its SHA-256 in {MANIFEST_FILE} (damaged)")


def _full_optimizer_state(learner) -> dict:
    from echo2_sdk.runtime.learning.sharding import full_optimizer_state

    return full_optimizer_state(learner.model, learner.optimizer, learner.sharded)


def load_learner_checkpoint(learner, path: str) -> dict:
    """Restore weights, optimizer, version and all RNG states from `path`; return `extra`."""
    folder = Path(path)
    missing = [name for name in _REQUIRED if not (folder / name).is_file()]
    if missing:
        raise FileNotFoundError(
            f"{folder} is not a complete learner checkpoint (missing {missing}); "
            "pass a directory written by Learner.save_checkpoint"
        )
    try:
        state = torch.load(folder / _STATE_FILE, map_location="cpu", weights_only=True)
    except Exception as exc:  # truncated or not a torch file: the folder's fault, not the learner's
        raise CheckpointError(f"{folder}: {_STATE_FILE} is unreadable ({type(exc).__name__}: {str(exc)[:200]})") from exc
    if state.get("format") not in _READABLE_FORMATS:
        raise CheckpointError(
            f"{folder} has checkpoint format {state.get('format')!r}, "
            f"this learner reads {list(_READABLE_FORMATS)}"
        )
    from echo2_sdk.runtime.learning.sharding import load_model_state, load_optimizer_state

    try:
        weights = load_file(str(folder / _MODEL_FILE))
        optimizer_state = torch.load(folder / _OPTIMIZER_FILE, map_location="cpu", weights_only=True)
    except Exception as exc:
        raise CheckpointError(f"{folder}: a weights or optimizer file is unreadable "
                              f"({type(exc).__name__}: {str(exc)[:200]})") from exc
    tied = getattr(learner, "tied", {})
    for alias, name in tied.items():
        if alias not in weights and name in weights:
            weights[alias] = weights[name]
    dtype = next(learner.model.parameters()).dtype
    weights = {k: v.to(dtype) if v.is_floating_point() else v for k, v in weights.items()}
    load_model_state(learner.model, weights, learner.sharded)
    if state["format"] == "echo2-learner-checkpoint/1":
        optimizer_state = _by_name(learner, optimizer_state)
    load_optimizer_state(learner.model, learner.optimizer, optimizer_state, learner.sharded)
    learner.version = int(state["version"])
    learner.num_optimizer_steps = int(state["num_optimizer_steps"])
    _restore_rng(state["rng"], learner.generator)
    return state["extra"]


def _by_name(learner, index_keyed: dict) -> dict:
    """A format-/1 optimizer state (``optimizer.state_dict()``: parameters by position) keyed by name."""
    names = [name for name, p in learner.model.named_parameters() if p.requires_grad]
    return {
        "state": {names[i]: value for i, value in index_keyed["state"].items()},
        "param_groups": [{**g, "params": [names[i] for i in g["params"]]} for g in index_keyed["param_groups"]],
    }


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
