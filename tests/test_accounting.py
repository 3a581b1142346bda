"""The per-worker sample ledger: stale drops split (on arrival vs evicted), every refusal, trained, buffered,
lost and in-flight samples each counted once; the invariant through a checkpoint and a resume that restores
the replay buffer."""

import json

from echo2_sdk.adapter import Example
from echo2_sdk.records import RecordLimits, group_from_wire
from echo2_sdk.runtime.admission import accounting
from echo2_sdk.runtime.admission.base import AdmissionCounters
from echo2_sdk.runtime.admission.gate import AdmissionGate
from echo2_sdk.runtime.driver.run_state import RunLedger
from echo2_sdk.runtime.rollout.base import SentRequest

from test_admission import VOCAB, Audit, gate, result, wire


def books(g, in_flight=None):
    return accounting.ledgers(g.counters, accounting.samples_by_worker(g.buffer.groups()), in_flight or {})


def by_worker(g, in_flight=None):
    return {b.worker: b for b in books(g, in_flight)}


def request(*keys, n=2):
    return SentRequest(tuple(Example(id=k, prompt=k, answer="") for k in keys), n)


def test_stale_drops_on_arrival_and_evictions_are_counted_apart():
    g = gate(staleness=1)
    g.admit("a", result(wire("old", version=1), wire("new", version=3)), newest_version=3, learner_version=3)
    c = g.counters
    assert c.dropped_on_arrival_by_worker == {"a": 2} and c.evicted_by_worker == {} and c.accepted == 2
    assert g.buffer.take(1, 5) is None  # v_t = 5: the accepted v=3 group is evicted from the buffer
    assert c.dropped_on_arrival_by_worker == {"a": 2} and c.evicted_by_worker == {"a": 2}
    assert (c.dropped_on_arrival, c.evicted, c.dropped_stale, c.dropped_stale_by_worker) == (2, 2, 4, {"a": 4})
    # What arrived too old was never accepted; what was evicted was.
    assert c.accepted == 2 and g.buffer.stats.evicted_groups == 1 and g.buffer.stats.dropped_stale_groups == 2
    assert by_worker(g)["a"].balanced


def test_every_sample_of_a_hostile_reply_ends_in_exactly_one_term():
    ask = request("p", "q", "r", "s", "t", "u", "liar", "old")
    g = gate(staleness=1, audit=Audit(lies={"liar"}))
    reply = result(
        wire("p", version=2),                  # accepted
        wire("p", version=2),                  # duplicate_group
        wire("zz", version=2),                 # unrequested
        wire("q", version=2, n=3),             # group_size
        wire("r", version=2, worker="b"),      # wrong_worker
        {"prompt_key": "s", "rollouts": "x"},  # malformed: counts once
        wire("t", version=9),                  # unknown_version for both records
        wire("u", version=2, completion=()),   # empty completions: refused record by record
        wire("liar", version=2),               # reward_mismatch
        wire("old", version=0),                # below the bound on arrival
    )
    g.admit("a", reply, newest_version=2, learner_version=2, request=ask)
    a = by_worker(g)["a"]
    assert a.generated == 2 * 8 + 3 + 1 == 20
    assert (a.buffered, a.dropped_on_arrival, a.rejected) == (2, 2, 16) and a.balanced
    assert g.counters.rejected == a.rejected  # every refusal is charged to the worker asked
    taken = g.buffer.take(1, 2)
    assert not by_worker(g)["a"].balanced  # taken from the buffer, not yet counted as trained: a hole
    g.count_trained(taken)
    assert by_worker(g)["a"].trained == 2 and by_worker(g)["a"].balanced


