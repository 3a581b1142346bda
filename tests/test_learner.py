"""Learner: versioning, mini-batch updates, TIS bookkeeping, padding, checkpoint determinism."""

import copy
import random

import numpy as np
import pytest
import torch
from transformers import Qwen3Config, Qwen3ForCausalLM

from echo2_sdk.runtime.learning.learner import Learner, TrainBatch
from echo2_sdk.runtime.models.logprobs import token_logprobs

torch.set_num_threads(1)
PAD = 0
B, T = 4, 10


def tiny_model(seed: int = 0, dtype=torch.float32, tie: bool = False) -> Qwen3ForCausalLM:
    config = Qwen3Config(
        vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
        num_attention_heads=2, num_key_value_heads=1, head_dim=16, max_position_embeddings=128,
        tie_word_embeddings=tie,
    )
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        return Qwen3ForCausalLM(config).to(dtype)


def sequences(seed: int = 1):
    """B sequences of different lengths: (prompt_len, total_len, token ids)."""
    g = torch.Generator().manual_seed(seed)
    lengths = [(3, 10), (2, 7), (4, 9), (3, 6)]
    return [(p, n, torch.randint(1, 64, (n,), generator=g)) for p, n in lengths]


def make_batch(model, advantages, *, left_pad=False, sampler_noise=0.0, versions=None):
    """Pad the sequences, train completions only; sampler log-probs = model's (+ noise)."""
    ids = torch.full((B, T), PAD)
    attn = torch.zeros(B, T, dtype=torch.long)
    loss_mask = torch.zeros(B, T - 1)
    for b, (prompt, n, toks) in enumerate(sequences()):
        start = T - n if left_pad else 0
        ids[b, start:start + n] = toks
        attn[b, start:start + n] = 1
        loss_mask[b, start + prompt - 1:start + n - 1] = 1  # targets = completion tokens
    with torch.no_grad():
        sampler = token_logprobs(model, ids, attn, 1.0)
    sampler = sampler + sampler_noise * torch.randn(sampler.shape)
    adv = torch.as_tensor(advantages, dtype=torch.float32)[:, None].expand(B, T - 1) * loss_mask
    versions = torch.zeros(B, dtype=torch.long) if versions is None else versions
    return TrainBatch(ids, attn, loss_mask, adv.contiguous(), sampler, versions)


def completion_logprob(model, batch: TrainBatch, row: int) -> float:
    with torch.no_grad():
        lp = token_logprobs(model, batch.input_ids, batch.attention_mask, 1.0)
    return float((lp[row] * batch.loss_mask[row]).sum())


def test_version_increments_once_per_step_with_two_optimizer_updates(monkeypatch):
    learner = Learner(tiny_model(), lr=1e-3)
    calls = []
    original_step = learner.optimizer.step
    def counting_step(*args, **kwargs):
        calls.append(1)
        return original_step(*args, **kwargs)

    monkeypatch.setattr(learner.optimizer, "step", counting_step)
    batch = make_batch(learner.model, [1.0, -1.0, 0.5, -0.5])
    assert learner.version == 0
    metrics = learner.train_step(batch)
    assert learner.version == 1 and len(calls) == 2 and learner.num_optimizer_steps == 2
    learner.train_step(batch)
    assert learner.version == 2 and len(calls) == 4
    state = learner.optimizer.state[learner.optimizer.param_groups[0]["params"][0]]
    assert int(state["step"]) == 4
    for key in ("pg_loss", "kl", "clip_frac", "tis_mean", "tis_max", "tis_trunc_frac", "ratio_mean",
                "grad_norm", "lr", "t_train_s", "num_tokens", "loss", "staleness_mean"):
        assert key in metrics, key
    assert metrics["num_tokens"] == float(batch.loss_mask.sum())
    assert metrics["lr"] == 1e-3 and metrics["version"] == 1.0


def test_positive_advantage_raises_its_logprob():
    model = tiny_model()
    learner = Learner(model, lr=1e-2, num_minibatches=2)
    batch = make_batch(model, [1.0, 0.0, 0.0, 0.0])
    before = completion_logprob(model, batch, 0)
    learner.train_step(batch)
    assert completion_logprob(model, batch, 0) > before + 1e-3


