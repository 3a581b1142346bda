"""Acceptance figures of the capacity planner and pool simulator, printed as JSON.

Runs the three example experiments through ``run_experiment`` (each also writes its JSON and PNG
under runs/) and checks:
  knee   — examples/simulate_fig3c.yaml: for each S, the measured knee is within ±1 worker of eq. 2's
           prediction and the bubble stays ≤ 2 % once N·μ ≥ γ·μ_min;
  table2 — examples/simulate_table2.yaml: cost-aware activation costs ≤ 0.7× NoCost per learner step
           (pool $) with both bubbles ≤ 2 %;
  scale  — examples/simulate_scale.yaml: 1,000 workers × 1,000 learner steps end to end in ≤ 60 s.

    python benchmarks/simulate_acceptance.py [--only knee|table2|scale]
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

from echo2_sdk.runtime.planning.experiments import run_experiment
from echo2_sdk.runtime.planning.simconfig import load_simulate_config

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"


def knee() -> dict:
    r = run_experiment(load_simulate_config(str(EXAMPLES / "simulate_fig3c.yaml")))
    curves = [{k: c[k] for k in ("staleness_S", "kappa", "mu_min", "predicted_knee_workers", "measured_knee_workers",
                                 "gamma_workers", "max_bubble_from_gamma")} for c in r["curves"]]
    ok = all(c["measured_knee_workers"] is not None and abs(c["measured_knee_workers"] - c["predicted_knee_workers"]) <= 1
             and c["max_bubble_from_gamma"] is not None and c["max_bubble_from_gamma"] <= 0.02 for c in r["curves"])
    return {"curves": curves, "pass": ok, "files": r["files"]}


def table2() -> dict:
    r = run_experiment(load_simulate_config(str(EXAMPLES / "simulate_table2.yaml")))
    rows = {v: {k: x for k, x in row.items() if k != "per_seed"} for v, row in r["rows"].items()}
    ratio = r["ratios"]["usd_pool_per_step_full_over_nocost"]
    ok = ratio <= 0.7 and rows["full"]["bubble_ratio"] <= 0.02 and rows["nocost"]["bubble_ratio"] <= 0.02
    return {"rows": rows, "ratios": r["ratios"], "pass": ok, "files": r["files"]}


def scale() -> dict:
    t0 = time.perf_counter()
    r = run_experiment(load_simulate_config(str(EXAMPLES / "simulate_scale.yaml")))
    wall = time.perf_counter() - t0
    s = r["summary"]
    keep = ("steps", "workers_in_pool", "sim_time_s", "wall_s", "bubble_ratio", "machines_mean", "usd_per_step",
            "preemptions", "joins", "staleness_max", "staleness_bound_tight", "decisions")
    return {"end_to_end_s": round(wall, 2), **{k: s[k] for k in keep},
            "pass": wall <= 60 and s["steps"] == 1000 and s["workers_in_pool"] >= 1000, "files": r["files"]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--only", choices=("knee", "table2", "scale"))
    args = ap.parse_args()
    checks = {"knee": knee, "table2": table2, "scale": scale}
    out = {name: fn() for name, fn in checks.items() if args.only in (None, name)}
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
