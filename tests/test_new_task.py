"""``echo2 new-task``: generated tasks pass their own tests and train; file-path task names."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from echo2_sdk.runtime.cli import main
from echo2_sdk.config import load_config
from echo2_sdk.registry import get_task_class, is_file_spec
from echo2_sdk.runtime.driver.rundir import default_run_dir
from echo2_sdk.scaffold import KINDS, TEMPLATES, ScaffoldError, new_task

REPO = Path(__file__).resolve().parents[1]
ENV = {**os.environ, "OMP_NUM_THREADS": "1", "TRANSFORMERS_VERBOSITY": "error"}
EXPECTED = {
    "single-turn": ["NAME.yaml", "NAME_task.py", "test_NAME.py"],
    "multi-turn": ["NAME.yaml", "NAME_env.py", "NAME_task.py", "test_NAME.py"],
}


@pytest.mark.parametrize("kind, name", [("single-turn", "rev_words"), ("multi-turn", "guessing")])
def test_generated_task_passes_its_own_tests(tmp_path, capsys, kind, name):
    out = tmp_path / "tasks" / name
    assert main(["new-task", name, "--kind", kind, "--out", str(out)]) == 0
    assert f"edit the TODOs in {out / (name + ('_env.py' if kind == 'multi-turn' else '_task.py'))}" \
        in capsys.readouterr().out
    assert sorted(p.name for p in out.iterdir()) == sorted(f.replace("NAME", name) for f in EXPECTED[kind])
    text = "".join(p.read_text() for p in out.iterdir())
    assert "{{" not in text and "TODO" in text
    # From another folder, as a user would run it; pytest puts the task folder on sys.path.
    proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(out)],
                          cwd=tmp_path, env=ENV, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    assert " passed" in proc.stdout and "failed" not in proc.stdout


def test_default_folder_is_the_task_name(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    written = new_task("capitals")
    assert {p.parent for p in written} == {Path("capitals")}
    assert (tmp_path / "capitals" / "capitals_task.py").exists()
    assert not (tmp_path / "capitals" / "capitals_env.py").exists()  # single-turn is the default kind


def test_refuses_to_overwrite_and_names_the_files(tmp_path, capsys):
    out = tmp_path / "game"
    assert main(["new-task", "game", "--kind", "multi-turn", "--out", str(out)]) == 0
    env_file = out / "game_env.py"
    env_file.write_text("# my rules\n")
    (out / "game.yaml").unlink()
    capsys.readouterr()
    assert main(["new-task", "game", "--kind", "multi-turn", "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert "refusing to overwrite" in err and str(env_file) in err and "game.yaml" not in err
    assert env_file.read_text() == "# my rules\n" and not (out / "game.yaml").exists()  # nothing written


@pytest.mark.parametrize("name, message", [
    ("Wordle", "lower-case Python identifier"), ("9lives", "lower-case Python identifier"),
    ("class", "lower-case Python identifier"), ("arith", "already registered")
])
def test_bad_names_are_refused_with_the_fix(tmp_path, name, message):
    with pytest.raises(ScaffoldError, match=message):
        new_task(name, out=tmp_path / "x")
    assert not (tmp_path / "x").exists()


def test_templates_ship_as_package_data():
    import tomllib

    globs = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]["package-data"]["echo2_sdk"]
    templates = sorted(TEMPLATES.rglob("*.tmpl"))
    assert len([t for t in templates if t.parent.name in KINDS]) == 7  # the built-ins' folders: test_new_task_builtin
    for template in templates:
        rel = template.relative_to(TEMPLATES.parent)
        assert any(rel.match(g) for g in globs), f"{rel} is not shipped by package-data {globs}"


# ----- file-path task names ----------------------------------------------------------------------------
def test_yaml_task_path_is_relative_to_the_yaml_and_set_to_the_cwd(tmp_path, monkeypatch):
    out = tmp_path / "tasks" / "rev"
    new_task("rev", out=out)
    monkeypatch.chdir(tmp_path)
    cfg = load_config(str(out / "rev.yaml"))
    assert cfg.task.name == f"{out.resolve() / 'rev_task.py'}:RevTask" and is_file_spec(cfg.task.name)
    assert get_task_class(cfg.task.name).name == "rev"
    cfg = load_config(None, ["task.name=tasks/rev/rev_task.py:RevTask"])
    assert cfg.task.name == f"{out.resolve() / 'rev_task.py'}:RevTask"
    assert default_run_dir(cfg.task.name).endswith("-rev_task") and "/tmp" not in default_run_dir(cfg.task.name)


def test_file_spec_errors_say_what_to_fix(tmp_path):
    with pytest.raises(ImportError, match="does not exist"):
        get_task_class(f"{tmp_path}/nope.py:Nope")
    new_task("rev2", out=tmp_path / "r")
    with pytest.raises(ImportError, match="Did you mean 'Rev2Task'"):
        get_task_class(f"{tmp_path}/r/rev2_task.py:Rev2Tsak")
    (tmp_path / "json.py").write_text("X = 1\n")  # the name 'json' is taken by the standard library
    with pytest.raises(ImportError, match="already taken"):
        get_task_class(f"{tmp_path}/json.py:X")
