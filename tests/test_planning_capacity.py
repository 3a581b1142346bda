"""Capacity model (eqs. 1–2), bubble prediction, staleness bounds and κ choice, against hand-computed values."""

import math

import pytest

from echo2_sdk.config_loader import ConfigError
from echo2_sdk.runtime.planning import capacity as cap
from echo2_sdk.runtime.planning.capacity import PlanningError

# κ = 2, T_train = 10 s, T_bcast = 4 s, R = 32: κR = 64, κT − T_b = 16 → μ_min = 4 rollouts/s exactly.
K, T, TB, R = 2, 10.0, 4.0, 32


def test_mu_min_eq2_hand_values():
    assert cap.mu_min(K, T, TB, R) == 4.0
    assert cap.mu_min(5, 60.0, 40.0, 256) == pytest.approx(5 * 256 / 260)  # 4.923
    assert cap.mu_min(2, 60.0, 40.0, 256) == pytest.approx(6.4)
    assert cap.mu_min(3, 10.0, 0.0, 30) == 3.0  # no broadcast: μ_min = R/T_train


def test_overlap_rule_eq1_holds_exactly_at_mu_min():
    # 20 ≥ 4 + 64/4 = 20 holds with equality; just below μ_min it fails
    assert cap.overlap_holds(K, T, TB, R, 4.0)
    assert not cap.overlap_holds(K, T, TB, R, 3.99)
    assert cap.overlap_holds(K, T, TB, R, 100.0)
    assert not cap.overlap_holds(K, T, TB, R, 0.0)  # empty pool


def test_kappa_t_train_equal_to_t_bcast_gives_infinite_mu_min():
    assert cap.mu_min(2, 10.0, 20.0, 32) == math.inf  # κ·T_train = T_bcast
    assert cap.mu_min(2, 10.0, 25.0, 32) == math.inf  # κ·T_train < T_bcast
    assert not cap.overlap_holds(2, 10.0, 20.0, 32, 1e12)
    assert cap.predicted_bubble_ratio(2, 10.0, 20.0, 32, 1e12) > 0


def test_mu_target_and_gamma_validation():
    assert cap.mu_target(4.0) == pytest.approx(4.4)
    assert cap.mu_target(4.0, 1.5) == 6.0
    assert cap.mu_target(math.inf) == math.inf
    with pytest.raises(ValueError, match="γ=0.9"):
        cap.mu_target(4.0, 0.9)


def test_predicted_bubble_ratio_hand_values():
    # μ = 2: cycle C = T_b + κR/μ = 4 + 32 = 36 s, training 20 s → bubble 16/36
    assert cap.cycle_time_s(K, T, TB, R, 2.0) == 36.0
    assert cap.predicted_bubble_ratio(K, T, TB, R, 2.0) == pytest.approx(16 / 36)
    assert cap.predicted_bubble_ratio(K, T, TB, R, 4.0) == 0.0  # at μ_min
    assert cap.predicted_bubble_ratio(K, T, TB, R, 8.0) == 0.0
    assert cap.predicted_bubble_ratio(K, T, TB, R, 0.0) == 1.0  # empty pool: the learner only waits
    assert cap.cycle_time_s(K, T, TB, R, 0.0) == math.inf


def test_staleness_bound_conservative_hand_values():
    # κ + ⌈(T_b + R/μ)/T⌉ − 1 = 2 + ⌈(4 + 8)/10⌉ − 1 = 3
    assert cap.staleness_bound_conservative(K, T, TB, R, 4.0) == 3
    # (12 + 8)/10 = 2 exactly → 2 + 2 − 1 = 3
    assert cap.staleness_bound_conservative(K, T, 12.0, R, 4.0) == 3
    # (0.1 + 0.2)/0.1 is 3.0000000000000004 in floating point: still ⌈3⌉ = 3
    assert cap.staleness_bound_conservative(4, 0.1, 0.1, 2, 10.0) == 4 + 3 - 1
    assert cap.staleness_bound_conservative(K, T, TB, R, 0.0) == math.inf


def test_staleness_bound_tight_hand_values():
    assert cap.staleness_bound_tight(2, 10.0, 4.0) == 2 + 1  # ⌈0.5·0.4⌉ = 1
    assert cap.staleness_bound_tight(2, 10.0, 0.0) == 2
    assert cap.staleness_bound_tight(5, 60.0, 40.0) == 5 + 1  # ⌈0.8·2/3⌉ = 1
    assert cap.staleness_bound_tight(5, 120.0, 160.0) == 5 + 2  # ⌈0.8·4/3⌉ = 2
    # (1 − 1/3)·30/10 is 2.0000000000000004 in floating point: ⌈2⌉ = 2, not 3
    assert cap.staleness_bound_tight(3, 10.0, 30.0) == 3 + 2
    assert cap.max_t_bcast_s(3, 2, 10.0) == 20.0  # (S − κ)·T·κ/(κ − 1)


def test_choose_kappa_default_is_s_minus_1_when_the_bound_fits():
    assert cap.choose_kappa(3, 60.0, 40.0) == 2
    assert cap.choose_kappa(6, 60.0, 40.0) == 5
    assert cap.choose_kappa(4, 10.0, 0.0) == 3


def test_choose_kappa_lowers_kappa_until_the_bound_fits():
    # κ = 5: 5 + ⌈0.8·160/120⌉ = 7 > 6; κ = 4: 4 + ⌈0.75·4/3⌉ = 5 ≤ 6
    assert cap.choose_kappa(6, 120.0, 160.0) == 4


def test_choose_kappa_explicit_value():
    assert cap.choose_kappa(3, 10.0, 0.0, kappa=3) == 3
    with pytest.raises(PlanningError, match="drop --kappa"):
        cap.choose_kappa(3, 10.0, 1.0, kappa=3)  # 3 + ⌈(2/3)·0.1⌉ = 4 > 3
    with pytest.raises(ConfigError, match="2 ≤ κ ≤ S"):
        cap.choose_kappa(3, 10.0, 1.0, kappa=1)


def test_no_kappa_fits_error_names_what_to_change():
    # S = 3, κ = 2: 2 + ⌈0.5·25/10⌉ = 4 > 3
    with pytest.raises(PlanningError) as err:
        cap.choose_kappa(3, 10.0, 25.0)
    msg = str(err.value)
    assert "S to ≥ 4" in msg and "T_bcast to ≤ 20 s" in msg and "T_train to ≥ 12.5 s" in msg
    # S = 2 leaves no slack at all: only an instantaneous broadcast fits
    with pytest.raises(PlanningError, match="S to ≥ 3.*instantaneous"):
        cap.choose_kappa(2, 10.0, 1.0)
    with pytest.raises(ConfigError, match="S ≥ 2"):
        cap.choose_kappa(1, 10.0, 1.0)


@pytest.mark.parametrize("call, match", [
    (lambda: cap.mu_min(2, 0.0, 1.0, 8), "T_train=0.0"),
    (lambda: cap.mu_min(2, 10.0, -1.0, 8), "T_bcast=-1.0"),
    (lambda: cap.mu_min(0, 10.0, 1.0, 8), "κ=0"),
    (lambda: cap.mu_min(2, 10.0, 1.0, 0), "R=0"),
    (lambda: cap.overlap_holds(2, 10.0, 1.0, 8, -1.0), "μ_pool=-1.0"),
    (lambda: cap.predicted_bubble_ratio(2, 10.0, 1.0, 8, float("nan")), "μ_pool=nan"),
])
def test_invalid_inputs_say_what_and_the_value(call, match):
    with pytest.raises(ValueError, match=match):
        call()
