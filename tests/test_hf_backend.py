"""HFBackend: shapes, per-row eos stopping, log-prob convention, seeding, in-place weight loads."""

from types import SimpleNamespace

import pytest
import torch

from echo2_sdk.runtime.rollout.backends.base import Completion, GenerationBackend, SamplingParams
from echo2_sdk.runtime.rollout.backends.hf import HFBackend, sequence_logprobs
from echo2_sdk.runtime.models.modeling import build_tiny_model, build_tiny_tokenizer

torch.set_num_threads(2)


@pytest.fixture(scope="module")
def tokenizer():
    return build_tiny_tokenizer()


@pytest.fixture()
def backend(tokenizer):
    return HFBackend(build_tiny_model(tokenizer, num_layers=2, seed=3), tokenizer)


def chat_prompt(tokenizer, text):
    rendered = tokenizer.apply_chat_template(
        [{"role": "user", "content": text}], add_generation_prompt=True
    )
    return list(rendered["input_ids"])


@pytest.fixture(scope="module")
def prompts(tokenizer):
    # Different lengths, so the batch is genuinely left-padded.
    return [chat_prompt(tokenizer, q) for q in ("1+2=", "13+7=", "What is 100+200?")]


def test_is_a_generation_backend(backend):
    assert isinstance(backend, GenerationBackend) and backend.version == 0


def test_generate_shape_and_completion_invariants(backend, tokenizer, prompts):
    params = SamplingParams(temperature=1.0, max_new_tokens=12, seed=0)
    groups = backend.generate(prompts, 4, params)
    assert len(groups) == 3 and all(len(group) == 4 for group in groups)
    eos = tokenizer.eos_token_id
    for completion in (c for group in groups for c in group):
        assert isinstance(completion, Completion)
        assert len(completion.token_ids) == len(completion.logprobs) >= 1
        assert all(lp <= 0.0 for lp in completion.logprobs)
        if completion.finish_reason == "stop":
            assert completion.token_ids[-1] == eos and eos not in completion.token_ids[:-1]
        else:
            assert completion.finish_reason == "length"
            assert len(completion.token_ids) == 12 and eos not in completion.token_ids


class CountingModel(torch.nn.Module):
    """Deterministic stand-in LM: after token k it emits k+1, and eos once k+1 reaches 10.

    Lets the test pin exactly when each row stops. Accepts the same keywords HFBackend passes.
    """

    eos, pad, vocab = 2, 0, 20

    def __init__(self):
        super().__init__()
        self.generation_config = SimpleNamespace(eos_token_id=self.eos)
        self.anchor = torch.nn.Parameter(torch.zeros(1))

    def forward(self, input_ids, attention_mask=None, position_ids=None, cache=None,
                use_cache=True, logits_to_keep=0):
        nxt = input_ids + 1
        nxt = torch.where(nxt >= 10, torch.full_like(nxt, self.eos), nxt)
        logits = torch.full((*input_ids.shape, self.vocab), -30.0)
        logits.scatter_(-1, nxt.unsqueeze(-1), 30.0)
        if logits_to_keep:
            logits = logits[:, -logits_to_keep:]
        return SimpleNamespace(logits=logits, cache=cache)


def test_each_row_stops_at_its_own_eos_and_excludes_padding():
    tokenizer = SimpleNamespace(pad_token_id=CountingModel.pad, eos_token_id=CountingModel.eos)
    backend = HFBackend(CountingModel(), tokenizer)
    prompts = [[4, 8], [3, 4, 5, 6], [3]]
    out = backend.generate(prompts, 2, SamplingParams(max_new_tokens=6, seed=1))
    assert out[0][0].token_ids == (9, 2) and out[0][0].finish_reason == "stop"
    assert out[1][1].token_ids == (7, 8, 9, 2) and out[1][1].finish_reason == "stop"
    assert out[2][0].token_ids == (4, 5, 6, 7, 8, 9) and out[2][0].finish_reason == "length"
    assert out[0][0].logprobs == pytest.approx((0.0, 0.0), abs=1e-6)


