"""Admission control at dispatch: the queue and arrival rules (hand-computed), what the control counts,
and a simulated async run with slow workers where waste stays ≤ 2 % while the bound still holds."""

import doctest
import random

from echo2_sdk.runtime.admission import dispatch
from echo2_sdk.runtime.admission.dispatch import DispatchControl, trained_at
from echo2_sdk.runtime.learning.buffer import ReplayBuffer

from test_buffer import group


def test_doctests():
    assert doctest.testmod(dispatch).failed == 0


def test_trained_at_by_hand():
    # P = 8, S = 3, the worker holds v = 8 while the learner is at v_t = 10 (lag 2): groups at queue
    # positions 0..15 are trained at v_t 10 and 11 (≤ 8 + 3), position 16 at 12 > 11.
    assert trained_at(10, 12, 4, 8) == 11 and trained_at(10, 13, 4, 8) == 12
    assert trained_at(10, 0, 8, 8) == 10 and trained_at(10, 1, 8, 8) == 11


def test_a_slow_worker_is_held_while_the_pool_would_pass_it_by_and_its_idle_time_counted():
    c = DispatchControl(staleness=3, groups_per_step=8)
    kw = dict(request_groups=4, version=10, learner_version=10, buffered_groups=0)
    # nothing measured: the request queues behind the 28 groups out (7 requests): trained at 13 ≤ 13
    assert c.allows("slow", in_flight={"fast": 7, "slow": 0}, now=0.0, **kw)
    assert not c.allows("slow", in_flight={"fast": 8, "slow": 0}, now=0.5, **kw)  # 32 ahead: at 14, stale; idle
    c.on_reply("fast", 0.5)  # 8 groups a second
    c.on_reply("slow", 10.0)  # back in 10 s, by when the fast worker finished 20 requests: 80 groups ahead
    assert not c.allows("slow", in_flight={"fast": 1, "slow": 0}, now=1.0, **kw)  # the same pause
    # back in 1 s behind its own 4 queued groups (the slow one finishes nothing by then): trained at 10
    assert c.allows("fast", in_flight={"fast": 1, "slow": 0}, now=1.0, **kw)
    c.on_reply("slow", 2.0)  # measured faster now (EMA: 8.4 s)
    # an idle fast worker would make 67 groups by then (it is refilled next); once it has left, none
    assert not c.allows("slow", in_flight={"fast": 0, "slow": 0}, now=3.0, **kw)
    assert c.allows("slow", in_flight={"slow": 0}, now=4.0, **kw)
    assert c.pauses == 1 and c.paused_s == {"slow": 3.5}
    off = DispatchControl(staleness=3, groups_per_step=8, enabled=False)
    assert off.allows("w", in_flight={"w": 1000}, now=0.0, **kw)


def test_uneven_request_times_lean_toward_holding_back():
    # "w" took 1 s, then 3 s: mean 1.4 s (EMA, alpha 0.2), mean deviation 2.0 s. With 2 deviations it is
    # expected back in 5.4 s and, seen by another worker, as fast as half its mean (0.7 s a request).
    kw = dict(request_groups=4, version=9, learner_version=10, buffered_groups=0)
    decisions = {}
    for margin in (0.0, 2.0):
        c = DispatchControl(staleness=3, groups_per_step=8, margin_devs=margin)
        for seconds in (1.0, 3.0):
            c.on_reply("w", seconds)
            c.on_reply("steady", 1.0)
        assert round(c.request_s["w"], 6) == 1.4 and c.request_dev_s == {"w": 2.0, "steady": 0.0}
        # "steady" finishes 1.4 (5.4) requests of 4 groups while w's request is out: 5.6 (21.6) groups ahead,
        # trained at v_t 11 (13); w holds v 9, so its groups are admissible up to 12.
        decisions[margin] = c.allows("w", in_flight={"w": 0, "steady": 1}, now=0.0, **kw)
        if margin:
            assert round(c._request_s("w", slow=True), 6) == 5.4 and round(c._request_s("w", slow=False), 6) == 0.7
    assert decisions == {0.0: True, 2.0: False}


