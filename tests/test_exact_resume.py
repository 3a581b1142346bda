"""End to end (tiny model, local Ray): the sample ledger balances after every step and in the summary, and a
run stopped at step k and resumed continues it — same totals, the replay buffer's groups restored, the data
position and the learner's RNG continued.

What is deterministic, and asserted: the prompts handed out (the stream is a function of its seed and
position), the learner's RNGs, the checkpointed counters and buffer. What is not: which worker answers which
request and when (rollouts are asynchronous), so the samples themselves and the later totals are not
compared with an uninterrupted run, only checked to balance.
"""

import json
import signal
import time

import pytest
import torch

from echo2_sdk.config import load_config
from echo2_sdk.runtime.learning.buffer import is_admissible

from test_trainer_e2e import TINY_RUN

pytestmark = pytest.mark.slow


def trainer(tmp_path, overrides, resume=False, logs=None):
    from echo2_sdk.runtime.driver.trainer import Trainer

    cfg = load_config(None, TINY_RUN + overrides)
    return Trainer(cfg, str(tmp_path / "run"), resume=resume, log=(logs.append if logs is not None else lambda m: None))


def rows(tmp_path):
    return [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]


def stop_with_groups_left(t):
    """Slow the learner down (workers run ahead) and stop once the buffer holds more than a step's groups,
    so that the checkpoint of the stop carries buffered groups and requests in flight."""
    P = t.cfg.train.prompts_per_step
    collect, train = t._collect, t._train

    def slow_train(groups):
        time.sleep(0.6)
        train(groups)

    def watching_collect(timeout_s):
        collect(timeout_s)
        if t.step >= 2 and len(t.buffer) > P and not t.stop.requested:
            t.stop.requested = signal.SIGINT  # as the SIGINT handler does: stop at the next step boundary

    t._collect, t._train = watching_collect, slow_train


def test_a_stopped_run_resumes_with_its_buffer_counters_data_position_and_rngs(tmp_path, ray_cluster):
    first = trainer(tmp_path, ["train.steps=30", "runtime.staleness=3", "runtime.admission_control=false"])
    stop_with_groups_left(first)
    a = first.fit()
    k = a["steps"]
    assert a["stopped"]["step"] == k < 30 and a["stopped"]["checkpoint"]
    acc = a["accounting"]
    assert acc["balanced"] and all(r["accounting_balanced"] for r in rows(tmp_path))
    assert acc["buffered"] > 0 and acc["trained"] == 4 * 4 * k  # P prompts x n samples per step
    # Admission control off: workers are kept busy (on, it holds them back once the buffer is full), so
    # requests are in flight at the stop and die with the run.
    assert acc["in_flight_at_stop"] > 0
    assert acc["generated"] == sum(acc[t] for t in ("trained", "dropped_on_arrival", "evicted", "rejected",
                                                    "buffered", "lost_in_flight", "in_flight_at_stop"))
    assert a["samples_dropped_stale"] == acc["dropped_on_arrival"] + acc["evicted"]
    saved_groups = list(first.buffer.groups())
    position, generator = first.stream.position, first.learner.generator.get_state()
    uninterrupted_next = [ex.id for ex in first.stream.take(6)]  # what this run would have asked next

    logs = []
    second = trainer(tmp_path, ["train.steps=" + str(k + 3), "runtime.staleness=3", "runtime.admission_control=false"], resume=True, logs=logs)
    asked = []
    submit = second.pool.submit
    second.pool.submit = lambda slot, examples: (asked.extend(ex.id for ex in examples), submit(slot, examples))[1]
    # The buffer is the stopped run's, less what is stale at the resumed version (evicted and counted).
    v = second.learner.version
    assert v == k and second.stream.position == position
    kept = [g for g in saved_groups if is_admissible(g.version, v, 3)]
    assert list(second.buffer.groups()) == kept and kept
    assert any(f"replay buffer restored: {len(kept)} of {len(saved_groups)} groups" in line for line in logs)
    assert torch.equal(second.learner.generator.get_state(), generator)
    # The resumed ledger is the stopped run's with its requests in flight counted lost.
    books = {b.worker: b for b in second.ledger.books()}
    for name, before in acc["by_worker"].items():
        now = books[name]
        assert (now.generated, now.trained, now.rejected, now.dropped_on_arrival) == (
            before["generated"], before["trained"], before["rejected"], before["dropped_on_arrival"])
        assert now.lost_in_flight == before["lost_in_flight"] + before["in_flight_at_stop"] and now.in_flight == 0
        assert now.buffered + now.evicted == before["buffered"] + before["evicted"] and now.balanced

    b = second.fit()
    assert b["steps"] == k + 3 and "stopped" not in b
    assert asked[:6] == uninterrupted_next  # the data position continues exactly
    acc2 = b["accounting"]
    assert acc2["balanced"] and all(r["accounting_balanced"] for r in rows(tmp_path))
    assert [r["step"] for r in rows(tmp_path)] == list(range(1, k + 4))
    assert acc2["trained"] == 4 * 4 * (k + 3)
    assert acc2["lost_in_flight_by_cause"].get("at_checkpoint", 0) == acc["in_flight_at_stop"]
    assert acc2["generated"] >= acc["generated"] and b["samples_accepted"] >= a["samples_accepted"]
