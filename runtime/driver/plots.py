"""PNG plots of a run: reward curve, staleness histogram, bubble ratio over time."""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any, Sequence


def _moving_average(values: Sequence[float], window: int) -> list[float]:
    out, acc = [], 0.0
    for i, v in enumerate(values):
        acc += v
        if i >= window:
            acc -= values[i - window]
        out.append(acc / min(i + 1, window))
    return out


def write_plots(rows: list[dict[str, Any]], staleness_counts: dict[int, int], out_dir: Path) -> list[str]:
    """Write the three run plots into ``out_dir``; return the file names."""
    if not rows:
        return []
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    steps = [r["step"] for r in rows]
    written = []

    fig, ax = plt.subplots(figsize=(6, 3.5))
    rewards = [r["reward_mean"] for r in rows]
    ax.plot(steps, rewards, alpha=0.35, label="per step")
    ax.plot(steps, _moving_average(rewards, max(1, len(rows) // 20)), label="moving average")
    ax.set(xlabel="learner step", ylabel="mean reward", title="Reward")
    ax.legend()
    fig.tight_layout()
    fig.savefig(out_dir / "reward.png", dpi=110)
    plt.close(fig)
    written.append("reward.png")

    fig, ax = plt.subplots(figsize=(6, 3.5))
    counts = Counter({int(k): v for k, v in staleness_counts.items()})
    xs = sorted(counts) or [0]
    ax.bar(xs, [counts.get(x, 0) for x in xs])
    ax.set(xlabel="staleness v_t − v (versions)", ylabel="samples trained on", title="Staleness")
    ax.set_xticks(xs)
    fig.tight_layout()
    fig.savefig(out_dir / "staleness.png", dpi=110)
    plt.close(fig)
    written.append("staleness.png")

    fig, ax = plt.subplots(figsize=(6, 3.5))
    ax.plot([r["wall_s"] for r in rows], [r["bubble_ratio"] for r in rows])
    ax.set(xlabel="wall time (s)", ylabel="bubble ratio", title="Learner bubble (cumulative idle share)")
    ax.set_ylim(0, 1)
    fig.tight_layout()
    fig.savefig(out_dir / "bubble.png", dpi=110)
    plt.close(fig)
    written.append("bubble.png")
    return written
