"""Ship a model folder that exists only on the learner's node to rollout workers on other nodes.

The base policy is often a local folder: the tiny model's cache, or ``<run dir>/base_model`` after a
warm start. On a multi-node Ray cluster a worker on another machine cannot read it, so the driver
puts the folder's files into the Ray object store once (``pack``) and a worker whose node lacks the
folder writes them into a local cache (``materialize``) and loads from there. A Hugging Face model
name is not a local folder: every node resolves it itself (hub or its own HF cache).
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import tempfile
from pathlib import Path
from typing import Any


def pack(model_path: str) -> list | None:
    """``[ObjectRef]`` of ``{relative path: bytes}`` for a local model folder (None: not a folder).

    The reference travels inside a list so that Ray does not resolve it when the worker starts: a
    worker that finds the folder on its own node never fetches the bytes."""
    import ray

    root = Path(model_path)
    if not root.is_dir():
        return None
    files = {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}
    return [ray.put({"source": str(root.resolve()), "files": files})]


def materialize(model_path: str, packed: Any) -> str:
    """``model_path`` if this node has it, else a local copy of the shipped folder (written once per node)."""
    if packed is None or Path(model_path, "config.json").exists():
        return model_path
    import ray

    payload = ray.get(packed[0])
    digest = hashlib.sha256()
    for name in sorted(payload["files"]):
        digest.update(name.encode())
        digest.update(hashlib.sha256(payload["files"][name]).digest())
    root = Path(os.environ.get("ECHO2_MODEL_CACHE", Path(tempfile.gettempdir()) / "echo2-models"))
    final = root / f"{Path(payload['source']).name}-{digest.hexdigest()[:16]}"
    if (final / "config.json").exists():
        return str(final)
    root.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{final.name}.", dir=root))
    try:
        for name, data in payload["files"].items():
            target = staging / name
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(data)
        try:
            staging.rename(final)  # atomic; another worker on this node may have won the race
        except OSError:
            if not (final / "config.json").exists():
                raise
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return str(final)


CHECKPOINT_RE = re.compile(r"^step_(\d+)$")
"""A run's checkpoint folders: ``<run>/checkpoints/step_K``."""


def latest_checkpoint(checkpoints: Path) -> Path | None:
    """The ``step_K`` folder with the largest K under ``checkpoints``, or None."""
    if not checkpoints.exists():
        return None
    found = [(int(m.group(1)), p) for p in checkpoints.iterdir() if (m := CHECKPOINT_RE.match(p.name)) and p.is_dir()]
    return max(found)[1] if found else None
