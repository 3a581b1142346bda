"""GRPO policy loss on a hand-computed batch: 2 sequences x 3 tokens.

Every expected number below is worked out by hand from

    r = exp(logp - old), pg = max(-A r, -A clip(r, 0.8, 1.2)), rho = exp(old - sampler),
    w = min(rho, C=2), kl = exp(ref - logp) - (ref - logp) - 1, loss_t = w pg + beta kl.

Sequence 0 has A = +1, sequence 1 has A = -2; its last token is masked and holds NaN/inf.

    token   r     rho   w     clipped?                 pg                    w * pg
    s0 t0   1.5   1     1     yes (A>0, r>1.2)        max(-1.5, -1.2) = -1.2   -1.2
    s0 t1   1.0   3     2     no  (rho truncated)     -1.0                     -2.0
    s0 t2   0.5   2     2     no  (A>0, r<0.8)        max(-0.5, -0.8) = -0.5   -1.0   (rho == C)
    s1 t0   0.5   0.5   0.5   yes (A<0, r<0.8)        max( 1.0,  1.6) =  1.6    0.8
    s1 t1   1.5   1     1     no  (A<0, r>1.2)        max( 3.0,  2.4) =  3.0    3.0
    s1 t2   masked
"""

import math

import pytest
import torch

from echo2_sdk.algos import get_policy_loss, grpo_policy_loss, list_policy_losses, register_policy_loss

torch.set_num_threads(1)
NAN, INF = float("nan"), float("inf")
LN2 = math.log(2.0)


def _batch():
    log = math.log
    old = torch.tensor([[log(0.5), log(0.25), log(0.2)], [log(0.4), log(0.2), -INF]])
    log_r = torch.tensor([[log(1.5), 0.0, log(0.5)], [log(0.5), log(1.5), 0.0]])
    log_rho = torch.tensor([[0.0, log(3.0), log(2.0)], [log(0.5), 0.0, 0.0]])
    logp = old + log_r
    logp[1, 2] = NAN
    sampler = old - log_rho
    sampler[1, 2] = INF
    adv = torch.tensor([[1.0, 1.0, 1.0], [-2.0, -2.0, NAN]])
    mask = torch.tensor([[1.0, 1.0, 1.0], [1.0, 1.0, 0.0]])
    # ref - logp = d with d = [[ln2, 0, 0], [-ln2, 0, *]]:
    # kl = 1 - ln2 at s0t0, ln2 - 1/2 at s1t0, 0 elsewhere.
    ref = logp + torch.tensor([[LN2, 0.0, 0.0], [-LN2, 0.0, NAN]])
    ref[1, 2] = -INF
    return logp.requires_grad_(True), old, sampler, adv, mask, ref


def test_registered_and_lookup_errors():
    assert "grpo" in list_policy_losses()
    assert get_policy_loss("grpo") is grpo_policy_loss
    with pytest.raises(KeyError, match=r"[Dd]id you mean 'grpo'.*Known policy losses: \[.*'grpo'"):
        get_policy_loss("gpro")
    with pytest.raises(ValueError, match="already registered"):
        register_policy_loss("grpo")(lambda *a, **k: None)


def test_token_mean_hand_computed_values_and_grad():
    logp, old, sampler, adv, mask, _ = _batch()
    old.requires_grad_(True)  # the loss must not push gradient into old/sampler log-probs
    loss, m = grpo_policy_loss(logp, old, sampler, adv, mask, tis_cap=2.0)
    # (-1.2 - 2.0 - 1.0 + 0.8 + 3.0) / 5 tokens
    assert loss.item() == pytest.approx(-0.08, abs=1e-6)
    assert m["pg_loss"] == pytest.approx(-0.08, abs=1e-6)
    assert m["kl"] == 0.0
    assert m["clip_frac"] == pytest.approx(2 / 5)
    assert m["ratio_mean"] == pytest.approx((1.5 + 1.0 + 0.5 + 0.5 + 1.5) / 5)
    assert m["tis_mean"] == pytest.approx((1 + 2 + 2 + 0.5 + 1) / 5)
    assert m["tis_max"] == pytest.approx(2.0)
    assert m["tis_trunc_frac"] == pytest.approx(1 / 5)  # rho = 3 truncated; rho == C is not

    loss.backward()
    # d/dlogp of w * (-A r) on unclipped tokens is -w A r, divided by 5 tokens; clipped -> 0.
    expected = torch.tensor([[0.0, -2 * 1 * 1.0 / 5, -2 * 1 * 0.5 / 5],
                             [0.0, 1 * 2 * 1.5 / 5, 0.0]])
    assert torch.isfinite(logp.grad).all()
    torch.testing.assert_close(logp.grad, expected, atol=1e-6, rtol=1e-5)
    assert old.grad is None


