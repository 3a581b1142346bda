"""The admission gate between the rollout pool and the replay buffer: every refusal counted under its
reason, the order of the checks, stale drops counted by worker, and the counters the summary reads."""

import json

import pytest

from echo2_sdk.records import Omega, RecordLimits, Rollout, RolloutGroup, group_to_wire
from echo2_sdk.runtime.admission.base import AdmissionCounters
from echo2_sdk.runtime.admission.gate import AdmissionGate
from echo2_sdk.runtime.rollout.base import GenerationResult
from echo2_sdk.runtime.rollout.codec import result_from_json, result_to_json

VOCAB = 100


class Audit:
    """Records every group it is asked about; refuses the prompt keys in ``lies``."""

    def __init__(self, lies=()):
        self.lies, self.seen = set(lies), []

    def check(self, group):
        self.seen.append(group)
        return group.prompt_key not in self.lies


def rollout(key="p", version=0, worker="a", completion=(3, 4), reward=1.0):
    return Rollout(prompt_ids=(1, 2), completion_ids=completion, reward=reward, version=version,
                   omega=Omega((1,) * len(completion), key), sampler_logprobs=(-0.5,) * len(completion),
                   prompt_key=key, meta={"worker": worker, "node": "n1"})


def wire(key="p", version=0, worker="a", n=2, meta_worker=None, **kw):
    rollouts = tuple(rollout(key, version, meta_worker or worker, **kw) for _ in range(n))
    return group_to_wire(RolloutGroup(key, version, rollouts, worker_id=worker))


def result(*groups, worker="a", num_tokens=7, reward_status=None):
    """A generate reply as the driver gets it: through the JSON codec every worker's reply passes."""
    raw = GenerationResult(worker, list(groups), 0, num_tokens, 0.1, 0.0, 0.0,
                           reward_status=reward_status or {"ok": 2})
    return result_from_json(result_to_json(raw))


def test_replies_encode_to_the_stdlib_document():
    # orjson for speed: the stdlib's document, every float back to the same double (orjson spells 1e-9 as
    # 1e-9, the stdlib as 1e-09); an integer past 64 bits takes the stdlib path itself.
    def stdlib(raw):
        doc = {**raw.__dict__, "installed": {str(v): t for v, t in raw.installed.items()}}
        return json.dumps(doc, separators=(",", ":")).encode()

    for num_tokens in (7, 2**70):
        raw = GenerationResult("a", [wire("p"), wire("q", reward=0.1 + 0.2, completion=(5, 6, 7))], 0, num_tokens,
                               0.123456789, 0.0, 1e-9, reward_status={"ok": 5}, installed={3: 17.25, 4: 0.5})
        assert json.loads(result_to_json(raw)) == json.loads(stdlib(raw))
        assert result_from_json(result_to_json(raw)) == result_from_json(stdlib(raw))


def gate(staleness=2, audit=None):
    return AdmissionGate(staleness=staleness, limits=RecordLimits(vocab_size=VOCAB), audit=audit or Audit())


def test_a_clean_group_is_admitted_and_its_tokens_and_reward_status_counted():
    g = gate()
    out = g.admit("a", result(wire("p"), wire("q"), reward_status={"ok": 3, "timeout": 1}),
                  newest_version=0, learner_version=0)
    assert (out.accepted, out.rejected, out.dropped_stale, out.arrived_versions) == (4, 0, 0, (0, 0))
    assert [grp.prompt_key for grp in g.buffer.take(2, 0)] == ["p", "q"]
    c = g.counters
    assert c.accepted == 4 and c.rejected == 0 and c.tokens == 7
    assert c.reward_status == {"ok": 3, "timeout": 1}


