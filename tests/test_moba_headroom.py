"""benchmarks/moba_headroom.py: the best return of a MOBA training window by exhaustive search.

Checked on a 2-decision window (a few dozen sequences per episode, well under a second): the search's optimum
is at least what every single-action-repeated plan and every rule bot earns from the same state, its plan
replays to its value, and bad input (a window over the limit, one episode, a model foe) is refused in one line.
"""

from __future__ import annotations

import copy
import dataclasses
import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "benchmarks" / "moba_headroom.py"
TWO_DECISIONS = ("--set", "task.options.warmup_ticks=24", "--set", "task.options.max_ticks=26")


def _module():
    spec = importlib.util.spec_from_file_location("moba_headroom", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(SCRIPT), *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=300, env={**os.environ, "OMP_NUM_THREADS": "1"})


def _episode_env(opponent: str = "rule:farmer"):
    from echo2_sdk.registry import make_task

    adapter = make_task("moba", {"warmup_ticks": 24, "max_ticks": 26, "num_sft": 4}, seed=0)
    first = next(iter(adapter.examples("eval")))
    example = dataclasses.replace(first, meta={**first.meta, "opponent": opponent})
    env = adapter.env_for(example)
    env.begin_episode(example.meta["episode_seed"])
    return adapter, env, example


def _replay(env, plan: list[str]) -> float:
    total = 0.0
    for action in plan:
        _, reward, terminated, truncated, _ = env.step(action)
        total += reward
        if terminated or truncated:
            break
    return total


def test_the_search_beats_or_ties_every_bot_and_its_plan_replays_to_its_value():
    m = _module()
    adapter, env, example = _episode_env()
    best, plan = m.best_return(copy.deepcopy(env))
    assert 1 <= len(plan) <= 2
    assert abs(_replay(copy.deepcopy(env), plan) - best) < 1e-9
    for spec in m.BOTS:
        assert best >= adapter.play_episode(example, spec).reward - 1e-9
    for action in env.legal_actions():  # the same action twice (when still legal) is one of the searched plans
        trial = copy.deepcopy(env)
        value = _replay(trial, [action])
        if not trial.done and action in trial.legal_actions():
            value += _replay(trial, [action])
        assert best >= value - 1e-9


def test_the_script_reports_every_lineup_as_json():
    proc = _run(*TWO_DECISIONS, "--episodes", "2")
    assert proc.returncode == 0, proc.stderr[-2000:]
    report = json.loads(proc.stdout)
    assert report["decisions"] == 2 and report["columns"]
    for column in report["columns"].values():
        assert column["best"]["n"] == 2
        for spec in ("rule:farmer", "rule:pusher"):
            assert column["best"]["mean"] >= column[f"{spec} as agent"]["mean"] - 1e-9


def test_a_window_over_the_limit_is_refused_in_one_line():
    proc = _run("--set", "task.options.max_ticks=40", "--episodes", "2")
    assert proc.returncode != 0
    message = proc.stderr.strip().splitlines()
    assert len(message) == 1 and "16 decisions" in message[0] and "at most 5" in message[0], proc.stderr


def test_one_episode_is_refused_in_one_line():
    proc = _run(*TWO_DECISIONS, "--episodes", "1")
    assert proc.returncode != 0
    message = proc.stderr.strip().splitlines()
    assert len(message) == 1 and "--episodes=1" in message[0] and "at least 2" in message[0], proc.stderr


def test_doctests():
    import doctest

    result = doctest.testmod(_module())
    assert result.attempted > 0 and result.failed == 0


def test_a_clone_is_independent_of_its_original():
    m = _module()
    _, env, _ = _episode_env()
    before = m.clone(env)
    twin = m.clone(env)
    _replay(twin, [twin.legal_actions()[0]])
    assert m.best_return(m.clone(env)) == m.best_return(before)  # stepping the twin left env as it was