def test_seq_mean_token_mean():
    logp, old, sampler, adv, mask, _ = _batch()
    loss, m = grpo_policy_loss(logp, old, sampler, adv, mask, loss_agg="seq-mean-token-mean")
    # seq 0: (-1.2 - 2.0 - 1.0) / 3 = -1.4; seq 1: (0.8 + 3.0) / 2 = 1.9; mean = 0.25
    assert loss.item() == pytest.approx(0.25, abs=1e-6)
    assert m["clip_frac"] == pytest.approx(2 / 5)  # token statistics ignore loss_agg
    loss.backward()
    expected = torch.tensor([[0.0, -2.0 / 3 / 2, -1.0 / 3 / 2], [0.0, 3.0 / 2 / 2, 0.0]])
    torch.testing.assert_close(logp.grad, expected, atol=1e-6, rtol=1e-5)


def test_sequence_without_tokens_is_excluded_from_seq_mean():
    logp, old, sampler, adv, mask, _ = _batch()
    mask = mask.clone()
    mask[1] = 0.0  # seq 1 contributes nothing: the mean is over seq 0 only
    loss, _ = grpo_policy_loss(logp, old, sampler, adv, mask, loss_agg="seq-mean-token-mean")
    assert loss.item() == pytest.approx(-1.4, abs=1e-6)


def test_k3_kl_value_and_grad():
    logp, old, sampler, adv, mask, ref = _batch()
    loss, m = grpo_policy_loss(logp, old, sampler, adv, mask, ref_logprobs=ref, kl_coef=0.5)
    # token-mean kl = ((1 - ln2) + (ln2 - 1/2)) / 5 = 0.1; loss = -0.08 + 0.5 * 0.1
    assert m["kl"] == pytest.approx(0.1, abs=1e-6)
    assert loss.item() == pytest.approx(-0.03, abs=1e-6)
    assert m["pg_loss"] == pytest.approx(-0.08, abs=1e-6)
    loss.backward()
    # d kl / d logp = 1 - exp(ref - logp): -1 at s0t0, +1/2 at s1t0; times beta / 5.
    pg_grad = torch.tensor([[0.0, -0.4, -0.2], [0.0, 0.6, 0.0]])
    kl_grad = torch.tensor([[-1.0, 0.0, 0.0], [0.5, 0.0, 0.0]]) * 0.5 / 5
    torch.testing.assert_close(logp.grad, pg_grad + kl_grad, atol=1e-6, rtol=1e-5)

    _, m_seq = grpo_policy_loss(
        logp, old, sampler, adv, mask, ref_logprobs=ref, kl_coef=0.5, loss_agg="seq-mean-token-mean"
    )
    assert m_seq["kl"] == pytest.approx(((1 - LN2) / 3 + (LN2 - 0.5) / 2) / 2, abs=1e-6)


def test_kl_metric_without_penalty_and_kl_without_ref_errors():
    logp, old, sampler, adv, mask, ref = _batch()
    loss, m = grpo_policy_loss(logp, old, sampler, adv, mask, ref_logprobs=ref, kl_coef=0.0)
    assert loss.item() == pytest.approx(-0.08, abs=1e-6)  # ref only monitored
    assert m["kl"] == pytest.approx(0.1, abs=1e-6)
    with pytest.raises(ValueError, match=r"kl_coef=0.1 needs ref_logprobs.*set kl_coef=0"):
        grpo_policy_loss(logp, old, sampler, adv, mask, kl_coef=0.1)


def test_tis_disabled_and_clip_higher():
    logp, old, sampler, adv, mask, _ = _batch()
    loss, m = grpo_policy_loss(logp, old, sampler, adv, mask, tis_cap=None)
    # w = 1: (-1.2 - 1.0 - 0.5 + 1.6 + 3.0) / 5
    assert loss.item() == pytest.approx(0.38, abs=1e-6)
    assert m["tis_mean"] == pytest.approx((1 + 3 + 2 + 0.5 + 1) / 5)  # raw rho, monitoring only
    assert m["tis_max"] == pytest.approx(3.0)
    assert m["tis_trunc_frac"] == 0.0

    # clip-higher eps_high = 0.6: s0t0 (r = 1.5 < 1.6) is no longer clipped -> -1.5 * w(1)
    loss, m = grpo_policy_loss(logp, old, sampler, adv, mask, clip_eps_high=0.6)
    assert loss.item() == pytest.approx((-1.5 - 2.0 - 1.0 + 0.8 + 3.0) / 5, abs=1e-6)
    assert m["clip_frac"] == pytest.approx(1 / 5)


