"""``--resume``: pick the newest complete, verified checkpoint of a run and load it into the learner.

A folder that fails verification (truncated, damaged, half-written by a run killed mid-save) or fails
to load is skipped for the previous one, and each skip is said; with no usable checkpoint at all the
resume fails with one line naming the run directory and what was skipped.
"""

from __future__ import annotations

from pathlib import Path
from typing import Callable

from echo2_sdk.runtime.driver.rundir import RunDir
from echo2_sdk.runtime.learning.checkpoint import CheckpointError, verify_checkpoint


def verified_checkpoints(run: RunDir, log: Callable[[str], None]) -> list[Path]:
    """The run's checkpoint folders newest first, from the newest one that verifies (skips are logged);
    the older ones are verified only if they are needed. CheckpointError when none verifies.

    Called before the learner and Ray start, so that a run with nothing to resume fails at once."""
    folders = [folder for _, folder in run.checkpoint_steps()]
    skipped = []
    for i, folder in enumerate(folders):
        try:
            verify_checkpoint(folder)  # hashes every file: done for as few folders as it takes
        except CheckpointError as exc:
            log(f"resume: skipping {exc}")
            skipped.append(str(exc))
            continue
        return folders[i:]
    raise CheckpointError(_nothing_to_resume(run, skipped))


def load_newest(learner, candidates: list[Path], run: RunDir, log: Callable[[str], None]) -> tuple[Path, dict]:
    """Load the first of ``candidates`` that loads; returns it and the checkpoint's ``extra``."""
    skipped = []
    for i, folder in enumerate(candidates):
        try:
            if i > 0:  # the first was verified by verified_checkpoints
                verify_checkpoint(folder)
            # A failed load may leave the learner half-restored; the next folder overwrites all of it
            # (weights, optimizer, version, every RNG).
            return folder, learner.load_checkpoint(str(folder))
        except CheckpointError as exc:
            log(f"resume: skipping {exc}")
            skipped.append(str(exc))
    raise CheckpointError(_nothing_to_resume(run, skipped))


def _nothing_to_resume(run: RunDir, skipped: list[str]) -> str:
    if skipped:
        return (f"--resume {run.path}: no intact checkpoint under {run.checkpoints} (skipped: {'; '.join(skipped)}); "
                "start the run again without --resume")
    return (f"--resume {run.path}: no checkpoint under {run.checkpoints} (the run stopped before its first one); "
            "start it again without --resume")