def right_padded(rows, pad_id):
    width = max(len(r) for r in rows)
    ids = torch.full((len(rows), width), pad_id)
    mask = torch.zeros_like(ids)
    for i, row in enumerate(rows):
        ids[i, : len(row)] = torch.tensor(row)
        mask[i, : len(row)] = 1
    return ids, mask


def left_padded(rows, pad_id):
    width = max(len(r) for r in rows)
    ids = torch.full((len(rows), width), pad_id)
    mask = torch.zeros_like(ids)
    for i, row in enumerate(rows):
        ids[i, width - len(row):] = torch.tensor(row)
        mask[i, width - len(row):] = 1
    return ids, mask


@pytest.mark.parametrize("temperature, top_p", [(1.0, 1.0), (0.7, 0.9), (0.0, 1.0)])
def test_reported_logprobs_match_sequence_logprobs(backend, tokenizer, prompts, temperature, top_p):
    params = SamplingParams(temperature=temperature, top_p=top_p, max_new_tokens=10, seed=5)
    groups = backend.generate(prompts, 3, params)
    pairs = [(p, c) for p, group in zip(prompts, groups) for c in group]
    rows = [p + list(c.token_ids) for p, c in pairs]
    # The learner's convention: temperature 0 (greedy) is scored untempered.
    score_temperature = temperature if temperature > 0 else 1.0
    for pad_fn in (right_padded, left_padded):
        ids, mask = pad_fn(rows, tokenizer.pad_token_id)
        with torch.no_grad():
            scored = sequence_logprobs(backend.model, ids, mask, score_temperature)
        assert scored.shape == (len(rows), ids.shape[1] - 1)
        assert torch.isfinite(scored).all()
        for i, (prompt, completion) in enumerate(pairs):
            start = (0 if pad_fn is right_padded else ids.shape[1] - len(rows[i])) + len(prompt) - 1
            expected = scored[i, start: start + len(completion.token_ids)]
            reported = torch.tensor(completion.logprobs)
            assert (expected - reported).abs().max() < 1e-4


def test_sequence_logprobs_zeroes_padding_targets_and_has_gradients(backend, tokenizer):
    ids, mask = right_padded([[5, 6, 7, 8], [5, 6]], tokenizer.pad_token_id)
    scored = sequence_logprobs(backend.model, ids, mask, 1.0)
    assert scored[1, 1:].eq(0).all() and scored[0].lt(0).all()
    scored.sum().backward()
    assert backend.model.model.embed_tokens.weight.grad is not None
    with pytest.raises(ValueError, match="batch, time"):
        sequence_logprobs(backend.model, ids[0], mask[0], 1.0)


def test_seeded_calls_are_reproducible(backend, prompts):
    params = SamplingParams(temperature=1.0, max_new_tokens=8, seed=42)
    first = backend.generate(prompts, 4, params)
    second = backend.generate(prompts, 4, params)
    other = backend.generate(prompts, 4, SamplingParams(temperature=1.0, max_new_tokens=8, seed=43))
    assert first == second
    assert [c.token_ids for g in first for c in g] != [c.token_ids for g in other for c in g]


def test_shared_prefill_matches_prefilling_every_row(backend, prompts):
    params = SamplingParams(temperature=1.0, max_new_tokens=8, seed=11)
    shared = backend.generate(prompts, 4, params)
    backend._cache_can_repeat = False  # force one prefill row per sample
    separate = backend.generate(prompts, 4, params)
    assert [c.token_ids for g in shared for c in g] == [c.token_ids for g in separate for c in g]
    for a, b in zip((c for g in shared for c in g), (c for g in separate for c in g)):
        assert max(abs(x - y) for x, y in zip(a.logprobs, b.logprobs)) < 1e-5


