"""PokerEnv: gymnasium + echo2 contract, rules through pokerkit, invalid actions, rewards, seeding."""

from __future__ import annotations

import random

import pytest

from echo2_sdk.env import TEXT_CHARSET, check_env
from echo2_sdk.envs.poker import PokerConfig, PokerEnv
from echo2_sdk.envs.poker.actions import parse_action
from echo2_sdk.envs.poker.hand import Hand, TableConfig
from echo2_sdk.envs.poker.players import make_player


@pytest.mark.parametrize("overrides", [
    {},
    {"seats": 6, "opponents": ("rule:lag",), "hands_per_episode": 2},
    {"seats": 6, "opponents": ("rule:calling", "rule:tag", "rule:lag", "rule:random", "rule:tag"), "agent_seat": 3},
])
def test_check_env_heads_up_and_six_max(overrides):
    report = check_env(PokerEnv(**overrides))
    assert report["steps"] > 30 and report["gymnasium_warnings"] == []


@pytest.mark.parametrize("text, verb, amount", [
    ("fold", "fold", None), ("Check", "check", None), ("  CALL ", "call", None), ("call 20", "call", 20),
    ("raise 40", "raise", 40), ("Raise to 1,000", "raise", 1000), ("bet 25.", "raise", 25),
    ("Action: all-in", "all-in", None), ("**shove**", "all-in", None), ("I think so.\nAction: call", "call", None),
    ("`check`", "check", None), ("all in", "all-in", None),
])
def test_parse_accepts_common_forms(text, verb, amount):
    action, reason = parse_action(text)
    assert reason is None and (action.verb, action.amount) == (verb, amount)


@pytest.mark.parametrize("text, reason", [
    ("", "empty action"), ("raise", "needs an amount"), ("raise 12.5", "whole number"),
    ("rasie 40", "did you mean 'raise'"), ("chekc", "did you mean 'check'"), ("fold now please", "write just 'fold'"),
    ("x" * 5000, "characters long"), ("é🂡", "unrecognized action '??'"),
])
def test_parse_refuses_with_a_reason(text, reason):
    action, why = parse_action(text)
    assert action is None and reason in why


def _env(**overrides) -> PokerEnv:
    return PokerEnv(button_seat=1, **overrides)  # agent (seat 0) is the big blind in the first hand


def test_heads_up_blinds_and_order_follow_pokerkit():
    env = PokerEnv(button_seat=0, opponents=("rule:calling",))
    obs, info = env.reset(seed=3)
    # Heads-up the button posts the small blind and acts first preflop.
    assert "You are SB" in obs and "To call: 5" in obs and "Pot: 15" in obs
    assert info["legal_actions"] == ["fold", "call 5", "raise 20", "raise 510", "all-in"]
    assert "Legal: fold | call 5 | raise 20..1000" in obs


def test_refusals_carry_pokerkit_reasons_then_the_table_folds():
    env = PokerEnv(button_seat=0, opponents=("rule:calling",), max_invalid_actions=2)
    env.reset(seed=3)
    obs, reward, terminated, truncated, info = env.step("raise 15")
    assert "below the minimum allowed 20" in info["invalid_reason"] and "Invalid action 'raise 15'" in obs
    obs, *_, info = env.step("check")
    assert "cannot check: 5 to call" in info["invalid_reason"]
    obs, reward, terminated, truncated, info = env.step("banana")
    assert "Out of attempts: you fold" in obs and terminated and reward == -5.0
    assert (info["invalid_actions"], info["forced_actions"]) == (3, 1)
    assert info["invalid_by_kind"] == {"unparsable": 1, "illegal": 2}
    assert [t.invalid_reason is None for t in env.log.turns] == [False, False, False]


def test_fold_when_check_is_free_is_refused_with_pokerkits_reason():
    hand = Hand(TableConfig(), "x", 0)
    assert hand.position(hand.actor_seat) == "SB"
    hand.apply("call")
    assert hand.legal().summary() == "check | raise 20..1000"  # the big blind's free option
    record, reason = hand.apply("fold")
    assert record is None and "There is no reason for this player to fold" in reason
    record, reason = hand.apply("check")
    assert reason is None and hand.street == 1 and len(hand.board) == 3


