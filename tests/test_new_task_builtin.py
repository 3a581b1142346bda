"""``echo2 new-task`` from a built-in: the generated subclasses pass their own tests, ``check`` and ``eval``.

The generated modules (``poker_task``, ``moba_task``, ...) are imported by file name, and a module name
is process-wide, so every folder is written once per session (the ``tasks`` fixture) and each test
uses those.
"""

from __future__ import annotations

import dataclasses
import doctest
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from echo2_sdk.registry import get_task_class, known_tasks
from echo2_sdk.runtime.cli import main
from echo2_sdk.scaffold import BUILTINS, KINDS, TEMPLATES, ScaffoldError, camel, new_task_from

ENV = {**os.environ, "OMP_NUM_THREADS": "1", "TRANSFORMERS_VERBOSITY": "error"}
# name → (the built-in it starts from, the files written)
SCAFFOLDS = {
    "poker": ("poker", ["poker.yaml", "poker_env.py", "poker_task.py", "test_poker.py"]),
    "moba": ("moba", ["moba.yaml", "moba_env.py", "moba_task.py", "test_moba.py"]),
    "sums": ("arith", ["sums.yaml", "sums_task.py", "test_sums.py"]),
    "aime24": ("aime24", ["aime24.yaml", "aime24_sample.jsonl", "aime24_task.py", "test_aime24.py"]),
    "threehanded": ("poker", ["test_threehanded.py", "threehanded.yaml", "threehanded_env.py", "threehanded_task.py"]),
}
# The README's edit, made in the generated file only: three-handed at 25/50 against a TAG and a LAG.
EDITS = [("seats: int = 2", "seats: int = 3"), ("small_blind: int = 5", "small_blind: int = 25"),
         ("big_blind: int = 10", "big_blind: int = 50"),
         ('opponent: str = "rule:calling, rule:tag, rule:lag"', 'opponent: str = "rule:tag+rule:lag"')]


@pytest.fixture(scope="module")
def tasks(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("new_task_builtin")
    for name, (source, _) in SCAFFOLDS.items():
        argv = ["new-task", name, "--out", str(root / name)] + ([] if name == source else ["--from", source])
        assert main(argv) == 0
    task_file = root / "threehanded" / "threehanded_task.py"
    text = task_file.read_text()
    for old, new in EDITS:
        assert text.count(old) == 1, old
        text = text.replace(old, new)
    task_file.write_text(text)
    return root


def _cls(tasks: Path, name: str):
    return get_task_class(f"{tasks / name / (name + '_task.py')}:{camel(name)}Task")


@pytest.mark.parametrize("name", list(SCAFFOLDS))
def test_each_builtin_scaffolds_a_subclass_that_imports_it(tasks, name):
    source, files = SCAFFOLDS[name]
    out = tasks / name
    assert sorted(p.name for p in out.iterdir() if p.is_file()) == files
    code = (out / f"{name}_task.py").read_text()
    assert "{{" not in code and "EDIT:" in code and "register_task" not in code  # named by file: no clash
    assert f"from echo2_sdk.adapters import {source} as builtin" in code
    cls = _cls(tasks, name)
    assert cls.__mro__[1] is get_task_class(source) and cls.name == name
    assert f"name: {name}_task.py:{cls.__name__}" in (out / f"{name}.yaml").read_text()
    if (out / f"{name}_env.py").exists():
        env_code = (out / f"{name}_env.py").read_text()
        assert f"from echo2_sdk.envs import {source} as engine" in env_code and env_code.count("# EDIT:") == 4


@pytest.mark.parametrize("name", ["poker", "moba", "sums", "aime24"])
def test_generated_options_restate_every_builtin_option_with_its_default(tasks, name):
    cls = _cls(tasks, name)
    builtin = get_task_class(SCAFFOLDS[name][0])
    restated = set(vars(cls.Options)["__annotations__"])
    assert restated == {f.name for f in dataclasses.fields(builtin.Options)}  # a new built-in option fails here
    assert dataclasses.asdict(cls.Options()) == dataclasses.asdict(builtin.Options())


def test_generated_tests_pass_unchanged_and_after_an_edit(tasks):
    # One process for every folder (a pytest start costs seconds); from the parent, as a user runs it.
    proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *SCAFFOLDS],
                          cwd=tasks, capture_output=True, text=True, timeout=300,
                          env={**ENV, "HF_DATASETS_CACHE": str(tasks / ".hf")})
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    assert " passed" in proc.stdout and "failed" not in proc.stdout


SMALL = ["--set", "task.options.num_sft=4", "--set", "task.options.num_train=8", "--set", "task.options.num_eval=4"]


@pytest.mark.parametrize("name, extra", [
    ("poker", SMALL), ("moba", SMALL), ("threehanded", SMALL), ("sums", []),  # SMALL: 4 demonstrations, not 256
    ("aime24", ["--tokenizer", "tiny", "--set", "task.options.path=aime24/aime24_sample.jsonl"]),
])
def test_echo2_check_passes_on_the_generated_config(tasks, capsys, monkeypatch, name, extra):
    monkeypatch.chdir(tasks)
    monkeypatch.setenv("HF_DATASETS_CACHE", str(tasks / ".hf"))
    assert main(["check", "--config", f"{name}/{name}.yaml", *extra]) == 0
    assert " 0 failed" in capsys.readouterr().out