def test_a_check_that_raises_after_validation_counts_each_sample_once():
    def broken(example):
        raise RuntimeError("renderer bug")

    g = AdmissionGate(staleness=1, limits=RecordLimits(vocab_size=VOCAB), audit=Audit(), prompt_ids=broken)
    half_bad = wire("p", n=2)
    half_bad["rollouts"][1].update(y=[], mask=[], logprobs=[])  # one record refused by validation, then the prompt check raises
    g.admit("a", result(half_bad), newest_version=0, learner_version=0, request=request("p"))
    assert g.counters.reject_reasons == {"empty_completion": 1, "check_failed": 1}
    assert by_worker(g)["a"].rejected == 2 and by_worker(g)["a"].balanced


def test_lost_and_in_flight_samples_balance_and_a_checkpoint_counts_in_flight_as_lost():
    g = gate()
    g.admit("a", result(wire("p")), newest_version=0, learner_version=0)
    g.count_lost("b", 4, accounting.FAILED)
    live = by_worker(g, {"a": 6})
    assert live["a"].generated == 8 and live["a"].in_flight == 6 and live["b"].lost_in_flight == 4
    assert accounting.balanced(live.values())
    saved = accounting.at_checkpoint(g.counters, {"a": 6})
    assert saved.lost_in_flight_by_worker == {"a": 6, "b": 4}
    assert saved.lost_in_flight_by_cause == {"failed": 4, "at_checkpoint": 6}
    assert g.counters.lost_in_flight_by_worker == {"b": 4}  # the live run still receives those replies
    resumed = gate(staleness=2)
    resumed.counters = AdmissionCounters.from_dict(json.loads(json.dumps(saved.to_dict())))
    resumed.buffer.restore(group_from_wire(wire("p")))
    assert accounting.balanced(books(resumed))  # nothing in flight in the resumed run: those are lost


class FakePool:
    def __init__(self):
        self.abandoned, self.in_flight = [], {}

    def take_abandoned(self):
        taken, self.abandoned = self.abandoned, []
        return taken

    def in_flight_samples(self):
        return dict(self.in_flight)


def test_the_buffer_and_the_counters_survive_a_checkpoint_and_stale_or_invalid_groups_are_counted():
    pool = FakePool()
    g = gate(staleness=1)
    ledger = RunLedger(g, pool)
    g.admit("a", result(wire("p", version=1), wire("q", version=3), wire("r", version=2)),
            newest_version=3, learner_version=3)
    g.admit("b", result(wire("s", version=3, worker="b", n=3, completion=(3, 50)), worker="b"), newest_version=3, learner_version=3)
    ledger.on_failed("a", request("x", "y"))  # a failed request: 2 prompts x 2 samples lost
    pool.abandoned.append(("b", request("z", n=3)))  # queued on a worker the pool stopped
    pool.in_flight = {"a": 2}
    assert accounting.balanced(ledger.books()) and g.counters.worker_errors == 1
    extra = json.loads(json.dumps(ledger.checkpoint_extra()))  # what torch.save gets is plain JSON-able data
    kept = [accounting.samples_by_worker([grp]) for grp in g.buffer.groups()]
    order = [grp.prompt_key for grp in g.buffer.groups()]
    assert order == ["r", "q", "s"]  # take order: lowest version, then arrival

    # Resume at the same version: the same groups, in the same order, and the same totals.
    resumed = gate(staleness=1)
    resumed.counters = AdmissionCounters.from_dict(extra["admission"])
    again = RunLedger(resumed, FakePool())
    again.restore(extra, 3, log=lambda m: None)
    assert [grp for grp in resumed.buffer.groups()] == list(g.buffer.groups())
    assert [accounting.samples_by_worker([grp]) for grp in resumed.buffer.groups()] == kept
    assert resumed.counters.lost_in_flight_by_cause == {"failed": 4, "abandoned": 3, "at_checkpoint": 2}
    after = {b.worker: b for b in again.books()}
    assert accounting.balanced(after.values()) and after["a"].generated == 6 + 4 + 2 and after["a"].lost_in_flight == 6

    # Resume with S = 0 and a smaller vocabulary: v=2 is evicted, b's records (token 50) no longer validate.
    strict = AdmissionGate(staleness=0, limits=RecordLimits(vocab_size=40), audit=Audit(),
                           counters=AdmissionCounters.from_dict(extra["admission"]))
    logs = []
    RunLedger(strict, FakePool()).restore(extra, 3, log=logs.append)
    assert [grp.prompt_key for grp in strict.buffer.groups()] == ["q"]
    assert strict.counters.evicted_by_worker == {"a": 2}
    assert strict.counters.reject_reasons["restore_invalid"] == 3 and strict.counters.rejected_by_worker == {"b": 3}
    assert accounting.balanced(books(strict)) and "1 of 3 groups" in logs[0]