def test_on_policy_batch_has_unit_tis_and_staleness_is_reported():
    model = tiny_model()
    learner = Learner(model, lr=1e-3)
    learner.version = 5
    batch = make_batch(model, [1.0, -1.0, 0.5, -0.5], versions=torch.tensor([5, 4, 3, 5]))
    metrics = learner.train_step(batch)
    assert metrics["tis_mean"] == pytest.approx(1.0, abs=1e-5)
    assert metrics["tis_max"] == pytest.approx(1.0, abs=1e-5)
    assert metrics["tis_trunc_frac"] == 0.0
    assert metrics["staleness_mean"] == pytest.approx(0.75) and metrics["staleness_max"] == 2.0
    # A stale sampler (noisy log-probs) moves the TIS weights off 1 and truncates some at C = 2.
    noisy = learner.train_step(make_batch(model, [1.0, -1.0, 0.5, -0.5], sampler_noise=2.0))
    assert noisy["tis_trunc_frac"] > 0 and noisy["tis_max"] == pytest.approx(2.0)


def test_left_and_right_padding_give_same_logprobs_and_step():
    model = tiny_model()
    right = make_batch(model, [1.0, -1.0, 0.5, -0.5])
    left = make_batch(model, [1.0, -1.0, 0.5, -0.5], left_pad=True)
    with torch.no_grad():
        lp_right = token_logprobs(model, right.input_ids, right.attention_mask, 0.7)
        lp_left = token_logprobs(model, left.input_ids, left.attention_mask, 0.7)
    for b in range(B):  # compare where both the context token and its target are real
        got_r = lp_right[b][(right.attention_mask[b, :-1] * right.attention_mask[b, 1:]).bool()]
        got_l = lp_left[b][(left.attention_mask[b, :-1] * left.attention_mask[b, 1:]).bool()]
        assert got_r.numel() == sequences()[b][1] - 1
        torch.testing.assert_close(got_r, got_l, atol=1e-5, rtol=1e-5)
    m_right = Learner(copy.deepcopy(model), lr=1e-3).train_step(right)
    m_left = Learner(copy.deepcopy(model), lr=1e-3).train_step(left)
    for key in ("loss", "pg_loss", "ratio_mean", "grad_norm"):
        assert m_left[key] == pytest.approx(m_right[key], rel=1e-4, abs=1e-6), key


def test_checkpoint_round_trip_is_bit_exact(tmp_path):
    def run_steps(learner, n):
        for _ in range(n):
            # The "data" depends on the global RNGs, so resuming must restore them too.
            adv = torch.randn(B).tolist()
            adv[0] += float(np.random.rand()) + random.random()
            learner.train_step(make_batch(learner.model, adv, sampler_noise=0.3,
                                          versions=torch.full((B,), max(learner.version - 1, 0))))

    torch.manual_seed(123), np.random.seed(123), random.seed(123)
    a = Learner(tiny_model(tie=True), lr=1e-2, weight_decay=0.01, seed=7)
    run_steps(a, 2)
    a.save_checkpoint(str(tmp_path / "ckpt"), extra={"data_pos": 8, "nested": (1, [2.5, "x"])})
    run_steps(a, 2)

    b = Learner(tiny_model(seed=99, tie=True), lr=1e-2, weight_decay=0.01, seed=0)
    extra = b.load_checkpoint(str(tmp_path / "ckpt"))
    assert extra == {"data_pos": 8, "nested": (1, [2.5, "x"])}
    assert b.version == 2 and b.num_optimizer_steps == 4
    run_steps(b, 2)
    assert b.version == a.version == 4
    sa, sb = a.model.state_dict(), b.model.state_dict()
    assert sa.keys() == sb.keys()
    for key in sa:
        assert torch.equal(sa[key], sb[key]), key

    # Overwriting an existing checkpoint is atomic and leaves no temporary folders behind.
    b.save_checkpoint(str(tmp_path / "ckpt"))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ckpt"]
    assert b.load_checkpoint(str(tmp_path / "ckpt")) == {}
    with pytest.raises(TypeError, match="extra cannot be stored in a checkpoint"):
        b.save_checkpoint(str(tmp_path / "bad"), extra={"obj": object()})


