"""Single-turn and multi-turn tasks are two base classes; a missing method fails when the task is built."""


import pytest

from echo2_sdk.adapter import BaseTaskAdapter, MultiTurnTaskAdapter, TaskAdapter
from echo2_sdk.episodic import EpisodicTaskAdapter
from echo2_sdk.registry import get_task_class, register_task
from test_registry import Echo  # the same one-file single-turn task


def test_single_turn_defaults_are_grpo():
    task = Echo({"size": 3}, seed=1)
    example = task.examples("train")[0]
    assert task.materialize(example, [1, 2], [3, 4, 5]).loss_mask == (1, 1, 1)
    assert task.group_key(example) == example.id and task.reference_answer(example) == "0"
    assert task.describe() == {"task": "", "options": {"size": 3}, "seed": 1}
    assert not isinstance(task, MultiTurnTaskAdapter) and Echo.head_to_head() is None


def test_a_missing_reward_fails_at_construction_naming_it():
    class NoReward(TaskAdapter):
        def examples(self, split):
            return []

    with pytest.raises(TypeError, match=r"NoReward cannot be built: it does not implement "
                                        r"reward\(example, completion_text\), which every TaskAdapter must"):
        NoReward()


def test_a_missing_episode_method_fails_at_construction_naming_it():
    class NoEpisodes(MultiTurnTaskAdapter):
        def examples(self, split):
            return []

        def open_episode(self, example, tokenizer):
            return None

    with pytest.raises(TypeError, match=r"does not implement to_rollout\(episode, example=\.\.\., version=\.\.\., "
                                        r"meta=\.\.\.\), which every MultiTurnTaskAdapter must"):
        NoEpisodes()


def test_an_episodic_task_names_what_its_env_glue_lacks():
    class HalfDone(EpisodicTaskAdapter):
        def make_env(self):
            return None

    with pytest.raises(TypeError, match=r"_example\(split, index\), bot_reply\(player, env, feedback\), "
                                        r"make_bot\(spec, env\), which every EpisodicTaskAdapter must"):
        HalfDone()


def test_multi_turn_tasks_are_told_apart_by_their_base_class():
    poker = get_task_class("poker")
    assert issubclass(poker, EpisodicTaskAdapter) and issubclass(poker, MultiTurnTaskAdapter)
    assert not issubclass(poker, TaskAdapter) and not issubclass(get_task_class("arith"), MultiTurnTaskAdapter)
    assert all(issubclass(cls, BaseTaskAdapter) for cls in (poker, get_task_class("arith")))


def test_the_registry_takes_both_kinds_and_nothing_else():
    class Plain:
        pass

    with pytest.raises(TypeError, match="expects a TaskAdapter or MultiTurnTaskAdapter subclass"):
        register_task("plain-object")(Plain)
