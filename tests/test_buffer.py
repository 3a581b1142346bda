from echo2_sdk.records import Omega, Rollout, RolloutGroup
from echo2_sdk.runtime.learning.buffer import ReplayBuffer, is_admissible


def group(key, version, n=2):
    r = Rollout((1,), (2,), 1.0, version, Omega((1,), key), (-0.1,), key)
    return RolloutGroup(key, version, (r,) * n)


def test_admission_at_the_S_boundary():
    # S = 3, learner at v_t = 10: v = 7 is the oldest admissible, v = 6 is not
    assert is_admissible(7, 10, 3) and not is_admissible(6, 10, 3)
    buf = ReplayBuffer(staleness=3)
    assert buf.add(group("a", 7), learner_version=10)
    assert not buf.add(group("b", 6), learner_version=10)
    assert buf.stats.dropped_stale_groups == 1 and buf.stats.dropped_stale_samples == 2


def test_oldest_admissible_first_and_eviction():
    buf = ReplayBuffer(staleness=2)
    for key, v in [("n1", 5), ("o1", 3), ("n2", 5), ("o2", 4), ("x", 2)]:
        buf.add(group(key, v), learner_version=4)
    assert len(buf) == 5
    # learner moves to v_t = 5: v=2 is now stale (2 < 5-2) and is dropped, never handed out
    taken = buf.take(2, learner_version=5)
    assert [g.prompt_key for g in taken] == ["o1", "o2"]
    assert buf.stats.dropped_stale_groups == 1
    assert buf.take(3, learner_version=5) is None  # only 2 left: nothing taken
    assert len(buf) == 2
    assert [g.prompt_key for g in buf.take(2, learner_version=5)] == ["n1", "n2"]


def test_every_taken_group_satisfies_the_bound():
    import random

    rng = random.Random(0)
    buf, S = ReplayBuffer(staleness=3), 3
    v_t = 0
    for _ in range(500):
        buf.add(group("k", max(0, v_t - rng.randint(0, 6))), learner_version=v_t)
        got = buf.take(2, v_t)
        if got:
            assert all(v_t - g.version <= S for g in got)
            v_t += 1


def test_drops_say_whether_on_arrival_or_evicted_and_groups_rebuild_the_take_order():
    from echo2_sdk.runtime.learning.buffer import EVICTED, ON_ARRIVAL

    drops = []
    buf = ReplayBuffer(staleness=1, on_drop=lambda g, kind: drops.append((g.prompt_key, kind)))
    for key, v in [("n1", 5), ("o1", 4), ("late", 2), ("n2", 5), ("o2", 4)]:
        buf.add(group(key, v), learner_version=5)
    assert drops == [("late", ON_ARRIVAL)]
    order = [g.prompt_key for g in buf.groups()]
    assert order == ["o1", "o2", "n1", "n2"] and len(buf) == 4  # reading them takes nothing
    again = ReplayBuffer(staleness=1)
    for g in buf.groups():  # as a checkpoint restores them
        again.restore(g)
    assert [g.prompt_key for g in again.take(4, learner_version=5)] == [g.prompt_key for g in buf.take(4, 5)] == order
    buf.add(group("o3", 4), learner_version=5)
    assert buf.take(1, learner_version=6) is None and drops[-1] == ("o3", EVICTED)
    assert buf.stats.evicted_groups == 1 and buf.stats.dropped_stale_groups == 2


def test_freshest_and_mixed_orders_take_the_newest_versions_and_leave_the_old_to_age_out():
    import pytest

    versions = [("o1", 3), ("n1", 5), ("m1", 4), ("n2", 5), ("o2", 3)]
    fresh, mixed = ReplayBuffer(staleness=2, order="freshest"), ReplayBuffer(staleness=2, order="mixed")
    for key, v in versions:
        fresh.add(group(key, v), learner_version=5)
        mixed.add(group(key, v), learner_version=5)
    assert sorted(g.prompt_key for g in fresh.take(2, learner_version=5)) == ["n1", "n2"]
    assert [g.prompt_key for g in fresh.groups()] == ["o1", "o2", "m1"]  # the heap still takes oldest next
    assert fresh.take(1, learner_version=6) is not None and fresh.stats.evicted_groups == 2  # o1, o2 aged out
    taken = [g.prompt_key for g in mixed.take(4, learner_version=5)]
    assert taken[:2] == ["o1", "o2"] and sorted(taken[2:]) == ["n1", "n2"]  # half oldest, half freshest
    with pytest.raises(ValueError, match="buffer order 'newest'"):
        ReplayBuffer(staleness=2, order="newest")
