"""The cost-aware pool in the Ray runtime: PoolController on a fake pool, dollar fields, config errors,
and (slow) a real CPU run where an active worker is killed and the scheduler replaces it."""

import json
import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from echo2_sdk.config import ConfigError, WorkerSpec, load_config, resolve_workers
from echo2_sdk.scheduler_config import PoolSchedulerConfig
from echo2_sdk.runtime.planning.scheduler import PoolScheduler, SchedulerConfig
from echo2_sdk.runtime.planning.control import PoolController, offers_from_specs

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"


@dataclass
class FakeSlot:
    name: str
    spec: WorkerSpec
    active: bool = False
    dead: bool = False
    lost: bool = False


@dataclass
class FakePool:
    """Records what the controller asks of it, like RolloutPool's scheduler-facing methods."""

    slots: list
    calls: list = field(default_factory=list)
    stuck: set = field(default_factory=set)
    stall_timeouts: list = field(default_factory=list)

    def _slot(self, name):
        return next(s for s in self.slots if s.name == name)

    def activate(self, name):
        self.calls.append(("activate", name))
        self._slot(name).active = True
        return "started"

    def release(self, name):
        self.calls.append(("release", name))
        self._slot(name).active = False
        return "stopped"

    def mark_lost(self, name):
        self.calls.append(("lost", name))
        slot = self._slot(name)
        slot.active, slot.lost = False, True
        return "out"

    def alive_names(self, stall_timeout_s=None):
        """Like RolloutPool: ``stuck`` workers (work queued, nothing finished) count as silent when
        the caller gives a stall timeout."""
        hung = {s.name for s, _ in self.hung(stall_timeout_s)}
        return [s.name for s in self.slots if not s.dead and not s.lost and s.name not in hung]

    def hung(self, stall_timeout_s, now=None):
        self.stall_timeouts.append(stall_timeout_s)
        return [(s, why) for s in self.slots if (why := self.why_hung(s, stall_timeout_s, now))]

    def why_hung(self, slot, stall_timeout_s, now):
        stuck = stall_timeout_s is not None and slot.name in self.stuck and not slot.dead and not slot.lost
        return f"no request finished for over {stall_timeout_s:g} s" if stuck else ""


# κ = 2, R = 16, T_train prior 1 s, T_bcast 0 → μ_min = 2·16/(2·1) = 16/s; γ = 1.25 → μ_target = 20/s
SPECS = [
    WorkerSpec("cheap", gpu="RTX4090", rollouts_per_s=12.0, usd_per_hour=0.36),  # ρ 0.03
    WorkerSpec("mid", gpu="RTX5090", rollouts_per_s=10.0, usd_per_hour=0.50),  # ρ 0.05
    WorkerSpec("dear", gpu="A100", rollouts_per_s=30.0, usd_per_hour=3.00),  # ρ 0.10
    WorkerSpec("tabled", gpu="L4", rollouts_per_s=8.0),  # price from the table: 0.72 → ρ 0.09
]
PRICES = {"A100": 2.0, "L4": 0.72}
CFG = PoolSchedulerConfig(enabled=True, gamma=1.25, heartbeat_interval_s=1.0, heartbeat_timeout_s=3.0,
                          sustain_s=5.0, release_margin=0.2, t_train_estimate_s=1.0, learner_gpu="A100",
                          learner_gpus=1, prices=PRICES)


def controller(tmp_path, cfg=CFG, specs=SPECS):
    pool = FakePool([FakeSlot(s.name, s) for s in specs])
    offers = offers_from_specs(specs, PRICES, max_new_tokens=8)
    ctl = PoolController(pool, offers, kappa=2, rollouts_per_step=16, config=cfg, prices=PRICES,
                         decisions_path=tmp_path / "decisions.jsonl", log=lambda m: None)
    return ctl, pool


def read_log(tmp_path):
    return [json.loads(line) for line in (tmp_path / "decisions.jsonl").read_text().splitlines()]


def test_offers_take_priors_from_rollouts_per_s_or_the_token_cap_and_prices_from_the_table():
    offers = offers_from_specs([WorkerSpec("a", max_tokens_per_s=80.0, gpu="cpu"),
                                WorkerSpec("b", rollouts_per_s=3.0, gpu="L4", usd_per_hour=None)],
                               {"cpu": 0.05, "L4": 0.72}, max_new_tokens=8)
    assert [(o.rollouts_per_s, o.usd_per_hour) for o in offers] == [(10.0, 0.05), (3.0, 0.72)]
    with pytest.raises(ValueError, match="no price for gpu 'H100'"):
        offers_from_specs([WorkerSpec("c", rollouts_per_s=1.0, gpu="H100")], {}, max_new_tokens=8)


