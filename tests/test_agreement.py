"""Sampler/learner log-prob agreement: per-sequence sums from the learner, per-worker verdicts."""

import math

import torch

from echo2_sdk.runtime.learning.agreement import SamplerAgreement, sequence_agreement
from echo2_sdk.runtime.learning.learner import Learner

from test_learner import make_batch, tiny_model


def test_sequence_sums_over_masked_tokens_only():
    old = torch.tensor([[0.0, -1.0, -2.0], [-1.0, -1.0, 0.0]])
    sampler = torch.tensor([[9.0, -1.5, -1.0], [-1.0, -1.0, 0.0]])
    mask = torch.tensor([[0.0, 1.0, 1.0], [1.0, 1.0, 0.0]])
    out = sequence_agreement(old, sampler, mask)
    assert out["tokens"].tolist() == [2.0, 2.0]
    assert torch.allclose(out["abs_delta"], torch.tensor([1.5, 0.0]))
    assert torch.allclose(out["delta"], torch.tensor([-0.5, 0.0]))
    assert math.isclose(out["ratio_min"][0].item(), math.exp(-1.0), rel_tol=1e-6)
    assert math.isclose(out["ratio_max"][0].item(), math.exp(0.5), rel_tol=1e-6)


def test_learner_reports_agreement_in_batch_order():
    model = tiny_model()
    batch = make_batch(model, [1.0, -1.0, 0.5, -0.5])
    shift = torch.zeros_like(batch.sampler_logprobs)
    shift[2] = 0.3 * batch.loss_mask[2]  # only sequence 2's sampler disagrees
    batch = type(batch)(batch.input_ids, batch.attention_mask, batch.loss_mask, batch.advantages,
                        batch.sampler_logprobs + shift, batch.versions)
    learner = Learner(model, lr=1e-3, num_minibatches=2, seed=0)
    learner.train_step(batch)
    a = learner.last_agreement
    assert a["tokens"].tolist() == batch.loss_mask.sum(-1).tolist()
    per_token = a["abs_delta"] / a["tokens"]
    assert math.isclose(per_token[2].item(), 0.3, rel_tol=1e-4)
    assert per_token[[0, 1, 3]].max().item() < 1e-5


def _step(agreement, worker, lag, tokens, per_token_delta):
    n = len(worker)
    return agreement.update(worker, lag, {
        "tokens": torch.full((n,), float(tokens)), "abs_delta": torch.full((n,), abs(per_token_delta) * tokens),
        "delta": torch.full((n,), per_token_delta * tokens),
        "ratio_min": torch.full((n,), math.exp(per_token_delta)), "ratio_max": torch.full((n,), math.exp(per_token_delta))})


def test_a_worker_is_flagged_once_on_same_snapshot_tokens_only():
    logs = []
    agreement = SamplerAgreement(tolerance=0.1, min_tokens=100, log=logs.append)
    # Stale samples carry the policy's drift: never flagged, however large.
    row = _step(agreement, ["bad", "good"], [2, 2], 200, 0.9)
    assert row["flagged_workers"] == 0 and "logprob_abs_delta_same_version" not in row
    row = _step(agreement, ["good"], [0], 150, 0.01)
    assert row["flagged_workers"] == 0 and math.isclose(row["logprob_abs_delta_same_version"], 0.01)
    row = _step(agreement, ["bad"], [0], 50, 0.5)  # below min_tokens: not judged yet
    assert row["flagged_workers"] == 0
    row = _step(agreement, ["bad"], [0], 60, 0.5)
    assert row["newly_flagged"] == ["bad"] and row["flagged_workers"] == 1
    assert len(logs) == 1 and "bad" in logs[0] and "logprob_tolerance" in logs[0]
    _step(agreement, ["bad"], [0], 60, 0.5)
    assert len(logs) == 1  # once
    summary = agreement.summary()
    assert set(summary["flagged"]) == {"bad"}
    assert summary["workers"]["good"]["same_version"]["tokens"] == 150
    assert summary["workers"]["bad"]["older_versions"]["mean_abs_delta"] > 0.8


def test_no_tolerance_reports_but_never_flags():
    agreement = SamplerAgreement(tolerance=None, min_tokens=1, log=lambda m: None)
    assert _step(agreement, ["w"], [0], 500, 3.0)["flagged_workers"] == 0
    assert agreement.summary()["workers"]["w"]["same_version"]["mean_abs_delta"] == 3.0


def test_bad_tolerance_settings_are_config_errors():
    import pytest

    from echo2_sdk.config import ConfigError, load_config

    with pytest.raises(ConfigError, match="logprob_tolerance=-1"):
        load_config(None, ["rollout.logprob_tolerance=-1"])
    with pytest.raises(ConfigError, match="logprob_check_min_tokens=0"):
        load_config(None, ["rollout.logprob_check_min_tokens=0"])
    assert load_config(None, ["rollout.logprob_tolerance=null"]).rollout.logprob_tolerance is None
