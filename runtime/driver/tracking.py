"""Experiment trackers (``train.report_to``): TensorBoard and W&B see what metrics.jsonl and summary.json hold.

Every metrics row is logged at its ``step`` as ``train/<key>``: each number of the row, nested mappings
flattened to ``a/b``. At the end of the run the held-out evaluations follow as ``eval/<key>`` (before training
at step 0, ``step_K`` at K, after training at the last step), and the other numbers of the summary as
``summary/<key>`` (the run configuration is left out: W&B records it with the run, TensorBoard has config.yaml
next to its event files).
"""

from __future__ import annotations

import math
import os
from pathlib import Path
from typing import Any, Iterator, Mapping, Protocol

from echo2_sdk.config import ConfigError, Echo2Config, to_dict


class Tracker(Protocol):
    def log_step(self, row: Mapping[str, Any]) -> None:
        """One metrics.jsonl row (it has a ``step``)."""

    def log_summary(self, summary: Mapping[str, Any]) -> None:
        """The run's summary.json (evaluations under ``eval``)."""

    def close(self) -> None:
        """Flush and finish; the tracker takes no more calls."""


def numbers(data: Mapping[str, Any], prefix: str = "") -> Iterator[tuple[str, float]]:
    """``(key, value)`` for every finite number in ``data``; nested mappings give ``outer/inner`` keys."""
    for key, value in data.items():
        name = f"{prefix}{key}"
        if isinstance(value, Mapping):
            yield from numbers(value, f"{name}/")
        elif isinstance(value, (int, float)) and math.isfinite(value):  # bools count as 0/1
            yield name, float(value)


def eval_points(summary: Mapping[str, Any]) -> list[tuple[int, dict[str, float]]]:
    """The summary's evaluations as ``(step, numbers)``, in step order."""
    last = int(summary.get("steps") or 0)
    points = []
    for name, result in (summary.get("eval") or {}).items():
        if not isinstance(result, Mapping):
            continue
        if name == "before":
            step = 0
        elif name == "after":
            step = last
        elif name.startswith("step_") and name[5:].isdigit():
            step = int(name[5:])
        else:
            continue
        points.append((step, dict(numbers(result))))
    return sorted(points, key=lambda p: p[0])


def summary_numbers(summary: Mapping[str, Any]) -> dict[str, float]:
    """The summary's numbers except the evaluations (logged as curves) and the configuration."""
    return dict(numbers({k: v for k, v in summary.items() if k not in ("eval", "config")}))


def _missing(package: str) -> ConfigError:
    return ConfigError(f"train.report_to names {package!r} but the {package} package is not installed; "
                       f"install it with pip install 'echo2[{package}]' or drop it from train.report_to")


class TensorBoardTracker:
    """Event files under ``<run dir>/tensorboard`` (``tensorboard --logdir <run dir>/tensorboard``)."""

    def __init__(self, log_dir: str | os.PathLike) -> None:
        try:
            from torch.utils.tensorboard import SummaryWriter
        except ImportError:
            raise _missing("tensorboard") from None
        self.log_dir = Path(log_dir)
        self._writer_class = SummaryWriter
        self._writer = None

    def _writer_for(self, step: int | None):
        if self._writer is None:
            # A resumed run logs again from the step after its checkpoint: purge_step makes TensorBoard
            # drop the earlier run's events from that step on instead of drawing both.
            self._writer = self._writer_class(str(self.log_dir), purge_step=step)
        return self._writer

    def log_step(self, row: Mapping[str, Any]) -> None:
        step = int(row["step"])
        writer = self._writer_for(step)
        for key, value in numbers(row):
            if key != "step":
                writer.add_scalar(f"train/{key}", value, step)
        writer.flush()  # a crashed run still leaves its curves on disk

    def log_summary(self, summary: Mapping[str, Any]) -> None:
        writer = self._writer_for(None)
        for step, result in eval_points(summary):
            for key, value in result.items():
                writer.add_scalar(f"eval/{key}", value, step)
        last = int(summary.get("steps") or 0)
        for key, value in summary_numbers(summary).items():
            writer.add_scalar(f"summary/{key}", value, last)
        writer.flush()

    def close(self) -> None:
        if self._writer is not None:
            self._writer.close()
            self._writer = None


class WandbTracker:
    """A W&B run in ``<run dir>/wandb``; ``WANDB_MODE=offline`` keeps it local (``wandb sync`` uploads it later)."""

    def __init__(self, run_dir: str | os.PathLike, project: str, config: dict[str, Any]) -> None:
        try:
            import wandb
        except ImportError:
            raise _missing("wandb") from None
        run_dir = Path(run_dir)
        try:
            self.run = wandb.init(project=project, dir=str(run_dir), name=run_dir.name, config=config)
        except Exception as exc:  # no login and no WANDB_MODE=offline, unreachable server, bad settings
            first = (str(exc).strip().splitlines() or [""])[0]
            raise ConfigError(f"train.report_to: wandb could not start a run in project {project!r} "
                              f"({type(exc).__name__}: {first}); log in (wandb login or WANDB_API_KEY) "
                              "or set WANDB_MODE=offline") from exc
        # Evaluations arrive after the last step: they get their own x axis, not W&B's step counter.
        self.run.define_metric("eval/step")
        self.run.define_metric("eval/*", step_metric="eval/step")

    def log_step(self, row: Mapping[str, Any]) -> None:
        self.run.log({f"train/{k}": v for k, v in numbers(row) if k != "step"}, step=int(row["step"]))

    def log_summary(self, summary: Mapping[str, Any]) -> None:
        for step, result in eval_points(summary):
            self.run.log({"eval/step": step, **{f"eval/{k}": v for k, v in result.items()}})
        self.run.summary.update({f"summary/{k}": v for k, v in summary_numbers(summary).items()})

    def close(self) -> None:
        if self.run is not None:
            import wandb

            self.run.finish()
            self.run = None
            # finish() can return before the service has written the run file (measured: 2 of 8 offline runs
            # left only its 7-byte header); teardown waits for it, so `wandb sync` right after sees every row.
            wandb.teardown()


def build_trackers(cfg: Echo2Config, run_dir: str | os.PathLike) -> list[Tracker]:
    """The trackers ``cfg.train.report_to`` names; a missing package fails here, before training starts."""
    trackers: list[Tracker] = []
    try:
        for name in dict.fromkeys(cfg.train.report_to):
            if name == "tensorboard":
                trackers.append(TensorBoardTracker(Path(run_dir) / "tensorboard"))
            elif name == "wandb":
                trackers.append(WandbTracker(run_dir, cfg.train.wandb_project, to_dict(cfg)))
            else:  # TrainConfig validates the names; a new one needs its tracker here
                raise ConfigError(f"train.report_to: no tracker implements {name!r}")
    except BaseException:
        for tracker in trackers:
            tracker.close()
        raise
    return trackers