def test_start_activates_the_cheapest_workers_on_the_pool_and_logs_why(tmp_path):
    ctl, pool = controller(tmp_path)
    decisions = ctl.start(0.0)
    # greedy by ρ: cheap (12/s) + mid (10/s) = 22/s ≥ 20/s; the trim keeps both
    assert pool.calls == [("activate", "cheap"), ("activate", "mid")]
    assert [d.action for d in decisions] == ["activate", "activate"]
    log = read_log(tmp_path)
    assert [(e["action"], e["worker"], e["applied"]) for e in log] == [
        ("activate", "cheap", "started"), ("activate", "mid", "started")]
    assert all("initial plan" in e["reason"] and "ρ=" in e["reason"] for e in log)
    assert log[0]["mu_target"] == pytest.approx(20.0)


def test_a_dead_worker_is_lost_after_the_deadline_then_replaced(tmp_path):
    ctl, pool = controller(tmp_path)
    ctl.start(0.0)
    for t in (1.0, 2.0):
        assert ctl.tick(t) == []
    pool._slot("mid").dead = True  # its actor died at t = 2.5: no more heartbeats
    for t in (3.0, 4.0, 5.0):
        assert ctl.tick(t) == []
    assert ctl.tick(5.5) == []  # within the heartbeat interval: no round
    out = ctl.tick(6.0)  # 4 s since its last heartbeat (t = 2) > 3 s deadline
    assert [(d.action, d.worker) for d in out] == [("lost", "mid"), ("activate", "tabled")]
    assert "no heartbeat for 4 s" in out[0].reason and "was active" in out[0].reason
    assert "replacing lost capacity" in out[1].reason
    assert pool.calls[-2:] == [("lost", "mid"), ("activate", "tabled")]
    assert [e["action"] for e in read_log(tmp_path)] == ["activate", "activate", "lost", "activate"]
    assert ctl.summary()["workers_lost"] == ["mid"]


def test_a_hung_worker_leaves_at_once_and_is_replaced(tmp_path):
    ctl, pool = controller(tmp_path)
    ctl.start(0.0)
    assert ctl.tick(1.0) == [] and ctl.tick(2.0) == []
    pool.stuck.add("mid")  # its actor lives (a stopped process), but nothing it was given comes back
    out = ctl.tick(3.0)
    # Declared at the first round it reads hung, not one heartbeat deadline later: a stopped process
    # never misses a heartbeat, and waiting for the deadline on top let a 60 s stop pass unnoticed.
    assert [(d.action, d.worker) for d in out] == [("leave", "mid"), ("activate", "tabled")]
    assert "hung" in out[0].reason and pool.calls[-2:] == [("lost", "mid"), ("activate", "tabled")]
    assert ctl.tick(4.0) == []  # out of the pool: not declared again
    assert CFG.heartbeat_timeout_s in pool.stall_timeouts  # no rollout stall timeout given: the deadline


def test_the_pool_counts_a_worker_with_work_but_no_progress_as_silent():
    from echo2_sdk.runtime.rollout.pool import RolloutPool, WorkerSlot

    pool = RolloutPool.__new__(RolloutPool)  # only the bookkeeping: no Ray, no actors
    now = time.perf_counter()
    pool.slots = [
        WorkerSlot("stuck", object(), WorkerSpec("stuck"), inflight=["req"], last_progress=now - 30),
        WorkerSlot("busy", object(), WorkerSpec("busy"), inflight=["req"], last_progress=now - 1),
        WorkerSlot("idle", object(), WorkerSpec("idle"), inflight=[], last_progress=now - 30),
        WorkerSlot("dead", object(), WorkerSpec("dead"), inflight=["req"], last_progress=now - 1, dead=True),
    ]
    assert pool.alive_names() == ["stuck", "busy", "idle"]
    assert pool.alive_names(stall_timeout_s=10.0) == ["busy", "idle"]
    pool.slots[0].slowest_request_s = 8.0  # a slow model: 30 s without a result is under 5x its slowest request
    assert pool.alive_names(stall_timeout_s=10.0) == ["stuck", "busy", "idle"]


