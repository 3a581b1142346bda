"""The learner's memory plan: printed at start, refused when it cannot fit, sized for the paper's GPUs."""

from __future__ import annotations

from pathlib import Path

import pytest

from echo2_sdk.config import ConfigError, load_config
from echo2_sdk.runtime.learning import memory
from echo2_sdk.runtime.learning.spec import LearnerSpec

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"
# Architecture of the public checkpoints (their config.json), so no download is needed here.
QWEN3 = {
    "Qwen/Qwen3-4B": memory.ModelShapes(num_params=4_022_468_096, hidden=2560, intermediate=9728, layers=36,
                                        kv_dim=8 * 128, vocab=151_936),
    "Qwen/Qwen3-8B": memory.ModelShapes(num_params=8_190_735_360, hidden=4096, intermediate=12288, layers=36,
                                        kv_dim=8 * 128, vocab=151_936),
}
A100_80GB = 80 * memory.GIB


def plan_of(cfg, **changes):
    ln = cfg.learner
    settings = dict(num_ranks=ln.num_ranks, precision=ln.precision, micro_batch_tokens=ln.micro_batch_tokens,
                    gradient_checkpointing=ln.gradient_checkpointing, with_reference=cfg.algo.kl_coef > 0)
    settings.update(changes)
    return memory.estimate(QWEN3[cfg.model.name], **settings)


@pytest.mark.parametrize("name", ["aime24.yaml", "aime24-8b.yaml"])
def test_the_paper_configs_fit_an_80gb_a100_per_rank(name):
    cfg = load_config(str(EXAMPLES / name))
    assert cfg.learner.num_ranks == 4 and cfg.learner.precision == "bf16-mixed"
    assert cfg.learner.micro_batch_tokens >= 1024 + cfg.rollout.max_new_tokens  # one whole sequence per pass
    plan = plan_of(cfg)
    memory.check_fits(plan, A100_80GB, num_ranks=4, micro_batch_tokens=cfg.learner.micro_batch_tokens,
                      gradient_checkpointing=True, where="an A100 80GB", headroom_frac=cfg.learner.memory_headroom_frac)
    # ... and the knobs matter: without checkpointing, or on one rank, the same step cannot fit.
    for bigger in (plan_of(cfg, gradient_checkpointing=False), plan_of(cfg, num_ranks=1)):
        assert bigger.total > A100_80GB


def test_a_plan_that_cannot_fit_is_refused_naming_the_knobs():
    plan = plan_of(load_config(str(EXAMPLES / "aime24.yaml")), num_ranks=1, gradient_checkpointing=False)
    with pytest.raises(MemoryError) as err:
        memory.check_fits(plan, A100_80GB, num_ranks=1, micro_batch_tokens=32768, gradient_checkpointing=False,
                          where="cuda (rank 0 of 1)")
    message = str(err.value)
    for knob in ("learner.num_ranks=1", "learner.micro_batch_tokens", "learner.gradient_checkpointing=true", "GiB"):
        assert knob in message


def test_sharding_divides_the_states_and_checkpointing_shrinks_activations():
    shapes = QWEN3["Qwen/Qwen3-4B"]
    one = memory.estimate(shapes, num_ranks=1, precision="fp32", micro_batch_tokens=8192,
                          gradient_checkpointing=False, with_reference=False)
    four = memory.estimate(shapes, num_ranks=4, precision="fp32", micro_batch_tokens=8192,
                           gradient_checkpointing=True, with_reference=False)
    assert four.weights * 4 == pytest.approx(one.weights, rel=1e-6) and one.optimizer == 2 * one.weights
    assert four.activations < one.activations / 5


def test_the_learner_refuses_at_start_when_its_plan_does_not_fit(monkeypatch, tmp_path):
    from echo2_sdk.runtime.models.modeling import ensure_tiny_qwen3

    path = ensure_tiny_qwen3(cache_dir=str(tmp_path))
    monkeypatch.setattr(memory, "device_memory", lambda device, ranks: 1024 * 1024)
    lines = []
    with pytest.raises(MemoryError, match="learner.micro_batch_tokens"):
        LearnerSpec(base_path=path, micro_batch_tokens=4096).build("cpu", log=lines.append)
    assert lines and lines[0].startswith("learner plan per rank") and "optimizer" in lines[0]
    learner, _ = LearnerSpec(base_path=path, micro_batch_tokens=4096, check_memory=False).build("cpu", log=lines.append)
    assert learner.micro_batch_tokens == 4096


@pytest.mark.parametrize("override, message", [
    ("learner.num_ranks=0", "learner.num_ranks=0"),
    ("learner.micro_batch_tokens=1", "learner.micro_batch_tokens=1"),
    ("learner.precision=fp16", "precision"),
    ("learner.memory_headroom_frac=1.5", "memory_headroom_frac"),
    ("learner.gradient_checkpoint=true", "gradient_checkpointing"),
])
def test_the_learner_section_is_validated(override, message):
    with pytest.raises(ConfigError, match=message):
        load_config(None, [override])
