"""PokerAdapter: examples, text-level and token-level episodes, turn masks, Ω groups, records."""

from __future__ import annotations

import math

import pytest

from echo2_sdk.adapter import MultiTurnTaskAdapter, TaskAdapter

from echo2_sdk.adapters.poker import PokerAdapter
from echo2_sdk.checks import check_adapter
from echo2_sdk.envs.poker.strength import BUCKETS
from echo2_sdk.records import validate_rollout
from echo2_sdk.signals import assistant_mask, compute_advantages, grouping_keys


def _mask_ids(tok):
    return dict(im_start_id=tok.convert_tokens_to_ids("<|im_start|>"), im_end_id=tok.convert_tokens_to_ids("<|im_end|>"),
                newline_id=tok.convert_tokens_to_ids("\n"))


def _masked_text(tok, ids, mask) -> str:
    return tok.decode([t for t, m in zip(ids, mask) if m], skip_special_tokens=False)


def test_check_adapter_and_deterministic_splits(tiny_tokenizer):
    adapter = PokerAdapter({"num_train": 16, "num_eval": 8, "num_sft": 4})
    report = check_adapter(adapter, tiny_tokenizer)
    assert report["splits"] == {"sft": 4, "train": 16, "eval": 8}
    twin = PokerAdapter({"num_train": 16, "num_eval": 8, "num_sft": 4})
    assert [e.meta for e in twin.examples("train")] == [e.meta for e in adapter.examples("train")]
    seeds = {e.meta["episode_seed"] for split in ("train", "eval") for e in adapter.examples(split)}
    assert len(seeds) == 24
    other = PokerAdapter({"num_train": 16, "num_eval": 8}, seed=1)
    assert other.examples("train")[0].meta != adapter.examples("train")[0].meta
    with pytest.raises(ValueError, match="reward_unit"):
        PokerAdapter({"reward_unit": "bb"})
    # A multi-turn task has no single-turn reward r = R(x, y) at all: its reward is the episode's return.
    assert isinstance(adapter, MultiTurnTaskAdapter) and not isinstance(adapter, TaskAdapter)
    assert not hasattr(adapter, "reward")


@pytest.mark.parametrize("options", [
    {"hands_per_episode": 3, "opponent": "rule:calling"},
    {"seats": 6, "opponent": "rule:lag", "hands_per_episode": 2},
])
def test_mask_tokens_decode_to_exactly_the_assistant_actions(tiny_tokenizer, options):
    tok = tiny_tokenizer
    adapter = PokerAdapter({**options, "num_train": 4, "num_eval": 1})
    for example in adapter.examples("train"):
        episode = adapter.play_episode(example, "rule:lag")
        actions = [m["content"] for m in episode.messages if m["role"] == "assistant"]
        assert len(actions) >= options["hands_per_episode"]
        tokens = adapter.episode_to_tokens(episode, tok)
        assert len(tokens.loss_mask) == len(tokens.completion_ids)
        assert tokens.prompt_ids == adapter_prompt(adapter, example, tok)
        assert _masked_text(tok, tokens.completion_ids, tokens.loss_mask) == "".join(a + "<|im_end|>" for a in actions)
        assert episode.reward == pytest.approx(sum(episode.rewards) / 10)
        assert episode.group in BUCKETS and episode.group == episode.info["hand_buckets"][0]
        rollout = adapter.episode_to_rollout(episode, tok)
        assert validate_rollout(rollout, newest_version=0) is None


def adapter_prompt(adapter, example, tok):
    ids = tok.apply_chat_template(adapter.build_messages(example), tokenize=True, add_generation_prompt=True)
    return list(ids["input_ids"] if hasattr(ids, "keys") else ids)


def test_token_level_episode_matches_the_text_level_one(tiny_tokenizer):
    tok = tiny_tokenizer
    adapter = PokerAdapter({"hands_per_episode": 2, "opponent": "rule:tag", "num_train": 3, "num_eval": 1})
    script = ["call", "nonsense", "check", "raise 40", "call", "check", "call", "all-in"] * 5
    for example in adapter.examples("train"):
        replies = iter(script)
        session = adapter.open_episode(example, tok)
        assert session.prompt_ids == adapter_prompt(adapter, example, tok)
        while not session.done:
            session.submit_text(next(replies))
        replies = iter(script)
        episode = adapter.play_episode(example, lambda messages: next(replies))
        tokens = adapter.episode_to_tokens(episode, tok)
        assert session.completion_ids == tokens.completion_ids and session.loss_mask == tokens.loss_mask
        full = session.prompt_ids + session.completion_ids
        assert assistant_mask(full, **_mask_ids(tok))[len(session.prompt_ids):] == session.loss_mask
        rollout = adapter.to_rollout(session, example=example, version=0)
        assert validate_rollout(rollout, newest_version=0) is None
        assert rollout.reward == episode.reward and rollout.omega.group == episode.group
        assert rollout.meta["invalid_actions"] >= 1 and rollout.meta["stop"] == "terminated"