def test_masked_garbage_never_leaks_and_empty_mask_is_zero():
    logp, old, sampler, adv, mask, ref = _batch()
    for agg in ("token-mean", "seq-mean-token-mean"):
        loss, m = grpo_policy_loss(
            logp, old, sampler, adv, mask, ref_logprobs=ref, kl_coef=1.0, loss_agg=agg
        )
        assert math.isfinite(loss.item()) and all(math.isfinite(v) for v in m.values())
        (grad,) = torch.autograd.grad(loss, logp)
        assert torch.isfinite(grad).all() and grad[1, 2] == 0
    loss, m = grpo_policy_loss(logp, old, sampler, adv, torch.zeros_like(mask))
    assert loss.item() == 0.0 and all(v == 0.0 for v in m.values())
    (grad,) = torch.autograd.grad(loss, logp)
    assert torch.equal(grad, torch.zeros_like(grad))


def test_input_validation():
    logp, old, sampler, adv, mask, _ = _batch()
    with pytest.raises(ValueError, match="loss_agg='sum'.*token-mean"):
        grpo_policy_loss(logp, old, sampler, adv, mask, loss_agg="sum")
    with pytest.raises(ValueError, match=r"advantages has shape \(2, 2\)"):
        grpo_policy_loss(logp, old, sampler, adv[:, :2], mask)
    with pytest.raises(ValueError, match="loss_mask must hold only 0 and 1"):
        grpo_policy_loss(logp, old, sampler, adv, mask * 0.5)
    with pytest.raises(ValueError, match="tis_cap=0"):
        grpo_policy_loss(logp, old, sampler, adv, mask, tis_cap=0)


# ---- off-policy corrections (echo2_sdk.corrections), hand-computed --------------------------------
def _weights(name: str, **kw):
    from echo2_sdk.corrections import get_correction

    # Two sequences of three tokens; rho = old / sampler per token; the last token of row 1 is masked out.
    old = torch.log(torch.tensor([[0.6, 0.5, 0.4], [0.9, 0.8, 0.3]]))
    sampler = torch.log(torch.tensor([[0.2, 0.5, 0.5], [0.3, 0.1, 0.9]]))
    keep = torch.tensor([[True, True, True], [True, True, False]])
    from echo2_sdk.corrections import log_ratio

    return get_correction(name)(log_ratio(old, sampler, keep), keep, **kw)


def test_tis_correction_truncates_each_token_ratio_at_the_cap():
    # rho row 0 = 3, 1, 0.8; row 1 = 3, 8, (masked)
    assert torch.allclose(_weights("tis", cap=2.0), torch.tensor([[2.0, 1.0, 0.8], [2.0, 2.0, 0.0]]))


def test_icepop_keeps_rho_only_inside_the_band():
    got = _weights("icepop", low=0.5, high=2.0)
    assert torch.allclose(got, torch.tensor([[0.0, 1.0, 0.8], [0.0, 0.0, 0.0]]))


def test_sequence_mask_drops_a_sequence_whose_geometric_mean_ratio_leaves_the_band():
    # geometric means: row 0 (3 * 1 * 0.8)^(1/3) = 1.339 -> kept with TIS; row 1 (3 * 8)^(1/2) = 4.90 -> dropped
    got = _weights("seq_mask_tis", cap=2.0, low=0.5, high=2.0)
    assert torch.allclose(got, torch.tensor([[2.0, 1.0, 0.8], [0.0, 0.0, 0.0]]))


def test_grpo_loss_with_a_masking_correction_reports_the_masked_fraction():
    logp = torch.zeros(1, 4, requires_grad=True)
    old = torch.log(torch.tensor([[0.5, 0.5, 0.5, 0.5]]))
    sampler = torch.log(torch.tensor([[0.5, 0.1, 0.4, 0.9]]))  # rho 1, 5, 1.25, 0.556
    adv = torch.ones(1, 4)
    loss, m = grpo_policy_loss(logp, old, sampler, adv, torch.ones(1, 4), correction="icepop", clip_eps_high=10.0)
    assert m["is_masked_frac"] == pytest.approx(0.25)  # only rho = 5 falls outside [0.5, 2]
    loss.backward()
    assert logp.grad[0, 1] == 0 and (logp.grad[0, [0, 2, 3]] != 0).all()
    plain, m_tis = grpo_policy_loss(logp, old, sampler, adv, torch.ones(1, 4), clip_eps_high=10.0)
    assert m_tis["is_masked_frac"] == 0.0 and m_tis["tis_max"] == pytest.approx(2.0)
    with pytest.raises(ValueError, match="unknown off-policy correction"):
        grpo_policy_loss(logp, old, sampler, adv, torch.ones(1, 4), correction="tiss")
