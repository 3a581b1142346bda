"""A training run's directory: metrics.jsonl, summary.json, plots, checkpoints, base model.

With ``train.report_to`` set, every metrics row and the summary also go to the experiment trackers
(tracking.py), so that nothing reaches them that the files do not hold.
"""

from __future__ import annotations

import json
import math
import os
import re
import time
from pathlib import Path
from typing import Any

from echo2_sdk.config import Echo2Config
from echo2_sdk.runtime.driver.tracking import Tracker, build_trackers
from echo2_sdk.runtime.models.files import latest_checkpoint


def default_run_dir(task: str) -> str:
    """``runs/<time>-<task>``; an import path (``pkg.mod:Class``, ``dir/file.py:Class``) is named by its
    module or file stem, so that a path never becomes nested folders."""
    if ":" in task:
        task = re.split(r"[./\\]", task.rpartition(":")[0].removesuffix(".py"))[-1] or "task"
    return os.path.join("runs", f"{time.strftime('%Y%m%d-%H%M%S')}-{task}")


class RunDir:
    def __init__(self, path: str | os.PathLike, cfg: Echo2Config | None = None) -> None:
        """``cfg``: the run's config; its ``train.report_to`` trackers start here (a missing package fails now)."""
        self.path = Path(path)
        self.path.mkdir(parents=True, exist_ok=True)
        self.checkpoints = self.path / "checkpoints"
        self.metrics_path = self.path / "metrics.jsonl"
        self.summary_path = self.path / "summary.json"
        self.base_model = self.path / "base_model"
        self.trackers: list[Tracker] = build_trackers(cfg, self.path) if cfg is not None else []

    def append_metrics(self, row: dict[str, Any]) -> None:
        """One learner step: a line of metrics.jsonl, and the same values to every tracker."""
        row = self.append_jsonl(self.metrics_path.name, row)
        for tracker in self.trackers:
            tracker.log_step(row)

    def append_jsonl(self, name: str, row: dict[str, Any]) -> dict[str, Any]:
        """Append one JSON line to ``name`` in the run directory (event logs next to metrics.jsonl);
        returns the row as written (non-finite floats as null)."""
        row = _jsonable(row)
        with open(self.path / name, "a") as fh:
            fh.write(json.dumps(row) + "\n")
        return row

    def read_metrics(self) -> list[dict[str, Any]]:
        if not self.metrics_path.exists():
            return []
        with open(self.metrics_path) as fh:
            return [json.loads(line) for line in fh if line.strip()]

    def truncate_metrics(self, last_step: int) -> None:
        """Keep only rows up to ``last_step`` (used on resume, so that no step is recorded twice)."""
        rows = [r for r in self.read_metrics() if r.get("step", 0) <= last_step]
        with open(self.metrics_path, "w") as fh:
            for r in rows:
                fh.write(json.dumps(r) + "\n")

    def write_summary(self, summary: dict[str, Any]) -> None:
        summary = _jsonable(summary)
        tmp = self.summary_path.with_suffix(".tmp")
        tmp.write_text(json.dumps(summary, indent=2))
        tmp.replace(self.summary_path)
        for tracker in self.trackers:
            tracker.log_summary(summary)

    def close(self) -> None:
        """Finish the trackers (flush event files, end the W&B run); the files need no closing."""
        trackers, self.trackers = self.trackers, []
        for tracker in trackers:
            tracker.close()

    def checkpoint_dir(self, step: int) -> Path:
        return self.checkpoints / f"step_{step}"

    def latest_checkpoint(self) -> Path | None:
        return latest_checkpoint(self.checkpoints)


def _jsonable(obj: Any) -> Any:
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, dict):
        return {str(k): _jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_jsonable(v) for v in obj]
    if hasattr(obj, "item") and callable(obj.item):
        return _jsonable(obj.item())
    return obj
