"""The rollout-overhead benchmark's premises: its A/B compares equal work, its interval is a real one."""

from __future__ import annotations

import sys

import pytest

from conftest import load_benchmark


@pytest.fixture(scope="module")
def bench():
    yield load_benchmark("rollout_overhead.py", "rollout_overhead_bench")
    del sys.modules["rollout_overhead_bench"]


def test_the_doctests_and_pooling_runs(bench, tmp_path, capsys, monkeypatch):
    """``--pool`` reads saved reports and pools their rounds; a report without raw rounds is a one-line error."""
    import doctest
    import json

    assert doctest.testmod(bench).failed == 0
    runs = [{"seconds_per_round": {"actor_engine": [1.0, 1.0], "actor": [1.0, 1.25]}},
            {"seconds_per_round": {"actor_engine": [2.0], "actor": [2.5]}}]
    paths = []
    for i, report in enumerate(runs):
        paths.append(tmp_path / f"run{i}.json")
        paths[-1].write_text(json.dumps(report))
    monkeypatch.setattr(sys, "argv", ["rollout_overhead.py", "--pool", *map(str, paths)])
    bench.main()
    pooled = json.loads(capsys.readouterr().out)["pooled_overhead"]
    assert list(pooled) == ["actor_vs_actor_engine"]
    assert pooled["actor_vs_actor_engine"]["median"] == 0.2 and pooled["actor_vs_actor_engine"]["n"] == 3
    (tmp_path / "old.json").write_text(json.dumps({"paired_overhead": {}}))
    monkeypatch.setattr(sys, "argv", ["rollout_overhead.py", "--pool", str(tmp_path / "old.json")])
    with pytest.raises(SystemExit):
        bench.main()
    assert "carry no seconds_per_round" in capsys.readouterr().err
    monkeypatch.setattr(sys, "argv", ["rollout_overhead.py", "--pool", str(tmp_path / "absent.json")])
    with pytest.raises(SystemExit):
        bench.main()
    assert "cannot read a report" in capsys.readouterr().err


def _bench_worker(bench, *, prompts: int, max_new_tokens: int, seed: int):
    """The benchmark's worker on arith, 4 samples a prompt: (worker, examples, sampling)."""
    from echo2_sdk.registry import make_task
    from echo2_sdk.runtime.models.modeling import ensure_tiny_qwen3
    from echo2_sdk.runtime.rollout.backends.base import SamplingParams
    from echo2_sdk.runtime.rollout.base import WorkerSettings

    examples = list(make_task("arith", {}, seed=0).examples("train"))[:prompts]
    sampling = SamplingParams(temperature=1.0, top_p=1.0, max_new_tokens=max_new_tokens, seed=seed)
    settings = WorkerSettings(model_path=ensure_tiny_qwen3(), task_name="arith", task_options={},
                              sampling=sampling, samples_per_prompt=4, seed=0, threads=1)
    return bench.make_bench_worker_class()("bench-test", settings), examples, sampling


def test_the_bootstrap_interval_brackets_the_median_and_narrows_with_more_data(bench):
    few = [1.0, 1.2, 0.8, 1.1, 0.9]
    lo, hi = bench.bootstrap_ci(few)
    assert lo <= 1.0 <= hi and lo < hi
    lo_many, hi_many = bench.bootstrap_ci(few * 20)
    assert hi_many - lo_many < hi - lo
    row = bench.summarize(few)
    assert row["median"] == 1.0 and row["n"] == 5 and (row["min"], row["max"]) == (0.8, 1.2)


def test_the_bare_engine_stream_produces_the_workers_tokens(bench):
    """The paired A/B is fair only if the engine alone and the worker sample the same tokens."""
    import dataclasses

    from echo2_sdk.records import group_from_wire

    worker, examples, sampling = _bench_worker(bench, prompts=3, max_new_tokens=8, seed=5)
    try:
        prompts = [worker._prompt_ids(ex) for ex in examples]
        engine_tokens, _ = bench.run_engine(worker.backend, prompts, 4, sampling, 2)
        worker.rewind()
        worker_tokens = sum(worker.generate(examples).num_tokens for _ in range(2))
        assert engine_tokens == worker_tokens
        worker.rewind()
        first = worker.generate(examples)
        sampled = [list(r.completion_ids) for g in first.groups for r in group_from_wire(g).rollouts]
        bare = [list(c.token_ids) for outs in worker.backend.generate(prompts, 4, sampling) for c in outs]
        assert sampled == bare  # rewound, the worker's first call uses the engine's first seed
        reseeded = dataclasses.replace(sampling, seed=6)
        assert [list(c.token_ids) for outs in worker.backend.generate(prompts, 4, reseeded) for c in outs] != bare
    finally:
        worker.close()


