"""Dollar accounting: Cost = Σ_g p_g · GPU-hours_g, per step, per accepted sample, per reward point."""

from pathlib import Path

import pytest

from echo2_sdk.config_loader import ConfigError
from echo2_sdk.runtime.planning.cost import CostMeter, Resource, load_prices, parse_prices

PRICES = {"A100": 1.8, "RTX5090": 0.65}
LEARNER = [Resource("A100", 8)]


def test_cost_is_price_times_gpu_hours_per_class():
    m = CostMeter(PRICES)
    usd = m.advance(3600.0, LEARNER + [Resource("RTX5090", 3)])
    assert usd == pytest.approx(8 * 1.8 + 3 * 0.65)  # 14.4 + 1.95
    assert m.gpu_hours == {"A100": 8.0, "RTX5090": 3.0}
    assert m.usd_by_gpu == pytest.approx({"A100": 14.4, "RTX5090": 1.95})
    m.advance(5400.0, [Resource("RTX5090", 1, usd_per_hour=0.5)])  # a worker's own c_i overrides the table
    assert m.cost_usd == pytest.approx(16.35 + 0.25)


def test_step_rows_per_step_cumulative_and_per_sample():
    m = CostMeter(PRICES)
    row = m.step(1800.0, LEARNER, accepted_samples=100)  # half an hour of 8 A100s = $7.2
    assert row["cost_step_usd"] == pytest.approx(7.2) and row["cost_usd"] == pytest.approx(7.2)
    assert row["usd_per_accepted_sample"] == pytest.approx(0.072)
    m.charge_between_steps(2700.0, LEARNER + [Resource("RTX5090", 4)])  # a worker released mid-step
    row = m.step(3600.0, LEARNER, accepted_samples=300)
    assert row["cost_step_usd"] == pytest.approx(3.6 + 0.65 + 3.6)
    assert row["cost_usd"] == pytest.approx(7.2 + 7.85)
    assert row["usd_per_accepted_sample"] == pytest.approx(15.05 / 400)


def test_usd_per_reward_point():
    m = CostMeter(PRICES)
    assert m.step(3600.0, LEARNER, reward_mean=0.20)["usd_per_reward_point"] is None  # no gain yet
    row = m.step(7200.0, LEARNER, reward_mean=0.50)  # +30 points for $28.8
    assert row["usd_per_reward_point"] == pytest.approx(28.8 / 30)
    assert m.step(7200.0, LEARNER, reward_mean=0.10)["usd_per_reward_point"] is None  # regression: no rate


def test_errors_name_the_missing_price_and_the_fix():
    m = CostMeter(PRICES)
    with pytest.raises(ConfigError, match="no price for GPU class 'H100'.*known: A100, RTX5090"):
        m.advance(10.0, [Resource("H100", 1)])
    m.advance(10.0, [])
    with pytest.raises(ValueError, match="time went backwards"):
        m.advance(5.0, [])
    with pytest.raises(ConfigError, match="price -1"):
        parse_prices({"A100": -1})
    with pytest.raises(ConfigError, match="maps GPU class"):
        parse_prices([1.8])


def test_example_price_table_loads():
    prices = load_prices(str(Path(__file__).resolve().parent.parent / "examples" / "pools" / "prices.yaml"))
    assert {"A100", "H100", "RTX5090", "RTX4090"} <= set(prices)
    with pytest.raises(ConfigError, match="does not exist"):
        load_prices("/nonexistent/prices.yaml")
