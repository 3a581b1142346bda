"""Learner benchmarks: learner_scale's quick sweep and qwen3_gpu_check's learner mode (CPU smoke) run and report.

Both run as subprocesses (each configuration spawns fresh rank processes), so they are slow (~40 s and
~20 s on two cores). The GPU check's learner mode runs from a bare copy of the source tree with site
processing off (``python -S``: no editable-install hook), as on a machine where echo2 is not installed.
"""

from __future__ import annotations

import importlib.util
import json
import math
import os
import shutil
import site
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
pytestmark = pytest.mark.slow


def _run(cmd: list[str], *, cwd: Path, env: dict | None = None, timeout: float = 300) -> dict:
    env = {**os.environ, "OMP_NUM_THREADS": "1", **(env or {})}
    proc = subprocess.run(cmd, check=False, cwd=cwd, capture_output=True, text=True, timeout=timeout, env=env)
    assert proc.returncode == 0, f"exit {proc.returncode}\n{proc.stderr[-4000:]}"
    return json.loads(proc.stdout)


def _load_learner_scale():
    spec = importlib.util.spec_from_file_location("learner_scale", ROOT / "benchmarks" / "learner_scale.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_learner_scale_quick_sweep():
    report = _run([sys.executable, "benchmarks/learner_scale.py", "--quick", "--json"], cwd=ROOT)
    env = report["environment"]
    assert env["threads_per_rank"] == 1 and env["cpu_count"] >= 1 and env["torch"]

    # the analytic parameter count is the model's
    scale_mod = _load_learner_scale()
    m = report["model"]
    spec = {"hidden": m["hidden"], "layers": m["layers"], "intermediate": m["intermediate"], "heads": m["heads"],
            "kv_heads": m["kv_heads"], "vocab": m["vocab"], "max_len": report["batch"]["max_len"], "seed": 0}
    assert m["params"] == sum(p.numel() for p in scale_mod.build_model(spec).parameters())

    rows = {r["name"]: r for r in report["configs"]}
    assert set(rows) == {"fp32/r1/mbt=whole", "fp32/r1/mbt=256", "fp32/r2/mbt=whole", "fp32/r2/mbt=256",
                         "fp32/r1/mbt=256/x4"}
    for row in rows.values():
        assert row["ok"], row.get("error")
        for key in ("step_s", "tokens_per_s", "peak_rss_mb", "micro_batches", "padding_frac", "loss"):
            assert key in row, key
        assert row["step_s"] > 0 and math.isfinite(row["loss"])
        # step_s is printed to 3 decimals: on a fast day (a ~30 ms step) that rounding alone moves the ratio > 1 %
        rounding = 0.0005 / row["step_s"]
        assert row["tokens_per_s"] == pytest.approx(row["real_tokens"] / row["step_s"], rel=0.01 + rounding)
        assert row["peak_rss_mb"] >= row["rss_before_step_mb"] > 0

    batch = report["batch"]
    whole, small = rows["fp32/r1/mbt=whole"], rows["fp32/r1/mbt=256"]
    assert whole["real_tokens"] == small["real_tokens"] == batch["real_tokens"]
    # None: one pass over the whole right-padded batch, so its padding is the batch's own
    assert whole["micro_batches"] == 1
    assert whole["padding_frac"] == pytest.approx(batch["padding_frac_whole_batch"], abs=1e-4)
    # a budget below the batch splits it, each pass within budget; the longest row is unique, so the
    # later passes are narrower than the whole batch and padding drops
    assert small["micro_batches"] > 1 and small["micro_batch_tokens_max"] <= 256
    assert small["padding_frac"] < whole["padding_frac"]
    # two ranks: every rank has at least one pass; the same update as one rank
    for name in ("fp32/r2/mbt=whole", "fp32/r2/mbt=256"):
        assert rows[name]["micro_batches"] >= 2 and len(rows[name]["per_rank_peak_rss_mb"]) == 2
    for r2, r1 in (("fp32/r2/mbt=whole", whole), ("fp32/r2/mbt=256", small)):
        assert rows[r2]["grad_norm"] == pytest.approx(r1["grad_norm"], rel=1e-3)
    assert small["grad_norm"] == pytest.approx(whole["grad_norm"], rel=1e-3)

    big = rows["fp32/r1/mbt=256/x4"]
    assert big["real_tokens"] == 4 * small["real_tokens"] and big["sequences"] == 4 * small["sequences"]
    scale = report["scale"]
    assert scale["base"] == "fp32/r1/mbt=256" and scale["scaled"] == "fp32/r1/mbt=256/x4"
    assert scale["tokens_ratio"] == 4.0
    assert scale["memory_ratio"] == pytest.approx(big["peak_rss_mb"] / small["peak_rss_mb"], abs=1e-3)
    assert scale["memory_ok"] and scale["memory_ratio"] <= 1.2


def _bare_copy(dst: Path) -> Path:
    """echo2_sdk/, runtime/ and the GPU check script, nothing installed."""
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc")
    shutil.copytree(ROOT / "echo2_sdk", dst / "echo2_sdk", ignore=ignore)
    shutil.copytree(ROOT / "runtime", dst / "runtime", ignore=ignore)
    (dst / "benchmarks").mkdir()
    shutil.copy2(ROOT / "benchmarks" / "qwen3_gpu_check.py", dst / "benchmarks")
    return dst


def test_gpu_check_learner_mode_cpu_smoke_from_a_bare_source_tree(tmp_path):
    copy = _bare_copy(tmp_path / "repo")
    out = tmp_path / "out"
    # -S: no site processing, so no .pth files and no editable-install finder; torch & co. come from
    # PYTHONPATH. Inside the copy, echo2_sdk.runtime exists only through the script's source-tree shim.
    site_dirs = os.pathsep.join(site.getsitepackages())
    env = {"PYTHONPATH": site_dirs, "PYTHONNOUSERSITE": "1"}
    probe = subprocess.run([sys.executable, "-S", "-c", "import echo2_sdk.runtime"], check=False, cwd=copy,
                           env={**os.environ, **env}, capture_output=True, text=True, timeout=60)
    assert probe.returncode != 0 and "echo2_sdk.runtime" in probe.stderr  # the shim is what makes it work

    report = _run([sys.executable, "-S", str(copy / "benchmarks" / "qwen3_gpu_check.py"), "--learner-only",
                   "--cpu-smoke", "--learner-steps", "2", "--out", str(out)], cwd=tmp_path, env=env)
    assert report == json.loads((out / "qwen3_learner_check.json").read_text())
    assert Path(report["environment"]["echo2_runtime"]) == (copy / "runtime").resolve()
    assert report["ray_or_vllm_imported"] == []
    shapes = report["shapes"]
    assert shapes["precision"] == "bf16-mixed" and shapes["gradient_checkpointing"] and shapes["backend"] == "gloo"
    assert [c["micro_batch_tokens"] for c in report["configs"]] == shapes["budgets"] == [64, 128]
    for config in report["configs"]:
        assert config["ok"], config.get("error") or config.get("killed")
        assert config["num_ranks"] == 2 and len(config["steps"]) == 2
        assert config["ray_or_vllm_imported"] == []
        for step in config["steps"]:
            assert step["step_s"] > 0 and math.isfinite(step["loss"]) and math.isfinite(step["grad_norm"])
            assert 1 < step["micro_batches"] and step["micro_batch_tokens_max"] <= config["micro_batch_tokens"]
            assert 0 <= step["padding_frac"] < 1 and step["peak_rss_gib"] > 0
        assert config["steady_from_step"] == 2
    # a smaller budget never needs fewer passes
    assert report["configs"][0]["micro_batches"] >= report["configs"][1]["micro_batches"]
