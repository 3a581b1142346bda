"""The shipped example configs load, ``--task NAME`` finds them, and the quickstart's task is shaped as the
README promises."""

import argparse
from pathlib import Path

import pytest

from echo2_sdk import examples
from echo2_sdk.config import load_config
from echo2_sdk.registry import make_task
from echo2_sdk.runtime.cli import _config_path

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"
# Training configs: every examples/*.yaml except the `echo2 simulate` ones.
TRAIN_CONFIGS = sorted(p.stem for p in EXAMPLES.glob("*.yaml") if not p.stem.startswith("simulate_"))


def test_the_installed_examples_are_this_checkouts():
    folder = examples.folder()
    assert sorted(p.name for p in folder.rglob("*.yaml")) == sorted(p.name for p in EXAMPLES.rglob("*.yaml"))
    assert examples.config("poker") == folder / "poker.yaml"


@pytest.mark.parametrize("name", TRAIN_CONFIGS)
def test_example_configs_load(name):
    cfg = load_config(str(EXAMPLES / f"{name}.yaml"))
    assert cfg.train.steps > 0


@pytest.mark.parametrize("name", ["poker", "quickstart"])
def test_task_name_uses_its_shipped_example(name):
    path = _config_path(argparse.Namespace(config=None, task=name))
    assert path is not None and Path(path).read_text() == (EXAMPLES / f"{name}.yaml").read_text()


@pytest.mark.parametrize("task", ["arith", "no-such-task", "pkg.mod:Adapter", "/abs/file.py:Adapter",
                                  "../examples/poker"])
def test_task_names_without_a_shipped_example_find_none(task):
    """``arith`` has no arith.yaml (quickstart.yaml configures it); import paths never name an example file."""
    assert examples.config(task) is None
    assert _config_path(argparse.Namespace(config=None, task=task)) is None


def test_quickstart_splits_are_disjoint_with_at_least_100_rl_prompts():
    cfg = load_config(str(EXAMPLES / "quickstart.yaml"))
    task = make_task(cfg.task.name, cfg.task.options, seed=cfg.train.seed)
    ids = {split: {e.id for e in task.examples(split)} for split in ("sft", "train", "eval")}
    assert len(ids["train"]) >= 100 and len(ids["eval"]) >= 100
    assert not (ids["sft"] & ids["train"]) and not (ids["sft"] & ids["eval"]) and not (ids["train"] & ids["eval"])
    assert cfg.model.warm_start.enabled and cfg.runtime.mode == "async"


def test_large_model_configs_require_gpus():
    for name in ("aime24", "aime24-8b"):
        cfg = load_config(str(EXAMPLES / f"{name}.yaml"))
        assert cfg.runtime.require_gpus >= 1 and cfg.model.name.startswith("Qwen/Qwen3-")
        assert cfg.rollout.samples_per_prompt == 16 and cfg.train.prompts_per_step == 128
        assert cfg.rollout.max_new_tokens == 8192 and cfg.rollout.top_p == 0.95 and cfg.runtime.staleness == 3
