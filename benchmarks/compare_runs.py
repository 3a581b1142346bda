"""Compare training runs side by side: reward against step and against wall time, as JSON and a PNG.

    python benchmarks/compare_runs.py RUN_DIR [RUN_DIR ...] [--out compare.png] [--window 40]

Typical use: the quickstart in async mode and with ``--set runtime.mode=sync``.
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path


def load(run_dir: Path) -> tuple[list[dict], dict]:
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines() if line.strip()]
    summary = json.loads((run_dir / "summary.json").read_text())
    return rows, summary


def window_means(values: list[float], window: int) -> list[float]:
    return [round(statistics.mean(values[i : i + window]), 3) for i in range(0, len(values), window)]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("runs", nargs="+", type=Path)
    ap.add_argument("--out", type=Path, default=Path("compare.png"))
    ap.add_argument("--window", type=int, default=40, help="steps per averaged window in the JSON")
    args = ap.parse_args()

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (by_step, by_time) = plt.subplots(1, 2, figsize=(11, 4))
    report = []
    for run_dir in args.runs:
        rows, summary = load(run_dir)
        label = f"{run_dir.name} ({summary['mode']})"
        rewards = [r["reward_mean"] for r in rows]
        smooth = [statistics.mean(rewards[max(0, i - 19) : i + 1]) for i in range(len(rewards))]
        by_step.plot([r["step"] for r in rows], smooth, label=label)
        by_time.plot([r["wall_s"] for r in rows], smooth, label=label)
        report.append({
            "run": str(run_dir),
            "mode": summary["mode"],
            "steps": summary["steps"],
            "wall_s": round(summary["wall_s"], 1),
            "bubble_ratio": round(summary["bubble_ratio"], 3),
            "reward_first_10pct": round(summary["reward_first_10pct"], 3),
            "reward_last_10pct": round(summary["reward_last_10pct"], 3),
            "heldout_before": summary["eval"]["before"].get("accuracy"),
            "heldout_after": summary["eval"]["after"].get("accuracy"),
            f"reward_per_{args.window}_steps": window_means(rewards, args.window),
        })
    for ax, xlabel in ((by_step, "learner step"), (by_time, "wall time (s)")):
        ax.set(xlabel=xlabel, ylabel="mean reward (20-step moving average)")
        ax.legend()
    fig.tight_layout()
    fig.savefig(args.out, dpi=110)
    print(json.dumps({"plot": str(args.out), "runs": report}, indent=2))


if __name__ == "__main__":
    main()
