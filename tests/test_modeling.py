"""Tiny offline policy: tokenizer, chat template, model construction, on-disk cache, loading."""

import string
import threading
from pathlib import Path

import pytest
import torch

from echo2_sdk.runtime.models.modeling import (
    IM_END,
    IM_START,
    PAD_TOKEN,
    build_tiny_model,
    build_tiny_tokenizer,
    ensure_tiny_qwen3,
    load_policy,
)

PRINTABLE = "".join(ch for ch in string.printable if ch not in "\t\r\x0b\x0c")


@pytest.fixture(scope="module")
def tokenizer():
    return build_tiny_tokenizer()


@pytest.fixture()
def cache_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("ECHO2_CACHE", str(tmp_path / "cache"))
    return tmp_path / "cache"


def test_round_trip_printable_ascii_and_newline(tokenizer):
    text = PRINTABLE + "\n12+7=19\n  x"
    ids = tokenizer.encode(text)
    assert len(ids) == len(text)  # one id per character
    assert tokenizer.decode(ids) == text


def test_special_tokens_are_single_ids(tokenizer):
    ids = tokenizer.encode(f"{IM_START}ab{IM_END}")
    assert ids == [tokenizer.convert_tokens_to_ids(IM_START), *tokenizer.encode("ab"),
                   tokenizer.eos_token_id]
    assert tokenizer.pad_token == PAD_TOKEN and tokenizer.eos_token == IM_END
    assert tokenizer.pad_token_id != tokenizer.eos_token_id
    assert tokenizer.decode(ids, skip_special_tokens=True) == "ab"


def test_unknown_characters_map_to_unk_instead_of_failing(tokenizer):
    ids = tokenizer.encode("é")
    assert ids == [tokenizer.unk_token_id]


def test_chat_template_renders_qwen_style_text(tokenizer):
    messages = [
        {"role": "system", "content": "Add."},
        {"role": "user", "content": "3+4="},
    ]
    text = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    assert text == (
        "<|im_start|>system\nAdd.<|im_end|>\n"
        "<|im_start|>user\n3+4=<|im_end|>\n"
        "<|im_start|>assistant\n"
    )
    without_prompt = tokenizer.apply_chat_template(messages, tokenize=False)
    assert without_prompt == text[: -len("<|im_start|>assistant\n")]
    assert "<think>" not in text


def test_chat_template_tokenizes_to_the_rendered_text(tokenizer):
    messages = [{"role": "user", "content": "12+7="}]
    rendered = tokenizer.apply_chat_template(messages, tokenize=True, add_generation_prompt=True)
    ids = rendered["input_ids"] if hasattr(rendered, "keys") else rendered
    text = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    assert tokenizer.decode(ids) == text
    assert ids[0] == tokenizer.convert_tokens_to_ids(IM_START)
    assert ids.count(tokenizer.eos_token_id) == 1  # the user turn's <|im_end|>


def test_build_tiny_model_config_and_size(tokenizer):
    model = build_tiny_model(tokenizer)
    config = model.config
    assert config.vocab_size == len(tokenizer) == 100
    assert config.max_position_embeddings >= 512
    assert config.eos_token_id == tokenizer.eos_token_id
    assert config.pad_token_id == tokenizer.pad_token_id
    assert model.generation_config.eos_token_id == tokenizer.eos_token_id
    assert model.generation_config.pad_token_id == tokenizer.pad_token_id
    params = sum(p.numel() for p in model.parameters())
    assert 0.9e6 < params < 1.1e6  # ~1M with tied embeddings
    logits = model(input_ids=torch.tensor([[5, 6, 7]])).logits
    assert logits.shape == (1, 3, 100)


def test_build_tiny_model_is_seeded_and_leaves_global_rng_alone(tokenizer):
    torch.manual_seed(123)
    expected_next = torch.rand(1)
    torch.manual_seed(123)
    first = build_tiny_model(tokenizer, seed=1)
    assert torch.equal(torch.rand(1), expected_next)
    second = build_tiny_model(tokenizer, seed=1)
    other = build_tiny_model(tokenizer, seed=2)
    weight = "model.layers.0.mlp.up_proj.weight"
    assert torch.equal(first.state_dict()[weight], second.state_dict()[weight])
    assert not torch.equal(first.state_dict()[weight], other.state_dict()[weight])


def test_build_tiny_model_rejects_bad_head_split(tokenizer):
    with pytest.raises(ValueError, match="num_heads"):
        build_tiny_model(tokenizer, hidden_size=130, num_heads=4)


def test_ensure_tiny_qwen3_caches_and_reuses(cache_dir):
    path = Path(ensure_tiny_qwen3(hidden_size=64, num_layers=2, num_heads=2, num_kv_heads=1,
                                  intermediate_size=128))
    assert path.parent == cache_dir
    assert "h64" in path.name and "l2" in path.name
    weights = path / "model.safetensors"
    stamp = weights.stat().st_mtime_ns
    again = ensure_tiny_qwen3(hidden_size=64, num_layers=2, num_heads=2, num_kv_heads=1,
                              intermediate_size=128)
    assert Path(again) == path and weights.stat().st_mtime_ns == stamp


def test_ensure_tiny_qwen3_concurrent_callers_agree(tmp_path):
    results, errors = [], []

    def build():
        try:
            results.append(ensure_tiny_qwen3(str(tmp_path), hidden_size=32, num_layers=1,
                                             num_heads=2, num_kv_heads=1, intermediate_size=64))
        except Exception as error:  # surfaced by the assertion below
            errors.append(error)

    threads = [threading.Thread(target=build) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not errors
    assert len(set(results)) == 1
    # Losers of the rename race clean up their staging folders.
    assert [p.name for p in tmp_path.iterdir()] == [Path(results[0]).name]
    model, _ = load_policy(results[0])
    assert model.config.hidden_size == 32


def test_ensure_tiny_qwen3_rejects_unknown_size_keys(tmp_path):
    with pytest.raises(TypeError, match="hidden"):
        ensure_tiny_qwen3(str(tmp_path), hiden_size=64)


def test_load_policy_tiny_is_left_padded_and_in_eval_mode(cache_dir):
    model, tokenizer = load_policy("tiny-qwen3", tiny_size={"num_layers": 2})
    assert model.config.num_hidden_layers == 2
    assert not model.training
    assert tokenizer.padding_side == "left"
    assert tokenizer.pad_token == PAD_TOKEN
    batch = tokenizer(["ab", "abcd"], padding=True, return_tensors="pt")
    assert batch["input_ids"][0, :2].tolist() == [tokenizer.pad_token_id] * 2
    assert model.dtype == torch.float32
    model16, _ = load_policy("tiny-qwen3", dtype="bfloat16", tiny_size={"num_layers": 2})
    assert model16.dtype == torch.bfloat16


def test_load_policy_local_folder_without_pad_token_falls_back_to_eos(tmp_path):
    tokenizer = build_tiny_tokenizer()
    model = build_tiny_model(tokenizer, num_layers=1)
    tokenizer.pad_token = None
    model.save_pretrained(tmp_path)
    tokenizer.save_pretrained(tmp_path)
    _, loaded = load_policy(str(tmp_path))
    assert loaded.pad_token == IM_END and loaded.padding_side == "left"


def test_load_policy_rejects_tiny_size_for_other_models(tmp_path, cache_dir):
    with pytest.raises(ValueError, match="tiny_size"):
        load_policy(str(tmp_path), tiny_size={"num_layers": 2})
    with pytest.raises(ValueError, match="dtype"):
        load_policy("tiny-qwen3", dtype="float8")
