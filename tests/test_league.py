"""Self-play league: ``llm:league`` seats one of the run's earlier snapshots, one drawn per worker request."""

from __future__ import annotations

import pytest
import torch

from echo2_sdk.records import group_from_wire, validate_group
from echo2_sdk.registry import make_task
from echo2_sdk.runtime.cli import main as cli_main
from echo2_sdk.runtime.models.modeling import ensure_tiny_qwen3
from echo2_sdk.runtime.rollout.backends.base import Completion, GenerationBackend, SamplingParams
from echo2_sdk.runtime.rollout.base import WorkerSettings
from echo2_sdk.runtime.rollout.codec import MalformedSettings, settings_from_dict, settings_to_dict
from echo2_sdk.runtime.rollout.league import SnapshotLeague, WarmStartSeat, seat_warm_start, seats_league
from echo2_sdk.runtime.rollout.mirror import SeatPolicies, bind_seats
from echo2_sdk.runtime.rollout.worker import RolloutWorker, _make_backend

OPTIONS = {"num_train": 8, "num_eval": 2, "num_sft": 0, "opponent": "rule:calling, llm:league"}


class CallingBackend(GenerationBackend):
    """The agent's backend in the worker test: answers ``call`` (legal, so the hand reaches the opponent)."""

    def __init__(self, tokenizer):
        self.tok, self.version = tokenizer, 0
        self.ids = tuple(tokenizer.encode("call", add_special_tokens=False)) + (tokenizer.convert_tokens_to_ids("<|im_end|>"),)

    def generate(self, prompts, n, params):
        return [[Completion(self.ids, tuple(-0.5 for _ in self.ids), "stop") for _ in range(n)] for _ in prompts]

    def load_weights(self, state_dict, version):
        self.version = version


def shifted(state_dict: dict[str, torch.Tensor], by: float) -> dict[str, torch.Tensor]:
    return {k: t + by for k, t in state_dict.items()}


def engine_weights(league: SnapshotLeague) -> dict[str, torch.Tensor]:
    return {k: t.clone() for k, t in league._engine.model.state_dict().items()}


def test_members_are_spaced_capped_and_copied():
    league = SnapshotLeague(lambda: None, size=3, every_versions=5, max_new_tokens=4)
    weights = {"w": torch.zeros(2)}
    assert [league.offer(v, weights) for v in (2, 5, 6, 9, 10, 15, 21)] == [False, True, False, False, True, True, True]
    assert league.versions == [10, 15, 21]  # the warm start (0) and 5 left, oldest first
    weights["w"] += 1  # the receiver reuses its buffer: the member keeps the snapshot as offered
    assert torch.equal(league._members[21]["w"], torch.zeros(2))
    draws = [league.draw(seed) for seed in range(40)]
    assert set(draws) == {10, 15, 21} and draws == [league.draw(seed) for seed in range(40)]  # seeded
    with pytest.raises(ValueError, match="rollout.league_size"):
        SnapshotLeague(lambda: None, size=0, every_versions=5, max_new_tokens=4)


def test_the_drawn_member_plays_with_its_own_weights_and_the_warm_start_comes_back():
    path = ensure_tiny_qwen3()
    league = SnapshotLeague(lambda: _make_backend("hf", path, "float32", "cpu"), size=4, every_versions=10,
                            max_new_tokens=4)
    messages = [{"role": "user", "content": "to act"}]
    assert league.draw(0) == 0 and league._engine is None  # nothing is built before a decision
    league(messages)
    base = engine_weights(league)
    league.offer(10, shifted(base, 0.5))
    league.drawn = 10
    reply = league(messages)
    assert isinstance(reply, str) and league._engine.version == 10
    assert all(torch.allclose(engine_weights(league)[k], base[k] + 0.5) for k in base)
    league.drawn = 0
    league(messages)
    assert all(torch.equal(engine_weights(league)[k], base[k]) for k in base) and league.calls == 3


