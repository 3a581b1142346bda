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