@pytest.mark.parametrize("group, reason, samples", [
    ({"prompt_key": "p", "version": 0}, "malformed", 1),  # no rollouts: cannot even be counted
    ({**wire("p"), "rollouts": [{"x": [1]}]}, "malformed", 1),
    (wire("p", completion=("3", "4")), "malformed", 2),  # token ids as strings: typed wrong, not raised
    ({**wire("p"), "version": "0"}, "malformed", 2),
    ({**wire("p"), "rollouts": [{**r, "group": ["x"]} for r in wire("p")["rollouts"]]}, "malformed", 2),
    (wire("p", worker="b"), "wrong_worker", 2),  # the group names another worker
    (wire("p", meta_worker="b"), "wrong_worker", 2),  # its records do
    (wire("p", version=3), "unknown_version", 2),  # newer than anything published
    (wire("p", completion=(3, VOCAB)), "oversize", 2),  # a token id outside the vocabulary
    (wire("p", reward=float("inf")), "non_finite", 2),  # the encoder writes null: refused all the same
    (wire("p", reward=float("nan")), "non_finite", 2),
    (wire("liar"), "reward_mismatch", 2),
])
def test_each_refusal_is_counted_under_its_reason(group, reason, samples):
    g = gate(audit=Audit(lies={"liar"}))
    out = g.admit("a", result(group), newest_version=0, learner_version=0)
    assert out.accepted == 0 and out.rejected == samples and out.arrived_versions == ()
    assert g.counters.reject_reasons == {reason: samples} and g.counters.rejected == samples
    assert len(g.buffer) == 0


def test_an_invalid_record_is_refused_alone_and_the_audit_sees_only_the_valid_ones():
    doc = wire("p", n=3)
    doc["rollouts"][1]["y"] = []  # an empty completion
    doc["rollouts"][1]["mask"] = doc["rollouts"][1]["logprobs"] = []
    audit = Audit()
    g = gate(audit=audit)
    out = g.admit("a", result(doc), newest_version=0, learner_version=0)
    assert (out.accepted, out.rejected) == (2, 1)
    assert g.counters.reject_reasons == {"empty_completion": 1}
    assert [len(grp.rollouts) for grp in audit.seen] == [2]  # validation runs before the audit
    assert len(g.buffer.take(1, 0)[0].rollouts) == 2


def test_checks_run_in_order_and_the_first_failure_names_the_reason():
    audit = Audit(lies={"liar", "liar2"})
    g = gate(staleness=0, audit=audit)
    groups = [
        wire("p", worker="b", version=5),  # wrong worker and an unknown version: identity comes first
        wire("q", version=5, completion=("x",)),  # typed wrong and invalid: decoding comes first
        wire("liar", version=5),  # invalid and lying: validation comes first, the audit never sees it
        wire("liar2", version=0),  # lying and stale: the audit comes before the staleness bound
    ]
    g.admit("a", result(*groups), newest_version=4, learner_version=1)
    assert g.counters.reject_reasons == {"wrong_worker": 2, "malformed": 2, "unknown_version": 2,
                                         "reward_mismatch": 2}
    assert [grp.version for grp in audit.seen] == [0]
    assert g.counters.dropped_stale == 0


def test_stale_groups_are_dropped_and_counted_by_worker_on_arrival_and_later():
    g = gate(staleness=1)
    out = g.admit("a", result(wire("old", version=1), wire("new", version=3)), newest_version=3, learner_version=3)
    assert (out.accepted, out.dropped_stale, out.arrived_versions) == (2, 2, (1, 3))
    g.admit("b", result(wire("b3", version=3, worker="b", n=3), worker="b"), newest_version=3, learner_version=3)
    assert g.counters.dropped_stale_by_worker == {"a": 2}
    # The learner moves on to v_t = 5: both v=3 groups fall below the bound inside the buffer.
    assert g.buffer.take(1, 5) is None
    assert g.counters.dropped_stale_by_worker == {"a": 4, "b": 3} and g.counters.dropped_stale == 7
    assert g.counters.accepted == 5 and g.counters.rejected == 0  # a stale drop is not a rejection


def test_worker_errors_are_counted():
    g = gate()
    g.count_worker_error()
    g.count_worker_error()
    assert g.counters.worker_errors == 2


