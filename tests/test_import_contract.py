"""The import contract (``.importlinter``) holds on the layout as it is installed.

``runtime/``, ``adapters/`` and ``envs/`` only become ``echo2_sdk.runtime``, ``echo2_sdk.adapters`` and
``echo2_sdk.envs`` through setuptools' package-dir mapping; an editable checkout hides them from a static
import graph. So the contract is checked on a real install of the wheel (the ``installed_tree`` fixture),
where the mapped folders are real sub-packages of ``echo2_sdk``.
"""

from __future__ import annotations

import configparser
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
CONTRACT = ROOT / ".importlinter"
LINT_IMPORTS = shutil.which("lint-imports") or str(Path(sys.executable).parent / "lint-imports")

pytestmark = pytest.mark.slow  # builds and installs a wheel


def _lint(tree: Path, config: Path = CONTRACT) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(tree)}
    return subprocess.run([LINT_IMPORTS, str(config), "--no-cache", "--no-logo"], cwd=tree, env=env,
                          capture_output=True, text=True, timeout=300)


def test_contract_is_checked_on_the_mapped_layout(installed_tree: Path) -> None:
    code = ("import echo2_sdk.runtime.driver.trainer as t, echo2_sdk.envs, echo2_sdk.adapters; "
            "print(t.__file__); print(echo2_sdk.envs.__file__); print(echo2_sdk.adapters.__file__)")
    out = subprocess.run([sys.executable, "-c", code], cwd=installed_tree, capture_output=True, text=True,
                         env={**os.environ, "PYTHONPATH": str(installed_tree)}, check=True).stdout.split()
    assert len(out) == 3 and all(Path(p).is_relative_to(installed_tree / "echo2_sdk") for p in out), out


def test_import_contracts_hold(installed_tree: Path) -> None:
    proc = _lint(installed_tree)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "0 broken" in proc.stdout, proc.stdout


def test_sdk_core_contract_names_every_core_module() -> None:
    """A new module in echo2_sdk/ cannot slip past the 'SDK core' contract."""
    parser = configparser.ConfigParser()
    parser.read(CONTRACT)
    listed = set(parser["importlinter:contract:sdk-core"]["source_modules"].split())
    core = {f"echo2_sdk.{p.stem}" for p in (ROOT / "echo2_sdk").glob("*.py") if p.stem != "__init__"}
    core |= {f"echo2_sdk.{p.parent.name}" for p in (ROOT / "echo2_sdk").glob("*/__init__.py")}
    assert listed == core, f"missing from the contract: {sorted(core - listed)}; stale: {sorted(listed - core)}"


@pytest.mark.parametrize("edit, broken", [
    # an SDK module reaching into the runtime
    ("echo2_sdk/records.py", "The SDK core imports neither"),
    # the rollout plane importing the learning plane
    ("echo2_sdk/runtime/rollout/pool.py", "Runtime planes"),
    # a circle inside the SDK (registry -> adapter -> records -> registry)
    ("echo2_sdk/records.py#circle", "No import circles"),
])
def test_contract_catches_violations(installed_tree: Path, tmp_path: Path, edit: str, broken: str) -> None:
    tree = tmp_path / "tree"
    shutil.copytree(installed_tree / "echo2_sdk", tree / "echo2_sdk")
    path, _, kind = edit.partition("#")
    line = {
        ("echo2_sdk/records.py", ""): "import echo2_sdk.runtime.models.files\n",
        ("echo2_sdk/runtime/rollout/pool.py", ""): "import echo2_sdk.runtime.learning.buffer\n",
        ("echo2_sdk/records.py", "circle"): "import echo2_sdk.registry\n",
    }[(path, kind)]
    target = tree / path
    target.write_text(target.read_text() + "\n" + line)
    proc = _lint(tree)
    assert proc.returncode != 0, proc.stdout
    assert broken in proc.stdout.split("Broken contracts")[-1], proc.stdout