def test_measured_surplus_releases_the_dearest_worker_after_the_sustain_window(tmp_path):
    ctl, pool = controller(tmp_path)
    ctl.start(0.0)
    for t in range(1, 12):  # both active workers measure 40/s: μ_pool 80/s > 1.2 · 20/s
        ctl.on_result("cheap", 40, 1.0)
        ctl.on_result("mid", 40, 1.0)
        out = ctl.tick(float(t))
        if out:
            break
    assert [(d.action, d.worker) for d in out] == [("release", "mid")]  # ρ̂ mid 0.0125 > cheap 0.009
    assert t == 6  # above since t = 1, sustain 5 s
    assert pool.calls[-1] == ("release", "mid") and not pool._slot("mid").active


def test_cost_fields_match_hand_computed_dollars(tmp_path):
    ctl, pool = controller(tmp_path)
    ctl.start(0.0)  # learner A100 at $2/h + cheap $0.36/h + mid $0.50/h = $2.86/h
    row = ctl.on_step(360.0, 1.0, accepted_samples=16, reward_mean=0.2)  # 0.1 h
    assert row["cost_step_usd"] == pytest.approx(0.286)
    assert row["cost_usd"] == pytest.approx(0.286)
    assert row["usd_per_accepted_sample"] == pytest.approx(0.286 / 16)
    assert row["usd_per_reward_point"] is None  # no gain yet
    assert row["pool_usd_per_hour"] == pytest.approx(2.86) and row["pool_active_workers"] == 2
    pool._slot("mid").dead = True  # a dead actor is not billed from then on
    row = ctl.on_step(720.0, 1.0, accepted_samples=16, reward_mean=0.3)  # 0.1 h at $2.36/h
    assert row["cost_step_usd"] == pytest.approx(0.236)
    assert row["cost_usd"] == pytest.approx(0.522)
    assert row["usd_per_accepted_sample"] == pytest.approx(0.522 / 32)
    assert row["usd_per_reward_point"] == pytest.approx(0.522 / 10.0)  # +0.1 reward = 10 points
    summary = ctl.summary()
    assert summary["usd_by_gpu"]["A100"] == pytest.approx(0.4)
    assert summary["gpu_hours"]["RTX5090"] == pytest.approx(0.1)


def test_activation_between_steps_is_charged_from_its_start(tmp_path):
    cfg = PoolSchedulerConfig(enabled=True, gamma=1.25, heartbeat_interval_s=1.0, heartbeat_timeout_s=3.0,
                              sustain_s=0.0, t_train_estimate_s=1.0, learner_gpus=0, prices=PRICES)
    ctl, pool = controller(tmp_path, cfg=cfg)
    ctl.start(0.0)  # cheap + mid: $0.86/h
    ctl.on_result("cheap", 1, 1.0)  # measured μ: cheap 1/s, mid 1/s → far below 20/s
    ctl.on_result("mid", 1, 1.0)
    out = ctl.tick(1800.0)  # half an hour in: deficit 18/s, activated at once (sustain 0)
    # greedy by ρ: tabled (8/s) then dear (30/s); the trim drops tabled (dear alone covers 18/s)
    assert [(d.action, d.worker) for d in out] == [("activate", "dear")]
    row = ctl.on_step(3600.0, 1.0, accepted_samples=1, reward_mean=None)
    # 0.5 h at $0.86/h, then 0.5 h at 0.86 + 3.00 = $3.86/h
    assert row["cost_step_usd"] == pytest.approx(0.5 * 0.86 + 0.5 * 3.86)


def test_broadcast_time_raises_mu_target(tmp_path):
    ctl, _ = controller(tmp_path)
    ctl.start(0.0)
    ctl.on_step(1.0, 1.0, 0, None)  # the first measured step replaces the prior (1 s)
    before = ctl.scheduler.mu_target
    ctl.on_broadcast(1.0)  # EMA α = 0.3: T_bcast 0.3 s → μ_min = 32/(2 − 0.3)
    assert ctl.scheduler.t_bcast_s == pytest.approx(0.3)
    assert ctl.scheduler.mu_target == pytest.approx(1.25 * 32 / 1.7) and ctl.scheduler.mu_target > before


# ---------------------------------------------------------------- config
ON = ["scheduler.enabled=true", "scheduler.prices={A100: 1.6, cpu: 0.05}"]


def test_scheduler_config_defaults_off_and_loads():
    assert load_config(None).scheduler.enabled is False
    cfg = load_config(None, ON + ["rollout.workers=[{name: a, max_tokens_per_s: 80}, {name: b, rollouts_per_s: 2, usd_per_hour: 0.2}]"])
    assert cfg.scheduler.prices == {"A100": 1.6, "cpu": 0.05} and cfg.rollout.workers[1].rollouts_per_s == 2.0


