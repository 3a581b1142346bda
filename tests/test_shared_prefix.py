"""Shared-prefix scoring: a group's prompt runs once, and every trained log-prob and gradient stays the same."""

from __future__ import annotations

import doctest

import pytest
import torch

from echo2_sdk.config import load_config
from echo2_sdk.runtime.driver.setup import learner_spec
from echo2_sdk.runtime.learning import learner as learner_module
from echo2_sdk.runtime.learning import sharding
from echo2_sdk.runtime.learning.base import TrainBatch
from echo2_sdk.runtime.learning.learner import Learner
from echo2_sdk.runtime.models import shared_prefix
from echo2_sdk.runtime.models.logprobs import SequenceLogprobs
from echo2_sdk.runtime.models.shared_prefix import plan_packing, prefix_ends
from learner_ranks import spawn, tiny_model

torch.set_num_threads(1)


def group_batch(prompts: int = 3, samples: int = 4, *, left_pad: bool = False, seed: int = 0) -> TrainBatch:
    """``prompts`` groups of ``samples`` rows: one random prompt each (4-9 tokens), answers of 1-5 tokens."""
    g = torch.Generator().manual_seed(seed)
    rows = []
    for _ in range(prompts):
        prompt = torch.randint(1, 96, (int(torch.randint(4, 10, (1,), generator=g)),), generator=g)
        for _ in range(samples):
            answer = torch.randint(1, 96, (int(torch.randint(1, 6, (1,), generator=g)),), generator=g)
            rows.append((len(prompt), torch.cat([prompt, answer])))
    width = max(len(r) for _, r in rows)
    ids = torch.zeros(len(rows), width, dtype=torch.long)
    attn = torch.zeros(len(rows), width, dtype=torch.long)
    loss_mask = torch.zeros(len(rows), width - 1)
    for b, (plen, r) in enumerate(rows):
        start = width - len(r) if left_pad else 0
        ids[b, start:start + len(r)] = r
        attn[b, start:start + len(r)] = 1
        loss_mask[b, start + plen - 1:start + len(r) - 1] = 1
    adv = (torch.randn(len(rows), 1, generator=g).expand(-1, width - 1) * loss_mask).contiguous()
    sampler = -torch.rand(len(rows), width - 1, generator=g) * 3 * loss_mask
    return TrainBatch(ids, attn, loss_mask, adv, sampler, torch.zeros(len(rows), dtype=torch.long))


def test_doctests():
    assert doctest.testmod(shared_prefix).failed == 0


def test_the_packing_of_two_rows_sharing_a_prompt_by_hand():
    ids = torch.tensor([[5, 6, 7, 8, 0], [5, 6, 9, 0, 0], [4, 6, 7, 1, 2]])
    attn = (ids > 0).long()
    loss_mask = torch.tensor([[0., 1, 1, 0], [0, 1, 0, 0], [0, 0, 1, 1]])  # prompts [5 6], [5 6], [4 6 7]
    assert prefix_ends(loss_mask, attn).tolist() == [2, 2, 3]
    plan = plan_packing(ids, attn, loss_mask)
    assert plan.input_ids.tolist() == [[5, 6, 7, 8, 9], [4, 6, 7, 1, 2]]
    assert plan.position_ids.tolist() == [[0, 1, 2, 3, 2], [0, 1, 2, 3, 4]]
    assert plan.allowed[0].int().tolist() == [[1, 0, 0, 0, 0],  # prefix: causal
                                              [1, 1, 0, 0, 0],
                                              [1, 1, 1, 0, 0],  # suffix 1 (7 8): prefix + itself
                                              [1, 1, 1, 1, 0],
                                              [1, 1, 0, 0, 1]]  # suffix 2 (9): prefix, never suffix 1
    # row 0's targets 7, 8 come from prefix end (pos 1) and 7 (pos 2); row 1's 9 from the prefix end too
    assert list(zip(plan.dst_row.tolist(), plan.dst_pos.tolist(), plan.src_row.tolist(), plan.src_pos.tolist(),
                    plan.targets.tolist()))[:3] == [(0, 1, 0, 1, 7), (0, 2, 0, 2, 8), (1, 1, 0, 1, 9)]
    assert (plan.packed_tokens, plan.unpacked_tokens) == (10, 12)
    # nothing shared: no plan (the row-by-row forward is no slower); a gap in a row's mask: no plan
    assert plan_packing(ids[2:], attn[2:], loss_mask[2:]) is None
    gappy = attn.clone()
    gappy[0, 1] = 0
    assert plan_packing(ids, gappy, loss_mask) is None


@pytest.mark.parametrize("left_pad", [False, True])
@pytest.mark.parametrize("attention", ["sdpa", "eager"])
def test_packed_log_probs_and_gradients_equal_the_row_by_row_ones(left_pad, attention):
    batch = group_batch(left_pad=left_pad)
    ends = prefix_ends(batch.loss_mask, batch.attention_mask)
    grads = []
    outs = []
    for with_prefix in (False, True):
        model = tiny_model()
        model.config._attn_implementation = attention
        pack = plan_packing(batch.input_ids, batch.attention_mask, batch.loss_mask) if with_prefix else None
        out = SequenceLogprobs(model)(batch.input_ids, batch.attention_mask, 1.0, pack)
        (out * batch.loss_mask * batch.advantages).sum().backward()
        grads.append({n: p.grad.clone() for n, p in model.named_parameters()})
        outs.append(out.detach())
    scored = torch.zeros_like(batch.loss_mask, dtype=torch.bool)  # from each prefix's last token on
    for b in range(len(batch)):
        real = batch.attention_mask[b].nonzero().flatten()
        scored[b, int(ends[b]) - 1:int(real[-1])] = True
    assert torch.allclose(outs[0][scored], outs[1][scored], atol=1e-5)
    assert (outs[1][~scored] == 0).all()  # the prompt's own targets are not scored
    assert (batch.loss_mask.bool() <= scored).all()  # every trained target is among the scored ones
    for name in grads[0]:
        assert torch.allclose(grads[0][name], grads[1][name], atol=1e-5), name


