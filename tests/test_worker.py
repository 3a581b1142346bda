"""RolloutWorker in-process (no Ray): groups, versions, installs, throttling, concurrent calls."""

import threading

import pytest
import torch

from echo2_sdk.records import group_from_wire, validate_group
from echo2_sdk.registry import make_task
from echo2_sdk.runtime.rollout.backends.base import SamplingParams
from echo2_sdk.runtime.models.modeling import ensure_tiny_qwen3
from echo2_sdk.runtime.rollout.base import WorkerSettings
from echo2_sdk.runtime.rollout.worker import RolloutWorker


@pytest.fixture(scope="module")
def worker():
    w = RolloutWorker("w", WorkerSettings(model_path=ensure_tiny_qwen3(), task_name="arith", task_options={},
                                          sampling=SamplingParams(1.0, 1.0, 4, seed=0), samples_per_prompt=3, seed=0))
    yield w
    w.close()


@pytest.fixture(scope="module")
def examples():
    return list(make_task("arith").examples("train"))[:2]


def test_groups_are_valid_version_tagged_records(worker, examples):
    result = worker.generate(examples)
    groups = [group_from_wire(g) for g in result.groups]
    assert [g.prompt_key for g in groups] == [e.id for e in examples]
    for g in groups:
        assert len(g.rollouts) == 3 and g.version == worker.version == result.version
        accepted, rejected = validate_group(g, newest_version=worker.version)
        assert len(accepted) == 3 and not rejected
        for r in g.rollouts:
            assert len(r.sampler_logprobs) == len(r.completion_ids) == len(r.omega.loss_mask)
            assert r.reward in (0.0, 1.0) and r.meta["worker"] == "w"
    assert result.num_tokens == sum(len(r.completion_ids) for g in groups for r in g.rollouts)
    assert sum(result.reward_status.values()) == 6


def test_install_applies_before_the_next_batch(worker, examples):
    state = {k: v.clone() for k, v in worker.backend.model.state_dict().items()}
    state["model.norm.weight"].mul_(0.5)
    assert worker.install(state, 4) == 4
    assert worker.version < 4  # staged, not applied yet
    result = worker.generate(examples)
    assert result.version == worker.version == 4 and 4 in result.installed
    assert torch.equal(worker.backend.model.state_dict()["model.norm.weight"], state["model.norm.weight"])
    worker.install(state, 3)  # an older snapshot arriving late never replaces a newer one
    assert worker.generate(examples).version == 4


def test_concurrent_calls_overlap_scoring_with_generation(worker, examples):
    results, errors = [], []

    def call():
        try:
            results.append(worker.generate(examples))
        except Exception as exc:  # pragma: no cover - surfaced by the assert below
            errors.append(exc)

    threads = [threading.Thread(target=call) for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert not errors and len(results) == 3
    assert all(len(r.groups) == 2 for r in results)


def test_throughput_cap_is_enforced_and_reported(examples):
    w = RolloutWorker("slow", WorkerSettings(model_path=ensure_tiny_qwen3(), task_name="arith", task_options={},
                                             sampling=SamplingParams(1.0, 1.0, 4, seed=0), samples_per_prompt=2,
                                             seed=0, max_tokens_per_s=20))
    try:
        result = w.generate(examples)
        assert result.t_throttle_s > 0
        elapsed = result.t_generate_s + result.t_reward_s + result.t_throttle_s
        assert result.num_tokens / elapsed <= 20 * 1.05
    finally:
        w.close()


def test_an_honest_reply_passes_every_admission_check_against_its_request(worker, examples):
    """The learner's own checks of a reply (request, group shape, prompt ids rendered on the learner side,
    max_new_tokens) refuse nothing an honest worker sends."""
    from types import SimpleNamespace

    from echo2_sdk.records import RecordLimits
    from echo2_sdk.runtime.admission.gate import AdmissionGate
    from echo2_sdk.runtime.admission.request import PromptRenderer
    from echo2_sdk.runtime.rollout.base import SentRequest
    from echo2_sdk.runtime.rollout.codec import example_to_dict, result_from_json

    gate = AdmissionGate(staleness=2, limits=RecordLimits(vocab_size=len(worker.tokenizer), max_completion_tokens=4),
                         audit=SimpleNamespace(check=lambda group: True),
                         prompt_ids=PromptRenderer(make_task("arith"), worker.tokenizer))
    request = SentRequest(tuple(examples) + (examples[0],), 3)  # the stream wrapped: one example twice
    reply = result_from_json(worker.generate_wire([example_to_dict(ex) for ex in request.examples]))
    out = gate.admit("w", reply, newest_version=worker.version, learner_version=worker.version, request=request)
    assert gate.counters.reject_reasons == {} and out.accepted == 3 * 3