def test_stale_drops_raise_the_margin_and_clean_replies_ease_it():
    # The same worker times as above: at the means alone w may go; after one reply that brought stale drops
    # the margin is 1 deviation (w expected back in 3.4 s: steady finishes 3.4 requests, 13.6 groups ahead,
    # trained at v_t 11 ≤ 12: still sent), after a second 2 (held, as the fixed margin of 2 above).
    kw = dict(request_groups=4, version=9, learner_version=10, buffered_groups=0, in_flight={"w": 0, "steady": 1})
    c = DispatchControl(staleness=3, groups_per_step=8, margin_max_devs=3.0)
    for seconds in (1.0, 3.0):
        c.on_reply("w", seconds)
        c.on_reply("steady", 1.0)
    decisions = []
    for wasted_total in (0, 64, 64, 128):  # the run's stale drops after each reply: none, one, none, one more
        c.on_admitted(wasted_total)
        decisions.append((round(c.margin_now_devs, 6), c.allows("w", now=0.0, **kw)))
    assert decisions == [(0.0, True), (1.0, True), (0.99, True), (1.99, False)]
    assert c.margin_raises == 2 and c.summary(now=0.0)["margin_devs"] == 1.99
    for _ in range(250):  # 199 clean replies bring it back to the floor, and it stays there
        c.on_admitted(128)
    assert c.margin_now_devs == 0.0 and c.margin_raises == 2


def test_margin_stays_fixed_without_room_or_control():
    fixed = DispatchControl(staleness=3, groups_per_step=8, margin_devs=2.0, margin_max_devs=2.0)
    off = DispatchControl(staleness=3, groups_per_step=8, enabled=False, margin_max_devs=3.0)
    resumed = DispatchControl(staleness=3, groups_per_step=8, margin_max_devs=3.0, wasted_seen=500)
    for c in (fixed, off, resumed):
        c.on_admitted(500)  # a resumed run's earlier drops are its baseline, not news
    assert (fixed.margin_now_devs, off.margin_now_devs, resumed.margin_now_devs) == (2.0, 0.0, 0.0)
    assert fixed.margin_raises == off.margin_raises == resumed.margin_raises == 0


def simulate(admission: bool, seed: int, steps: int = 200, dt: float = 0.05) -> dict:
    """An async run in ticks of ``dt`` seconds: workers of different speeds with up to 2 requests queued
    each, a learner taking P = 8 groups oldest first for a 1 s step whenever it has them, a snapshot every
    κ = 2 steps reaching the workers 0.5 s later. Returns generated, dropped and trained groups, the
    staleness trained on, the learner's idle seconds and the wall time."""
    rng = random.Random(seed)
    S, P, k, kappa, depth = 3, 8, 4, 2, 2
    speeds = {"fast": 0.8, "mid": 1.2, "slow": 6.0}  # s per request of 4 groups: 9 groups/s for 8 per step
    control = DispatchControl(staleness=S, groups_per_step=P, enabled=admission)
    buf = ReplayBuffer(staleness=S)
    t, v_t, busy_until, installed, installs = 0.0, 0, None, dict.fromkeys(speeds, 0), []
    inflight = {w: [] for w in speeds}  # (finish time, version) per queued request, in order
    generated = idle = 0.0
    staleness = []
    while v_t < steps:
        for when, v in [x for x in installs if x[0] <= t]:
            installed = {w: max(v, iv) for w, iv in installed.items()}
            installs.remove((when, v))
        for w, q in inflight.items():
            while q and q[0][0] <= t:
                finish, version = q.pop(0)
                control.on_reply(w, speeds[w])
                for i in range(k):
                    buf.add(group(f"{w}{finish}{i}", version), learner_version=v_t)
                generated += k
        if busy_until is not None and t >= busy_until:  # the step ends: a new version
            v_t, busy_until = v_t + 1, None
            if v_t % kappa == 0:
                installs.append((t + 0.5, v_t))
        if busy_until is None:
            taken = buf.take(P, v_t)
            if taken is None:
                idle += dt
            else:
                staleness += [v_t - g.version for g in taken]
                busy_until = t + 1.0
        for w in speeds:
            while len(inflight[w]) < depth:
                next_take = v_t if busy_until is None else v_t + 1  # mid-step, the next take is at v_t + 1
                if not control.allows(w, request_groups=k, version=installed[w], learner_version=next_take,
                                      buffered_groups=buf.num_admissible(v_t),
                                      in_flight={x: len(q) for x, q in inflight.items()}, now=t):
                    break
                start = inflight[w][-1][0] if inflight[w] else t
                inflight[w].append((start + speeds[w] * rng.uniform(0.8, 1.2), installed[w]))
        t += dt
    return {"generated": generated, "dropped": buf.stats.dropped_stale_groups, "trained": steps * P,
            "staleness_max": max(staleness), "staleness_mean": sum(staleness) / len(staleness),
            "idle_s": round(idle, 2), "wall_s": round(t, 2)}


