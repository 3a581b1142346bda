"""Opponent pools (``task.options.opponent``): a weighted mixture of line-ups, one drawn per deal, seeded,
recorded in meta and in Ω.group, played for real, and checked at construction."""

from __future__ import annotations

from collections import Counter

import pytest

from echo2_sdk.adapters.moba import MobaAdapter, eval_game
from echo2_sdk.adapters.poker import PokerAdapter, eval_table
from echo2_sdk.envs.moba.players import Farmer, Pusher
from echo2_sdk.envs.poker.players import CallingStation, LooseAggressive, TightAggressive
from echo2_sdk.episodic import lineup_seats, opponent_pool
from echo2_sdk.records import validate_rollout

SMALL = {"num_train": 40, "num_eval": 4, "num_sft": 0}


def _seat_types(env) -> list[type]:
    return [type(p) for _, p in sorted(env.players.items())]


def test_pool_and_lineup_parsing():
    assert opponent_pool("rule:tag") == (("rule:tag", 1.0),)
    assert opponent_pool("rule:tag + rule:lag, 3 rule:calling") == (("rule:tag+rule:lag", 0.25), ("rule:calling", 0.75))
    assert lineup_seats("rule:tag") == ("rule:tag",)
    with pytest.raises(ValueError, match="task.options.opponent=.*weight 'x' is not a number"):
        opponent_pool("x rule:tag")


def test_each_deal_draws_one_lineup_seeded_and_weighted():
    adapter = PokerAdapter({**SMALL, "opponent": "rule:tag, rule:lag"})
    drawn = [e.meta["opponent"] for e in adapter.examples("train")]
    assert set(drawn) == {"rule:tag", "rule:lag"}
    assert drawn == [e.meta["opponent"] for e in PokerAdapter({**SMALL, "opponent": "rule:tag, rule:lag"}).examples("train")]
    assert drawn != [e.meta["opponent"] for e in PokerAdapter({**SMALL, "opponent": "rule:tag, rule:lag"}, seed=1).examples("train")]
    heavy = Counter(e.meta["opponent"] for e in PokerAdapter({**SMALL, "opponent": "1000 rule:tag, rule:lag"}).examples("train"))
    assert heavy == {"rule:tag": 40}
    # The deal itself does not depend on the pool: the same episode seeds as a single opponent.
    single = PokerAdapter({**SMALL, "opponent": "rule:tag"})
    assert [e.meta["episode_seed"] for e in single.examples("train")] == [e.meta["episode_seed"] for e in adapter.examples("train")]


def test_an_episode_is_played_against_the_lineup_it_drew():
    pooled = PokerAdapter({**SMALL, "opponent": "rule:tag, rule:lag"})
    for example in pooled.examples("train")[:12]:
        spec = example.meta["opponent"]
        expected = {"rule:tag": TightAggressive, "rule:lag": LooseAggressive}[spec]
        assert _seat_types(pooled.env_for(example)) == [expected]
        alone = PokerAdapter({**SMALL, "opponent": spec})
        twin = alone.examples("train")[int(example.id.rsplit(":", 1)[1])]
        mine, theirs = pooled.play_episode(example, "rule:calling"), alone.play_episode(twin, "rule:calling")
        assert mine.messages == theirs.messages and mine.reward == theirs.reward
        assert mine.group == f"{theirs.group}|vs {spec}" and mine.info["opponent"] == spec


def test_records_carry_the_opponent_and_group_by_deal_and_opponent(tiny_tokenizer):
    pooled = PokerAdapter({**SMALL, "opponent": "rule:tag, rule:calling"})
    examples = pooled.examples("train")[:6]
    for example in examples:
        spec = example.meta["opponent"]
        groups = set()
        for _ in range(2):  # two of the n samples of one deal
            episode = pooled.open_episode(example, tiny_tokenizer)
            assert _seat_types(episode.env) == [{"rule:tag": TightAggressive, "rule:calling": CallingStation}[spec]]
            while not episode.done:
                episode.submit_text("fold")
            record = pooled.to_rollout(episode, example=example, version=0)
            assert validate_rollout(record, newest_version=0) is None
            assert record.meta["opponent"] == spec and record.omega.group.endswith(f"|vs {spec}")
            groups.add(record.omega.group)
        assert groups == {pooled.group_key(example)}
    # One line-up: groups read as before, the opponent is still in meta.
    single = PokerAdapter({**SMALL, "opponent": "rule:tag"})
    example = single.examples("train")[0]
    assert "|vs" not in single.group_key(example) and example.meta["opponent"] == "rule:tag"


