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
from echo2_sdk.rewards import RewardGuard, RewardResult, RewardWorkerError, score_directly, score_quickly

sys.path.insert(0, os.path.dirname(__file__))
from reward_fixtures import ScriptedRewardAdapter, import_path  # noqa: E402

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


class _QuickScripted(ScriptedRewardAdapter):
    """A local adapter's quick path: decides digits and "hang" here, scripts its own failures."""

    def quick_reward(self, example: Example, completion_text: str):
        if completion_text == "hang":
            return 0.5  # had it reached the child, this item would time out
        if completion_text == "quick-boom":
            raise ValueError("quick path failure")
        if completion_text == "quick-nan":
            return float("nan")
        if completion_text in ("quick-str", "quick-bool"):
            return "1.0" if completion_text == "quick-str" else True
        if completion_text.isdigit():
            return 1.0 if completion_text == example.answer else 0.0
        return None


def test_quick_reward_decides_in_process_and_defers_the_rest_to_the_child():
    with RewardGuard(SCRIPTED, None, 0, timeout_s=TIMEOUT_S, max_chars=100, local=_QuickScripted(None)) as guard:
        started = time.perf_counter()
        results = _in_thread(guard.score_many, [(EXAMPLE, "hang"), (EXAMPLE, "7"), (EXAMPLE, "8")])
        assert time.perf_counter() - started < TIMEOUT_S, "a quick-decided item went to the child"
        assert results == [RewardResult(0.5, "ok", ""), RewardResult(1.0, "ok", ""), RewardResult(0.0, "ok", "")]
        # A raise or a non-number goes to the full reward (which scores these texts 0, or fails on "boom").
        results = guard.score_many([(EXAMPLE, "quick-boom"), (EXAMPLE, "quick-str"), (EXAMPLE, "quick-bool"),
                                    (EXAMPLE, "boom"), (EXAMPLE, "quick-nan"), (EXAMPLE, "x" * 101)])
        assert [r.status for r in results] == ["ok", "ok", "ok", "error", "non_finite", "oversize"]
        assert [r.reward for r in results] == [0.0] * 6
        assert "quick_reward returned nan" in results[4].detail
        stats = guard.stats()
        assert stats["in_process"] == 4 and stats["ok"] == 6 and stats["timeout"] == 0 and stats["restarts"] == 0


def test_arith_quick_reward_agrees_with_its_reward():
    adapter = make_task("arith", None, seed=0)
    example = adapter.examples("eval")[0]
    gold = int(example.answer)
    texts = [str(gold), f" {gold} \n", str(gold + 1), str(-gold), f"{gold}.0", f"{gold}+0", "", " ", "abc",
             "٣", "1" * 60, f"\\boxed{{{gold}}}", f"0{gold}", "-0", "12 13"]
    decided = 0
    for text in texts:
        quick = adapter.quick_reward(example, text)
        if quick is not None:
            decided += 1
            assert quick == adapter.reward(example, text), text
    assert decided >= len(texts) - 2  # only the unicode digit and the 60-digit number need math-verify


def test_an_inherited_quick_reward_is_off_once_reward_is_overridden():
    """A task generated over a built-in overrides ``reward``; the parent's quick rule must not score it."""
    arith = make_task("arith", None, seed=0)
    mine = type("Mine", (type(arith),), {"reward": lambda self, example, text: 0.25})(seed=0)
    both = type("Both", (type(mine),), {"quick_reward": lambda self, example, text: 0.25})(seed=0)
    example = arith.examples("eval")[0]
    assert score_quickly(arith, example, example.answer) == RewardResult(1.0, "ok", "")
    assert score_quickly(mine, example, example.answer) is None  # its own reward decides: 0.25, not 1.0
    assert score_quickly(both, example, example.answer) == RewardResult(0.25, "ok", "")


def test_doctests():
    import doctest

    from echo2_sdk import rewards
    from echo2_sdk.adapters import arith

    for module in (rewards, arith):
        result = doctest.testmod(module)
        assert result.attempted > 0 and result.failed == 0, module.__name__