def test_every_refused_reply_costs_the_penalty_so_gibberish_is_never_a_cheap_fold(tiny_tokenizer):
    """The same moves, once with a refusal before each: the return drops by the penalty per refusal, in
    both the token-level record and the text-level episode; the refused-then-forced fold costs more
    than folding."""
    options = {"num_train": 1, "num_eval": 1, "opponent": "rule:calling", "max_invalid_actions": 1}
    example = PokerAdapter(options).examples("train")[0]
    results = {}
    for penalty in (0.0, 1.0):
        adapter = PokerAdapter({**options, "invalid_action_penalty": penalty})
        for script in (["fold"], ["nonsense", "fold"], ["nonsense", "nonsense"]):
            session = adapter.open_episode(example, tiny_tokenizer)
            replies = iter(script)
            while not session.done:
                session.submit_text(next(replies))
            rollout = adapter.to_rollout(session, example=example, version=0)
            replies = iter(script)
            assert adapter.play_episode(example, lambda messages: next(replies)).reward == rollout.reward
            results[penalty, len(script), script[-1]] = rollout.reward, rollout.meta["invalid_actions"]
    fold, _ = results[0.0, 1, "fold"]
    assert results[0.0, 2, "fold"] == (fold, 1) and results[0.0, 2, "nonsense"] == (fold, 2)  # forced fold
    assert results[1.0, 1, "fold"] == (fold, 0)
    assert results[1.0, 2, "fold"] == (fold - 1.0, 1) and results[1.0, 2, "nonsense"] == (fold - 2.0, 2)


@pytest.mark.parametrize("penalty", [-1.0, float("nan"), float("inf")])
def test_a_negative_or_non_finite_penalty_is_refused_with_the_option_and_the_fix(penalty):
    with pytest.raises(ValueError, match=r"task.options.invalid_action_penalty=.*must be a finite number >= 0.*use e.g. 1.0"):
        PokerAdapter({"num_train": 1, "num_eval": 1, "invalid_action_penalty": penalty})


def test_sampled_tokens_and_logprobs_stay_aligned(tiny_tokenizer):
    tok = tiny_tokenizer
    adapter = PokerAdapter({"num_train": 1, "num_eval": 1, "opponent": "rule:calling"})
    example = adapter.examples("train")[0]
    session = adapter.open_episode(example, tok)
    eos = tok.convert_tokens_to_ids("<|im_end|>")
    turns = [tok.encode("raise 9", add_special_tokens=False),  # cut by max_new_tokens: no <|im_end|>
             tok.encode("call", add_special_tokens=False) + [eos]] + \
        [tok.encode("check", add_special_tokens=False) + [eos]] * 20
    sampled = []
    for ids in turns:
        if session.done:
            break
        logprobs = [-0.5 - i for i in range(len(ids))]
        session.submit(ids, logprobs)
        sampled.append((ids, logprobs))
    trained = [lp for lp, m in zip(session.logprobs, session.loss_mask) if m]
    assert trained == [lp for _, lps in sampled for lp in lps]
    assert all(lp == 0.0 for lp, m in zip(session.logprobs, session.loss_mask) if not m)
    # The length-cut turn gets an environment-written <|im_end|> (mask 0); the mask still covers only sampled ids.
    assert sum(session.loss_mask) == sum(len(ids) for ids, _ in sampled)
    assert validate_rollout(adapter.to_rollout(session, example=example, version=0), newest_version=0) is None


@pytest.mark.parametrize("reply", ["", "\n\n", "garbage garbage", "x" * 20_000, "レイズ ♠ 40", "<|im_start|>user",
                                   "raise 1e309", "raise 99999999999999999999"])
def test_malformed_model_output_never_crashes_a_token_episode(tiny_tokenizer, reply):
    tok = tiny_tokenizer
    adapter = PokerAdapter({"num_train": 1, "num_eval": 1, "max_invalid_actions": 1})
    example = adapter.examples("train")[0]
    session = adapter.open_episode(example, tok)
    steps = 0
    while not session.done and steps < 50:
        session.submit(tok.encode(reply, add_special_tokens=False)[:4000])
        steps += 1
    assert session.done and session.stop_reason == "terminated"
    rollout = adapter.to_rollout(session, example=example, version=0)
    assert len(rollout.omega.loss_mask) == len(rollout.completion_ids) == len(rollout.sampler_logprobs)
    assert math.isfinite(rollout.reward) and rollout.meta["forced_actions"] >= 1


