import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

# Two cores are shared by the learner, workers and pytest: keep each test single-threaded.
torch.set_num_threads(1)
os.environ.setdefault("OMP_NUM_THREADS", "1")

SHARED_DATA = os.path.join(os.path.dirname(__file__), "..", "..", "shared", "data")
ROOT = Path(__file__).resolve().parent.parent
# Not part of the distribution; left out of the copy the wheel is built from (runs/ can be large).
_NOT_BUILT = {".git", "runs", "build", "dist", "tests", "benchmarks", ".whl", ".gl"}


# The test command runs `-n 2 --dist loadfile --no-loadscope-reorder`: xdist hands out whole files in collection
# order, so the files that take longest go first (longest-processing-time-first) and the many short ones fill in
# behind them on whichever process frees up. xdist's own reorder (by number of tests) would hand out the few-test
# end-to-end files last and leave one process running a 4-minute file alone at the end. Seconds per file: their
# tests' sum in one run of the suite on the 2-core machine (--durations=0; 1,536 s for all; the template's from its
# 150-step version, two runs side by side); the others take < 40 s.
LONGEST_FILES_S = {
    "test_template_learns.py": 330, "test_chaos.py": 223, "test_trainer_e2e.py": 199, "test_vllm_backend.py": 147,
    "test_run_safety.py": 120, "test_benchmarks_learner.py": 52, "test_exact_resume.py": 48,
    "test_broadcast_delta.py": 48, "test_learner_sharded.py": 46, "test_multinode.py": 45,
    "test_new_task_builtin.py": 43, "test_league.py": 37,
}


def pytest_collection_modifyitems(config, items):
    rank = {name: i for i, name in enumerate(sorted(LONGEST_FILES_S, key=LONGEST_FILES_S.get, reverse=True))}
    items.sort(key=lambda item: rank.get(item.path.name, len(rank)))  # stable: a file's own order is kept


def load_benchmark(script: str, module_name: str):
    """``benchmarks/SCRIPT`` imported as ``module_name`` (registered in ``sys.modules``, as dataclasses and Ray's
    pickling need); the caller removes it when done."""
    import importlib.util

    spec = importlib.util.spec_from_file_location(module_name, ROOT / "benchmarks" / script)
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = module
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="session")
def tiny_tokenizer():
    from echo2_sdk.runtime.models.modeling import build_tiny_tokenizer

    return build_tiny_tokenizer()


@pytest.fixture(scope="module")
def ray_cluster():
    """A local Ray cluster shared by one test module (trainer runs start their workers on it)."""
    import ray

    ray.init(address="local", num_cpus=4, include_dashboard=False, logging_level="ERROR",
             runtime_env={"env_vars": {"OMP_NUM_THREADS": "1", "TRANSFORMERS_VERBOSITY": "error"}})
    yield
    ray.shutdown()


def _pip(*args: str) -> None:
    env = {**os.environ, "PIP_DISABLE_PIP_VERSION_CHECK": "1", "PIP_NO_INPUT": "1"}
    proc = subprocess.run([sys.executable, "-m", "pip", *args], capture_output=True, text=True, env=env, timeout=300)
    if proc.returncode != 0:
        pytest.fail(f"pip {' '.join(args)} failed (exit {proc.returncode}):\n"
                    f"{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")


@pytest.fixture(scope="session")
def built_wheel(tmp_path_factory) -> Path:
    """A wheel of this checkout. Built from a copy, so that setuptools' build/ and egg-info never land in the
    checkout and two test sessions cannot build over each other."""
    base = tmp_path_factory.mktemp("wheel")
    src = base / "src"

    def ignore(folder: str, names: list[str]) -> set[str]:
        skipped = {n for n in names if n == "__pycache__" or n.endswith(".egg-info") or n == ".pytest_cache"}
        return skipped | (_NOT_BUILT & set(names) if Path(folder) == ROOT else set())

    shutil.copytree(ROOT, src, ignore=ignore)
    _pip("wheel", "--no-deps", "--no-build-isolation", "--no-index", "-q", "-w", str(base / "dist"), str(src))
    wheels = sorted((base / "dist").glob("echo2-*.whl"))
    assert len(wheels) == 1, f"expected one echo2 wheel in {base / 'dist'}, found {[w.name for w in wheels]}"
    return wheels[0]


@pytest.fixture(scope="session")
def installed_tree(built_wheel: Path, tmp_path_factory) -> Path:
    """The wheel installed (no dependencies) into a folder of its own: the layout users get, with runtime/,
    adapters/, envs/ and examples/ as sub-packages of echo2_sdk. Put it first on PYTHONPATH and run from
    outside the checkout, so that the checkout's editable install cannot stand in for it."""
    tree = tmp_path_factory.mktemp("installed")
    _pip("install", "--no-deps", "--no-index", "--no-compile", "-q", "--target", str(tree), str(built_wheel))
    assert (tree / "echo2_sdk" / "runtime" / "cli.py").is_file(), sorted(p.name for p in tree.iterdir())
    return tree
