"""The learner for large models: FSDP2 ranks on gloo, token-budget micro-batches, mixed precision.

Every rank test spawns real processes that form a gloo process group and shard the model with FSDP2
(the code that runs on GPUs with NCCL).
"""

from __future__ import annotations

import warnings

import pytest
import torch

from echo2_sdk.runtime.learning import sharding
from learner_ranks import make_learner, ragged_batch, spawn, tiny_model

torch.set_num_threads(1)


def _max_diff(a: dict, b: dict) -> float:
    assert a.keys() == b.keys()
    return max(float((a[k].float() - b[k].float()).abs().max()) for k in a)


spawned = pytest.mark.slow  # spawned gloo ranks: ~10 s each


def _with_kl(loss_agg: str) -> dict:
    """seq-mean-token-mean runs with a KL term: the frozen reference is then sharded like the policy."""
    if loss_agg == "token-mean":
        return {}
    return {"ref_model": tiny_model(seed=1), "extra_loss_kwargs": {"kl_coef": 0.05}}


def _learner(loss_agg: str, **kwargs):
    extra = _with_kl(loss_agg)
    learner = make_learner(loss_agg, ref_model=extra.get("ref_model"), **kwargs)
    learner.loss_kwargs.update(extra.get("extra_loss_kwargs", {}))
    return learner


def _sharded_step(rank, world, port, loss_agg, budget, out):
    torch.set_num_threads(1)
    group = sharding.init_rank_group(rank, world, "127.0.0.1", port, backend="gloo")
    learner = _learner(loss_agg, micro_batch_tokens=budget, group=group, shard=True)
    metrics = learner.train_step(ragged_batch())
    weights = learner.full_state_dict()
    snapshot = learner.state_dict_for_rollout()
    if rank == 0:
        torch.save({"metrics": metrics, "weights": weights, "snapshot_keys": sorted(snapshot),
                    "agreement": learner.last_agreement}, out)
    else:
        assert weights == {} and snapshot == {}


@spawned
@pytest.mark.parametrize("loss_agg", ["token-mean", "seq-mean-token-mean"])
def test_two_ranks_with_micro_batches_equal_one_rank_with_whole_mini_batches(tmp_path, loss_agg):
    whole = _learner(loss_agg)
    expected = whole.train_step(ragged_batch())  # two optimizer updates (num_minibatches=2)
    assert (expected["kl"] > 0) == (loss_agg != "token-mean")
    spawn(_sharded_step, 2, loss_agg, 64, str(tmp_path / "rank0.pt"))
    got = torch.load(tmp_path / "rank0.pt", weights_only=False)

    assert got["metrics"]["micro_batches"] > 4  # the 64-token budget really split the mini-batches
    assert got["metrics"]["loss"] == pytest.approx(expected["loss"], abs=1e-6)
    assert got["metrics"]["grad_norm"] == pytest.approx(expected["grad_norm"], rel=1e-5)
    assert got["metrics"]["pg_loss"] == pytest.approx(expected["pg_loss"], abs=1e-6)
    assert got["metrics"]["clip_frac"] == pytest.approx(expected["clip_frac"], abs=1e-6)
    assert got["metrics"]["kl"] == pytest.approx(expected["kl"], abs=1e-7)
    assert _max_diff(got["weights"], whole.full_state_dict()) <= 1e-5
    assert got["snapshot_keys"] == sorted(whole.state_dict_for_rollout())
    for key, values in whole.last_agreement.items():  # per-sequence statistics gathered from both ranks
        assert torch.allclose(got["agreement"][key], values, atol=1e-5), key
    assert got["metrics"]["padding_frac"] < expected["padding_frac"]  # sorted packing pads less


@pytest.mark.parametrize("loss_agg", ["token-mean", "seq-mean-token-mean"])
def test_micro_batches_on_one_rank_equal_the_whole_mini_batch(loss_agg):
    whole, split = make_learner(loss_agg), make_learner(loss_agg, micro_batch_tokens=48)
    a, b = whole.train_step(ragged_batch()), split.train_step(ragged_batch())
    assert b["micro_batches"] >= 6 and a["micro_batches"] == 2
    assert b["loss"] == pytest.approx(a["loss"], abs=1e-6)
    assert _max_diff(whole.full_state_dict(), split.full_state_dict()) <= 1e-5


def test_normalising_per_micro_batch_would_differ(monkeypatch):
    """The equivalence above is not vacuous: weighting every micro-batch's mean loss alike (the classic
    per-micro-batch normalisation bug) moves the weights elsewhere."""
    whole = make_learner("token-mean")
    whole.train_step(ragged_batch())
    import echo2_sdk.runtime.learning.learner as learner_module

    monkeypatch.setattr(learner_module, "aggregation_units", lambda mask, agg: torch.tensor(1.0))
    wrong = make_learner("token-mean", micro_batch_tokens=48)
    wrong.train_step(ragged_batch())
    assert _max_diff(whole.full_state_dict(), wrong.full_state_dict()) > 1e-4


def _changed_fraction(precision: str, steps: int = 5) -> float:
    learner = make_learner(lr=1e-6, precision=precision)
    before = {k: v.clone() for k, v in learner.full_state_dict().items()}
    for seed in range(steps):
        learner.train_step(ragged_batch(seed=seed))
    after = learner.full_state_dict()
    changed = sum(int((after[k] != before[k]).sum()) for k in before if k != "lm_head.weight")
    return changed / sum(v.numel() for k, v in before.items() if k != "lm_head.weight")