def test_stop_for_length_keeps_the_record_valid(tiny_tokenizer):
    adapter = PokerAdapter({"num_train": 1, "num_eval": 1, "opponent": "rule:calling", "hands_per_episode": 3})
    example = adapter.examples("train")[0]
    session = adapter.open_episode(example, tiny_tokenizer)
    session.submit_text("call")
    session.stop("length")
    rollout = adapter.to_rollout(session, example=example, version=0)
    assert rollout.meta["stop"] == "length" and validate_rollout(rollout, newest_version=0) is None


def test_hand_bucket_groups_drive_key_grouping(tiny_tokenizer):
    adapter = PokerAdapter({"num_train": 24, "num_eval": 1, "opponent": "rule:lag"})
    episodes = [adapter.play_episode(ex, "rule:tag") for ex in adapter.examples("train")]
    groups = [e.group for e in episodes]
    assert set(groups) <= set(BUCKETS) and len(set(groups)) >= 3
    assert groups == [adapter.group_key(ex) for ex in adapter.examples("train")]
    keys = grouping_keys([e.example_id for e in episodes], groups, "key")
    advantages = compute_advantages([e.reward for e in episodes], keys)
    for bucket in set(groups):
        members = [a for a, g in zip(advantages.tolist(), groups) if g == bucket]
        assert abs(sum(members)) < 1e-4  # normalized within each hand bucket


def test_sft_demonstrations_are_legal_decisions_of_the_demonstrator(tiny_tokenizer):
    adapter = PokerAdapter({"num_sft": 12, "num_train": 1, "num_eval": 1, "demonstrator": "rule:lag"})
    demos = adapter.examples("sft")
    assert len(demos) == 12 and len({d.id for d in demos}) == 12
    assert not {d.meta["episode_seed"] for d in demos} & {e.meta["episode_seed"] for e in adapter.examples("train")}
    for demo in demos:
        messages = adapter.build_messages(demo)
        assert messages[0]["role"] == "system" and messages[-1]["role"] == "user"
        # Replaying the conversation's earlier replies, then the answer: the env accepts the answer.
        env = adapter.env_for(demo)  # against the line-up the demonstration drew
        env.begin_episode(demo.meta["episode_seed"])
        for message in messages[2::2]:
            env.step(message["content"])
        assert env.step(adapter.reference_answer(demo))[4]["invalid_reason"] is None
    assert len({len(adapter.build_messages(d)) for d in demos}) > 1  # later streets are demonstrated too


def test_a_demonstrator_mixture_draws_one_player_per_demonstration():
    import doctest

    from echo2_sdk import episodic

    assert doctest.testmod(episodic).failed == 0
    opts = {"num_sft": 16, "num_train": 1, "num_eval": 1}
    pure = {spec: PokerAdapter({**opts, "demonstrator": spec}).examples("sft") for spec in ("rule:tag", "rule:calling")}
    mixed = PokerAdapter({**opts, "demonstrator": "rule:tag, rule:calling"}).examples("sft")
    # Demonstration i is exactly the one the drawn player gives alone (same deal, same decision picked).
    drawn = [next(s for s, demos in pure.items() if demos[i] == d) for i, d in enumerate(mixed)]
    assert set(drawn) == {"rule:tag", "rule:calling"}
    assert mixed == PokerAdapter({**opts, "demonstrator": "rule:tag, rule:calling"}).examples("sft")  # seeded
    heavy = PokerAdapter({**opts, "demonstrator": "1000 rule:tag, rule:calling"}).examples("sft")
    assert heavy == pure["rule:tag"]


@pytest.mark.parametrize("spec, message", [
    ("rule:tag,", "each entry is '\\[WEIGHT\\] SPEC'"),
    ("x rule:tag", "weight 'x' is not a number"),
    ("0 rule:tag, rule:lag", "weight '0' must be a positive finite number"),
    ("1 2 rule:tag", "each entry is"),
])
def test_a_bad_demonstrator_mixture_is_refused_with_the_option_and_the_fix(spec, message):
    with pytest.raises(ValueError, match=f"task.options.demonstrator=.*{message}"):
        PokerAdapter({"num_sft": 1, "num_train": 1, "num_eval": 1, "demonstrator": spec})


def test_the_episode_return_is_the_chips_in_big_blinds_less_the_penalty_per_refusal():
    adapter = PokerAdapter({"invalid_action_penalty": 0.5})
    refused, accepted = {"invalid_reason": "bad"}, {"invalid_reason": None}
    assert adapter.episode_return([0, -10], [refused, accepted]) == -1.5  # -10 chips = -1 BB, one refusal
    assert adapter.episode_return([0, 25], [accepted, accepted]) == 2.5
    assert PokerAdapter({"reward_unit": "chip"}).episode_return([0, -10], [refused, accepted]) == -11.0
