"""Sync-mode install wait (``install_wait.wait_installed``): a worker far behind its peers is not waited
for — it is marked overdue, which makes it hung — while one that is merely last is."""

import time

import pytest

from echo2_sdk.config import WorkerSpec
from echo2_sdk.runtime.rollout import install_wait
from echo2_sdk.runtime.rollout.install_wait import wait_installed
from echo2_sdk.runtime.rollout.pool import RolloutPool, WorkerSlot


class FakeRay:
    """``ray.wait``/``ray.get`` over handles that finish at given perf_counter offsets (None: never)."""

    def __init__(self, done_at: dict):
        self.t0 = time.perf_counter()
        self.done_at = done_at

    def _done(self, ref):
        at = self.done_at[ref]
        return at is not None and time.perf_counter() - self.t0 >= at

    def wait(self, refs, num_returns=1, timeout=None):
        deadline = time.perf_counter() + (timeout or 0)
        while True:
            ready = [r for r in refs if self._done(r)][:num_returns]
            if len(ready) >= num_returns or time.perf_counter() >= deadline:
                return ready, [r for r in refs if r not in ready]
            time.sleep(0.01)

    def get(self, ref, timeout=None):
        if ref == "fails":
            raise RuntimeError("install refused")
        return None


def pool_with(monkeypatch, done_at):
    monkeypatch.setattr(install_wait, "ray", FakeRay(done_at))
    pool = RolloutPool.__new__(RolloutPool)
    pool.slots = [WorkerSlot(n, object(), WorkerSpec(n)) for n in done_at]
    pool.last_publish_names = list(done_at)
    return pool


def test_a_worker_far_behind_its_peers_is_marked_overdue_and_not_waited_for(monkeypatch):
    pool = pool_with(monkeypatch, {"a": 0.0, "b": 0.05, "stopped": None})
    logs = []
    t0 = time.perf_counter()
    wait_installed(pool, ["a", "b", "stopped"], timeout_s=30.0, log=logs.append, laggard_s=0.3)
    waited = time.perf_counter() - t0
    assert 0.3 <= waited < 2.0  # not the 30 s receive timeout
    assert pool.slot("stopped").overdue and not pool.slot("a").overdue and not pool.slot("b").overdue
    assert any("worker stopped has not installed" in line and "treated as hung" in line for line in logs)
    assert [(s.name, why) for s, why in pool.hung(stall_timeout_s=None)] == [
        ("stopped", "had not installed a snapshot 0.3 s after its peers")]


def test_a_worker_that_is_only_last_is_waited_for(monkeypatch):
    pool = pool_with(monkeypatch, {"a": 0.0, "slow": 0.2})
    wait_installed(pool, ["a", "slow"], timeout_s=30.0, log=print, laggard_s=1.0)
    assert not any(s.overdue for s in pool.slots)


def test_without_peers_only_the_receive_timeout_ends_the_wait_and_marks_nothing(monkeypatch):
    pool = pool_with(monkeypatch, {"only": None})
    logs = []
    wait_installed(pool, ["only"], timeout_s=0.3, log=logs.append, laggard_s=0.05)
    assert not pool.slot("only").overdue and any("has not installed" in line for line in logs)


def test_a_failed_install_is_logged_with_the_worker_name(monkeypatch):
    pool = pool_with(monkeypatch, {"fails": 0.0, "ok": 0.0})
    logs = []
    wait_installed(pool, ["fails", "ok"], timeout_s=5.0, log=logs.append, laggard_s=1.0)
    assert logs == ["snapshot install failed on worker fails (RuntimeError: install refused)"]


@pytest.mark.parametrize("value", [0, -1.0, float("inf"), float("nan")])
def test_the_start_timeout_must_be_a_finite_positive_number(value):
    from echo2_sdk.config import ConfigError, RolloutConfig

    with pytest.raises(ConfigError, match="rollout.worker_start_timeout_s"):
        RolloutConfig(worker_start_timeout_s=value)