def test_the_child_rewards_variant_scores_the_same_rewards_without_the_quick_path(bench):
    """``actor_child_rewards`` is equal work: the same tokens, the same rewards, every one from the child."""
    from echo2_sdk.records import group_from_wire

    worker, examples, _ = _bench_worker(bench, prompts=4, max_new_tokens=6, seed=3)

    def scored() -> list[tuple[list[int], float]]:
        worker.rewind()
        result = worker.generate(examples)
        return [(list(r.completion_ids), r.reward) for g in result.groups for r in group_from_wire(g).rollouts]

    try:
        quick = scored()
        assert worker.guard.stats()["in_process"] == 16
        worker.use_quick_reward(False)
        assert scored() == quick
        assert worker.guard.stats()["in_process"] == 16  # the second call's 16 went to the child
    finally:
        worker.close()


def test_the_stdlib_json_variant_sends_the_same_reply(bench):
    """``actor_stdlib_json`` is equal work: the reply the product's encoder writes, decoded alike."""
    from echo2_sdk.runtime.rollout.codec import example_to_dict, result_from_json

    worker, examples, _ = _bench_worker(bench, prompts=3, max_new_tokens=6, seed=2)
    wire = [example_to_dict(e) for e in examples]

    def reply(method) -> tuple:
        worker.rewind()
        result = result_from_json(method(wire))
        groups = [{k: v for k, v in g.items() if k != "t_generated"} for g in result.groups]  # a wall-clock stamp
        return result.version, result.num_tokens, result.reward_status, groups

    try:
        product, stdlib = reply(worker.generate_wire), reply(worker.generate_wire_stdlib)
        assert product == stdlib and product[1] > 0 and len(product[3]) == 3
    finally:
        worker.close()


@pytest.mark.parametrize("multi_turn", [False, True])
def test_the_worker_hands_the_gil_over_once_a_call_and_the_variant_does_not(bench, monkeypatch, multi_turn):
    """The generation lock's release yields the GIL (``time.sleep(0)``) once per call, single- and multi-turn;
    ``actor_no_handover`` turns exactly that off and nothing else (the same tokens)."""
    import time as real_time

    import echo2_sdk.runtime.rollout.worker as worker_module

    if multi_turn:
        from echo2_sdk.runtime.models.modeling import ensure_tiny_qwen3
        from echo2_sdk.runtime.rollout.backends.base import SamplingParams
        from echo2_sdk.runtime.rollout.base import WorkerSettings

        sampling = SamplingParams(temperature=1.0, top_p=1.0, max_new_tokens=4, seed=1)
        settings = WorkerSettings(model_path=ensure_tiny_qwen3(), task_name="moba", task_options={},
                                  sampling=sampling, samples_per_prompt=2, seed=0, threads=1)
        worker = bench.make_bench_worker_class()("bench-test", settings)
        from echo2_sdk.registry import make_task

        examples = list(make_task("moba", {}, seed=0).examples("train"))[:1]
    else:
        worker, examples, _ = _bench_worker(bench, prompts=2, max_new_tokens=4, seed=1)
    yields: list[float] = []

    class Clock:
        def __getattr__(self, name):
            return getattr(real_time, name)

        @staticmethod
        def sleep(seconds: float) -> None:
            yields.append(seconds)
            real_time.sleep(seconds)

    monkeypatch.setattr(worker_module, "time", Clock())
    try:
        def tokens() -> list:
            worker.rewind()
            return [g["rollouts"] for g in worker.generate(examples).groups]

        handed = tokens()
        assert yields == [0]
        worker.set_hand_over(False)
        assert tokens() == handed and yields == [0]
    finally:
        worker.close()


def test_the_engine_call_is_the_workers_generation_under_its_lock(bench):
    """``actor_engine_calls`` / ``actor_engine_pipelined``: call r samples the worker's call r's tokens, and holds the
    generation lock, so two calls in flight take turns as ``generate`` does (not two engines at once)."""
    from echo2_sdk.runtime.rollout.codec import example_to_dict

    worker, examples, _ = _bench_worker(bench, prompts=2, max_new_tokens=6, seed=4)
    wire = [example_to_dict(e) for e in examples]
    locked: list[bool] = []
    generate = worker.backend.generate

    def watched(*args, **kwargs):
        locked.append(worker._generate_lock.locked())
        return generate(*args, **kwargs)

    try:
        worker.backend.generate = watched
        engine = [worker.engine_call(wire, r) for r in range(2)]
        assert locked == [True, True]
        worker.rewind()
        assert engine == [worker.generate(examples).num_tokens for _ in range(2)] and min(engine) > 0
    finally:
        worker.close()
