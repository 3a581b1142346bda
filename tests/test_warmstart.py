"""Supervised warm start with TRL's SFTTrainer: runs offline on CPU and fits its data."""

import pytest
import torch

from echo2_sdk.runtime.models.modeling import ensure_tiny_qwen3, load_policy
from echo2_sdk.runtime.learning.warmstart import completion_loss, sft_warm_start

PAIRS = [([{"role": "user", "content": f"{a}+{b}="}], str(a + b)) for a in range(6) for b in range(6)]


@pytest.fixture(scope="module")
def base_path(tmp_path_factory):
    return ensure_tiny_qwen3(str(tmp_path_factory.mktemp("cache")), num_layers=2)


def test_warm_start_lowers_completion_loss_and_saves_a_loadable_policy(base_path, tmp_path):
    torch.set_num_threads(2)
    model, tokenizer = load_policy(base_path)
    loss_before = completion_loss(model, tokenizer, PAIRS)

    out_dir = str(tmp_path / "sft")
    returned = sft_warm_start(base_path, PAIRS, out_dir, epochs=6, lr=3e-3, batch_size=12, seed=0)
    assert returned == out_dir

    trained, trained_tokenizer = load_policy(out_dir)
    assert trained_tokenizer.padding_side == "left"  # restored for generation
    assert trained_tokenizer.chat_template == tokenizer.chat_template
    loss_after = completion_loss(trained, trained_tokenizer, PAIRS)
    # Random init sits near ln(100) = 4.6 nats; fitting the answers must cut that by over half.
    assert loss_before > 4.0
    assert loss_after < 0.5 * loss_before


def test_warm_start_validates_pairs(base_path, tmp_path):
    with pytest.raises(ValueError, match="at least one"):
        sft_warm_start(base_path, [], str(tmp_path), epochs=1, lr=1e-3, batch_size=1, seed=0)
    with pytest.raises(TypeError, match="pair 0"):
        sft_warm_start(base_path, [("3+4=", "7")], str(tmp_path), epochs=1, lr=1e-3,
                       batch_size=1, seed=0)


@pytest.mark.parametrize("threads, expected", [(0, "cores"), (1, 1)])
def test_the_warm_start_runs_on_the_configured_threads_and_gives_the_learner_its_own_back(
        tmp_path, monkeypatch, threads, expected):
    """The warm start runs before the rollout workers start: ``threads: 0`` (the game examples) gives it every
    core of the process, and the learner's thread count (``runtime.learner_threads``) is back after it."""
    import echo2_sdk.runtime.learning.warmstart as warmstart
    from echo2_sdk.config import ConfigError, load_config
    from echo2_sdk.registry import make_task
    from echo2_sdk.runtime.driver import setup
    from echo2_sdk.runtime.driver.rundir import RunDir

    seen = []
    monkeypatch.setattr(warmstart, "sft_warm_start", lambda *a, **k: seen.append(torch.get_num_threads()))
    monkeypatch.setattr(setup, "usable_cores", lambda: 3)  # not this machine's count: the value must come from it
    cfg = load_config(None, [f"model.warm_start.threads={threads}", "model.warm_start.enabled=true",
                             "model.name=some/model"])
    before = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        setup.prepare_base_model(cfg, make_task("arith", {}, seed=0), RunDir(tmp_path, lock=False), lambda _: None)
        assert seen == [3 if expected == "cores" else expected]
        assert torch.get_num_threads() == 1
    finally:
        torch.set_num_threads(before)
    with pytest.raises(ConfigError, match="model.warm_start.threads=-1 must be >= 0"):
        load_config(None, ["model.warm_start.threads=-1"])
