import math
import pickle

import pytest

from echo2_sdk.records import Omega, RecordLimits, Rollout, RolloutGroup, validate_group, validate_rollout


def rec(**kw):
    base = dict(prompt_ids=(1, 2, 3), completion_ids=(4, 5), reward=1.0, version=2,
                omega=Omega((1, 1), "p"), sampler_logprobs=(-0.5, -0.1), prompt_key="p", meta={"worker": "w"})
    base.update(kw)
    return Rollout(**base)


def test_record_is_immutable_and_picklable():
    r = rec(omega=Omega([1, 1], "p"))
    assert isinstance(r.omega.loss_mask, tuple)
    with pytest.raises(Exception):
        r.reward = 0.0
    with pytest.raises(TypeError):
        r.meta["x"] = 1
    assert pickle.loads(pickle.dumps(r)) == r


@pytest.mark.parametrize(
    "kw, code",
    [
        (dict(sampler_logprobs=(-0.5,)), "length_mismatch"),
        (dict(omega=Omega((1,), "p")), "length_mismatch"),
        (dict(reward=math.nan), "non_finite"),
        (dict(reward=math.inf), "non_finite"),
        (dict(sampler_logprobs=(-0.5, math.nan)), "non_finite"),
        (dict(sampler_logprobs=(-0.5, 0.7)), "non_finite"),
        (dict(version=9), "unknown_version"),
        (dict(version=-1), "unknown_version"),
        (dict(completion_ids=(), sampler_logprobs=(), omega=Omega((), "p")), "empty_completion"),
        (dict(omega=Omega((0, 0), "p")), "bad_mask"),
        (dict(omega=Omega((2, 1), "p")), "bad_mask"),
        (dict(sampler_logprobs=None), "missing_field"),
        (dict(omega=None), "missing_field"),
        (dict(completion_ids=tuple(range(40)), sampler_logprobs=(-1.0,) * 40, omega=Omega((1,) * 40, "p")), "oversize"),
        (dict(prompt_ids=()), "empty_prompt"),
        (dict(reward=1e308), "out_of_range"),
        (dict(reward=10**400), "non_finite"),  # an integer no float holds: refused, not an OverflowError
        (dict(reward="1"), "non_finite"),
        (dict(sampler_logprobs=(-0.5, -1e308)), "out_of_range"),
        (dict(sampler_logprobs=(-0.5, -10**400), omega=Omega((1, 0), "p")), "out_of_range"),  # even masked out
        (dict(completion_ids=(4, 5, 6, 7), sampler_logprobs=(-1.0,) * 4, omega=Omega((1,) * 4, "p")), "oversize"),
        (dict(completion_ids=(4, 2**40)), "oversize"),  # no vocabulary given: still an id a tensor can hold
        (dict(completion_ids=(4, "5")), "wrong_type"),
        (dict(version=True), "unknown_version"),
    ],
)
def test_rejection_reasons(kw, code):
    reason = validate_rollout(rec(**kw), newest_version=4,
                              limits=RecordLimits(max_total_tokens=32, max_completion_tokens=3))
    assert reason is not None and reason.startswith(code + ":"), reason


def test_valid_record_passes_and_masked_garbage_logprob_is_ignored():
    assert validate_rollout(rec(), newest_version=2) is None
    r = rec(omega=Omega((1, 0), "p"), sampler_logprobs=(-0.5, math.nan))
    assert validate_rollout(r, newest_version=2) is None


def test_vocab_limit_and_wrong_type():
    assert validate_rollout(rec(completion_ids=(4, 500)), newest_version=2,
                            limits=RecordLimits(vocab_size=100)).startswith("oversize")
    assert validate_rollout({"prompt_ids": []}, newest_version=2).startswith("wrong_type")


def test_group_validation_counts_each_reason():
    g = RolloutGroup("p", 2, (rec(), rec(reward=math.nan), rec(version=1), rec(version=7)))
    accepted, rejected = validate_group(g, newest_version=3)
    assert len(accepted) == 1
    assert rejected == {"non_finite": 1, "version_mismatch": 1, "unknown_version": 1}
    assert validate_group("junk", newest_version=3) == ([], {"wrong_type": 1})


def test_wire_round_trip_and_malformed_groups_are_named():
    from echo2_sdk.records import group_from_wire, group_to_wire

    g = RolloutGroup("p", 2, (rec(), rec(reward=0.0)), worker_id="w", t_generated=1.5)
    wire = group_to_wire(g)
    assert pickle.loads(pickle.dumps(wire)) == wire
    back = group_from_wire(wire)
    assert back == g
    broken = dict(wire, rollouts=[{"x": [1]}])
    with pytest.raises(ValueError, match="malformed group"):
        group_from_wire(broken)
    with pytest.raises(ValueError, match="malformed group"):
        group_from_wire("junk")
