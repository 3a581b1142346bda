"""The worker supervisor (scheduler off): dead and hung workers restart with backoff, bounded, and the run
fails with one clear error only when no worker can be kept alive."""

from dataclasses import dataclass, field

import pytest

from echo2_sdk.config import WorkerSpec
from echo2_sdk.runtime.rollout.pool import RolloutPool, WorkerSlot
from echo2_sdk.runtime.rollout.supervisor import WorkerSupervisor, WorkersExhausted


@dataclass
class FakePool:
    """RolloutPool's bookkeeping with its hung/retire/restart/exhausted rules; restart only records the call."""

    slots: list
    restarted: list = field(default_factory=list)

    slot = RolloutPool.slot
    hung = RolloutPool.hung
    why_hung = RolloutPool.why_hung
    start_timeout_s = 600.0
    exhausted = RolloutPool.exhausted

    def retire(self, name):
        s = self.slot(name)
        dropped, s.inflight, s.dead, s.actor = len(s.inflight), [], True, None
        return dropped

    def restart(self, name):
        s = self.slot(name)
        self.restarted.append(name)
        s.dead, s.ready, s.actor = False, False, object()  # starting; the pool marks it ready when installed
        return "started actor, installing v3"


def pool_of(*names):
    return FakePool([WorkerSlot(n, object(), WorkerSpec(n), last_progress=0.0) for n in names])


def supervisor(pool, restarts=3, backoff_s=1.0, stall_s=10.0):
    logs = []
    return WorkerSupervisor(pool, restarts, backoff_s, stall_s, t_start=0.0, log=logs.append), logs


def test_a_dead_worker_restarts_after_the_backoff_and_its_replace_time_is_measured():
    pool = pool_of("a", "b")
    sup, logs = supervisor(pool)
    pool.slots[0].dead = True
    assert sup.check(now=10.0) == []  # noticed; the first restart waits backoff_s
    assert sup.check(now=11.0) == ["a"] and pool.restarted == ["a"]
    pool.slots[0].ready = True  # started and installed the latest snapshot
    sup.check(now=13.5)
    s = sup.summary()
    assert s["died"] == 1 and s["restarts"] == 1 and s["replace_s"]["max"] == 3.5
    assert any("worker a died" in line for line in logs) and any("back after 3.5 s" in line for line in logs)


def test_a_hung_worker_is_killed_and_restarted_but_a_slow_one_is_not():
    pool = pool_of("stopped", "slow", "idle")
    stopped, slow, idle = pool.slots
    stopped.inflight = ["r1", "r2"]
    slow.inflight, slow.slowest_request_s = ["r3"], 4.0  # 5 x 4 s = 20 s > 15 s of silence: slow, not hung
    sup, logs = supervisor(pool)
    sup.check(now=15.0)
    assert stopped.dead and not slow.dead and not idle.dead
    assert sup.summary()["hung"] == 1 and sup.summary()["requests_dropped_hung"] == 2
    assert sup.check(now=16.0) == ["stopped"]


def test_restarts_in_a_row_are_bounded_with_doubling_backoff_and_work_resets_the_count():
    pool = pool_of("a", "b")
    a = pool.slots[0]
    sup, logs = supervisor(pool, restarts=2, backoff_s=1.0)
    a.dead = True
    sup.check(now=0.0)
    assert sup.check(now=1.0) == ["a"]
    a.dead = True  # the restart failed at start
    assert sup.check(now=2.0) == []  # backoff doubled: next try at 1 + 2·2 = 5
    assert sup.check(now=5.0) == ["a"]
    a.dead = True
    assert sup.check(now=100.0) == [] and a.name in sup.summary()["given_up"]
    assert any("not restarted again" in line for line in logs)
    # A worker that delivers work after a restart starts afresh on its next failure.
    b = pool.slots[1]
    b.dead = True
    sup.check(now=200.0)
    assert sup.check(now=201.0) == ["b"]
    b.ready, b.samples = True, 64
    sup.check(now=202.0)
    b.dead = True
    sup.check(now=300.0)
    assert sup.check(now=301.0) == ["b"]  # again after backoff_s, not after the doubled one


