"""RewardGuard: deadlines off the main thread, failures scored 0 and counted, child lifecycle."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import threading
import time

import pytest

from echo2_sdk.adapter import Example
from echo2_sdk.registry import make_task
from echo2_sdk.rewards import RewardGuard, RewardResult, RewardWorkerError, score_directly

sys.path.insert(0, os.path.dirname(__file__))
from reward_fixtures import import_path  # noqa: E402

SCRIPTED = import_path("ScriptedRewardAdapter")
EXAMPLE = Example(id="scripted:7", prompt="say 7", answer="7")
TIMEOUT_S = 1.0


def _in_thread(fn, *args):
    """Run fn in a non-main thread (where signal.alarm deadlines would fail) and return its value."""
    box = {}
    thread = threading.Thread(target=lambda: box.setdefault("value", fn(*args)))
    thread.start()
    thread.join(timeout=60)
    assert not thread.is_alive(), "the call did not return within 60 s"
    return box["value"]


@pytest.fixture
def guard():
    with RewardGuard(SCRIPTED, None, 0, timeout_s=TIMEOUT_S, max_chars=100) as g:
        yield g


def test_hanging_reward_times_out_off_main_thread_and_guard_recovers(guard):
    started = time.perf_counter()
    [result] = _in_thread(guard.score_many, [(EXAMPLE, "hang")])
    elapsed = time.perf_counter() - started
    assert result.reward == 0.0 and result.status == "timeout", result
    # timeout_s for the item, plus killing and restarting the child (a fresh interpreter).
    assert elapsed < TIMEOUT_S + 1.5, f"took {elapsed:.2f}s for timeout_s={TIMEOUT_S}"
    assert _in_thread(guard.score, EXAMPLE, "7") == RewardResult(1.0, "ok", "")
    stats = guard.stats()
    assert stats["timeout"] == 1 and stats["ok"] == 1 and stats["restarts"] == 1


def test_items_after_a_hang_are_scored_in_order(guard):
    items = [(EXAMPLE, "7"), (EXAMPLE, "hang"), (EXAMPLE, "7"), (EXAMPLE, "8"), (EXAMPLE, "boom")]
    results = guard.score_many(items)
    assert [r.status for r in results] == ["ok", "timeout", "ok", "ok", "error"]
    assert [r.reward for r in results] == [1.0, 0.0, 1.0, 0.0, 0.0]


def test_exception_non_finite_and_wrong_type_score_zero_and_are_counted(guard):
    results = guard.score_many(
        [(EXAMPLE, "boom"), (EXAMPLE, "nan"), (EXAMPLE, "inf"), (EXAMPLE, "str"), (EXAMPLE, "7")]
    )
    assert [r.status for r in results] == ["error", "non_finite", "non_finite", "error", "ok"]
    assert [r.reward for r in results] == [0.0, 0.0, 0.0, 0.0, 1.0]
    assert "ValueError: boom" in results[0].detail
    assert "must return a float" in results[3].detail
    stats = guard.stats()
    assert (stats["error"], stats["non_finite"], stats["ok"], stats["restarts"]) == (2, 2, 1, 0)


def test_oversize_text_is_not_sent_to_the_reward(guard):
    # "hang" padded past max_chars: had the reward run, this would time out.
    [result] = guard.score_many([(EXAMPLE, "hang" + " " * 200)])
    assert result.status == "oversize" and result.reward == 0.0
    assert "max_chars=100" in result.detail
    assert guard.stats()["timeout"] == 0


def test_child_crash_scores_error_and_restarts(guard):
    results = guard.score_many([(EXAMPLE, "die"), (EXAMPLE, "7")])
    assert results[0].status == "error" and "exit code 3" in results[0].detail
    assert results[1] == RewardResult(1.0, "ok", "")
    assert guard.stats()["restarts"] == 1


def test_child_killed_between_calls_is_restarted(guard):
    os.kill(guard.child_pid, 9)
    time.sleep(0.2)
    assert guard.score(EXAMPLE, "7").reward == 1.0


def test_builtin_task_through_guard_matches_direct_scoring():
    adapter = make_task("arith", None, seed=0)
    examples = adapter.examples("eval")[:16]
    items = [(ex, ex.answer if i % 2 else "0") for i, ex in enumerate(examples)]
    with RewardGuard("arith", {}, 0, timeout_s=5.0) as guard:
        results = _in_thread(guard.score_many, items)
    assert [r.reward for r in results] == [adapter.reward(ex, text) for ex, text in items]
    assert sum(r.reward for r in results) >= 8  # every gold answer scores 1


def test_task_that_cannot_be_built_fails_at_construction():
    with pytest.raises(RewardWorkerError, match="this task refuses to be built"):
        RewardGuard(import_path("BrokenInitAdapter"), None, 0)


def test_close_stops_child_and_is_idempotent():
    guard = RewardGuard(SCRIPTED, None, 0)
    pid = guard.child_pid
    guard.close()
    guard.close()
    with pytest.raises(RuntimeError, match="closed"):
        guard.score(EXAMPLE, "7")
    deadline = time.time() + 5
    while time.time() < deadline and _alive(pid):
        time.sleep(0.05)
    assert not _alive(pid)


def test_child_dies_with_a_killed_parent(tmp_path):
    # The parent is SIGKILLed while its child hangs in a reward: no atexit, no finalizer runs.
    script = tmp_path / "parent.py"
    script.write_text(
        textwrap.dedent(
            f"""
            import sys
            sys.path.insert(0, {os.path.dirname(__file__)!r})
            from reward_fixtures import import_path
            from echo2_sdk.adapter import Example
            from echo2_sdk.rewards import RewardGuard
            if __name__ == "__main__":
                guard = RewardGuard(import_path("ScriptedRewardAdapter"), timeout_s=600)
                print(guard.child_pid, flush=True)
                guard.score(Example(id="x", prompt="", answer="1"), "hang")
            """
        )
    )
    parent = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, text=True)
    try:
        child_pid = int(parent.stdout.readline())
        time.sleep(0.3)
        assert _alive(child_pid)
    finally:
        parent.kill()
        parent.wait()
    deadline = time.time() + 5
    while time.time() < deadline and _alive(child_pid):
        time.sleep(0.05)
    assert not _alive(child_pid), "the reward child outlived its killed parent"


def test_score_directly_applies_the_same_rules():
    adapter = make_task(SCRIPTED)
    assert score_directly(adapter, EXAMPLE, "boom").status == "error"
    assert score_directly(adapter, EXAMPLE, "nan").status == "non_finite"
    assert score_directly(adapter, EXAMPLE, "xxxx", max_chars=3).status == "oversize"
    assert score_directly(adapter, EXAMPLE, "7") == RewardResult(1.0, "ok", "")


def test_bad_arguments_are_rejected_with_the_value():
    with pytest.raises(ValueError, match="timeout_s must be > 0"):
        RewardGuard(SCRIPTED, None, 0, timeout_s=0)


def _alive(pid: int) -> bool:
    """True while `pid` runs (a zombie, i.e. exited but not yet reaped, counts as dead)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(")")[-1].split()[0] != "Z"
    except FileNotFoundError:
        return False