def test_rewards_sum_to_chips_and_hands_are_zero_sum():
    env = PokerEnv(hands_per_episode=5, opponents=("rule:lag",))
    chooser = random.Random(0)
    for seed in range(6):
        env.reset(seed=seed)
        total, done = 0.0, False
        while not done:
            _, reward, terminated, truncated, info = env.step(chooser.choice(env.legal_actions()))
            total, done = total + reward, terminated or truncated
        assert terminated and total == info["chips"] == sum(info["hand_results"]) + _walk_chips(env)
        assert info["hands_played"] == 5 and len(info["hand_buckets"]) == 5
        assert env.log.total_reward == total


def _walk_chips(env: PokerEnv) -> int:
    # Chips of walks (hands the agent did not act in) are included in the rewards, not in hand_results.
    return env._chips - sum(env._results)


def test_walk_chips_reach_the_first_reward():
    # Find an episode whose first hand is a walk for the agent (big blind, opponent folds).
    env = PokerEnv(button_seat=1, opponents=("rule:tag",))
    for seed in range(200):
        obs, info = env.reset(seed=seed)
        if info["walks"]:
            break
    else:
        pytest.fail("no walk in 200 episodes")
    assert "Walk (you did not act, not counted) result: +5 chips" in obs and info["chips"] == 5
    _, reward, *_ , info = env.step(env.legal_actions()[0])
    assert reward == info["chips"] and info["walks"] >= 1


def test_seeded_determinism_and_global_random_untouched():
    env = PokerEnv(seats=3, opponents=("rule:lag",))
    random.seed(123)
    expected = [random.random() for _ in range(3)]
    random.seed(123)
    observations = {env.reset(seed=s)[0] for s in range(8)}
    for _ in range(4):
        if not env.done:
            env.step("call")
    assert [random.random() for _ in range(3)] == expected
    assert len(observations) > 4
    assert env.reset(seed=5)[0] == PokerEnv(seats=3, opponents=("rule:lag",)).reset(seed=5)[0]


@pytest.mark.parametrize("garbage", ["", "\n", "%%%%", "x" * 1_000_000, "レイズ 40", "🂡🂱", None, 12, b"\xff",
                                     "raise 99999999999999999999999", "raise -1", "call 7", "Action: Action: fold"])
def test_malformed_model_output_never_crashes(garbage):
    env = _env(seats=6, opponents=("rule:calling",))
    obs, _ = env.reset(seed=1)
    out = env.step(garbage)
    assert out[0] in env.observation_space and set(out[0]) <= set(TEXT_CHARSET)
    assert len(out[0]) < 2000


def test_truncation_is_separate_from_termination():
    env = PokerEnv(max_steps=2, opponents=("rule:calling",), button_seat=0)
    env.reset(seed=0)
    _, _, terminated, truncated, _ = env.step("nonsense")
    assert (terminated, truncated) == (False, False)
    _, _, terminated, truncated, _ = env.step("nonsense")
    assert (terminated, truncated) == (False, True)


def test_llm_opponent_gets_the_conversation_and_its_refusals_count():
    seen: list[list[dict]] = []

    def policy(messages):
        seen.append(messages)
        return "uh" if len(seen) == 1 else "call"

    env = PokerEnv(button_seat=1, opponents=("llm:test",), llm_policies={"test": policy})
    obs, info = env.reset(seed=2)  # the LLM is the small blind and acts first: refused once, then calls
    assert info["opponent_invalid_actions"] == 1
    assert seen[1][0]["role"] == "system" and "Invalid action: unrecognized action 'uh'" in seen[1][-1]["content"]
    assert [m["role"] for m in seen[1]] == ["system", "user", "assistant", "user"]
    assert "History: preflop SB call" in obs


def test_configuration_errors_say_what_to_do():
    with pytest.raises(TypeError, match="Did you mean 'seats'"):
        PokerEnv(seat=6)
    with pytest.raises(ValueError, match="Did you mean 'rule:tag'"):
        make_player("rule:tga")
    with pytest.raises(ValueError, match="Did you mean 'rule:calling'"):
        make_player("calling")
    with pytest.raises(ValueError, match="2 to 6 seats"):
        PokerConfig(seats=7)
    with pytest.raises(ValueError, match="llm_policies"):
        PokerEnv(opponents=("llm:ckpt",))
    with pytest.raises(TypeError, match="whole numbers"):
        TableConfig(starting_stack=1000.5)
