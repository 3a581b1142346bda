"""The pool simulator: the knee of eq. 2, S through the real ReplayBuffer admission, the closed loop, dollars."""

import dataclasses
from pathlib import Path

import pytest

from echo2_sdk.config_loader import ConfigError
from echo2_sdk.runtime.learning import buffer as buffer_module
from echo2_sdk.runtime.planning import capacity
from echo2_sdk.runtime.planning.bcast_model import broadcast_time_s
from echo2_sdk.runtime.planning.poolfile import WorkerOffer
from echo2_sdk.runtime.planning.simconfig import (
    BroadcastSpec, LearnerSpec, PoolSpec, SimulateConfig, build_offers, load_simulate_config,
)
from echo2_sdk.runtime.planning.simulator import Simulation

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"
PRICES = {"A100": 1.8}
# T_train 60 s, T_bcast 40 s, R = 256, μ = 0.5/worker: μ_min = 6.4 (S=3, κ=2) → knee 13; 4.92 (S=6, κ=5) → 10
LEARNER = LearnerSpec(t_train_s=60.0, rollouts_per_step=256, samples_per_group=8, steps=40)


def homogeneous(n, mu=0.5, c=0.65):
    return [WorkerOffer(f"w{i:02d}", "RTX5090", mu, c) for i in range(n)]


def run(n, staleness=3, kappa=None, t_bcast=40.0, overlap=False, seed=0, steps=40):
    cfg = SimulateConfig(seed=seed, learner=dataclasses.replace(LEARNER, staleness=staleness, kappa=kappa, steps=steps),
                         broadcast=BroadcastSpec(t_bcast_s=t_bcast, generate_during_broadcast=overlap),
                         pool=PoolSpec(activate="all"))
    sim = Simulation(cfg, homogeneous(n), PRICES)
    return sim, sim.run()["summary"]


