"""Test-only task adapters for RewardGuard tests.

They live in their own small module because the guard's child process (a fresh ``spawn``
interpreter) imports the adapter by name: ``reward_fixtures:ScriptedRewardAdapter``. The spawn
child inherits the parent's ``sys.path``; tests put this folder on it with :func:`import_path`.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

from echo2_sdk.adapter import Example, TaskAdapter

HERE = Path(__file__).resolve().parent


def import_path(class_name: str) -> str:
    """``module:Class`` task name for a class of this module, importable by a spawn child."""
    if str(HERE) not in sys.path:
        sys.path.insert(0, str(HERE))
    return f"reward_fixtures:{class_name}"


class ScriptedRewardAdapter(TaskAdapter):
    """The completion text scripts what the reward does.

    "hang" sleeps forever, "boom" raises, "nan"/"inf" return non-finite values, "str" returns a
    string, "die" kills the process; any other text scores 1.0 when equal to the answer, else 0.0.
    """

    name = "scripted"

    def examples(self, split: str):
        return [Example(id=f"scripted:{i}", prompt=f"say {i}", answer=str(i)) for i in range(4)]

    def reward(self, example: Example, completion_text: str) -> float:
        if completion_text == "hang":
            while True:
                time.sleep(0.05)
        if completion_text == "boom":
            raise ValueError("boom: scripted failure")
        if completion_text == "nan":
            return float("nan")
        if completion_text == "inf":
            return float("inf")
        if completion_text == "str":
            return "1.0"  # type: ignore[return-value]
        if completion_text == "die":
            os._exit(3)
        return 1.0 if completion_text == example.answer else 0.0


class BrokenInitAdapter(TaskAdapter):
    """Cannot be built: the guard must report why at construction."""

    name = "broken-init"

    def __init__(self, options=None, *, seed: int = 0) -> None:
        raise RuntimeError("scripted: this task refuses to be built")

    def examples(self, split: str):
        return []

    def reward(self, example: Example, completion_text: str) -> float:
        return 0.0


class SlowRewardAdapter(TaskAdapter):
    """A reward that takes a minute for any text: the deadline, not the reward, must bound the wait."""

    name = "slow-reward"

    def examples(self, split: str):
        return [Example(id=f"slow:{i}", prompt=f"say {i}", answer=str(i)) for i in range(2)]

    def reward(self, example: Example, completion_text: str) -> float:
        time.sleep(60)
        return 1.0


class RaisingRewardAdapter(ScriptedRewardAdapter):
    """A reward with a bug: it raises on every completion."""

    name = "raising-reward"

    def reward(self, example: Example, completion_text: str) -> float:
        raise KeyError("reward bug: no field 'answer_text'")