def test_per_seat_lineups_in_a_pool():
    adapter = PokerAdapter({**SMALL, "seats": 3, "opponent": "rule:tag + rule:lag, rule:calling"})
    by_spec = {e.meta["opponent"]: e for e in adapter.examples("train")}
    assert set(by_spec) == {"rule:tag+rule:lag", "rule:calling"}
    assert _seat_types(adapter.env_for(by_spec["rule:tag+rule:lag"])) == [TightAggressive, LooseAggressive]
    assert _seat_types(adapter.env_for(by_spec["rule:calling"])) == [CallingStation, CallingStation]
    assert eval_table(adapter.options)["opponents"] == "rule:tag+rule:lag,rule:calling"


@pytest.mark.parametrize("options, message", [
    ({"opponent": "rule:tag, rule:tgg"}, r"task.options.opponent: line-up 'rule:tgg'.*Did you mean 'rule:tag'"),
    ({"opponent": "rule:tag, rule:tag+rule:lag"}, r"task.options.opponent: line-up 'rule:tag\+rule:lag'.*one per other seat"),
    ({"demonstrator": "1000 rule:tag, rule:lagg"}, r"task.options.demonstrator: 'rule:lagg'.*Did you mean 'rule:lag'"),
])
def test_a_misspelled_player_is_refused_at_construction_even_at_a_tiny_weight(options, message):
    with pytest.raises(ValueError, match=message):
        PokerAdapter({**SMALL, **options})


def test_llm_checkpoints_join_the_pool_and_load_only_when_drawn():
    adapter = PokerAdapter({**SMALL, "opponent": "rule:calling, llm:runs/old/base_model"})  # nothing loads here
    assert adapter.llm_policy_factory is None
    loaded = []

    def factory(name):
        loaded.append(name)
        return lambda messages: "call"

    adapter.llm_policy_factory = factory
    example = next(e for e in adapter.examples("train") if e.meta["opponent"].startswith("llm:"))
    episode = adapter.play_episode(example, "rule:calling")
    assert loaded == ["runs/old/base_model"] and episode.info["opponent"] == "llm:runs/old/base_model"


def test_moba_pools_its_foes_the_same_way():
    adapter = MobaAdapter({**SMALL, "opponent": "rule:farmer, rule:pusher"})
    by_spec = {e.meta["opponent"]: e for e in adapter.examples("train")}
    assert set(by_spec) == {"rule:farmer", "rule:pusher"}
    for spec, example in by_spec.items():
        foe = adapter.env_for(example).players[1]
        assert isinstance(foe, {"rule:farmer": Farmer, "rule:pusher": Pusher}[spec])
        assert adapter.group_key(example).endswith(f"|vs {spec}")
    assert eval_game(adapter.options)["opponents"] == "rule:farmer,rule:pusher"


def test_held_out_play_is_summarized_per_lineup_when_pooled(tiny_tokenizer):
    import dataclasses

    from echo2_sdk.runtime.driver.evaluation import format_eval
    from echo2_sdk.runtime.rollout.episodes import summarize_rollouts

    pooled = PokerAdapter({**SMALL, "opponent": "rule:tag, rule:calling"})
    records = []
    for example in pooled.examples("train")[:10]:
        episode = pooled.play_episode(example, "rule:calling")
        record = pooled.episode_to_rollout(episode, tiny_tokenizer)
        turns = sum(m["role"] == "assistant" for m in episode.messages)
        records.append(dataclasses.replace(record, meta={**record.meta, "turns": turns}))
    summary = summarize_rollouts(records)
    assert set(summary["by_opponent"]) == {"rule:tag", "rule:calling"}
    for spec, part in summary["by_opponent"].items():
        mine = [r.reward for r in records if r.meta["opponent"] == spec]
        assert part["episodes"] == len(mine) and part["mean_return"] == pytest.approx(sum(mine) / len(mine))
    assert sum(p["episodes"] for p in summary["by_opponent"].values()) == summary["episodes"] == 10
    assert "; vs rule:calling: return" in format_eval(summary)
    alone = [dataclasses.replace(r, meta={**r.meta, "opponent": "rule:tag"}) for r in records]
    assert "by_opponent" not in summarize_rollouts(alone)
