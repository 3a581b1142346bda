"""A training run's directory: metrics.jsonl, summary.json, plots, checkpoints, base model.

One run owns the directory at a time: ``run.lock`` carries an exclusive ``fcntl`` lock for the run's
life (the kernel drops it when the process dies, however it dies), so a second ``echo2 train`` on the
same directory refuses at once instead of interleaving its metrics and overwriting the checkpoints.

With ``train.report_to`` set, every metrics row and the summary also go to the experiment trackers
(tracking.py), so that nothing reaches them that the files do not hold.
"""

from __future__ import annotations

import fcntl
import json
import math
import os
import re
import shutil
import socket
import time
from pathlib import Path
from typing import Any

from echo2_sdk.config import Echo2Config
from echo2_sdk.runtime.driver.tracking import Tracker, build_trackers
from echo2_sdk.runtime.models.files import CHECKPOINT_RE, latest_checkpoint

LOCK_FILE = "run.lock"


class RunDirError(RuntimeError):
    """The run directory cannot be used (in use by another run, missing for --resume, not writable)."""


def default_run_dir(task: str) -> str:
    """``runs/<time>-<task>``; an import path (``pkg.mod:Class``, ``dir/file.py:Class``) is named by its
    module or file stem, so that a path never becomes nested folders."""
    if ":" in task:
        task = re.split(r"[./\\]", task.rpartition(":")[0].removesuffix(".py"))[-1] or "task"
    return os.path.join("runs", f"{time.strftime('%Y%m%d-%H%M%S')}-{task}")


