"""Rewards under a deadline, safe off the main thread and inside threaded Ray actors.

A reward function is user code (math-verify, a regex, a game engine) and can hang, raise or return
NaN. None of that may stop a rollout worker: a bad reward is data (scored 0 and counted), not a
crash. ``signal.alarm`` deadlines only work on the main thread, so :class:`RewardGuard` runs the
reward in a persistent child process instead and kills it when an item overruns its deadline.

The child is started with the ``spawn`` method (a fresh interpreter, never a ``fork`` of a process
that has threads, which can deadlock) and builds the adapter itself from the task name and options,
so nothing but examples and texts cross the pipe. Like any spawn-based code, a script that creates
a guard at import time needs the usual ``if __name__ == "__main__":`` guard.
"""

from __future__ import annotations

import functools
import math
import multiprocessing
import numbers
import os
import signal
import threading
import traceback
import weakref
from collections import Counter
from dataclasses import dataclass
from typing import Any, Sequence

from echo2_sdk.adapter import Example, TaskAdapter

STATUSES = ("ok", "error", "timeout", "oversize", "non_finite")
_MAX_DETAIL_CHARS = 500


@dataclass(frozen=True)
class RewardResult:
    """The reward of one completion and how it was obtained.

    ``status``: ``ok``; ``error`` (the reward raised: ``detail`` has the exception); ``timeout``
    (it overran the deadline); ``oversize`` (the text exceeded ``max_chars``, not scored);
    ``non_finite`` (it returned NaN/inf). Every status but ``ok`` carries reward 0.0.
    """

    reward: float
    status: str
    detail: str = ""


class RewardWorkerError(RuntimeError):
    """The reward child process could not be started (e.g. the task cannot be built)."""


def _shorten(text: str) -> str:
    return text if len(text) <= _MAX_DETAIL_CHARS else text[: _MAX_DETAIL_CHARS - 3] + "..."


def score_directly(
    adapter: TaskAdapter, example: Example, text: str, *, max_chars: int | None = None
) -> RewardResult:
    """Score in this thread with the same rules as the guard, minus the deadline.

    Used by the guard's child process, and by callers that score without a guard (evaluation on a
    trusted reward, checks).
    """
    if max_chars is not None and len(text) > max_chars:
        return RewardResult(0.0, "oversize", f"{len(text)} chars > max_chars={max_chars}")
    try:
        value = adapter.reward(example, text)
    except Exception as exc:  # any failure of user code is a data point, not a crash
        return RewardResult(0.0, "error", _shorten(f"{type(exc).__name__}: {exc}"))
    if not isinstance(value, numbers.Real):
        return RewardResult(
            0.0,
            "error",
            _shorten(f"reward returned {type(value).__name__} {value!r}; it must return a float"),
        )
    reward = float(value)
    if not math.isfinite(reward):
        return RewardResult(0.0, "non_finite", f"reward returned {reward!r}")
    return RewardResult(reward, "ok", "")


@functools.lru_cache(maxsize=None)  # asked per scored item; the answer depends on the class alone
def _quick_path(cls: type) -> Any:
    """``cls.quick_reward`` when it was written with ``cls.reward``: defined by the class that defines
    ``reward`` or by a subclass of it. A subclass that overrides ``reward`` only (a generated task over a
    built-in) would otherwise be scored by its parent's rule.

    >>> from echo2_sdk.registry import get_task_class
    >>> arith = get_task_class("arith")
    >>> _quick_path(arith) is not None, _quick_path(type("Mine", (arith,), {"reward": lambda *_: 0.0})) is None
    (True, True)
    """
    owners = {}
    for name in ("reward", "quick_reward"):
        owners[name] = next((k for k in cls.__mro__ if name in vars(k)), None)
    if owners["quick_reward"] is None or owners["reward"] is None:
        return None
    if not issubclass(owners["quick_reward"], owners["reward"]):
        return None
    return vars(owners["quick_reward"])["quick_reward"]


def score_quickly(adapter: TaskAdapter, example: Example, text: str) -> RewardResult | None:
    """The adapter's ``quick_reward`` under the guard's rules, or None when ``reward`` must decide.

    A raise or a non-number is not the quick path's to report: the item goes to ``reward``, which
    decides it under the deadline (and reports any failure of its own).
    """
    quick = _quick_path(type(adapter))
    if quick is None:
        return None
    try:
        value = quick(adapter, example, text)
    except Exception:  # the full reward decides
        return None
    if value is None or isinstance(value, bool) or not isinstance(value, numbers.Real):
        return None
    reward = float(value)
    if not math.isfinite(reward):
        return RewardResult(0.0, "non_finite", f"quick_reward returned {reward!r}")
    return RewardResult(reward, "ok", "")