def test_rollout_state_dict_is_a_detached_cpu_copy():
    learner = Learner(tiny_model(tie=True), lr=1e-2)
    snapshot = learner.state_dict_for_rollout()
    assert snapshot["lm_head.weight"] is snapshot["model.embed_tokens.weight"]  # tied stays tied
    before = {k: v.clone() for k, v in snapshot.items()}
    learner.train_step(make_batch(learner.model, [1.0, -1.0, 0.5, -0.5]))
    assert all(torch.equal(before[k], snapshot[k]) for k in snapshot)  # not aliased to the model
    worker = tiny_model(seed=5, tie=True)
    worker.load_state_dict(learner.state_dict_for_rollout())
    batch = make_batch(learner.model, [0.0] * B)
    assert completion_logprob(worker, batch, 1) == completion_logprob(learner.model, batch, 1)


def test_reference_model_is_frozen_and_required_for_kl():
    with pytest.raises(ValueError, match="kl_coef=0.1 needs a reference model"):
        Learner(tiny_model(), loss_kwargs={"kl_coef": 0.1})
    with pytest.raises(TypeError, match="did you mean 'clip_eps_high'"):
        Learner(tiny_model(), loss_kwargs={"clip_eps_hi": 0.28})
    with pytest.raises(ValueError, match="tis_cap=-1"):
        Learner(tiny_model(), loss_kwargs={"tis_cap": -1})
    model = tiny_model()
    ref = copy.deepcopy(model)
    ref_before = {k: v.clone() for k, v in ref.state_dict().items()}
    kwargs = {"kl_coef": 0.05, "loss_agg": "seq-mean-token-mean"}
    learner = Learner(model, ref_model=ref, lr=1e-2, loss_kwargs=kwargs)
    assert not any(p.requires_grad for p in ref.parameters()) and not ref.training
    batch = make_batch(model, [1.0, -1.0, 0.5, -0.5])
    first = learner.train_step(batch)
    second = learner.train_step(batch)
    assert first["kl"] >= 0 and second["kl"] > first["kl"]
    assert all(torch.equal(ref_before[k], v) for k, v in ref.state_dict().items())


def test_batch_validation_and_small_batch_errors():
    model = tiny_model()
    good = make_batch(model, [1.0] * B)
    with pytest.raises(ValueError, match="loss_mask is 1 on 1 position"):
        bad_mask = good.loss_mask.clone()
        bad_mask[1, T - 2] = 1  # sequence 1 is right padded: its last target is padding
        TrainBatch(**{**vars(good), "loss_mask": bad_mask})
    with pytest.raises(ValueError, match=r"advantages has shape \(4, 10\), expected \(4, 9\)"):
        TrainBatch(**{**vars(good), "advantages": torch.zeros(B, T)})
    with pytest.raises(ValueError, match="1 sequence\\(s\\) but num_minibatches=2"):
        Learner(model).train_step(good.select(torch.tensor([0])))


def test_bf16_and_gradient_checkpointing():
    model = tiny_model(dtype=torch.bfloat16)
    batch = make_batch(model, [1.0, -1.0, 0.5, -0.5])
    assert batch.sampler_logprobs.dtype == torch.float32
    metrics = Learner(model, lr=1e-3).train_step(batch)
    assert all(np.isfinite(v) for v in metrics.values())
    plain, ckpt = tiny_model(), tiny_model()
    batch = make_batch(plain, [1.0, -1.0, 0.5, -0.5])
    Learner(plain, lr=1e-2).train_step(batch)
    Learner(ckpt, lr=1e-2, gradient_checkpointing=True).train_step(batch)
    for (k, p), q in zip(plain.state_dict().items(), ckpt.state_dict().values()):
        torch.testing.assert_close(p, q, atol=1e-6, rtol=1e-5, msg=k)
