"""Pool files, ρ = c/μ and greedy / random activation."""

import math
import random
from pathlib import Path

import pytest

from echo2_sdk.config_loader import ConfigError
from echo2_sdk.runtime.planning.activation import activate_greedy, activate_random, rho
from echo2_sdk.runtime.planning.poolfile import WorkerOffer, load_pool, parse_pool, pool_to_yaml

POOLS = Path(__file__).resolve().parent.parent / "examples" / "pools"


def offer(name, mu, c, gpu="RTX5090"):
    return WorkerOffer(name, gpu, mu, c)


# ρ: a 1, b 2, c 3, e 4; d has μ = 0 (ρ = inf) and costs nothing
POOL = [offer("a", 1.0, 1.0), offer("b", 2.0, 4.0), offer("c", 1.0, 3.0), offer("d", 0.0, 0.0), offer("e", 4.0, 16.0)]


def test_rho_hand_values_and_zero_throughput():
    assert rho(1.0, 2.0) == 0.5
    assert rho(0.65, 0.5) == pytest.approx(1.3)
    assert rho(0.0, 0.0) == math.inf  # a worker that delivers nothing is never worth it, even for free
    assert rho(1.0, 0.0) == math.inf
    with pytest.raises(ValueError, match="μ=-1"):
        rho(1.0, -1.0)


def test_greedy_picks_cheapest_rho_first():
    act = activate_greedy(POOL, 2.5)
    assert act.names == ["a", "b"] and act.mu_pool == 3.0 and act.usd_per_hour == 5.0 and act.feasible
    # a, b, c reach 4 < 4.5, so e joins (8/s, $24/h); the trim then drops b and c (dearest first)
    # whose throughput is surplus: {a, e} gives 5/s for $17/h
    act = activate_greedy(POOL, 4.5)
    assert act.names == ["a", "e"] and act.mu_pool == 5.0 and act.usd_per_hour == 17.0 and act.feasible


def test_greedy_trims_workers_whose_throughput_is_surplus():
    # x (ρ 0.5) then y (ρ 1) reach 10.5 ≥ 10, but y alone already does: x is dropped
    act = activate_greedy([offer("x", 0.5, 0.25), offer("y", 10.0, 10.0)], 10.0)
    assert act.names == ["y"] and act.usd_per_hour == 10.0


def test_zero_throughput_worker_is_never_chosen():
    act = activate_greedy(POOL, 1e9)
    assert "d" not in act.names and set(act.names) == {"a", "b", "c", "e"}
    assert not act.feasible  # the pool cannot reach the target: every capable worker, flagged


def test_boundary_targets_and_empty_pool():
    assert activate_greedy(POOL, 0.0).names == [] and activate_greedy(POOL, 0.0).feasible
    inf = activate_greedy(POOL, math.inf)  # μ_min infinite: everything capable, never feasible
    assert len(inf.names) == 4 and not inf.feasible
    empty = activate_greedy([], 1.0)
    assert empty.names == [] and empty.mu_pool == 0 and not empty.feasible
    with pytest.raises(ValueError, match="NaN"):
        activate_greedy(POOL, float("nan"))


def test_random_activation_reaches_the_same_target_reproducibly():
    pool = [offer(f"w{i}", 0.5 + (i % 3) * 0.5, 0.3 + i * 0.1) for i in range(30)]
    first = activate_random(pool, 5.0, random.Random(7))
    again = activate_random(pool, 5.0, random.Random(7))
    assert first.names == again.names and first.feasible and first.mu_pool >= 5.0
    greedy = activate_greedy(pool, 5.0)
    assert greedy.usd_per_hour <= first.usd_per_hour
    assert "d" not in activate_random(POOL, 100.0, random.Random(0)).names


def test_pool_file_round_trip_and_examples(tmp_path):
    path = tmp_path / "pool.yaml"
    pool = [WorkerOffer("w1", "RTX4090", 0.25, 0.35, 500.0, 1000.0), WorkerOffer("w2", "A100", 0.55, 1.8)]
    path.write_text(pool_to_yaml(pool))
    assert list(load_pool(str(path))) == pool
    mixed = load_pool(str(POOLS / "mixed.yaml"))
    assert len(mixed) == 72 and {o.gpu for o in mixed} == {"RTX4090", "RTX5090", "A100", "H100"}
    small = load_pool(str(POOLS / "small.yaml"))
    assert any(o.rollouts_per_s == 0 for o in small)


@pytest.mark.parametrize("entries, match", [
    ({"name": "w"}, "a YAML list of workers"),
    ([{"name": "w", "gpu": "A100", "rollouts_per_s": 1, "usd_per_hr": 1}], "Did you mean 'pool\\[0\\].usd_per_hour'"),
    ([{"name": "w", "gpu": "A100", "rollouts_per_s": -1, "usd_per_hour": 1}], "rollouts_per_s=-1"),
    ([{"name": "w", "gpu": "A100", "rollouts_per_s": 1, "usd_per_hour": 1, "uplink_mbps": 0}], "uplink_mbps=0"),
    ([{"name": "w", "gpu": "A100", "rollouts_per_s": 1, "usd_per_hour": 1}] * 2, "repeats entry 0"),
    ([{"name": "w", "gpu": "A100", "rollouts_per_s": "fast", "usd_per_hour": 1}], "expected a number"),
])
def test_pool_file_errors_name_the_entry_and_the_fix(entries, match):
    with pytest.raises(ConfigError, match=match):
        parse_pool(entries)


def test_missing_pool_file():
    with pytest.raises(ConfigError, match="does not exist"):
        load_pool("/nonexistent/pool.yaml")
