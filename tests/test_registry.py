from dataclasses import dataclass

import pytest

import echo2_sdk.registry as registry
from echo2_sdk.adapter import Example, MultiTurnTaskAdapter, TaskAdapter
from echo2_sdk.registry import get_task_class, known_tasks, make_task, register_task


class Echo(TaskAdapter):
    """A test task: answer with the prompt."""

    @dataclass(frozen=True)
    class Options:
        size: int = 2

    def examples(self, split):
        return [Example(id=f"e{i}", prompt=str(i), answer=str(i)) for i in range(self.options.size)]

    def reward(self, example, completion_text):
        return float(completion_text == example.answer)


def test_builtins_are_known_and_unknown_names_list_them():
    assert {"arith", "aime24", "poker"} <= set(known_tasks())
    poker = get_task_class("poker")
    assert issubclass(poker, MultiTurnTaskAdapter) and make_task("poker").options.opponent == "rule:calling, rule:tag, rule:lag"
    with pytest.raises(KeyError, match=r"unknown task 'arithm'.*Did you mean 'arith'"):
        get_task_class("arithm")


def test_import_path_and_options_mapping():
    task = make_task(f"{__name__}:Echo", {"size": 3})
    assert len(task.examples("train")) == 3
    with pytest.raises(ImportError, match="has no attribute"):
        get_task_class(f"{__name__}:Nope")
    with pytest.raises(TypeError, match="not a TaskAdapter"):
        get_task_class("json:dumps")


def test_register_task_decorator_and_entry_points(monkeypatch):
    register_task("echo-test")(Echo)
    assert get_task_class("echo-test") is Echo

    class FakeEntryPoint:
        name = "echo-ep"

        def load(self):
            return Echo

    monkeypatch.setattr(registry, "entry_points", lambda group: [FakeEntryPoint()] if group == "echo2.tasks" else [])
    assert "echo-ep" in known_tasks()
    assert get_task_class("echo-ep") is Echo
