"""Learner-side reward audit: honest groups pass, a false reward rejects the group, repeat offenders go."""

import pytest

from echo2_sdk.config import WorkerSpec
from echo2_sdk.records import Omega, Rollout, RolloutGroup
from echo2_sdk.registry import make_task
from echo2_sdk.rewards import RewardGuard
from echo2_sdk.runtime.models.modeling import ensure_tiny_qwen3, load_tokenizer
from echo2_sdk.runtime.admission.reward_audit import RewardAudit, audited_workers


@pytest.fixture(scope="module")
def setup():
    adapter = make_task("arith")
    tokenizer = load_tokenizer(ensure_tiny_qwen3())
    example = next(iter(adapter.examples("train")))
    return adapter, tokenizer, example


def group(tokenizer, example, worker, text, reward, n=2):
    ids = tuple(tokenizer(text, add_special_tokens=False)["input_ids"])
    rollouts = tuple(Rollout(prompt_ids=(1,), completion_ids=ids, reward=reward, version=0,
                             omega=Omega((1,) * len(ids), None), sampler_logprobs=(-0.1,) * len(ids),
                             prompt_key=example.id, meta={"worker": worker}) for _ in range(n))
    return RolloutGroup(example.id, 0, rollouts, worker_id=worker)


def make_audit(adapter, tokenizer, **kw):
    logs = []
    audit = RewardAudit(adapter, tokenizer, lambda: RewardGuard("arith", {}, 0), log=logs.append,
                        **{"fraction": 1.0, "audited": {"far"}, "evict_after": 2, "seed": 0, **kw})
    return audit, logs


def test_honest_rewards_pass_false_ones_reject_and_evict(setup):
    adapter, tokenizer, example = setup
    right = adapter.reference_answer(example)
    audit, logs = make_audit(adapter, tokenizer)
    try:
        assert audit.check(group(tokenizer, example, "far", right, 1.0))
        assert audit.check(group(tokenizer, example, "far", "no idea", 0.0))
        assert not audit.check(group(tokenizer, example, "far", "no idea", 1.0))  # a lie: 1.0 for a wrong answer
        assert audit.mismatches["far"] == 1 and audit.to_evict() == []
        assert "reported reward 1.0" in logs[0] and "far" in logs[0]
        assert not audit.check(group(tokenizer, example, "far", "still wrong", 1.0))
        assert audit.to_evict() == ["far"] and audit.to_evict() == []  # evicted once
        # Unknown prompt keys cannot come from this task's training prompts.
        forged = RolloutGroup("nope", 0, group(tokenizer, example, "far", right, 1.0).rollouts, worker_id="far")
        assert not audit.check(forged)
        summary = audit.summary()
        assert summary["checked"]["far"] == 8 and summary["mismatched_groups"]["far"] == 3
        assert summary["evicted"] == ["far"]
    finally:
        audit.close()


def test_unaudited_workers_and_disabled_audit_are_not_checked(setup):
    adapter, tokenizer, example = setup
    audit, _ = make_audit(adapter, tokenizer)
    assert audit.check(group(tokenizer, example, "local", "no idea", 1.0))  # a trusted Ray worker
    off, _ = make_audit(adapter, tokenizer, fraction=0.0)
    assert off.check(group(tokenizer, example, "far", "no idea", 1.0)) and off._guard is None
    specs = [WorkerSpec("a"), WorkerSpec("b", endpoint="h:1")]
    assert audited_workers(specs, False) == {"b"}
    assert audited_workers(specs, True) == {"a", "b"}