def test_greedy_and_tiny_top_p_agree(backend, prompts):
    greedy = backend.generate(prompts, 2, SamplingParams(temperature=0.0, max_new_tokens=8))
    for group in greedy:
        assert group[0].token_ids == group[1].token_ids
    nucleus = backend.generate(prompts, 2, SamplingParams(temperature=1.0, top_p=1e-6,
                                                          max_new_tokens=8, seed=0))
    assert [c.token_ids for g in nucleus for c in g] == [c.token_ids for g in greedy for c in g]


def test_load_weights_in_place_changes_outputs_and_restores(backend, tokenizer, prompts):
    params = SamplingParams(temperature=0.0, max_new_tokens=8)
    original = {k: v.clone() for k, v in backend.model.state_dict().items()}
    before = backend.generate(prompts, 1, params)
    storage = {k: v.data_ptr() for k, v in backend.model.state_dict().items()}

    other = build_tiny_model(tokenizer, num_layers=2, seed=99).state_dict()
    backend.load_weights(other, version=7)
    assert backend.version == 7
    assert {k: v.data_ptr() for k, v in backend.model.state_dict().items()} == storage
    after = backend.generate(prompts, 1, params)
    assert [g[0].logprobs for g in after] != [g[0].logprobs for g in before]

    # A tied alias (lm_head.weight shares the embedding) may be left out.
    original.pop("lm_head.weight")
    backend.load_weights(original, version=8)
    assert backend.generate(prompts, 1, params) == before


def test_load_weights_rejects_mismatched_state_dicts(backend):
    state = {k: v.clone() for k, v in backend.model.state_dict().items()}
    missing = dict(state)
    missing.pop("model.norm.weight")
    with pytest.raises(KeyError, match="model.norm.weight"):
        backend.load_weights(missing, version=1)
    with pytest.raises(KeyError, match="unexpected"):
        backend.load_weights({**state, "extra.weight": torch.zeros(1)}, version=1)
    wrong = {**state, "model.norm.weight": torch.zeros(3)}
    with pytest.raises(ValueError, match="shape"):
        backend.load_weights(wrong, version=1)
    assert backend.version == 0


def test_invalid_requests_fail_with_clear_errors(backend, prompts):
    with pytest.raises(ValueError, match="empty"):
        backend.generate([[]], 1, SamplingParams())
    with pytest.raises(ValueError, match="n"):
        backend.generate(prompts, 0, SamplingParams())
    with pytest.raises(ValueError, match="top_p"):
        SamplingParams(top_p=0.0)
    with pytest.raises(ValueError, match="temperature"):
        SamplingParams(temperature=-1.0)
    with pytest.raises(ValueError, match="logprob"):
        Completion(token_ids=(1, 2), logprobs=(0.0,), finish_reason="stop")
    assert backend.generate([], 3, SamplingParams()) == []


@pytest.mark.parametrize("chunk_tokens", [1, 7, 4096])
def test_chunked_head_gives_the_full_path_values_and_gradients(backend, chunk_tokens):
    """The memory-bounded path (output head on chunks of real targets, recomputed in backward)
    equals materializing [B, T, V] logits, with left and right padding in one batch."""
    model = backend.model
    torch.manual_seed(0)
    ids = torch.randint(5, 60, (3, 19))
    mask = torch.ones_like(ids)
    mask[0, :6] = 0  # left padded
    mask[1, 12:] = 0  # right padded
    params = [p for p in model.parameters() if p.requires_grad]
    full = sequence_logprobs(model, ids, mask, 0.7, chunk_tokens=None)
    full_grads = torch.autograd.grad((full * torch.arange(18.0)).sum(), params)
    chunked = sequence_logprobs(model, ids, mask, 0.7, chunk_tokens=chunk_tokens)
    chunked_grads = torch.autograd.grad((chunked * torch.arange(18.0)).sum(), params)
    assert torch.allclose(full, chunked, atol=1e-5)
    assert (chunked[~mask[:, 1:].bool()] == 0).all()
    for a, b in zip(full_grads, chunked_grads):  # float32 sums in another order: relative to the scale
        assert (a - b).abs().max() <= 1e-5 * a.abs().max() + 1e-6
