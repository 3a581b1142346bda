"""staleness_sweep's refusals of bad input (fast). Its smoke run (``python benchmarks/staleness_sweep.py --out
DIR --quick``: a warm start and two 12-step runs, 1.5-3 minutes) is left out of the suite, which has no room for
it within its 20 minutes.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path


ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "benchmarks" / "staleness_sweep.py"


def _sweep(out: Path, *extra: str, timeout: float = 400) -> subprocess.CompletedProcess:
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    return subprocess.run([sys.executable, str(SCRIPT), "--out", str(out), *extra], cwd=out.parent, env=env,
                          capture_output=True, text=True, timeout=timeout, check=False)


def test_bad_input_fails_in_one_line(tmp_path):
    for args, needle in ((["--staleness", "1"], "S >= 2"), (["--corrections", "tiss"], "use any of"),
                         (["--set", "algo.lr"], "KEY=VALUE")):
        proc = _sweep(tmp_path / "x", *args, timeout=60)
        assert proc.returncode == 2 and needle in proc.stderr, proc.stderr
        assert not (tmp_path / "x").exists()
