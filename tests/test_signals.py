import pytest
import torch

from echo2_sdk.signals import (assistant_mask, broadcast_to_tokens, compute_advantages, get_advantage,
                               grouping_keys, shift_to_targets, turn_index)


def test_grpo_advantages_per_group_hand_computed():
    # group a: rewards 1, 0, 0, 1 -> mean .5, unbiased std sqrt(1/3)=.57735
    # group b: all equal -> 0; group c: single sample -> 0
    adv = compute_advantages([1, 0, 0, 1, 0.5, 0.5, 3.0], ["a", "a", "a", "a", "b", "b", "c"])
    s = (1 / 3) ** 0.5
    expected = torch.tensor([0.5 / s, -0.5 / s, -0.5 / s, 0.5 / s, 0, 0, 0])
    assert torch.allclose(adv, expected, atol=1e-5)


def test_dr_grpo_and_unknown_estimator():
    adv = compute_advantages([1, 0, 2], ["a", "a", "b"], "dr_grpo")
    assert torch.allclose(adv, torch.tensor([0.5, -0.5, 0.0]))
    with pytest.raises(KeyError, match="Did you mean 'grpo'"):
        get_advantage("grp")


def test_pooled_std_advantages_hand_computed():
    # groups: a = 0, 3, 6 (mean 3, squares 9+0+9, 2 dof), b = 10, 14 (mean 12, squares 4+4, 1 dof), c alone
    # pooled std = sqrt(26 / 3); each group keeps its own mean, all share the one std
    adv = compute_advantages([0, 3, 6, 10, 14, 5], ["a", "a", "a", "b", "b", "c"], "grpo_pooled_std")
    s = (26 / 3) ** 0.5
    assert torch.allclose(adv, torch.tensor([-3 / s, 0, 3 / s, -2 / s, 2 / s, 0]), atol=1e-5)
    # a pair that differs by 1 and one that differs by 100: grpo weighs them alike, pooled keeps the ratio
    small_and_large = [0, 1, 0, 100], ["a", "a", "b", "b"]
    assert torch.allclose(compute_advantages(*small_and_large, "grpo").abs(), torch.full((4,), 0.5 ** 0.5), atol=1e-4)
    pooled = compute_advantages(*small_and_large, "grpo_pooled_std")
    assert float(pooled[3] / pooled[1]) == pytest.approx(100.0, rel=1e-4)
    assert compute_advantages([1, 1, 2], ["a", "a", "b"], "grpo_pooled_std").tolist() == [0, 0, 0]  # no spread
    import doctest

    from echo2_sdk import algos

    assert doctest.testmod(algos).failed == 0  # the docstring's example is the same estimator, by hand


def test_grouping_choices():
    prompts, keys = ["p1", "p1", "p2", "p2"], ["AK", "QQ", "AK", "QQ"]
    assert grouping_keys(prompts, keys, "prompt") == prompts
    assert grouping_keys(prompts, keys, "key") == keys
    assert grouping_keys(prompts, keys, "batch") == ["batch"] * 4
    with pytest.raises(ValueError, match="Did you mean 'batch'"):
        grouping_keys(prompts, keys, "btch")
    # by key: AK samples (rewards 1 and 3) are normalized together
    adv = compute_advantages([1, 0, 3, 0], grouping_keys(prompts, keys, "key"))
    assert adv[0] < 0 < adv[2] and adv[1] == adv[3] == 0


def test_zero_advantage_fraction_counts_the_groups_every_estimator_gives_zero():
    import doctest

    from echo2_sdk import signals
    from echo2_sdk.signals import zero_advantage_fraction

    assert doctest.testmod(signals).failed == 0
    rewards, keys = [1, 0, 0, 1, 0.5, 0.5, 3.0], ["a", "a", "a", "a", "b", "b", "c"]
    assert zero_advantage_fraction(rewards, keys) == 2 / 3  # b (all equal) and c (alone): see the test above
    for estimator in ("grpo", "dr_grpo", "grpo_pooled_std"):  # exactly the groups whose advantages are all zero
        adv = compute_advantages(rewards, keys, estimator)
        assert [bool((adv[i:j] == 0).all()) for i, j in ((0, 4), (4, 6), (6, 7))] == [False, True, True]
    assert zero_advantage_fraction([], []) == 0.0
    with pytest.raises(ValueError, match="2 rewards but 1 group keys"):
        zero_advantage_fraction([1, 0], ["a"])