@pytest.mark.parametrize("overrides, message", [
    (["runtime.scheduler=random"], r"runtime.scheduler='random' is not a config key.*policy: random"),
    (["scheduler.policy=nocost"], r"scheduler.policy: 'nocost' is not one of \['cost', 'random'\]"),
    (["scheduler.heartbeat_interval_s=5", "scheduler.heartbeat_timeout_s=5"], r"heartbeat_timeout_s=5.0 must be > heartbeat_interval_s"),
    (["scheduler.gamma=0.9"], r"scheduler.gamma=0.9 must be ≥ 1"),
    (["scheduler.prices={A100: -1}"], r"scheduler.prices.A100: price -1 must be a number ≥ 0"),
    (["scheduler.prices=/nonexistent/prices.yaml", "scheduler.enabled=true"], r"scheduler.prices file '/nonexistent/prices.yaml' does not exist"),
    (ON + ["rollout.workers=[{name: a, gpu: H100, max_tokens_per_s: 80}]"], r"worker 'a': no price.*'H100'.*known: A100, cpu"),
    (ON + ["rollout.workers=[{name: a, usd_per_hour: 0.1}]"], r"worker 'a': the scheduler needs a throughput prior"),
    (ON + ["scheduler.learner_gpu=H100", "rollout.workers=[{name: a, max_tokens_per_s: 80}]"], r"learner_gpu='H100' has no price.*learner_gpus=0"),
    (ON + ["runtime.mode=sync", "rollout.workers=[{name: a, max_tokens_per_s: 80}]"], r"needs runtime.mode=async"),
    (["rollout.workers=[{name: a}, {name: a}]"], r"worker name 'a' appears twice"),
    (["rollout.workers=[{name: a, max_tokens_per_s: 0}]"], r"max_tokens_per_s=0.0 must be a finite number > 0"),
    (["rollout.workers=[{name: a, rollouts_per_s: 1, usd_per_hur: 1}]"], r"Did you mean 'rollout.workers\[0\].usd_per_hour'"),
    (["rollout.workers=[{name: a}]", "rollout.pool_file=x.yaml"], r"rollout.workers and rollout.pool_file='x.yaml' are both set"),
])
def test_config_errors_say_what_and_how_to_fix(overrides, message):
    with pytest.raises(ConfigError, match=message):
        load_config(None, overrides)


def test_pool_file_and_price_file_are_read(tmp_path):
    pool = tmp_path / "pool.yaml"
    pool.write_text("- {name: w1, gpu: RTX4090, rollouts_per_s: 0.25, usd_per_hour: 0.35, uplink_mbps: 500}\n"
                    "- {name: w2, gpu: L4, rollouts_per_s: 0.2}\n")
    prices = tmp_path / "prices.yaml"
    prices.write_text("A100: 1.6\nL4: 0.7\n")
    cfg = load_config(None, [f"rollout.pool_file={pool}", f"scheduler.prices={prices}", "scheduler.enabled=true"])
    assert [w.name for w in resolve_workers(cfg)] == ["w1", "w2"] and resolve_workers(cfg)[0].uplink_mbps == 500
    pool.write_text("- {name: w1, rollouts_per_s: 1, gpu: cpu, colour: red}\n")
    with pytest.raises(ConfigError, match=r"unknown config key .*colour"):
        load_config(None, [f"rollout.pool_file={pool}"])


def test_pool_cpu_example_activates_only_some_workers_at_start():
    cfg = load_config(str(EXAMPLES / "pool_cpu.yaml"))
    assert cfg.scheduler.enabled and cfg.scheduler.policy == "cost"
    workers = resolve_workers(cfg)
    assert len(workers) >= 4 and len({w.max_tokens_per_s for w in workers}) == len(workers)
    from echo2_sdk.scheduler_config import resolve_prices

    offers = offers_from_specs(workers, resolve_prices(cfg.scheduler), cfg.rollout.max_new_tokens)
    s = PoolScheduler(offers, kappa=2, rollouts_per_step=cfg.train.prompts_per_step * cfg.rollout.samples_per_prompt,
                      t_train_s=cfg.scheduler.t_train_estimate_s, t_bcast_s=0.0,
                      config=SchedulerConfig(gamma=cfg.scheduler.gamma))
    s.start(0.0)
    assert 1 <= len(s.active) < len(workers)


