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
    for estimator in ("grpo", "dr_grpo"):  # exactly the groups whose advantages are all zero
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