def test_a_shared_prefix_learner_trains_like_the_row_by_row_one_and_runs_fewer_tokens(monkeypatch):
    batch = group_batch(prompts=4, samples=6)
    plain = Learner(tiny_model(), lr=1e-3, num_minibatches=2, seed=3)
    packed = Learner(tiny_model(), lr=1e-3, num_minibatches=2, seed=3, shared_prefix=True)
    runs = []
    monkeypatch.setattr(learner_module, "plan_packing", lambda *a: runs.append(plan_packing(*a)) or runs[-1])
    for _ in range(2):
        expected, got = plain.train_step(batch), packed.train_step(batch)
        assert got["loss"] == pytest.approx(expected["loss"], abs=1e-6)
        assert got["grad_norm"] == pytest.approx(expected["grad_norm"], rel=1e-5)
    for (name, a), b in zip(plain.model.named_parameters(), packed.model.parameters()):
        assert torch.allclose(a, b, atol=1e-5), name
    assert runs and all(p is not None and p.packed_tokens < p.unpacked_tokens for p in runs)


def test_packing_under_activation_checkpointing_trains_alike():
    batch = group_batch()
    plain = Learner(tiny_model(), lr=1e-3, seed=3)
    packed = Learner(tiny_model(), lr=1e-3, seed=3, shared_prefix=True, gradient_checkpointing=True)
    expected, got = plain.train_step(batch), packed.train_step(batch)
    assert got["loss"] == pytest.approx(expected["loss"], abs=1e-6)
    assert got["grad_norm"] == pytest.approx(expected["grad_norm"], rel=1e-5)


def test_bf16_mixed_packs_too():
    batch = group_batch()
    plain = Learner(tiny_model(), lr=1e-3, precision="bf16-mixed", seed=3)
    packed = Learner(tiny_model(), lr=1e-3, precision="bf16-mixed", seed=3, shared_prefix=True)
    expected, got = plain.train_step(batch), packed.train_step(batch)
    assert got["loss"] == pytest.approx(expected["loss"], abs=0.02)
    assert got["tis_mean"] == pytest.approx(expected["tis_mean"], abs=0.05)


def test_an_attention_without_4d_masks_is_refused_and_the_config_reaches_the_spec():
    model = tiny_model()
    model.config._attn_implementation = "flash_attention_2"
    with pytest.raises(ValueError, match="shared_prefix=True needs attention in"):
        Learner(model, shared_prefix=True)
    assert learner_spec(load_config(None, ["learner.shared_prefix=true"]), "base").shared_prefix is True
    assert learner_spec(load_config(None, []), "base").shared_prefix is False


def _two_ranks(rank, world, port, out):
    torch.set_num_threads(1)
    group = sharding.init_rank_group(rank, world, "127.0.0.1", port, backend="gloo")
    learner = Learner(tiny_model(), lr=1e-3, num_minibatches=2, seed=3, micro_batch_tokens=40, group=group,
                      shard=True, shared_prefix=True)
    metrics = learner.train_step(group_batch(prompts=4, samples=6))
    weights = learner.full_state_dict()
    if rank == 0:
        torch.save({"metrics": metrics, "weights": weights}, out)


@pytest.mark.slow  # spawned gloo ranks
def test_two_sharded_ranks_with_micro_batches_and_shared_prefixes_equal_one_plain_rank(tmp_path):
    whole = Learner(tiny_model(), lr=1e-3, num_minibatches=2, seed=3)
    expected = whole.train_step(group_batch(prompts=4, samples=6))
    spawn(_two_ranks, 2, str(tmp_path / "rank0.pt"))
    got = torch.load(tmp_path / "rank0.pt", weights_only=False)
    assert got["metrics"]["micro_batches"] > 2
    assert got["metrics"]["loss"] == pytest.approx(expected["loss"], abs=1e-6)
    assert got["metrics"]["grad_norm"] == pytest.approx(expected["grad_norm"], rel=1e-5)
    full = whole.full_state_dict()
    assert max(float((got["weights"][k] - full[k]).abs().max()) for k in full) <= 1e-5


def test_the_benchmark_reports_both_learners_training_alike(capsys, monkeypatch):
    import importlib.util
    import json
    import sys
    from pathlib import Path

    path = Path(__file__).resolve().parent.parent / "benchmarks" / "shared_prefix.py"
    spec = importlib.util.spec_from_file_location("shared_prefix_bench", path)
    bench = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, "shared_prefix_bench", bench)  # its dataclasses look themselves up there
    spec.loader.exec_module(bench)
    bench.main(["--quick"])
    (row,) = json.loads(capsys.readouterr().out)["results"]
    assert row["shape"]["name"] == "quickstart" and row["rows"] == 8 * 16
    assert row["tokens_whole_batch_packed"] < row["tokens_row_by_row"] / 3  # 16 answers share each question
    assert row["loss_max_abs_diff"] < 1e-5 and set(row["step_s_median"]) == {"row_by_row", "packed"}
    with pytest.raises(SystemExit, match="must be >= 1"):
        bench.main(["--repeats", "0"])