def test_first_turn_and_its_entropy_per_group_hand_computed():
    from echo2_sdk.signals import first_turn, first_turn_entropy

    # completion = assistant turn, env turn, assistant turn: only the first assistant run counts
    assert first_turn([4, 5, 0, 0, 6], [1, 1, 0, 0, 1]) == (4, 5)
    assert first_turn([1, 2], [1, 1]) == (1, 2)  # single-turn: the whole answer
    turns = [(1,), (1,), (1,), (2,), (5,), (5,), (6,), (7,)]
    keys = ["a"] * 4 + ["b"] * 4
    # a: p = 3/4, 1/4 -> 0.5623 nats; b: 1/2, 1/4, 1/4 -> 1.0397 nats; mean 0.8010
    assert first_turn_entropy(turns, keys) == pytest.approx((0.5623351 + 1.0397208) / 2, abs=1e-6)
    assert first_turn_entropy([(1,)] * 3, ["a"] * 3) == 0.0 and first_turn_entropy([], []) == 0.0
    with pytest.raises(ValueError, match="1 first turns but 2 group keys"):
        first_turn_entropy([(1,)], ["a", "b"])


def test_broadcast_to_tokens():
    mask = torch.tensor([[0, 1, 1], [1, 0, 0.0]])
    out = broadcast_to_tokens(torch.tensor([2.0, -1.0]), mask)
    assert torch.equal(out, torch.tensor([[0, 2, 2], [-1, 0, 0.0]]))


def test_assistant_mask_on_multi_turn_qwen_sequence(tiny_tokenizer):
    tok = tiny_tokenizer
    msgs = [
        {"role": "system", "content": "rules"},
        {"role": "user", "content": "obs1"},
        {"role": "assistant", "content": "call"},
        {"role": "user", "content": "obs2"},
        {"role": "assistant", "content": "raise 40"},
    ]
    ids = tok.apply_chat_template(msgs, tokenize=True)
    ids = list(ids["input_ids"] if hasattr(ids, "keys") else ids)
    im_start, im_end = tok.convert_tokens_to_ids("<|im_start|>"), tok.convert_tokens_to_ids("<|im_end|>")
    nl = tok.convert_tokens_to_ids("\n")
    c = turn_index(ids, im_start)
    assert max(c) == 5 and c[0] == 1
    mask = assistant_mask(ids, im_start_id=im_start, im_end_id=im_end, newline_id=nl)
    spans, cur = [], []
    for t, m in zip(ids, mask):
        if m:
            cur.append(t)
        elif cur:
            spans.append(cur)
            cur = []
    if cur:
        spans.append(cur)
    assert [tok.decode(s, skip_special_tokens=True) for s in spans] == ["call", "raise 40"]
    assert all(s[-1] == im_end for s in spans)  # the model learns to stop
    # without a system message, assistant turns are the even ones
    ids2 = tok.apply_chat_template(msgs[1:3], tokenize=True)
    ids2 = list(ids2["input_ids"] if hasattr(ids2, "keys") else ids2)
    m2 = assistant_mask(ids2, im_start_id=im_start, im_end_id=im_end, newline_id=nl, first_assistant_turn=2)
    assert tok.decode([t for t, m in zip(ids2, m2) if m], skip_special_tokens=True) == "call"
    # target alignment: target j predicts token j+1
    shifted = shift_to_targets(mask)
    assert len(shifted) == len(ids) - 1 and shifted[:-1] == mask[1:-1]


