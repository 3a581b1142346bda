"""The closed-loop PoolScheduler, driven the way a driver loop drives it: heartbeats, ticks, time passed in."""

import math

import pytest

from echo2_sdk.runtime.planning.poolfile import WorkerOffer
from echo2_sdk.runtime.planning.scheduler import PoolScheduler, SchedulerConfig

# κ = 2, T_train = 10 s, T_bcast = 4 s, R = 32 → μ_min = 4/s; γ = 1.25 → μ_target = 5/s
PLAN = dict(kappa=2, rollouts_per_step=32, t_train_s=10.0, t_bcast_s=4.0)
CFG = SchedulerConfig(gamma=1.25, heartbeat_timeout_s=30.0, sustain_s=60.0, release_margin=0.2)


def pool():
    # ρ: cheap* 0.5, mid* 1.0, dear* 3.0
    cheap = [WorkerOffer(f"cheap{i}", "RTX4090", 1.0, 0.5) for i in range(4)]
    mid = [WorkerOffer(f"mid{i}", "RTX5090", 2.0, 2.0) for i in range(2)]
    dear = [WorkerOffer(f"dear{i}", "H100", 3.0, 9.0) for i in range(2)]
    return cheap + mid + dear


def beat_all(s, now, rates=None):
    for name in [o.name for o in pool()]:
        if name in (rates or {}) or rates is None:
            s.heartbeat(name, now, (rates or {}).get(name))


def test_start_activates_the_cheapest_workers_to_mu_target():
    s = PoolScheduler(pool(), config=CFG, **PLAN)
    assert s.mu_min == 4.0 and s.mu_target == 5.0
    decisions = s.start(0.0)
    # greedy: cheap0..3 (4/s) + mid0 = 6/s; the trim drops one cheap worker (5/s still reaches 5/s)
    assert s.active == ["cheap1", "cheap2", "cheap3", "mid0"]
    assert s.mu_pool == 5.0 and s.usd_per_hour == 3.5
    assert all(d.action == "activate" and "initial plan" in d.reason and "ρ=" in d.reason for d in decisions)
    assert s.decisions == decisions


def test_a_killed_worker_misses_its_deadline_and_is_replaced_at_once():
    s = PoolScheduler(pool(), config=CFG, **PLAN)
    s.start(0.0)  # active: cheap1..3 + mid0 = 5/s
    dead = {"mid0"}  # killed right after t = 0: it never heartbeats again
    out_by_t = {}
    for t in (10.0, 20.0, 30.0, 40.0, 50.0):
        for o in pool():
            if o.name not in dead:
                s.heartbeat(o.name, t)
        out_by_t[t] = s.tick(t)
    assert all(d.action != "lost" for t in (10.0, 20.0, 30.0) for d in out_by_t[t])  # 30 s deadline not passed
    lost, act = out_by_t[40.0][0], out_by_t[40.0][1:]
    assert (lost.action, lost.worker) == ("lost", "mid0") and "deadline 30 s" in lost.reason and "was active" in lost.reason
    # replaced in the same tick (no sustain window for lost capacity): deficit 2/s; greedy takes cheap0 then
    # mid1 by ρ, and the trim drops cheap0 (mid1 alone covers it, $2/h instead of $2.5/h)
    assert [d.worker for d in act] == ["mid1"] and "replacing lost capacity" in act[0].reason
    assert "mid0" not in s.active and s.mu_pool >= s.mu_target
    assert out_by_t[50.0] == []
    s.heartbeat("mid0", 60.0)  # the worker comes back: available, not re-activated (no deficit)
    assert s.decisions[-1].action == "recover" and "mid0" not in s.active


def test_low_throughput_activates_only_after_the_sustain_window():
    s = PoolScheduler(pool(), config=CFG, **PLAN)
    s.start(0.0)
    t, activated = 0.0, []
    while t < 100.0:
        t += 10.0
        beat_all(s, t, {o.name: (0.5 if s.is_active(o.name) else None) for o in pool()})
        activated += [d for d in s.tick(t) if d.action == "activate"]
        if t < 70.0:  # below target since t=10; the window (60 s) has not elapsed yet
            assert activated == []
    assert activated and "below μ_target for 60 s" in activated[0].reason
    # μ_pool = 4·0.5 = 2 < 5: the deficit 3 is covered by the cheapest inactive by ρ (cheap0, mid1)
    assert [d.worker for d in activated] == ["cheap0", "mid1"]


def test_hysteresis_releases_the_dearest_and_never_thrashes():
    s = PoolScheduler(pool(), config=CFG, **PLAN)
    s.start(0.0)  # cheap1..3 + mid0, planned 5/s
    # measured: the cheap workers deliver 3/s each → μ_pool = 9 + 2 = 11 > (1 + 0.2)·5
    rates = {o.name: (3.0 if o.name.startswith("cheap") else o.rollouts_per_s) for o in pool()}
    t, seen = 0.0, []
    while t < 200.0:
        t += 10.0
        beat_all(s, t, rates)
        seen += s.tick(t)
    released = [d for d in seen if d.action == "release"]
    # highest ρ̂ first: mid0 (2/2 = 1) then a cheap one (0.5/3); stop when the rest would fall below 1.1·5
    assert [d.worker for d in released] == ["mid0", "cheap1"] and released[0].t_s == 70.0
    assert s.mu_pool == pytest.approx(6.0) and s.mu_pool >= (1 + CFG.release_margin / 2) * s.mu_target
    assert not [d for d in seen if d.action == "activate"]  # a release never triggers an activation
    assert [d for d in seen if d.t_s > 70.0] == []  # steady: no more decisions