# ----- child process ----------------------------------------------------------------------------
def _exit_with_parent() -> None:
    """Exit as soon as the parent dies, even when the parent was SIGKILLed (atexit never ran).

    The parent's end of the spawn bootstrap pipe closes when it dies, which wakes this thread.
    A thread rather than PR_SET_PDEATHSIG: that signal fires when the parent *thread* that
    started us exits, and guards are started from short-lived threads in thread pools.
    """
    parent = multiprocessing.parent_process()
    if parent is None:
        return

    def watch() -> None:
        parent.join()
        os._exit(0)

    threading.Thread(target=watch, name="echo2-reward-parent-watch", daemon=True).start()


def _child_main(conn, task_name: str, options: Any, seed: int, max_chars: int) -> None:
    # Ctrl-C in a terminal reaches the whole process group; the parent decides when we stop.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    _exit_with_parent()
    try:
        from echo2_sdk.registry import make_task

        adapter = make_task(task_name, options, seed=seed)
    except BaseException:
        conn.send(("fatal", traceback.format_exc()))
        return
    conn.send(("ready", os.getpid()))
    while True:
        try:
            message = conn.recv()
        except (EOFError, OSError):
            return
        if message[0] == "close":
            return
        # One message per item, so the parent can time each item separately.
        for example, text in message[1]:
            result = score_directly(adapter, example, text, max_chars=max_chars)
            conn.send((result.reward, result.status, result.detail))


def _stop_child(process, conn) -> None:
    """Ask the child to exit, kill it if it does not; idempotent (used by close and finalizers)."""
    try:
        if process.is_alive():
            try:
                conn.send(("close",))
            except (OSError, ValueError):
                pass
            process.join(timeout=1.0)
        if process.is_alive():
            process.kill()
            process.join(timeout=5.0)
    finally:
        conn.close()