def test_turn_advantages_compare_only_turns_taken_from_the_same_state_hand_computed():
    from echo2_sdk.signals import shared_turn_fraction, turn_advantages

    # One group of four episodes. Turn 1: all four share the opening state s0. Turn 2: episodes 0, 1 reached
    # s1 (same first action), 2 and 3 reached s2 and s3 alone. Episode 4 is another group with the same
    # states: it must not be compared with the first four.
    rewards = [3.0, 1.0, 0.0, 0.0, 9.0]
    keys = ["g", "g", "g", "g", "h"]
    states = [[10, 11], [10, 11], [10, 12], [10, 13], [10, 11]]
    adv = turn_advantages(rewards, keys, states, "grpo")
    mean, std = 1.0, (((2 ** 2) + 0 + 1 + 1) / 3) ** 0.5  # turn 1 over the group: the episode-level advantage
    s1 = ((1.0 ** 2 + 1.0 ** 2) / 1) ** 0.5  # s1: rewards 3 and 1, mean 2, unbiased std sqrt(2)
    expected = [[(3 - mean) / std, 1 / s1], [(1 - mean) / std, -1 / s1], [(0 - mean) / std, 0.0],
                [(0 - mean) / std, 0.0], [0.0, 0.0]]
    for got, want in zip(adv, expected):
        assert got == pytest.approx(want, abs=1e-5)
    assert adv[0][0] == pytest.approx(compute_advantages(rewards, keys)[0].item(), abs=1e-6)
    assert shared_turn_fraction(keys, states) == pytest.approx(6 / 10)  # 4 openings + 2 at s1, of 10 turns
    with pytest.raises(ValueError, match="2 rewards, 2 group keys, 1 turn-state lists"):
        turn_advantages([1.0, 2.0], ["g", "g"], [[1]])


def _episode(prompt, completion, mask, reward, key="deal"):
    from echo2_sdk.records import Omega, Rollout

    return Rollout(prompt_ids=tuple(prompt), completion_ids=tuple(completion), reward=reward, version=0,
                   omega=Omega(tuple(mask), key), sampler_logprobs=tuple(-0.5 * m for m in mask), prompt_key=key)


def test_collate_adds_the_weighted_turn_advantage_on_each_turns_tokens_only():
    from echo2_sdk.runtime.learning.batching import collate
    from echo2_sdk.signals import turn_advantages, turn_spans, turn_state_keys

    # prompt [1, 2]; completion = action, env reply, action. Episodes 0 and 1 open alike (token 5) and so
    # reach the same second state; episode 2 opens with 6.
    mask = [1, 0, 0, 1]
    records = [_episode([1, 2], [5, 9, 9, 7], mask, 2.0), _episode([1, 2], [5, 9, 9, 8], mask, 0.0),
               _episode([1, 2], [6, 9, 9, 7], mask, 1.0)]
    plain, seq_adv = collate(records, pad_id=0, estimator="dr_grpo")
    weighted, _ = collate(records, pad_id=0, estimator="dr_grpo", turn_advantage_weight=0.5)
    assert torch.equal(plain.advantages, broadcast_to_tokens(seq_adv, plain.loss_mask))
    states = [turn_state_keys(r.prompt_ids, r.completion_ids, turn_spans(r.omega.loss_mask)) for r in records]
    per_turn = turn_advantages([2.0, 0.0, 1.0], ["deal"] * 3, states, "dr_grpo")
    assert per_turn == [pytest.approx([1.0, 1.0]), pytest.approx([-1.0, -1.0]), pytest.approx([0.0, 0.0])]
    # completion token i sits at target P - 1 + i = 1 + i: turn 1 at target 1, turn 2 at target 4
    for b in range(3):
        for target, turn in ((1, 0), (4, 1)):
            assert weighted.advantages[b, target].item() == pytest.approx(seq_adv[b].item() + 0.5 * per_turn[b][turn])
        assert weighted.advantages[b, 2:4].tolist() == [0.0, 0.0]  # the env's reply is never trained on


def test_turn_advantage_weight_must_be_finite_and_not_negative():
    from echo2_sdk.config import ConfigError, load_config

    assert load_config(None, ["algo.turn_advantage_weight=1.0"]).algo.turn_advantage_weight == 1.0
    for bad in ("-0.5", "nan"):
        with pytest.raises(ConfigError, match="algo.turn_advantage_weight"):
            load_config(None, [f"algo.turn_advantage_weight={bad}"])