# ---------------------------------------------------------------- acceptance: a real CPU run
@pytest.mark.slow
def test_killed_worker_is_replaced_within_the_window_and_the_log_says_why(tmp_path, ray_cluster):
    import ray

    from echo2_sdk.runtime.driver.trainer import Trainer

    interval, timeout = 0.5, 2.0
    cfg = load_config(None, [
        "train.steps=14", "train.prompts_per_step=4", "rollout.samples_per_prompt=4",
        "rollout.prompts_per_request=2", "rollout.max_new_tokens=4", "train.eval_max_examples=4",
        "train.checkpoint_every=0", "train.plots=false", "broadcast.transport=object_store",
        # priors: μ_target = 1.1 · 2·16/(2·1 s) = 17.6/s, so the cheapest worker alone is the initial plan. The
        # measured T_train (~0.1 s) raises μ_target to ~200/s by the time a is killed: priors of 1,000/s keep the
        # replacement one worker (at 100/s two were started at once, and the faster one could do all the work).
        "rollout.workers=[{name: a, rollouts_per_s: 1000, usd_per_hour: 0.1}, {name: b, rollouts_per_s: 1000, usd_per_hour: 0.2},"
        " {name: c, rollouts_per_s: 1000, usd_per_hour: 0.3}, {name: d, rollouts_per_s: 1000, usd_per_hour: 0.4}]",
        "scheduler.enabled=true", "scheduler.t_train_estimate_s=1.0", f"scheduler.heartbeat_interval_s={interval}",
        f"scheduler.heartbeat_timeout_s={timeout}", "scheduler.sustain_s=1000", "scheduler.prices={A100: 1.6}",
    ])
    logs = []
    trainer = Trainer(cfg, str(tmp_path / "run"), log=logs.append)
    started = {s.name for s in trainer.pool.slots if s.actor is not None}
    assert started == {"a"}  # lazy pool: only the initial plan's worker runs
    killed = {}
    on_step = trainer.controller.on_step

    def kill_at_step_4(now, *args):
        if trainer.step == 4 and not killed:
            ray.kill(trainer.pool.slot("a").actor)
            killed["t"] = time.perf_counter() - trainer.controller.t0  # the decision log's clock
        return on_step(now, *args)

    trainer.controller.on_step = kill_at_step_4
    summary = trainer.fit()

    assert summary["steps"] == 14 and killed
    log = [json.loads(line) for line in (tmp_path / "run" / "decisions.jsonl").read_text().splitlines()]
    print("\n".join(f"{e['t_s']:7.2f} {e['action']:9} {e['worker']} {e['reason']} -> {e['applied']}" for e in log))
    print("killed at", killed["t"])
    assert [(e["action"], e["worker"]) for e in log[:1]] == [("activate", "a")] and "initial plan" in log[0]["reason"]
    i_lost = next(i for i, e in enumerate(log) if e["action"] == "lost")
    lost, replacement = log[i_lost], log[i_lost + 1]
    assert lost["worker"] == "a" and "no heartbeat" in lost["reason"] and "was active" in lost["reason"]
    assert replacement["action"] == "activate" and "replacing lost capacity" in replacement["reason"]
    assert replacement["worker"] in {"b", "c", "d"} and replacement["applied"].startswith("started actor, installing v")
    latency = replacement["t_s"] - killed["t"]
    assert timeout - interval <= latency <= timeout + 2 * interval + 1.0, latency
    print(f"kill→replacement latency {latency:.2f} s (timeout {timeout} s, interval {interval} s)")
    installed_v = int(replacement["applied"].rsplit("v", 1)[1])
    workers = {w["name"]: w for w in summary["workers"]}
    assert workers["a"]["dead"] and workers["a"]["lost"]
    assert workers[replacement["worker"]]["samples"] > 0 and workers[replacement["worker"]]["last_version"] >= installed_v
    # The killed worker's queued requests are counted lost in flight (failed or abandoned), and every sample balances.
    acc = summary["accounting"]
    assert acc["balanced"] and acc["by_worker"]["a"]["lost_in_flight"] > 0, acc
    rows = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    costs = [r["cost_usd"] for r in rows]
    assert all(c > 0 for c in costs) and costs == sorted(costs)
    assert summary["pool"]["cost_usd"] == pytest.approx(costs[-1])
    assert summary["pool"]["decisions"]["lost"] == 1 and any("pool t=" in m and "lost a" in m for m in logs)
