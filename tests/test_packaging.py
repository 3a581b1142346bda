"""The wheel ships examples/ and a non-editable install finds them: ``--task poker`` loads examples/poker.yaml,
and the simulate configs reach the pool and price files they name, from a copy installed outside the checkout."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from echo2_sdk.config import load_config

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = ROOT / "examples"

pytestmark = pytest.mark.slow  # builds and installs a wheel (~20 s on two shared cores)


def run_installed(tree: Path, cwd: Path, code: str, *args: str) -> subprocess.CompletedProcess:
    """``python -c code args`` on the installed copy only: PYTHONPATH is the tree, the folder is not the checkout."""
    env = {**os.environ, "PYTHONPATH": str(tree), "PYTHONNOUSERSITE": "1"}
    return subprocess.run([sys.executable, "-c", code, *args], cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=300)


# Runs the CLI module as ``python -m echo2_sdk.runtime.cli`` does, after saying where its code came from.
CLI = """
import runpy, sys
import echo2_sdk.examples, echo2_sdk.runtime.cli
print(echo2_sdk.runtime.cli.__file__, file=sys.stderr)
print(echo2_sdk.examples.folder(), file=sys.stderr)
sys.argv = ["echo2", *sys.argv[1:]]
runpy.run_module("echo2_sdk.runtime.cli", run_name="__main__")
"""


def test_wheel_ships_every_example_config(built_wheel: Path) -> None:
    names = set(zipfile.ZipFile(built_wheel).namelist())
    shipped = {f"echo2_sdk/examples/{p.relative_to(EXAMPLES).as_posix()}" for p in EXAMPLES.rglob("*.yaml")}
    assert len(shipped) >= 10 and any("/pools/" in n for n in shipped)
    assert shipped <= names, f"missing from {built_wheel.name}: {sorted(shipped - names)}"
    assert "echo2_sdk/examples/__init__.py" in names


def test_installed_cli_loads_the_shipped_poker_config(installed_tree: Path, tmp_path: Path) -> None:
    proc = run_installed(installed_tree, tmp_path, CLI, "config", "--task", "poker", "--json")
    assert proc.returncode == 0, proc.stderr
    cli_file, examples_folder = proc.stderr.split()[:2]
    assert Path(cli_file).is_relative_to(installed_tree)
    assert Path(examples_folder) == installed_tree / "echo2_sdk" / "examples"
    cfg, defaults = json.loads(proc.stdout), load_config(None, ["task.name=poker"])
    # poker.yaml's values, each of which differs from the defaults a missing example would fall back to
    assert cfg["task"]["name"] == "poker"
    assert (cfg["model"]["tiny"]["tokenizer"], defaults.model.tiny.tokenizer) == ("task", "char")
    assert (cfg["train"]["prompts_per_step"], defaults.train.prompts_per_step) == (4, 16)
    assert cfg["rollout"]["max_new_tokens"] == 6 != defaults.rollout.max_new_tokens
    assert cfg["algo"]["turn_advantage_weight"] == 1.0 != defaults.algo.turn_advantage_weight
    assert cfg["task"]["options"] == {"num_sft": 512, "max_invalid_actions": 1}
    assert cfg["model"]["warm_start"]["enabled"] is True and cfg["model"]["warm_start"]["epochs"] == 16
    assert (cfg["model"]["warm_start"]["threads"], defaults.model.warm_start.threads) == (0, 1)


def test_installed_cli_rejects_a_task_with_neither_example_nor_adapter(installed_tree: Path, tmp_path: Path) -> None:
    proc = run_installed(installed_tree, tmp_path, CLI, "config", "--task", "pokr")
    assert proc.returncode == 2, proc.stdout + proc.stderr
    message = proc.stderr.strip().splitlines()[-1]
    assert message.startswith("echo2 config: unknown task 'pokr'") and "known tasks:" in message and "poker" in message


def test_installed_simulate_configs_find_their_pool_and_price_files(installed_tree: Path, tmp_path: Path) -> None:
    code = """
import json
from echo2_sdk import examples
from echo2_sdk.runtime.planning.simconfig import build_offers, load_simulate_config, resolve_prices
out = {}
for path in sorted(examples.folder().glob("simulate_*.yaml")):
    cfg = load_simulate_config(str(path))
    out[path.name] = {"files": [f for f in (cfg.pool.file, cfg.prices_file) if f],
                      "prices": len(resolve_prices(cfg)), "offers": len(build_offers(cfg))}
print(json.dumps(out))
"""
    proc = run_installed(installed_tree, tmp_path, code)
    assert proc.returncode == 0, proc.stderr
    found = json.loads(proc.stdout)
    assert set(found) == {p.name for p in EXAMPLES.glob("simulate_*.yaml")}
    files = [Path(f) for entry in found.values() for f in entry["files"]]
    assert files and all(f.is_file() and f.is_relative_to(installed_tree) for f in files), files
    assert all(entry["prices"] > 0 for entry in found.values())
    assert found["simulate_table2.yaml"]["offers"] > 0  # its workers come from pools/mixed.yaml
