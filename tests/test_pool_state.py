"""The cost-aware pool's state through a checkpoint: dollars, measured μ_i, T_train / T_bcast, the random
policy's RNG and the decision log carry over; the resumed first plan uses the measurements."""

import json

import pytest

from echo2_sdk.runtime.planning.pool_state import PoolState

from test_pool_control import controller


def test_cost_and_estimates_survive_a_checkpoint_and_the_resumed_plan_uses_them(tmp_path):
    ctl, _ = controller(tmp_path)
    ctl.start(0.0)
    ctl.on_result("cheap", 4, 2.0)  # measured 2/s against its 12/s prior
    ctl.on_result("mid", 20, 1.0)  # 20/s against 10/s
    ctl.tick(1.0)
    ctl.on_step(2.0, 0.5, accepted_samples=16, reward_mean=0.2)
    ctl.on_broadcast(0.3, 2.0)
    ctl.on_step(3.0, 0.5, accepted_samples=16, reward_mean=0.3)
    saved = json.loads(json.dumps(ctl.state().to_dict()))  # as a checkpoint stores it

    (tmp_path / "resumed").mkdir()
    fresh, pool = controller(tmp_path / "resumed")
    fresh.restore(PoolState.from_dict(saved))
    assert ctl.cost.cost_usd > 0 and fresh.cost.cost_usd == pytest.approx(ctl.cost.cost_usd)
    assert fresh.cost.accepted_samples == 32 and dict(fresh.cost.usd_by_gpu) == pytest.approx(dict(ctl.cost.usd_by_gpu))
    assert fresh.scheduler.estimates() == ctl.scheduler.estimates()
    assert (fresh.scheduler.estimate("cheap"), fresh.scheduler.estimate("mid")) == (2.0, 20.0)
    assert fresh.scheduler.t_train_s == ctl.scheduler.t_train_s and fresh.scheduler.t_bcast_s == ctl.scheduler.t_bcast_s
    assert fresh.applied == ctl.applied
    fresh.start(0.0)
    # From the priors it rented cheap + mid; measured, mid alone (ρ 0.5/20) covers μ_target first.
    assert pool.calls[0] == ("activate", "mid") and ("activate", "cheap") not in pool.calls
    row = fresh.on_step(1.0, 0.5, accepted_samples=16, reward_mean=0.4)
    assert row["cost_usd"] > ctl.cost.cost_usd  # billing goes on from the carried total