class RunDir:
    def __init__(self, path: str | os.PathLike, cfg: Echo2Config | None = None, *, resume: bool = False,
                 lock: bool = True) -> None:
        """``cfg``: the run's config; its ``train.report_to`` trackers start here (a missing package fails now).
        ``resume``: the directory must already exist (a mistyped ``--resume`` path creates nothing).
        ``lock``: take the directory's lock for this object's life (released by :meth:`close`)."""
        self.path = Path(path)
        if resume and not self.path.is_dir():
            raise RunDirError(f"--resume {str(path)!r}: no such run directory; give the folder of an earlier "
                              "run (runs/<time>-<task>), the one its `echo2 train` printed")
        try:
            self.path.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise RunDirError(f"cannot create the run directory {str(path)!r} ({exc.strerror}); pick another "
                              "--run-dir, or fix the permissions of its parent") from None
        self.checkpoints = self.path / "checkpoints"
        self.metrics_path = self.path / "metrics.jsonl"
        self.summary_path = self.path / "summary.json"
        self.base_model = self.path / "base_model"
        self._lock_fd: int | None = None
        if lock:
            self._lock()
            self._recover_checkpoint_folders()
        try:
            self.trackers: list[Tracker] = build_trackers(cfg, self.path) if cfg is not None else []
        except BaseException:
            self._unlock()
            raise

    # ----- ownership --------------------------------------------------------------------------
    def _lock(self) -> None:
        lock_path = self.path / LOCK_FILE
        try:
            fd = os.open(lock_path, os.O_RDWR | os.O_CREAT, 0o644)
        except OSError as exc:
            raise RunDirError(f"run directory {str(self.path)!r} is not writable ({exc.strerror}); pick another "
                              "--run-dir, or fix its permissions") from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = _read_holder(fd)
            os.close(fd)
            raise RunDirError(f"run directory {str(self.path)!r} is in use by {holder}; wait for that run to end "
                              "or stop it, or give another --run-dir") from None
        # Who holds it, for the message a second run prints. Written in place: the lock is on the file,
        # so it must never be replaced by a new inode while held.
        holder = {"pid": os.getpid(), "host": socket.gethostname(),
                  "started": time.strftime("%Y-%m-%d %H:%M:%S %Z", time.localtime())}
        os.ftruncate(fd, 0)
        os.pwrite(fd, (json.dumps(holder) + "\n").encode(), 0)
        self._lock_fd = fd

    def _unlock(self) -> None:
        fd, self._lock_fd = self._lock_fd, None
        if fd is not None:
            os.close(fd)  # closing the last descriptor releases the flock

    def _recover_checkpoint_folders(self) -> None:
        """Finish or undo what a run killed while writing a checkpoint left behind (we hold the lock, so
        no other run is writing here): a replaced checkpoint parked in ``.step_K.old-*`` whose successor
        never arrived goes back; half-written ``.step_K.tmp-*`` folders are removed."""
        if not self.checkpoints.is_dir():
            return
        for parked in self.checkpoints.glob(".step_*.old-*"):
            for folder in parked.iterdir():
                if CHECKPOINT_RE.match(folder.name) and not (self.checkpoints / folder.name).exists():
                    os.rename(folder, self.checkpoints / folder.name)
            shutil.rmtree(parked, ignore_errors=True)
        for partial in self.checkpoints.glob(".step_*.tmp-*"):
            shutil.rmtree(partial, ignore_errors=True)

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
        """The rows of metrics.jsonl; a line that does not parse (the driver was killed mid-write) is skipped."""
        if not self.metrics_path.exists():
            return []
        rows = []
        with open(self.metrics_path) as fh:
            for line in fh:
                try:
                    rows.append(json.loads(line))
                except ValueError:
                    continue
        return [r for r in rows if isinstance(r, dict)]

    def truncate_metrics(self, last_step: int) -> int:
        """Keep only rows up to ``last_step`` (on resume: those steps are trained again, and must not be
        recorded twice); returns how many rows were dropped. Replaced atomically, so that a kill during
        the rewrite loses nothing; a second call drops nothing more."""
        if not self.metrics_path.exists():
            return 0
        lines = [line for line in self.metrics_path.read_text().splitlines() if line.strip()]
        kept = [r for r in self.read_metrics() if isinstance(r.get("step"), int) and r["step"] <= last_step]
        tmp = self.metrics_path.with_suffix(".jsonl.tmp")
        with open(tmp, "w") as fh:
            for r in kept:
                fh.write(json.dumps(r) + "\n")
            fh.flush()
            os.fsync(fh.fileno())
        tmp.replace(self.metrics_path)
        return len(lines) - len(kept)  # a torn last line (a kill mid-write) counts as dropped

    def write_summary(self, summary: dict[str, Any]) -> None:
        summary = _jsonable(summary)
        tmp = self.summary_path.with_suffix(".tmp")
        tmp.write_text(json.dumps(summary, indent=2))
        tmp.replace(self.summary_path)
        for tracker in self.trackers:
            tracker.log_summary(summary)

    def close(self) -> None:
        """Finish the trackers (flush event files, end the W&B run) and release the directory. Idempotent."""
        trackers, self.trackers = self.trackers, []
        try:
            for tracker in trackers:
                tracker.close()
        finally:
            self._unlock()

    # ----- checkpoints ------------------------------------------------------------------------
    def checkpoint_dir(self, step: int) -> Path:
        return self.checkpoints / f"step_{step}"

    def checkpoint_steps(self) -> list[tuple[int, Path]]:
        """``(K, checkpoints/step_K)``, newest first."""
        if not self.checkpoints.is_dir():
            return []
        found = [(int(m.group(1)), p) for p in self.checkpoints.iterdir()
                 if (m := CHECKPOINT_RE.match(p.name)) and p.is_dir()]
        return sorted(found, reverse=True)

    def latest_checkpoint(self) -> Path | None:
        return latest_checkpoint(self.checkpoints)

    def prune_checkpoints(self, keep: int | None, current_step: int) -> list[Path]:
        """Delete all but the newest ``keep`` checkpoints up to ``current_step`` (None: keep all); returns
        what was deleted. Later-numbered folders (left by a run that was resumed from an earlier one)
        are neither counted nor deleted: training replaces them when it gets there."""
        if keep is None:
            return []
        mine = [p for k, p in self.checkpoint_steps() if k <= current_step]
        for old in mine[keep:]:
            shutil.rmtree(old, ignore_errors=True)
        return mine[keep:]


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


def _read_holder(fd: int) -> str:
    try:
        info = json.loads(os.pread(fd, 4096, 0).decode() or "{}")
    except (OSError, ValueError):
        info = {}
    if not isinstance(info, dict) or "pid" not in info:
        return "another echo2 train"
    where = f" on {info['host']}" if info.get("host") and info["host"] != socket.gethostname() else ""
    return f"echo2 train PID {info['pid']}{where} (started {info.get('started', '?')})"