def test_counters_round_trip_through_a_checkpoint_and_read_older_ones():
    g = gate(staleness=0)
    g.admit("a", result(wire("p"), wire("q", worker="b"), wire("r", version=0)), newest_version=1, learner_version=1)
    g.count_worker_error()
    saved = json.loads(json.dumps(g.counters.to_dict()))
    restored = AdmissionCounters.from_dict(saved)
    assert restored == g.counters and restored.dropped_stale == 4 and restored.rejected == 2
    resumed = AdmissionGate(staleness=0, limits=RecordLimits(), audit=Audit(), counters=restored)
    resumed.admit("a", result(wire("s", version=1)), newest_version=1, learner_version=1)
    assert resumed.counters.accepted == 2 and resumed.counters.tokens == 14  # continued, not restarted
    # Run statistics of a checkpoint written before the gate counted held these counters.
    older = {"accepted": 5, "rejected": 1, "reject_reasons": {"malformed": 1}, "dropped_stale": 2,
             "dropped_by_worker": {"a": 2}, "reward_status": {"ok": 8}, "tokens": 40, "worker_errors": 1,
             "t_idle_s": 3.0}
    c = AdmissionCounters.from_dict(older)
    assert (c.accepted, c.rejected, c.dropped_stale, c.tokens, c.worker_errors) == (5, 1, 2, 40, 1)
    assert c.dropped_stale_by_worker == {"a": 2} and c.reward_status == {"ok": 8}


def test_step_rows_and_the_summary_read_the_gate_counters():
    from echo2_sdk.config import load_config
    from echo2_sdk.runtime.driver.metrics import RunStats, summarize

    g = gate(staleness=0)
    g.admit("a", result(wire("p"), wire("q", worker="b"), reward_status={"ok": 6}),
            newest_version=1, learner_version=1)
    stats = RunStats()
    records = [rollout("p", version=0)] * 2

    def step(n):
        return stats.on_step(step=n, version=n, records=records, v_t=1, t_train_s=0.5, wall_s=float(n),
                             published_version=1, buffer_groups=len(g.buffer), learner_metrics={"kl": 0.0},
                             admission=g.counters)

    row = step(1)
    assert (row["accepted"], row["rejected"], row["dropped_stale"]) == (0, 2, 2) and row["kl"] == 0.0
    assert row["rollout_tokens_per_s"] == 7.0
    g.admit("a", result(wire("s", version=1)), newest_version=1, learner_version=1)
    stats = RunStats.from_dict(json.loads(json.dumps(stats.to_dict())))  # a resume between the steps
    row = step(2)
    assert (row["accepted"], row["rejected"], row["dropped_stale"]) == (2, 0, 0)  # differences since step 1
    summary = summarize(load_config(None, []), [row], stats=stats, admission=g.counters, staleness=0, kappa=1,
                        steps=2, version=2, base_model="m", workers=[], pool=None)
    assert summary["samples_accepted"] == 2 and summary["samples_rejected"] == 2
    assert summary["reject_reasons"] == {"wrong_worker": 2}
    assert summary["samples_dropped_stale"] == 2 and summary["samples_dropped_stale_by_worker"] == {"a": 2}
    assert summary["reward_status"] == {"ok": 8} and summary["rollout_tokens"] == 14
    assert summary["worker_errors"] == 0 and "pool" not in summary
    assert summary["staleness_histogram"] == {"1": 4} and summary["samples_trained_by_node"] == {"n1": 4}


def test_the_progress_line_shows_the_rollout_rate_since_the_previous_line_not_one_steps():
    from echo2_sdk.runtime.driver.metrics import RunStats, progress_line

    stats = RunStats()
    assert stats.progress_rate(tokens=300, wall_s=3.0) == 100.0
    assert stats.progress_rate(tokens=300, wall_s=4.0) == 0.0  # no reply landed since: truly nothing
    assert stats.progress_rate(tokens=900, wall_s=6.0) == 300.0  # 600 tokens over the 2 s since
    stats = RunStats.from_dict(json.loads(json.dumps(stats.to_dict())))  # a resume keeps the mark
    assert stats.progress_rate(tokens=1000, wall_s=7.0) == 100.0
    row = {"step": 3, "version": 3, "reward_mean": 0.5, "staleness_max": 1, "staleness_mean": 0.5,
           "bubble_ratio": 0.1, "rollout_tokens_per_s": 0.0, "t_train_s": 0.4, "wall_s": 7.0}
    assert "    100 tok/s" in progress_line(row, 10, tokens_per_s=100.0)
    assert "      0 tok/s" in progress_line(row, 10)
