"""The shipped example configs load, and the quickstart's task is shaped as the README promises."""

from pathlib import Path

import pytest

from echo2_sdk.config import load_config
from echo2_sdk.registry import make_task

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"


@pytest.mark.parametrize("name", ["quickstart", "aime24", "aime24-8b"])
def test_example_configs_load(name):
    cfg = load_config(str(EXAMPLES / f"{name}.yaml"))
    assert cfg.train.steps > 0


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