def test_a_model_foe_is_refused_in_one_line():
    proc = _run(*TWO_DECISIONS, "--set", "task.options.opponent=rule:pusher, llm:/nonexistent", "--episodes", "2")
    assert proc.returncode != 0
    message = proc.stderr.strip().splitlines()
    assert len(message) == 1 and "seats a model" in message[0], proc.stderr


def test_named_bots_without_the_search_and_a_misspelt_bot_refused_in_one_line():
    proc = _run(*TWO_DECISIONS, "--episodes", "2", "--bots", "rule:grinder", "--no-search")
    assert proc.returncode == 0, proc.stderr[-2000:]
    report = json.loads(proc.stdout)
    assert report["bots"] == ["rule:grinder"] and report["searched"] is False
    for column in report["columns"].values():
        assert set(column) == {"rule:grinder as agent"} and column["rule:grinder as agent"]["n"] == 2
    proc = _run(*TWO_DECISIONS, "--episodes", "2", "--bots", "rule:grindr", "--no-search")
    message = proc.stderr.strip().splitlines()
    assert proc.returncode != 0 and len(message) == 1 and "rule:grindr" in message[0], proc.stderr


def test_a_model_samples_every_episode_and_a_bad_model_folder_is_refused_in_one_line(tmp_path):
    """``--model``: the model's sampled episodes (n = episodes x samples) beside the bots, with the share that beats
    every bot on its own episode and reaches its optimum; a folder without a model is refused in one line."""
    from echo2_sdk.runtime.models.modeling import ensure_tiny_qwen3

    proc = _run(*TWO_DECISIONS, "--episodes", "2", "--model", ensure_tiny_qwen3(), "--samples", "3",
                "--bots", "rule:farmer")
    assert proc.returncode == 0, proc.stderr[-2000:]
    report = json.loads(proc.stdout)
    assert report["model"] and report["samples"] == 3 and report["temperature"] == 1.0
    for column in report["columns"].values():
        sampled = column["model sampled"]
        assert sampled["n"] == 6 and sampled["max"] >= sampled["mean"]
        assert 0.0 <= sampled["share_beating_every_bot"] <= 1.0 and 0.0 <= sampled["share_reaching_best"] <= 1.0
    proc = _run(*TWO_DECISIONS, "--episodes", "2", "--model", str(tmp_path), "--no-search")
    message = proc.stderr.strip().splitlines()
    assert proc.returncode != 0 and len(message) == 1 and "not a model folder" in message[0], proc.stderr
    (tmp_path / "config.json").write_text("{}")  # weights without a tokenizer, as in checkpoints/step_K
    proc = _run(*TWO_DECISIONS, "--episodes", "2", "--model", str(tmp_path), "--no-search")
    message = proc.stderr.strip().splitlines()
    assert proc.returncode != 0 and len(message) == 1 and "tokenizer_config.json" in message[0], proc.stderr


def test_sampling_leaves_the_searched_adapter_without_a_model():
    """The episode loop binds its model to the adapter it plays on (``llm:self`` seats); the sampler plays on an
    adapter of its own, so the search's env copies never carry (and pickle) a model."""
    from echo2_sdk.config import load_config
    from echo2_sdk.registry import make_task
    from echo2_sdk.runtime.models.modeling import ensure_tiny_qwen3

    m = _module()
    cfg = load_config(str(ROOT / "examples" / "moba.yaml"), list(TWO_DECISIONS[1::2]) + ["task.options.num_sft=4"])
    adapter = make_task(cfg.task.name, cfg.task.options, seed=cfg.train.seed)
    sampler = m.model_sampler(cfg, ensure_tiny_qwen3(), 2, 1.0)
    column = m.measure(adapter, "rule:farmer", list(adapter.examples("eval"))[:1], ("rule:farmer",), sampler=sampler)
    assert column["model sampled"]["n"] == 2 and column["best"]["n"] == 1
    assert adapter.llm_policy_factory is None