def test_the_run_fails_with_one_error_only_when_no_worker_is_alive_and_none_may_restart():
    pool = pool_of("a")
    sup, _ = supervisor(pool, restarts=1, backoff_s=0.0)
    pool.slots[0].dead = True
    assert sup.check(now=0.0) == ["a"]  # everything down, but a restart is under way: no failure
    pool.slots[0].dead = True
    with pytest.raises(WorkersExhausted, match="every rollout worker is down.*a: died.*worker_restarts"):
        sup.check(now=1.0)


def test_zero_restarts_keeps_the_old_behaviour_of_never_restarting():
    pool = pool_of("a", "b")
    sup, _ = supervisor(pool, restarts=0)
    pool.slots[0].dead = True
    assert sup.check(now=5.0) == [] and pool.restarted == []
    pool.slots[1].dead = True
    with pytest.raises(WorkersExhausted):
        sup.check(now=6.0)


def test_a_worker_taken_out_of_the_pool_is_not_restarted():
    pool = pool_of("a", "b")
    pool.slots[0].lost, pool.slots[0].dead = True, True  # e.g. evicted by the reward audit
    sup, _ = supervisor(pool)
    assert sup.check(now=5.0) == [] and pool.restarted == []


def test_a_worker_that_hangs_while_starting_is_killed_and_restarted_and_counts_as_a_failed_try():
    pool = pool_of("a", "b")
    pool.start_timeout_s = 20.0
    a = pool.slots[0]
    a.ready, a.active_since = False, 0.0  # launched at t = 0, never up (e.g. stopped while loading)
    sup, logs = supervisor(pool, restarts=1)
    sup.check(now=19.0)
    assert not a.dead  # still within its start timeout
    sup.check(now=21.0)
    assert a.dead and sup.summary()["hung"] == 1
    assert any("not up 21 s after its launch" in line for line in logs)
    assert sup.check(now=22.0) == ["a"]
    a.ready, a.active_since = False, 22.0  # the restart hangs too: hung again, then given up (1 try)
    sup.check(now=43.0)
    assert a.dead and sup.summary()["given_up"] == ["a"]


def test_a_worker_the_pool_stopped_waiting_for_is_hung_and_restarted():
    pool = pool_of("late", "ok")
    late = pool.slots[0]
    late.overdue = "had not installed a snapshot 30 s after its peers"
    assert not RolloutPool.accepts_work(pool, late)  # no work is sent to it meanwhile
    sup, logs = supervisor(pool)
    sup.check(now=1.0)
    assert late.dead and not pool.slots[1].dead
    assert any("30 s after its peers" in line for line in logs)
    assert sup.check(now=2.0) == ["late"]


def test_the_quiet_clock_starts_when_an_idle_worker_gets_work():
    """A worker that was idle for a minute (the driver evaluating before training) and has just been sent its
    first request is not hung; one whose request has been queued for the stall time is."""
    import time
    from types import SimpleNamespace

    class Actor:
        class generate_wire:  # noqa: N801 - the Ray actor method's name
            @staticmethod
            def remote(examples):
                return object()

    pool = SimpleNamespace(_ref_owner={}, _requests={}, _settings=SimpleNamespace(samples_per_prompt=2))
    slot = WorkerSlot("w", Actor(), WorkerSpec("w"), last_progress=time.perf_counter() - 60.0)
    RolloutPool.submit(pool, slot, [])
    sent = slot.last_progress
    assert time.perf_counter() - sent < 5.0
    assert RolloutPool.why_hung(pool_of(), slot, 30.0, now=sent + 1.0) == ""
    RolloutPool.submit(pool, slot, [])  # a second request queued behind the first does not restart the clock
    assert slot.last_progress == sent and len(slot.inflight) == 2
    assert RolloutPool.why_hung(pool_of(), slot, 30.0, now=sent + 31.0).startswith("no request finished for 31 s")