@pytest.mark.parametrize("staleness, kappa, knee", [(3, 2, 13), (6, 5, 10)])
def test_bubble_knee_is_where_eq2_puts_it(staleness, kappa, knee):
    mu_min = capacity.mu_min(kappa, 60.0, 40.0, 256)
    assert knee == -int(-mu_min // 0.5)  # ⌈μ_min/μ⌉
    below, at = run(knee - 1, staleness)[1], run(knee, staleness)[1]
    assert below["bubble_ratio"] > 0.02 and at["bubble_ratio"] <= 0.02
    # below the knee the simulated bubble follows the capacity model's prediction
    assert below["bubble_ratio"] == pytest.approx(below["predicted_bubble_ratio"], abs=0.01)
    gamma_n = -int(-1.1 * mu_min // 0.5)
    for n in (gamma_n, gamma_n + 3):
        sim, s = run(n, staleness)
        assert sim.kappa == kappa and s["bubble_ratio"] <= 0.02
        assert s["staleness_max"] <= staleness and s["staleness_max"] <= s["staleness_bound_tight"]


def test_staleness_reaches_the_learner_through_the_real_replay_buffer(monkeypatch):
    calls = []
    real = buffer_module.is_admissible
    monkeypatch.setattr(buffer_module, "is_admissible", lambda *a: calls.append(a) or real(*a))
    # Workers keep generating during a long broadcast (T_bcast 100 s > T_train 60 s); κ = 2 for both.
    # With S = 3 the groups made under the old snapshot age out of the buffer before they are used;
    # S = 6 admits them longer, so the same 12 workers keep the learner busy.
    sim3, s3 = run(12, staleness=3, kappa=2, t_bcast=100.0, overlap=True)
    sim6, s6 = run(12, staleness=6, kappa=2, t_bcast=100.0, overlap=True)
    assert isinstance(sim3.buffer, buffer_module.ReplayBuffer) and calls
    assert s3["groups_dropped_stale"] > 0 and s3["bubble_ratio"] > 0.05
    assert s6["bubble_ratio"] <= 0.02 < s3["bubble_ratio"]
    assert s3["staleness_max"] <= 3 and s6["staleness_max"] <= 6


def test_same_seed_same_run_and_noise_matters():
    a, b, c = run(12, seed=1)[1], run(12, seed=1)[1], run(12, seed=2)[1]
    assert a["bubble_ratio"] == b["bubble_ratio"] and a["sim_time_s"] == b["sim_time_s"]
    assert a["sim_time_s"] != c["sim_time_s"]


def test_closed_loop_replaces_preempted_workers():
    offers = [WorkerOffer(f"c{i}", "RTX4090", 0.5, 0.35) for i in range(16)] + \
             [WorkerOffer(f"d{i}", "H100", 1.0, 2.9) for i in range(6)]
    cfg = SimulateConfig(learner=dataclasses.replace(LEARNER, steps=60),
                         pool=PoolSpec(preempt_per_hour=1.0, heartbeat_interval_s=15.0, activation_delay_s=20.0))
    result = Simulation(cfg, offers, PRICES).run()
    s, decisions = result["summary"], result["decisions"]
    lost = [d for d in decisions if d["action"] == "lost" and "was active" in d["reason"]]
    replaced = [d for d in decisions if d["action"] == "activate" and "replacing lost capacity" in d["reason"]]
    assert s["preemptions"] > 0 and lost and replaced
    # a replacement happens in the very tick that detects the loss (when the loss drops μ_pool below target)
    assert {d["t_s"] for d in replaced} <= {d["t_s"] for d in lost}
    assert s["steps"] == 60 and s["bubble_ratio"] < 0.15
    first = [d["worker"] for d in decisions if d["t_s"] == 0.0]
    assert all(w.startswith("c") for w in first)  # cost-aware: the cheap class first


def test_dollars_of_a_static_pool():
    sim, s = run(14, steps=20)
    hours = s["sim_time_s"] / 3600
    assert s["usd_pool"] == pytest.approx(14 * 0.65 * hours)
    assert s["usd_learner"] == pytest.approx(8 * 1.8 * hours)
    assert s["machines_mean"] == pytest.approx(14)
    assert s["usd_per_accepted_sample"] > 0


def test_empty_pool_stalls_without_crashing():
    for activate in ("all", "scheduler"):
        cfg = SimulateConfig(learner=dataclasses.replace(LEARNER, steps=3, t_train_s=10.0), pool=PoolSpec(activate=activate))
        s = Simulation(cfg, [], PRICES).run()["summary"]
        assert s["stalled"] and s["steps"] == 0


def test_broadcast_model_star_grows_with_n_chain_does_not():
    kw = dict(snapshot_gb=8.0, learner_uplink_mbps=10000.0, worker_mbps=1000.0, hop_latency_s=0.0)
    assert broadcast_time_s("chain", 1, **kw) == pytest.approx(64.0)  # G/Bw = 64000 Mb / 1000 Mb/s
    assert broadcast_time_s("star", 50, **kw) == pytest.approx(50 * 64000 / 10000)  # N·G/B0
    assert broadcast_time_s("chain", 50, **kw) < 66.0
    assert broadcast_time_s("fixed", 50, fixed_t_bcast_s=7.0, **kw) == 7.0


def test_example_configs_load_and_errors_suggest_the_key(tmp_path):
    for name in ("simulate_fig3c.yaml", "simulate_table2.yaml", "simulate_scale.yaml"):
        cfg = load_simulate_config(str(EXAMPLES / name))
        assert cfg.prices_file and Path(cfg.prices_file).exists()
    cfg = load_simulate_config(str(EXAMPLES / "simulate_table2.yaml"), ["learner.steps=5"])
    assert cfg.learner.steps == 5 and len(build_offers(cfg)) == 72
    assert len(build_offers(load_simulate_config(str(EXAMPLES / "simulate_scale.yaml")))) == 1000
    bad = tmp_path / "bad.yaml"
    bad.write_text("learner:\n  stalenes: 3\n")
    with pytest.raises(ConfigError, match="Did you mean 'learner.staleness'"):
        load_simulate_config(str(bad))
    bad.write_text("learner:\n  rollouts_per_step: 100\n  samples_per_group: 8\n")
    with pytest.raises(ConfigError, match="multiple of"):
        load_simulate_config(str(bad))


def test_pause_windows_push_generation_past_broadcasts():
    from echo2_sdk.runtime.planning.simparts import PauseWindows

    w = PauseWindows()
    w.add(10.0, 20.0)
    w.add(30.0, 35.0)
    assert w.finish_time(0.0, 5.0) == 5.0  # done before the first broadcast
    assert w.finish_time(5.0, 10.0) == 25.0  # 5 s before, paused 10 s, 5 s after
    assert w.finish_time(12.0, 12.0) == 37.0  # starts inside a window: 10 s after it, paused again 5 s
    assert w.paused(0.0, 40.0) == 15.0 and w.paused(15.0, 32.0) == 7.0
    with pytest.raises(ValueError, match="overlaps"):
        w.add(34.0, 40.0)


def test_a_simulation_runs_once():
    sim, _ = run(12, steps=5)
    with pytest.raises(RuntimeError, match="runs once"):
        sim.run()
