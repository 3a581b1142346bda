"""Delivery tracking of published snapshots: T_bcast at q = 1/γ, time to all, superseded versions."""

from echo2_sdk.runtime.broadcast.delivery import DeliveryTracker, delivery_summary


class FakeTransport:
    """Reports what a P2P control server would: install times since publish, live workers, settled."""

    def __init__(self) -> None:
        self.reports: dict[int, dict] = {}

    def progress(self, version, handles=()):
        return self.reports.get(version)


def report(installed, live, settled, failed=None):
    return {"installed_s": installed, "failed": failed or {}, "live": live, "settled": settled}


def test_t_bcast_is_the_time_to_ceil_q_of_live_workers_and_t_all_the_last():
    t = FakeTransport()
    tracker = DeliveryTracker(t, gamma=1.1)
    names = [f"w{i}" for i in range(20)]
    tracker.published(2, step=2, handles=[], names=names)
    assert tracker.poll() == []  # nothing known yet: still pending, never blocks
    installed = {n: 1.0 + i for i, n in enumerate(names)}  # 1, 2, ..., 20 s
    t.reports[2] = report(installed, names, settled=True)
    (rec,) = tracker.poll()
    # q = 1/1.1 → ⌈0.909·20⌉ = 19 workers: the 19th install, at 19 s.
    assert rec["workers_needed"] == 19 and rec["t_bcast_s"] == 19.0 and rec["t_all_s"] == 20.0
    assert rec["installed"] == 20 and rec["settled"] and rec["superseded_by"] is None
    assert tracker.pending == []


def test_a_failed_worker_leaves_t_all_open_but_t_bcast_defined():
    t = FakeTransport()
    tracker = DeliveryTracker(t, gamma=1.1)
    names = ["a", "b", "c"]
    tracker.published(4, step=4, handles=[], names=names)
    t.reports[4] = report({"a": 0.5, "b": 0.7}, names, settled=True, failed={"c": "stalled"})
    (rec,) = tracker.poll()
    # ⌈0.909·3⌉ = 3 installs needed, only 2 happened: T_bcast undefined, the failure is kept.
    assert rec["t_bcast_s"] is None and rec["t_all_s"] is None and rec["failed"] == {"c": "stalled"}
    summary = delivery_summary([rec])
    assert summary["incomplete"] == 1 and summary["t_bcast_s"] is None


def test_an_older_delivery_overtaken_by_a_settled_newer_one_is_closed_as_superseded():
    t = FakeTransport()
    tracker = DeliveryTracker(t, gamma=1.1)
    tracker.published(2, step=2, handles=[], names=["a", "b"])
    tracker.published(4, step=4, handles=[], names=["a", "b"])
    t.reports[2] = report({"a": 0.2}, ["a", "b"], settled=False)
    t.reports[4] = report({"a": 0.3, "b": 0.4}, ["a", "b"], settled=True)
    recs = tracker.poll()
    assert [r["version"] for r in recs] == [2, 4]
    assert recs[0]["superseded_by"] == 4 and recs[0]["installed"] == 1 and recs[0]["t_bcast_s"] is None
    assert recs[1]["t_bcast_s"] == 0.4
    s = delivery_summary(recs)
    assert s["superseded"] == 1 and s["incomplete"] == 0 and s["t_bcast_s"]["max"] == 0.4


def test_finish_all_reports_deliveries_still_open_instead_of_dropping_them():
    t = FakeTransport()
    tracker = DeliveryTracker(t, gamma=1.1)
    tracker.published(6, step=6, handles=[], names=["a", "b"])
    t.reports[6] = report({"a": 0.1}, ["a", "b"], settled=False)
    (rec,) = tracker.finish_all(timeout_s=0.1)
    assert rec["version"] == 6 and not rec["settled"] and rec["installed_s"] == {"a": 0.1}


def test_a_worker_killed_mid_broadcast_is_named_failed():
    """The transport drops a dead worker from its live set; the record must still say its delivery failed."""
    from echo2_sdk.runtime.broadcast.delivery import LOST

    t = FakeTransport()
    tracker = DeliveryTracker(t, gamma=1.1)
    tracker.published(8, step=8, handles=[], names=["a", "b", "c"])
    t.reports[8] = report({"a": 0.2, "b": 0.3}, ["a", "b"], settled=True)  # c was killed: no longer live
    (rec,) = tracker.poll()
    assert rec["failed"] == {"c": LOST} and rec["live"] == 2 and rec["t_all_s"] == 0.3
    assert delivery_summary([rec])["incomplete"] == 0  # every live worker has it


def test_a_superseded_delivery_keeps_its_repairs_and_refetches_after_the_transport_forgot_it():
    t = FakeTransport()
    tracker = DeliveryTracker(t, gamma=1.1)
    tracker.published(2, step=2, handles=[], names=["a", "b"])
    tracker.published(4, step=4, handles=[], names=["a", "b"])
    t.reports[2] = {**report({"a": 0.2}, ["a", "b"], settled=False), "repairs": 2, "refetches": 1}
    assert tracker.poll() == []  # v2 seen in progress, v4 not started
    del t.reports[2]  # the transport keeps a bounded window of versions
    t.reports[4] = report({"a": 0.3, "b": 0.4}, ["a", "b"], settled=True)
    old, new = tracker.poll()
    assert old["superseded_by"] == 4 and (old["repairs"], old["refetches"]) == (2, 1)
    assert old["installed_s"] == {"a": 0.2} and delivery_summary([old, new])["repairs"] == 2


def test_finish_all_keeps_the_last_known_progress():
    t = FakeTransport()
    tracker = DeliveryTracker(t, gamma=1.1)
    tracker.published(6, step=6, handles=[], names=["a", "b"])
    t.reports[6] = {**report({"a": 0.1}, ["a", "b"], settled=False), "repairs": 1}
    assert tracker.poll() == []
    t.reports.clear()
    (rec,) = tracker.finish_all(timeout_s=0.0)
    assert rec["repairs"] == 1 and rec["installed_s"] == {"a": 0.1} and not rec["settled"]