def test_bf16_mixed_keeps_the_updates_that_pure_bf16_loses():
    fp32, mixed = _changed_fraction("fp32"), _changed_fraction("bf16-mixed")
    with pytest.warns(UserWarning, match="bf16-mixed"):
        pure = _changed_fraction("bf16")
    assert mixed == pytest.approx(fp32, rel=0.1)  # within 10 % of float32's
    assert pure < 0.5 * fp32


def test_bf16_mixed_keeps_float32_master_weights_and_hands_out_the_rollout_dtype():
    learner = make_learner(precision="bf16-mixed", rollout_dtype=torch.bfloat16)
    assert all(p.dtype == torch.float32 for p in learner.model.parameters())
    assert all(v.dtype == torch.bfloat16 for v in learner.state_dict_for_rollout().values())
    metrics = learner.train_step(ragged_batch())
    assert metrics["skipped_updates"] == 0 and metrics["grad_norm"] > 0
    assert all(s["exp_avg"].dtype == torch.float32 for s in learner.optimizer.state.values())


def test_pure_bf16_warns_at_low_learning_rates():
    with pytest.warns(UserWarning, match="precision=bf16 keeps weights"):
        make_learner(lr=1e-6, precision="bf16")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        make_learner(lr=1e-4, precision="bf16")


def _save_two_ranks(rank, world, port, path):
    torch.set_num_threads(1)
    group = sharding.init_rank_group(rank, world, "127.0.0.1", port, backend="gloo")
    learner = make_learner(micro_batch_tokens=64, group=group, shard=True)
    learner.train_step(ragged_batch())
    learner.save_checkpoint(path, extra={"step": 1})
    learner.train_step(ragged_batch(seed=1))
    weights = learner.full_state_dict()
    if rank == 0:
        torch.save(weights, path + ".after")


@spawned
def test_a_two_rank_checkpoint_resumes_on_one_rank_and_continues_alike(tmp_path):
    path = str(tmp_path / "ckpt")
    spawn(_save_two_ranks, 2, path)
    one = make_learner(micro_batch_tokens=64)
    assert one.load_checkpoint(path) == {"step": 1} and one.version == 1 and one.num_optimizer_steps == 2
    one.train_step(ragged_batch(seed=1))  # the restored moments and shuffle generator give the same update
    assert _max_diff(one.full_state_dict(), torch.load(path + ".after")) <= 1e-5


def test_a_sharded_learner_cannot_evaluate_in_place_and_ranks_must_shard():
    with pytest.raises(ValueError, match="shard=True"):
        make_learner(group=sharding.RankGroup(0, 2), shard=False)


def test_micro_batch_budget_is_validated():
    with pytest.raises(ValueError, match="micro_batch_tokens=1"):
        make_learner(micro_batch_tokens=1)


def test_a_model_without_decoder_layers_cannot_be_sharded():
    with pytest.raises(TypeError, match="decoder layers"):
        sharding.decoder_layers(torch.nn.Linear(2, 2))


def test_tiny_model_ties_embeddings_and_the_learner_sees_the_alias():
    learner = make_learner()
    assert learner.tied == {"lm_head.weight": "model.embed_tokens.weight"}
    state = learner.state_dict_for_rollout()
    assert state["lm_head.weight"] is state["model.embed_tokens.weight"]
    assert tiny_model().config.tie_word_embeddings


def _resume_two_ranks(rank, world, port, path):
    torch.set_num_threads(1)
    group = sharding.init_rank_group(rank, world, "127.0.0.1", port, backend="gloo")
    learner = make_learner(micro_batch_tokens=64, group=group, shard=True)
    assert learner.load_checkpoint(path) == {"step": 1} and learner.version == 1
    learner.train_step(ragged_batch(seed=1))
    weights = learner.full_state_dict()
    if rank == 0:
        torch.save(weights, path + ".two")


@spawned
def test_a_one_rank_checkpoint_resumes_on_two_ranks_and_continues_alike(tmp_path):
    path = str(tmp_path / "ckpt")
    one = make_learner(micro_batch_tokens=64)
    one.train_step(ragged_batch())
    one.save_checkpoint(path, extra={"step": 1})
    one.train_step(ragged_batch(seed=1))
    spawn(_resume_two_ranks, 2, path)
    assert _max_diff(torch.load(path + ".two"), one.full_state_dict()) <= 1e-5


def _one_row_per_minibatch(rank, world, port, out):
    torch.set_num_threads(1)
    group = sharding.init_rank_group(rank, world, "127.0.0.1", port, backend="gloo")
    learner = make_learner(group=group, shard=True)
    metrics = learner.train_step(ragged_batch(rows=2))  # each mini-batch: one row, so rank 1 runs only fillers
    weights = learner.full_state_dict()
    if rank == 0:
        torch.save({"metrics": metrics, "weights": weights}, out)


@spawned
def test_a_rank_left_with_only_fillers_keeps_in_step(tmp_path):
    whole = make_learner()
    expected = whole.train_step(ragged_batch(rows=2))
    spawn(_one_row_per_minibatch, 2, str(tmp_path / "rank0.pt"))
    got = torch.load(tmp_path / "rank0.pt", weights_only=False)
    assert got["metrics"]["loss"] == pytest.approx(expected["loss"], abs=1e-6)
    assert got["metrics"]["tis_max"] == pytest.approx(expected["tis_max"], abs=1e-6)
    assert _max_diff(got["weights"], whole.full_state_dict()) <= 1e-5
