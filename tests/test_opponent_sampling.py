"""Prioritized opponent sampling (``train.opponent_sampling: prioritized``): the pure share function, the
driver's running statistics, the re-drawn examples, and the config's one-line errors."""

from __future__ import annotations

import json
import math
from collections import Counter

import pytest

from echo2_sdk.adapters.arith import ArithAdapter
from echo2_sdk.adapters.moba import MobaAdapter
from echo2_sdk.adapters.poker import PokerAdapter
from echo2_sdk.config import ConfigError, TrainConfig, load_config
from echo2_sdk.opponent_sampling import prioritized_shares
from echo2_sdk.records import Omega, Rollout, RolloutGroup
from echo2_sdk.runtime.driver.opponents import WINDOW_GROUPS, OpponentSampler

POOL = "rule:calling, rule:tag, rule:lag"
PRIORITIZED = TrainConfig(opponent_sampling="prioritized", opponent_priority=2.0, opponent_floor=0.25, seed=3)


def _group(lineup, rewards, key="poker:train:0"):
    rollouts = [Rollout((1,), (2,), r, 0, Omega((1,), "g"), (0.0,), key, meta={"opponent": lineup}) for r in rewards]
    return RolloutGroup(key, 0, rollouts)


def test_doctests():
    import doctest

    from echo2_sdk import opponent_sampling

    assert doctest.testmod(opponent_sampling).failed == 0


def test_shares_hand_computed():
    # spread 2, strength 1: gaps (0, 1, 2)/2 -> weights 1/3 * (1, e^0.5, e^1), floor 0.1 of the base mixed in
    base = [1 / 3] * 3
    got = prioritized_shares(base, [1.0, 0.0, -1.0], spread=2.0, strength=1.0, floor=0.1)
    w = [1.0, math.exp(0.5), math.exp(1.0)]
    want = [0.1 / 3 + 0.9 * x / sum(w) for x in w]
    assert got == pytest.approx(want, abs=1e-12) and sum(got) == pytest.approx(1.0)
    # unseen line-ups count as the mean of the seen ones; no spread: the base shares
    assert prioritized_shares(base, [0.0, None, -2.0], spread=1.0, strength=1.0, floor=0.0)[1] == pytest.approx(
        prioritized_shares(base, [0.0, -1.0, -2.0], spread=1.0, strength=1.0, floor=0.0)[1])
    assert prioritized_shares(base, [5.0, 0.0, -5.0], spread=0.0, strength=1.0, floor=0.0) == tuple(base)
    # a huge gap neither overflows nor starves a line-up below its floor
    extreme = prioritized_shares([0.5, 0.5], [0.0, -1e9], spread=1e-9, strength=50.0, floor=0.2)
    assert extreme[0] == pytest.approx(0.1) and extreme[1] == pytest.approx(0.9)


def test_the_worst_lineup_is_drawn_more_and_every_lineup_keeps_its_floor():
    adapter = PokerAdapter({"num_train": 64, "num_eval": 2, "num_sft": 0, "opponent": POOL}, seed=0)
    sampler = OpponentSampler.from_config(PRIORITIZED, adapter)
    assert sampler.shares() == pytest.approx((1 / 3,) * 3)
    for _ in range(WINDOW_GROUPS):
        sampler.observe([_group("rule:calling", [1.0, 3.0]), _group("rule:tag", [0.0, 1.0]),
                         _group("rule:lag", [-6.0, -2.0])])
    calling, tag, lag = sampler.shares()
    assert lag > tag > calling >= 0.25 / 3 - 1e-12 and lag > 0.5
    drawn = Counter(ex.meta["opponent"] for ex in sampler.assign(adapter.examples("train")))
    assert drawn["rule:lag"] >= 0.6 * 64 and len(drawn) == 3  # the floor: the others are still drawn
    row = sampler.row()
    assert row["opponent_share/rule:lag"] == pytest.approx(lag, abs=1e-4) and row["opponent_return/rule:lag"] == -4.0


def test_redrawn_examples_keep_their_deal_and_group_by_the_new_lineup():
    adapter = PokerAdapter({"num_train": 16, "num_eval": 2, "num_sft": 0, "opponent": POOL}, seed=0)
    examples = list(adapter.examples("train"))
    first = OpponentSampler.from_config(PRIORITIZED, adapter).assign(examples)
    again = OpponentSampler.from_config(PRIORITIZED, adapter).assign(examples)
    assert [e.meta["opponent"] for e in first] == [e.meta["opponent"] for e in again]  # seeded
    assert {e.meta["opponent"] for e in first} == {"rule:calling", "rule:tag", "rule:lag"}
    for old, new in zip(examples, first):
        assert (new.id, new.meta["episode_seed"]) == (old.id, old.meta["episode_seed"])
        assert adapter.group_key(new).endswith(f"|vs {new.meta['opponent']}")
        assert adapter.env_for(new).config.opponents == (new.meta["opponent"],)
    with pytest.raises(ValueError, match="not in task.options.opponent"):
        adapter.against(examples[0], "rule:random")


def test_hostile_or_unknown_meta_is_ignored_and_state_survives_a_checkpoint():
    adapter = MobaAdapter({"num_train": 8, "num_eval": 2, "num_sft": 0, "opponent": "rule:farmer, rule:pusher"},
                          seed=0)
    sampler = OpponentSampler.from_config(PRIORITIZED, adapter)
    sampler.observe([_group(["rule:farmer"], [1.0]), _group("rule:nobody", [5.0]), _group("rule:farmer", [math.nan]),
                     _group({"x": 1}, [0.0])])
    assert sampler.means == {} and len(sampler.returns) == 0
    sampler.observe([_group("rule:farmer", [0.0, 0.1]), _group("rule:pusher", [0.3, 0.4])])
    sampler.assign(adapter.examples("train")[:3])
    state = json.loads(json.dumps(sampler.state()))  # as the checkpoint's JSON extra holds it
    restored = OpponentSampler.from_config(PRIORITIZED, adapter)
    restored.restore(state)
    assert restored.shares() == sampler.shares() and restored.draws == 3 and sampler.shares()[0] > 0.5


def test_prioritized_needs_a_pool_and_bad_settings_fail_in_one_line():
    for adapter in (ArithAdapter(seed=0), PokerAdapter({"num_sft": 0, "opponent": "rule:calling"}, seed=0)):
        with pytest.raises(ConfigError, match="needs two or more line-ups in task.options.opponent"):
            OpponentSampler.from_config(PRIORITIZED, adapter)
    assert OpponentSampler.from_config(TrainConfig(), PokerAdapter({"num_sft": 0}, seed=0)) is None
    for override, message in (("train.opponent_sampling=pfsp", "use one of"),
                              ("train.opponent_sampling=prioritised", "Did you mean 'prioritized'"),
                              ("train.opponent_priority=-1", "opponent_priority=-1"),
                              ("train.opponent_floor=1.5", "opponent_floor=1.5")):
        with pytest.raises(ConfigError, match=message):
            load_config("examples/poker.yaml", [override])
