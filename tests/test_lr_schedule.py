"""Learning-rate schedules: the pure step → lr function, the learner applying it, and resume on the same curve."""

import doctest

import pytest
import torch

from echo2_sdk.config import ConfigError, Echo2Config, load_config
from echo2_sdk.runtime.driver.setup import learner_spec
from echo2_sdk.runtime.learning import schedule
from echo2_sdk.runtime.learning.learner import Learner
from echo2_sdk.runtime.learning.schedule import LrSchedule
from tests.test_learner import make_batch, tiny_model

torch.set_num_threads(1)


def test_doctests():
    assert doctest.testmod(schedule).failed == 0


def test_the_factor_by_hand_for_every_kind():
    # linear over 5 steps after a 1-step warm-up: from step 1 down to 0.25 at step 5
    s = LrSchedule(2.0, "linear", total_steps=5, warmup_steps=1, min_ratio=0.25)
    assert [s.lr_at(i) for i in range(5)] == pytest.approx([2.0, 2.0, 1.625, 1.25, 0.875])
    c = LrSchedule(1.0, "cosine", total_steps=4)
    assert [c.factor(i) for i in range(4)] == pytest.approx([1.0, 0.853553, 0.5, 0.146447], abs=1e-6)
    assert LrSchedule(1.0, "cosine", total_steps=1).factor(0) == 1.0  # the first step is at the peak
    w = LrSchedule(1.0, "linear", total_steps=3, warmup_steps=3)  # all warm-up: never decays
    assert [w.factor(i) for i in range(4)] == pytest.approx([1 / 3, 2 / 3, 1.0, 1.0])
    with pytest.raises(ValueError, match="is not one of"):
        LrSchedule(1.0, "step")


def test_the_learner_trains_each_step_at_the_schedules_lr_and_a_resume_continues_it(tmp_path):
    sched = LrSchedule(1e-3, "linear", total_steps=4)
    learner = Learner(tiny_model(), lr=1e-3, lr_schedule=sched)
    batch = make_batch(learner.model, [1.0, -1.0, 0.5, -0.5])
    lrs = [learner.train_step(batch)["lr"]]
    learner.save_checkpoint(str(tmp_path / "ckpt"))
    lrs.append(learner.train_step(batch)["lr"])
    assert lrs == pytest.approx([1e-3, 0.75e-3])

    resumed = Learner(tiny_model(), lr=1e-3, lr_schedule=sched)
    resumed.load_checkpoint(str(tmp_path / "ckpt"))  # its optimizer state carries step 1's lr
    assert [resumed.train_step(batch)["lr"] for _ in range(4)] == pytest.approx([0.75e-3, 0.5e-3, 0.25e-3, 0.0])
    # Past the end the lr stays at the floor, where AdamW leaves the weights as they are.
    before = [p.detach().clone() for p in resumed.model.parameters()]
    resumed.train_step(batch)
    assert all(torch.equal(a, b) for a, b in zip(before, resumed.model.parameters()))
    assert Learner(tiny_model(), lr=5e-4).train_step(batch)["lr"] == pytest.approx(5e-4)  # default: constant
    with pytest.raises(ValueError, match="differs from lr"):  # one source of truth for the peak
        Learner(tiny_model(), lr=5e-4, lr_schedule=sched)


def test_the_config_reaches_the_learner_spec_and_bad_values_are_one_line_errors():
    cfg = load_config(None, ["algo.lr=0.01", "algo.lr_schedule=cosine", "algo.lr_warmup_steps=3",
                             "algo.lr_min_ratio=0.1", "train.steps=50"])
    assert learner_spec(cfg, "base").lr_schedule == LrSchedule(0.01, "cosine", total_steps=50, warmup_steps=3,
                                                                min_ratio=0.1)
    assert learner_spec(Echo2Config(), "base").lr_schedule.kind == "constant"
    for bad, message in (("algo.lr_min_ratio=1.5", "lr_min_ratio=1.5 must be in"),
                         ("algo.lr_warmup_steps=-1", "lr_warmup_steps=-1 must be >= 0"),
                         ("algo.lr_schedule=step", "lr_schedule")):
        with pytest.raises(ConfigError, match=message):
            load_config(None, [bad])