# ----- parent side ------------------------------------------------------------------------------
class RewardGuard:
    """Scores completions in a persistent child process, with a per-item deadline.

    ``task_name``/``options``/``seed`` are what :func:`echo2_sdk.registry.make_task` takes (options:
    the ``task.options`` mapping or the task's Options dataclass; it must pickle). A task that cannot
    be built raises :class:`RewardWorkerError` here, with the child's traceback.

    ``score_many`` sends a batch in one round trip; the child answers item by item. When an item
    overruns ``timeout_s`` the child is killed, the item scores 0 with status ``timeout``, a new child
    is started and the remaining items continue there. Texts longer than ``max_chars`` score 0
    without reaching the reward (``oversize``). One batch runs at a time (calls are serialized).

    ``local``: the caller's own adapter of the same task. Items its ``quick_reward`` decides are
    scored here, without the round trip (a worker passes its adapter; the child stays for the rest).
    """

    def __init__(
        self,
        task_name: str,
        options: Any = None,
        seed: int = 0,
        *,
        timeout_s: float = 5.0,
        max_chars: int = 4000,
        start_timeout_s: float = 120.0,
        local: TaskAdapter | None = None,
    ) -> None:
        if not timeout_s > 0:
            raise ValueError(f"RewardGuard timeout_s must be > 0 seconds, got {timeout_s!r}")
        if max_chars < 0:
            raise ValueError(f"RewardGuard max_chars must be >= 0, got {max_chars!r}")
        self.task_name = task_name
        self.options = options
        self.seed = seed
        self.timeout_s = float(timeout_s)
        self.max_chars = int(max_chars)
        self.start_timeout_s = float(start_timeout_s)
        self.local = local
        self._in_process = 0
        self._context = multiprocessing.get_context("spawn")
        self._lock = threading.Lock()
        self._counts: Counter = Counter({status: 0 for status in STATUSES})
        self._restarts = 0
        self._process = None
        self._conn = None
        self._finalizer: weakref.finalize | None = None
        self._closed = False
        self._start_child()

    # ----- child lifecycle --------------------------------------------------------------------
    def _start_child(self) -> None:
        parent_conn, child_conn = self._context.Pipe(duplex=True)
        process = self._context.Process(
            target=_child_main,
            args=(child_conn, self.task_name, self.options, self.seed, self.max_chars),
            name=f"echo2-reward-{self.task_name}",
            # A daemonic multiprocessing worker may not have children; the parent watch in the
            # child still ties its life to ours in that case.
            daemon=not multiprocessing.current_process().daemon,
        )
        process.start()
        child_conn.close()  # so that the child's death reads as EOF on our end
        failure = None
        if not parent_conn.poll(self.start_timeout_s):
            failure = f"did not start within start_timeout_s={self.start_timeout_s}s"
        else:
            try:
                kind, payload = parent_conn.recv()
                if kind == "fatal":
                    failure = f"could not build the task:\n{payload}"
            except (EOFError, OSError):
                process.join(timeout=5.0)
                failure = (
                    f"died during start-up (exit code {process.exitcode}); see its traceback on "
                    "stderr. If it fails re-importing your main script, spawn needs that script's "
                    "entry code under `if __name__ == '__main__':` (and a real file, not stdin)"
                )
        if failure is not None:
            process.kill()
            _stop_child(process, parent_conn)
            raise RewardWorkerError(
                f"reward process for task {self.task_name!r} (options {self.options!r}) {failure}"
            )
        self._process, self._conn = process, parent_conn
        self._finalizer = weakref.finalize(self, _stop_child, process, parent_conn)

    def _kill_child(self) -> None:
        if self._process is not None:
            self._process.kill()  # SIGKILL: a reward stuck in C code ignores anything milder
        if self._finalizer is not None:
            self._finalizer()
        self._process = self._conn = self._finalizer = None

    def _restart_child(self) -> None:
        self._kill_child()
        self._restarts += 1
        self._start_child()

    # ----- scoring ----------------------------------------------------------------------------
    def score(self, example: Example, text: str) -> RewardResult:
        """Score one completion (a batch of one)."""
        return self.score_many([(example, text)])[0]

    def score_many(self, items: Sequence[tuple[Example, str]]) -> list[RewardResult]:
        """Score ``(example, completion_text)`` pairs; results in input order, never raises for data."""
        items = list(items)
        results: list[RewardResult | None] = [None] * len(items)
        pending, local, quick_count = [], self.local, 0
        for index, (_, text) in enumerate(items):
            if not isinstance(text, str):
                results[index] = RewardResult(
                    0.0, "error", f"completion must be str, got {type(text).__name__}"
                )
            elif len(text) > self.max_chars:
                results[index] = RewardResult(
                    0.0, "oversize", f"{len(text)} chars > max_chars={self.max_chars}"
                )
            else:
                quick = None if local is None else score_quickly(local, *items[index])
                if quick is None:
                    pending.append(index)
                else:
                    results[index], quick_count = quick, quick_count + 1
        with self._lock:
            if self._closed:
                raise RuntimeError("RewardGuard is closed; create a new one to score more items")
            self._in_process += quick_count
            while pending:
                pending = self._run_batch(items, pending, results)
            for result in results:
                self._counts[result.status] += 1
        return results  # type: ignore[return-value]

    def _send_batch(self, batch: list[tuple[Example, str]]) -> None:
        if self._process is None or not self._process.is_alive():
            self._restart_child()  # died between calls (killed from outside, OOM...)
        try:
            self._conn.send(("score", batch))
        except (BrokenPipeError, ConnectionResetError, EOFError):
            self._restart_child()
            self._conn.send(("score", batch))

    def _run_batch(self, items, pending: list[int], results: list) -> list[int]:
        """Send ``pending`` items; fill ``results``; return the items still to score after a restart."""
        try:
            self._send_batch([items[i] for i in pending])
        except (TypeError, AttributeError) as exc:
            raise TypeError(
                f"cannot send examples to the reward process: {exc}. Examples must be picklable; "
                "keep Example.meta to plain data (numbers, strings, lists, dicts)"
            ) from exc
        for position, index in enumerate(pending):
            if not self._conn.poll(self.timeout_s):
                results[index] = RewardResult(
                    0.0,
                    "timeout",
                    f"reward did not finish within timeout_s={self.timeout_s}s; "
                    "the reward process was restarted",
                )
                self._restart_child()
                return pending[position + 1 :]
            try:
                reward, status, detail = self._conn.recv()
            except (EOFError, OSError):
                self._process.join(timeout=5.0)
                results[index] = RewardResult(
                    0.0,
                    "error",
                    f"reward process died while scoring (exit code {self._process.exitcode}); "
                    "it was restarted",
                )
                self._restart_child()
                return pending[position + 1 :]
            results[index] = RewardResult(reward, status, detail)
        return []

    # ----- bookkeeping ------------------------------------------------------------------------
    def stats(self) -> dict[str, int]:
        """Counts of each status since creation, ``restarts`` of the child process, and how many
        items ``quick_reward`` decided in this process (``in_process``, also counted by status)."""
        # No lock: a batch waiting on a hung reward must not block monitoring. The keys are fixed,
        # so reading while a batch updates the counts is safe (at worst one batch behind).
        return {**{s: self._counts[s] for s in STATUSES}, "restarts": self._restarts,
                "in_process": self._in_process}

    @property
    def child_pid(self) -> int | None:
        return None if self._process is None else self._process.pid

    def close(self) -> None:
        """Stop the child process. Idempotent."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            if self._finalizer is not None:
                self._finalizer()
            self._process = self._conn = self._finalizer = None

    def __enter__(self) -> "RewardGuard":
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()

    def __repr__(self) -> str:
        state = "closed" if self._closed else f"child pid {self.child_pid}"
        return f"RewardGuard({self.task_name!r}, timeout_s={self.timeout_s}, {state})"