def test_seat_factories_resolve_the_league_and_refuse_it_without_one(tiny_tokenizer):
    with pytest.raises(ValueError, match="plays only inside the run"):
        SeatPolicies()("league")
    league = SnapshotLeague(lambda: None, size=2, every_versions=10, max_new_tokens=4)

    class Adapter:
        llm_policy_factory = SeatPolicies(league=league)

    adapter = Adapter()
    bind_seats(adapter, backend=None, tokenizer=tiny_tokenizer, max_new_tokens=4)  # the mirror is bound beside it
    assert adapter.llm_policy_factory("league") is league and adapter.llm_policy_factory.mirror is not None
    poker = make_task("poker", OPTIONS)
    assert seats_league(poker) and not seats_league(make_task("poker", {**OPTIONS, "opponent": "llm:self"}))
    seat_warm_start(poker, "runs/x/base_model", 6)
    seat = poker.llm_policy_factory("league")
    assert isinstance(seat, WarmStartSeat) and (seat.path, seat.max_new_tokens) == ("runs/x/base_model", 6)


def test_echo2_eval_refuses_a_league_seat_in_one_line(capsys):
    assert cli_main(["eval", "--task", "poker", "--agent", "rule:tag", "--opponents", "llm:league", "--hands", "2"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "llm:league" in err and "name a checkpoint" in err


def test_league_settings_travel_to_remote_workers_and_are_checked():
    settings = WorkerSettings(model_path="m", task_name="poker", task_options={}, sampling=SamplingParams(),
                              samples_per_prompt=2, seed=0, league_size=3, league_every_versions=7)
    again = settings_from_dict(settings_to_dict(settings))
    assert (again.league_size, again.league_every_versions) == (3, 7)
    with pytest.raises(MalformedSettings, match="league_size"):
        settings_from_dict({**settings_to_dict(settings), "league_size": 0})


@pytest.mark.slow
def test_a_worker_keeps_earlier_snapshots_and_tags_what_each_deal_met():
    # Sampling seed 4: the requests after the first use seeds 5 and 6, which draw members 10 and 0.
    worker = RolloutWorker("w", WorkerSettings(model_path=ensure_tiny_qwen3(), task_name="poker", task_options=OPTIONS,
                                               sampling=SamplingParams(1.0, 1.0, 3, seed=4), samples_per_prompt=2,
                                               seed=0, league_every_versions=10))
    try:
        examples = [e for e in worker.adapter.examples("train") if e.meta["opponent"] == "llm:league"][:2]
        calling = [e for e in worker.adapter.examples("train") if e.meta["opponent"] == "rule:calling"][:1]
        assert len(examples) == 2 and calling
        base = {k: t.clone() for k, t in worker.backend.model.state_dict().items()}
        worker.backend = CallingBackend(worker.tokenizer)  # the random-init agent would fold: no opponent turn
        assert worker.league is not None and worker.league.versions == [0]
        result = worker.generate(examples + calling)
        groups = [group_from_wire(g) for g in result.groups]
        assert all(validate_group(g, newest_version=0)[1] == {} for g in groups)
        assert [r.meta.get("league_version") for g in groups[:2] for r in g.rollouts] == [0] * 4
        assert all("league_version" not in r.meta for r in groups[2].rollouts)  # the calling station's deal
        for version in (4, 10, 12):
            worker.install(shifted(base, 0.01 * version), version)
            worker._apply_pending()  # what the next request does first
        assert worker.league.versions == [0, 10] and worker.version == 12
        met = []
        for _ in range(2):  # each request draws a member, seeded by its own sampling seed
            groups = [group_from_wire(g) for g in worker.generate(examples).groups]
            versions = {r.meta["league_version"] for g in groups for r in g.rollouts}
            assert len(versions) == 1  # a request's deals (and so each deal's episodes) meet one member
            met += versions
        assert met == [10, 0] and worker.league.calls > 0
    finally:
        worker.close()


def test_doctests():
    import doctest

    from echo2_sdk.runtime.rollout import league

    result = doctest.testmod(league)
    assert result.attempted >= 2 and result.failed == 0