def test_t_bcast_drift_is_replanned_online():
    s = PoolScheduler(pool(), config=CFG, **PLAN)
    s.start(0.0)
    t = 0.0
    for _ in range(30):
        t += 10.0
        s.observe(t, t_bcast_s=12.0)  # broadcasts got slower: μ_min → 64/8 = 8/s
        beat_all(s, t, {o.name: o.rollouts_per_s for o in pool()})
        s.tick(t)
    assert s.t_bcast_s == pytest.approx(12.0, abs=0.01)
    assert s.mu_target == pytest.approx(1.25 * 64 / (20 - s.t_bcast_s))
    assert any(d.action == "replan" and "T_bcast 4.0→" in d.reason for d in s.decisions)
    assert s.mu_pool >= s.mu_target


def test_infinite_mu_min_activates_every_capable_worker_and_logs_the_shortfall_once():
    s = PoolScheduler(pool() + [WorkerOffer("broken", "RTX3090", 0.0, 0.1)], config=CFG,
                      kappa=2, rollouts_per_step=32, t_train_s=10.0, t_bcast_s=20.0)
    assert s.mu_target == math.inf
    out = s.start(0.0)
    assert len(s.active) == 8 and "broken" not in s.active
    assert "μ_min is infinite" in out[0].reason
    assert [d.action for d in out].count("shortfall") == 1
    for t in (60.0, 120.0, 180.0):
        beat_all(s, t)
        assert [d for d in s.tick(t) if d.action == "shortfall"] == []


def test_random_policy_is_the_nocost_ablation():
    cfg = SchedulerConfig(policy="random", gamma=1.25, seed=3)
    runs = [PoolScheduler(pool(), config=cfg, **PLAN) for _ in range(2)]
    for s in runs:
        s.start(0.0)
    assert runs[0].active == runs[1].active  # seeded
    assert runs[0].mu_pool >= runs[0].mu_target
    costs = set()
    for seed in range(12):
        s = PoolScheduler(pool(), config=SchedulerConfig(policy="random", gamma=1.25, seed=seed), **PLAN)
        s.start(0.0)
        costs.add(s.usd_per_hour)
    cheapest = PoolScheduler(pool(), config=CFG, **PLAN)
    cheapest.start(0.0)
    assert min(costs) >= cheapest.usd_per_hour and max(costs) > cheapest.usd_per_hour


def test_join_recover_leave_and_unknown_workers():
    s = PoolScheduler(pool()[:2], config=CFG, **PLAN)
    s.start(0.0)
    assert s.active == ["cheap0", "cheap1"] and s.mu_pool < s.mu_target
    s.join(WorkerOffer("late", "H100", 5.0, 5.0), 5.0)
    for t in (10.0, 40.0, 70.0):  # below target for the whole window: the newcomer is activated
        for name in ("cheap0", "cheap1", "late"):
            s.heartbeat(name, t)
        s.tick(t)
    assert "late" in s.active
    out = s.leave("cheap1", 71.0, "actor died")
    assert out[0].action == "leave" and "was active" in out[0].reason
    s.tick(72.0)
    assert "cheap1" not in s.active
    s.heartbeat("cheap1", 80.0)
    assert s.decisions[-1].action == "recover"
    with pytest.raises(KeyError, match="join\\(\\) first"):
        s.heartbeat("ghost", 1.0)
    with pytest.raises(ValueError, match="rollouts_per_s=-1"):
        s.heartbeat("late", 90.0, -1.0)


def test_config_validation():
    with pytest.raises(ValueError, match="ema_alpha=0"):
        SchedulerConfig(ema_alpha=0)
    with pytest.raises(ValueError, match="γ=0.5"):
        SchedulerConfig(gamma=0.5)
    with pytest.raises(ValueError, match="appears twice"):
        PoolScheduler(pool() + pool()[:1], **PLAN)


def test_throughput_meter_and_heartbeat_round_as_a_driver_loop_uses_them():
    from echo2_sdk.runtime.planning.heartbeat import ThroughputMeter, heartbeat_round

    meter = ThroughputMeter()
    meter.record("cheap1", 16, 8.0)
    meter.record("cheap1", 16, 8.0)
    assert meter.take_rate("cheap1") == 2.0 and meter.take_rate("cheap1") is None  # reset after a heartbeat
    with pytest.raises(ValueError, match="busy_s=-1"):
        meter.record("cheap1", 1, -1.0)
    s = PoolScheduler(pool(), config=CFG, **PLAN)
    s.start(0.0)
    names = [o.name for o in pool()]
    for t in (10.0, 20.0, 30.0, 40.0):  # mid0 is killed: it no longer reports
        for name in s.active:
            meter.record(name, 10, 10.0 / s.estimate(name))
        decisions = heartbeat_round(s, meter, [n for n in names if n != "mid0"], t)
    assert [d.action for d in decisions][:1] == ["lost"] and any(d.action == "activate" for d in decisions)
    assert s.estimate("cheap1") == pytest.approx(1.0)
