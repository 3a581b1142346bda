"""Self-play seats: ``llm:self`` in an opponent pool answers with the worker's own backend, greedily."""

from __future__ import annotations

import pytest

from echo2_sdk.records import validate_group
from echo2_sdk.registry import make_task
from echo2_sdk.runtime.cli import main as cli_main
from echo2_sdk.runtime.rollout.backends.base import Completion, GenerationBackend, SamplingParams
from echo2_sdk.runtime.rollout.episodes import run_episodes
from echo2_sdk.runtime.rollout.mirror import MirrorPolicy, SeatPolicies, bind_seats


class RecordingBackend(GenerationBackend):
    """Answers ``reply`` to every prompt; records (batch size, n, temperature) of each call."""

    def __init__(self, tokenizer, reply: str):
        self.tok, self.reply, self.calls, self.version = tokenizer, reply, [], 3
        self.eos = tokenizer.convert_tokens_to_ids("<|im_end|>")

    def generate(self, prompts, n, params):
        self.calls.append((len(prompts), n, params.temperature))
        ids = tuple(self.tok.encode(self.reply, add_special_tokens=False)) + (self.eos,)
        return [[Completion(ids, tuple(-0.5 for _ in ids), "stop") for _ in range(n)] for _ in prompts]

    def load_weights(self, state_dict, version):
        self.version = version


@pytest.mark.parametrize("task", ["poker", "moba"])
def test_a_self_seat_plays_with_the_workers_backend_greedily(tiny_tokenizer, task):
    options = {"num_train": 4, "num_eval": 2, "num_sft": 0, "opponent": "llm:self"}
    adapter = make_task(task, options)
    backend = RecordingBackend(tiny_tokenizer, "call" if task == "poker" else "hold")
    params = SamplingParams(1.0, 1.0, 6, seed=0)
    batch = run_episodes(adapter, backend, tiny_tokenizer, adapter.examples("train")[:2], 3, params, version=3)
    agent_calls = batch.rounds
    mirror_calls = [c for c in backend.calls if c[2] == 0.0]
    assert len(backend.calls) == agent_calls + len(mirror_calls)
    assert mirror_calls and all(size == 1 and n == 1 for size, n, _ in mirror_calls)  # one greedy reply a decision
    assert all(t == 1.0 for _, _, t in backend.calls if (_, _, t) not in mirror_calls)
    for group in batch.groups:
        accepted, rejected = validate_group(group, newest_version=3)
        assert len(accepted) == 3 and not rejected


def test_a_pool_with_a_self_seat_groups_it_apart(tiny_tokenizer):
    adapter = make_task("poker", {"num_train": 16, "num_eval": 2, "num_sft": 0, "opponent": "rule:calling, llm:self"})
    examples = adapter.examples("train")
    drawn = {e.meta["opponent"] for e in examples}
    assert drawn == {"rule:calling", "llm:self"}
    mirrored = [e for e in examples if e.meta["opponent"] == "llm:self"][:1]
    backend = RecordingBackend(tiny_tokenizer, "call")
    batch = run_episodes(adapter, backend, tiny_tokenizer, mirrored, 2, SamplingParams(1.0, 1.0, 6, seed=0), version=0)
    assert all(r.omega.group.endswith("|vs llm:self") and r.meta["opponent"] == "llm:self"
               for r in batch.groups[0].rollouts)


def test_seat_policies_resolve_self_and_load_the_rest(tiny_tokenizer):
    with pytest.raises(ValueError, match="plays only inside a training run"):
        SeatPolicies()("self")
    loaded = []
    mirror = MirrorPolicy(RecordingBackend(tiny_tokenizer, "fold"), tiny_tokenizer, max_new_tokens=4)
    seats = SeatPolicies(mirror, load=lambda name: loaded.append(name) or (lambda messages: "check"))
    assert seats("self") is mirror
    assert seats("runs/old")([]) == "check" and loaded == ["runs/old"]
    assert mirror([{"role": "user", "content": "to act"}]) == "fold" and mirror.calls == 1
    assert mirror.params.temperature == 0.0 and mirror.params.max_new_tokens == 4

    class Adapter:
        llm_policy_factory = None

    adapter = Adapter()
    bind_seats(adapter, mirror.backend, tiny_tokenizer, 4)
    first = adapter.llm_policy_factory
    assert isinstance(first, SeatPolicies)
    bind_seats(adapter, mirror.backend, tiny_tokenizer, 4)  # the runtime's own factory is re-bound
    assert adapter.llm_policy_factory is not first

    def own(name):
        return lambda messages: "fold"

    adapter.llm_policy_factory = own
    bind_seats(adapter, mirror.backend, tiny_tokenizer, 4)  # a caller's factory is kept
    assert adapter.llm_policy_factory is own


def test_echo2_eval_refuses_a_self_seat_in_one_line(capsys):
    assert cli_main(["eval", "--task", "poker", "--agent", "rule:tag", "--opponents", "llm:self", "--hands", "2"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "llm:self" in err and "name a checkpoint" in err


@pytest.mark.parametrize("pool", ["llm:self", "rule:calling, llm:self", "llm:self, rule:tag + rule:lag"])
def test_demonstrations_and_the_tokenizer_corpus_never_seat_a_model(pool):
    """Before training there is no model to seat: warm-start episodes and the tokenizer corpus play the
    pool's rule line-ups, or the demonstrators' styles when every line-up seats a model."""
    seats = 3 if "+" in pool else 2
    adapter = make_task("poker", {"num_train": 4, "num_eval": 2, "num_sft": 12, "opponent": pool, "seats": seats})
    assert adapter.llm_policy_factory is None  # nothing could answer for llm:self here
    demos = adapter.examples("sft")
    assert len(demos) == 12 and not any("llm:" in d.meta["opponent"] for d in demos)
    rule_lineups = [lineup for lineup, _ in adapter.opponents if "llm:" not in lineup]
    expected = set(rule_lineups) if rule_lineups else {spec for spec, _ in adapter.demonstrators}
    assert {d.meta["opponent"] for d in demos} <= expected
    assert sum(1 for _ in adapter.tokenizer_corpus()) > 100


def test_a_pool_without_model_seats_draws_its_demonstrations_as_before():
    adapter = make_task("poker", {"num_train": 4, "num_eval": 2, "num_sft": 16})
    drawn = [adapter._drawn_example("sft", i).meta["opponent"] for i in range(16)]
    assert [d.meta["opponent"] for d in adapter.examples("sft")] == drawn and len(set(drawn)) > 1