def test_eval_plays_the_edited_table(tasks, capsys, monkeypatch):
    monkeypatch.chdir(tasks)
    table = {"seats": 3, "small_blind": 25, "big_blind": 50, "starting_stack": 1000}
    for where in (["--config", "threehanded/threehanded.yaml"], ["--task", "threehanded/threehanded_task.py:ThreehandedTask"]):
        assert main(["eval", *where, "--hands", "3", "--json"]) == 0
        result = json.loads(capsys.readouterr().out)
        assert result["table"] == table and result["opponents"] == ["rule:tag+rule:lag"], where
    # Explicit arguments still win; the config's options (with --set) are the table.
    assert main(["eval", "--config", "threehanded/threehanded.yaml", "--set", "task.options.big_blind=100",
                 "--opponents", "rule:calling", "--hands", "3", "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["table"]["big_blind"] == 100 and result["opponents"] == ["rule:calling"]
    assert main(["eval", "--config", "moba/moba.yaml", "--episodes", "2", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["opponents"] == ["rule:pusher", "rule:farmer"]
    # A registered name keeps its evaluation's own defaults (all three styles heads-up at 5/10).
    assert main(["eval", "--task", "poker", "--hands", "2", "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["table"]["seats"] == 2 and len(result["opponents"]) == 3
    assert main(["eval", "--config", "poker/poker.yaml", "--task", "moba"]) == 2
    assert "not both" in capsys.readouterr().err


def test_list_names_the_builtins_and_the_kinds(capsys):
    assert main(["new-task", "--list"]) == 0
    out = capsys.readouterr().out
    assert all(f"  {name} " in out for name in [*BUILTINS, *KINDS])


def test_every_builtin_has_a_template_folder_and_is_registered():
    folders = {p.name for p in TEMPLATES.iterdir() if p.is_dir()}
    assert folders == {*BUILTINS, *KINDS} and set(BUILTINS) <= set(known_tasks())


@pytest.mark.parametrize("argv, message", [
    (["shortdeck", "--from", "pokr"], "--from 'pokr' is not a built-in task to start from (aime24, arith, moba, "
                                      "poker); for a task of your own use --kind single-turn|multi-turn. "
                                      "Did you mean 'poker'?"),
    (["game", "--from", "multi-turn"], "use --kind multi-turn"),
    (["shortdeck", "--from", "poker", "--kind", "multi-turn"], "exclude each other"),
    (["moba", "--from", "poker"], "task name 'moba' is already registered"),
    (["poker", "--kind", "multi-turn"], "or start from the built-in: echo2 new-task poker (without --kind)"),
    ([], "give the task's NAME"),
])
def test_bad_requests_are_one_line_errors_with_the_fix(tmp_path, capsys, monkeypatch, argv, message):
    monkeypatch.chdir(tmp_path)
    assert main(["new-task", *argv]) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1 and not any(tmp_path.iterdir())


def test_default_folder_and_refusing_to_overwrite(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    written = new_task_from("poker", "poker")
    assert {p.parent for p in written} == {Path("poker")}
    (tmp_path / "poker" / "poker_env.py").write_text("# my hooks\n")
    with pytest.raises(ScaffoldError, match="refusing to overwrite existing file"):
        new_task_from("poker", "poker")
    assert (tmp_path / "poker" / "poker_env.py").read_text() == "# my hooks\n"


def test_doctests():
    from echo2_sdk import scaffold
    from echo2_sdk.adapters import moba, poker
    from echo2_sdk.envs.poker import evaluation

    for module in (scaffold, poker, moba, evaluation):
        assert doctest.testmod(module).failed == 0, module.__name__


def test_a_mixed_opponent_column_must_name_every_seat():
    from echo2_sdk.envs.poker.evaluation import seat_specs

    with pytest.raises(ValueError, match="names 2 seats but the table has 1 besides the agent's"):
        seat_specs("rule:tag+rule:lag", 1)


@pytest.mark.slow
def test_two_training_steps_of_the_generated_poker_task(tmp_path):
    """What a user runs after `echo2 new-task poker`, shortened (no warm start, one worker, tiny batches)."""
    assert main(["new-task", "poker", "--out", str(tmp_path / "poker")]) == 0
    run_dir = tmp_path / "run"
    cmd = [sys.executable, "-m", "echo2_sdk.runtime.cli", "train", "--config", "poker/poker.yaml",
           "--run-dir", str(run_dir), "--set", "train.steps=2", "--set", "model.warm_start.enabled=false",
           "--set", "train.eval_max_examples=2", "--set", "rollout.num_workers=1", "--set", "rollout.samples_per_prompt=2",
           "--set", "train.prompts_per_step=2", "--set", "train.plots=false", "--set", "train.checkpoint_every=0",
           "--set", "task.options={num_train: 8, num_eval: 2, num_sft: 0}", "--set", "runtime.ray_num_cpus=2",
           # the tokenizer fitted to the generated task: episodes 4x shorter, and its corpus hook exercised
           "--set", "model.tiny.tokenizer=task"]
    proc = subprocess.run(cmd, cwd=tmp_path, env=ENV, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["steps"] == 2 and summary["samples_accepted"] >= 2 * 2 * 2 and summary["samples_rejected"] == 0
    assert summary["config"]["task"]["name"] == f"{(tmp_path / 'poker' / 'poker_task.py').resolve()}:PokerTask"


@pytest.mark.parametrize("name", ["poker", "moba"])
def test_a_generated_game_config_trains_with_the_example_configs_values(tasks, name):
    """The generated NAME.yaml says its values are examples/NAME.yaml's: every section but the task's
    name matches, and the task options it sets are the ones the example sets."""
    import yaml

    from echo2_sdk.config import load_config, to_dict

    generated = to_dict(load_config(str(tasks / name / f"{name}.yaml")))
    example = to_dict(load_config(str(Path(__file__).resolve().parents[1] / "examples" / f"{name}.yaml")))
    generated_task, example_task = generated.pop("task"), example.pop("task")
    assert generated == example
    assert generated_task["options"] == example_task["options"]
    assert yaml.safe_load((tasks / name / f"{name}.yaml").read_text())["model"]["tiny"]["tokenizer"] == "task"