def test_an_older_checkpoint_loads_with_the_ledger_starting_at_its_step():
    older = {"accepted": 5, "reject_reasons": {"malformed": 1}, "dropped_stale_by_worker": {"a": 2},
             "reward_status": {"ok": 8}, "tokens": 40, "worker_errors": 1}
    c = AdmissionCounters.from_dict(older, step=7)
    assert c.ledger_since_step == 7 and c.dropped_stale == 2 and c.dropped_stale_by_worker == {"a": 2}
    assert c.dropped_on_arrival == c.evicted == 0 and c.returned_by_worker == {}
    g = gate()
    g.counters = c
    g.admit("a", result(wire("p")), newest_version=0, learner_version=0)
    assert accounting.balanced(books(g))  # the old unsplit drops stay outside the ledger
    block = accounting.summary(g.counters, books(g))
    assert block["since_step"] == 7 and block["balanced"] and block["generated"] == 2
    assert AdmissionCounters.from_dict(json.loads(json.dumps(c.to_dict()))) == c


def test_the_summary_block_has_every_term_per_worker_and_says_when_it_does_not_balance():
    g = gate()
    g.admit("a", result(wire("p"), wire("q")), newest_version=0, learner_version=0)
    g.count_trained(g.buffer.take(1, 0))
    block = accounting.summary(g.counters, books(g, {"a": 2}))
    assert block["by_worker"]["a"] == {"generated": 6, "trained": 2, "dropped_on_arrival": 0, "evicted": 0,
                                       "rejected": 0, "buffered": 2, "lost_in_flight": 0, "in_flight_at_stop": 2,
                                       "balanced": True}
    assert block["generated"] == 6 and block["in_flight_at_stop"] == 2 and block["balanced"] is True
    g.buffer.take(1, 0)  # a group vanishes without being counted
    assert accounting.summary(g.counters, books(g))["balanced"] is False


def test_a_checkpoint_keeps_the_deliveries_still_open_in_the_per_version_table():
    from echo2_sdk.runtime.driver.metrics import RunStats
    from echo2_sdk.runtime.driver.run_state import stats_at_checkpoint

    done = {"version": 2, "t_publish_s": 1.0, "t_bcast_s": 0.2, "t_all_s": 0.3, "installed_s": {"a": 0.2},
            "failed": {}, "superseded_by": None}
    still = {"version": 4, "t_bcast_s": None, "t_all_s": None, "installed_s": {}, "failed": {}, "settled": False,
             "superseded_by": None}

    class Deliveries:
        def open_records(self):
            return [dict(still)]

    stats = RunStats()
    stats.on_publish(2, 1.0, 100.0)
    stats.on_publish(4, 3.0, 102.0)
    stats.on_delivery(done)
    saved = json.loads(json.dumps(stats_at_checkpoint(stats, Deliveries())))
    assert len(stats.deliveries) == 1  # the live run's table is left alone: it will see v4 settle
    table = RunStats.from_dict(saved).version_table()
    assert [(r["version"], r["t_publish_s"], r["t_bcast_s"]) for r in table] == [(2, 1.0, 0.2), (4, 3.0, None)]
    assert saved["deliveries"][1]["open_at_checkpoint"] is True