def test_with_slow_workers_waste_stays_under_2_percent_and_the_bound_holds():
    for seed in (0, 1):
        off, on = simulate(False, seed), simulate(True, seed)
        assert off["dropped"] / off["generated"] > 0.05  # without control the slow worker's groups go stale
        assert on["dropped"] / on["generated"] <= 0.02
        assert on["staleness_max"] <= 3 and off["staleness_max"] <= 3  # stale groups dropped, never trained
        # Holding work back does not starve the learner: no more idle time, no longer a run.
        assert on["idle_s"] <= off["idle_s"] and on["wall_s"] <= 1.05 * off["wall_s"]


def test_a_worker_holds_what_its_replies_and_the_deliveries_progress_say():
    from types import SimpleNamespace

    from echo2_sdk.runtime.driver.dispatch import Dispatcher

    from echo2_sdk.runtime.broadcast.delivery import DeliveryTracker

    deliveries = DeliveryTracker(transport=None)
    d = Dispatcher(pool=None, stream=None, buffer=None, control=DispatchControl(3, 8), prompts_per_request=4,
                   holds=deliveries.holds)
    slot = SimpleNamespace(name="w", version=4, inflight=[])
    assert d.worker_version(slot) == 4  # from its last reply
    deliveries.holds.update({"w": 6, "other": 8})  # as a poll records installs before the delivery settles
    assert d.worker_version(slot) == 6  # installed, before its delivery settled
    slot.version = 5  # a late reply generated under an older version
    assert d.worker_version(slot) == 6  # never backwards


def test_the_run_never_stalls_on_estimates_one_request_goes_out_when_nothing_is_in_flight():
    from types import SimpleNamespace

    from echo2_sdk.runtime.driver.dispatch import Dispatcher

    class Pool:
        queue_depth = 2

        def __init__(self):
            self.slots = [SimpleNamespace(name="w", version=0, inflight=[])]
            self.sent = []

        def accepts_work(self, slot):
            return True

        def submit(self, slot, examples):
            slot.inflight.append(examples)
            self.sent.append(examples)

    class Buffer:
        def num_admissible(self, version):
            return 0

    pool = Pool()
    d = Dispatcher(pool, SimpleNamespace(take=lambda n: ["ex"] * n), Buffer(), DispatchControl(3, 8), 4, holds={})
    d.fill_all(learner_version=10)  # the worker is known to hold v0: every group would be stale
    assert len(pool.sent) == 1 and d.control.forced == 1  # one goes out anyway; its reply updates v
    d.fill_all(learner_version=10)
    assert len(pool.sent) == 1  # something is in flight now: held again
