"""What bounded staleness S costs: reward and held-out accuracy against step for sync and each S, per
off-policy correction (ECHO-2 figure-3b style).

    python benchmarks/staleness_sweep.py --out runs/staleness            # the full sweep (hours)
    python benchmarks/staleness_sweep.py --out /tmp/sweep --quick --json  # smoke: 2 runs, ~2 min

Every (S, correction, seed) is one ``echo2 train`` subprocess on the CPU quickstart task, one after
another (two cores); a run whose directory holds its ``summary.json`` is skipped, so an interrupted
sweep resumes (an unfinished run starts over). Every run starts from the same weights: one warm start
(the config's ``model.warm_start`` at seed 0, byte-identical to the one ``echo2 train`` makes) goes to
``OUT/base_model``, loaded with ``model.warm_start.enabled=false``; seeds differ only in the RL stage.

Setting: the quickstart as it is (``algo.lr=3e-4`` decaying linearly to 0, an 18-epoch warm start: reward
~0.5 -> ~0.94 in 400 steps; ``--set algo.lr_schedule=constant`` gives the constant lr of the README's first
sweep, ~0.5 -> ~0.75), held-out accuracy (100 examples, the config's avg@8 at temperature 1.0) every ``steps // 8`` steps for
the accuracy panel. A higher learning rate was probed and rejected (with the earlier 15-epoch warm start): at
``algo.lr=1e-3`` (100 steps, seed 0) S=2 and S=11 both collapsed to reward 0 (held-out 0.08 -> 0.00 / 0.01),
and so did seed 1 at 400 steps from a 40-epoch warm start: that measures the learning rate, not S.
Whether S hurts at 3e-4 is what the sweep measures; the quickstart's seed spread is wide (README), so two
seeds resolve only large gaps. Admission control is off (``runtime.admission_control=false``; the waste shows as the
dropped-stale fraction): workers stay busy and the realised staleness fills [0, S] (probe: S=11 trained
on every staleness 2..11 in equal shares, mean 6.3; S=2 mean 1.5). ``--admission-on S ...`` adds runs
of those S with it on. kappa is the default S - 1. Sync runs once per seed, with ``tis`` (on-policy,
rho = 1, so tis = none = icepop there). The learner scores row by row (``learner.shared_prefix=false``,
before the user's ``--set``): the packed learner is ~3× faster, the workers then set the pace and most
batches arrive fresh, while the sweep wants generation ahead of the learner so that the realised
staleness fills [0, S] (and its README figures were measured so).

Output: OUT/sweep.json (every run; per cell the final reward = mean of the last 10% of steps and the
held-out accuracy after training, mean / min / max / half-range over seeds, staleness histogram, mean
and max, dropped-stale fraction, wall time) and OUT/sweep.png (reward and held-out accuracy against
step, colour per S, line style per correction, mean of seeds; staleness histograms).

Wall time: a 400-step run with its 10 evaluations is ~6 minutes on two cores (start-up ~30 s), so the
full sweep (sync + S in {2, 3, 6, 11} x {tis, none, icepop} x 2 seeds = 26 runs) is ~2.5-3 hours on an
idle machine, up to twice that on a shared one.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import subprocess
import sys
import time
from collections import Counter
from dataclasses import asdict, dataclass
from pathlib import Path
from statistics import fmean as mean

CONFIG = Path(__file__).resolve().parent.parent / "examples" / "quickstart.yaml"
CORRECTIONS = ("tis", "none", "icepop", "seq_mask_tis")
DEFAULT_SETS = ("train.eval_max_examples=100",)
QUICK_SETS = ("model.warm_start.epochs=1", "train.eval_max_examples=10", "train.prompts_per_step=4")
SYNC = 0  # the staleness value that stands for the synchronous baseline (runtime.mode=sync)


@dataclass(frozen=True)
class RunKey:
    """One training run of the sweep."""

    staleness: int
    """S, or SYNC (0) for the synchronous baseline."""
    correction: str
    seed: int
    admission: bool = False
    """runtime.admission_control of the run."""

    @property
    def cell(self) -> str:
        return f"{label(self.staleness, 'S')}-{self.correction}" + ("-adm" if self.admission else "")

    @property
    def name(self) -> str:
        return f"{self.cell}-seed{self.seed}"

    def overrides(self) -> list[str]:
        sync = self.staleness == SYNC
        mode = ["runtime.mode=sync"] if sync else ["runtime.mode=async", f"runtime.staleness={self.staleness}"]
        return [*mode, f"algo.correction={self.correction}", f"train.seed={self.seed}",
                f"runtime.admission_control={str(self.admission).lower()}"]


@dataclass(frozen=True)
class SweepSpec:
    out: Path
    steps: int
    seeds: tuple[int, ...]
    staleness: tuple[int, ...]
    corrections: tuple[str, ...]
    admission_on: tuple[int, ...]
    sets: tuple[str, ...]
    """--set overrides of every run (defaults, then the user's)."""

    @property
    def eval_every(self) -> int:
        return max(1, self.steps // 8)

    def runs(self) -> list[RunKey]:
        keys = [RunKey(s, c, seed) for s in self.staleness for c in (("tis",) if s == SYNC else self.corrections)
                for seed in self.seeds]
        return keys + [RunKey(s, c, seed, admission=True) for s in self.admission_on for c in self.corrections
                       for seed in self.seeds]

    def run_sets(self, key: RunKey, base_model: Path) -> list[str]:
        return [f"train.steps={self.steps}", f"train.eval_every={self.eval_every}", "train.checkpoint_every=0",
                "train.plots=false", "learner.shared_prefix=false", *self.sets, f"model.name={base_model}",
                "model.warm_start.enabled=false", *key.overrides()]


@dataclass(frozen=True)
class RunResult:
    key: RunKey
    steps: tuple[int, ...]
    reward: tuple[float, ...]
    """reward_mean of every learner step."""
    eval_steps: tuple[int, ...]
    eval_accuracy: tuple[float, ...]
    """Held-out accuracy before training (step 0), every eval_every steps and after."""
    final_reward: float
    """Mean reward of the last 10% of steps."""
    heldout_before: float
    heldout_after: float
    staleness_histogram: dict[int, int]
    """Samples trained on, by realised staleness v_t - v."""
    staleness_mean: float
    staleness_max: int
    dropped_stale_frac: float
    """Stale-dropped samples over the samples that passed every check."""
    wall_s: float


@dataclass(frozen=True)
class Spread:
    """A value over seeds: mean, min, max and half the range (the table's ±)."""

    mean: float
    min: float
    max: float
    half_range: float

    @staticmethod
    def of(values: list[float]) -> Spread:
        return Spread(mean(values), min(values), max(values), (max(values) - min(values)) / 2)


def hist_mean_max(hist: dict[int, int]) -> tuple[float, int]:
    return sum(k * v for k, v in hist.items()) / max(1, sum(hist.values())), max(hist, default=0)


@dataclass(frozen=True)
class Cell:
    """One (S, correction[, admission on]) over its seeds."""

    cell: str
    staleness: int
    correction: str
    admission: bool
    seeds: tuple[int, ...]
    final_reward: Spread
    heldout_after: Spread
    staleness_histogram: dict[int, int]
    staleness_mean: float
    staleness_max: int
    dropped_stale_frac: float
    wall_s: float
    steps: tuple[int, ...]
    reward_curve: tuple[float, ...]
    """Mean over seeds of each step's reward."""
    eval_steps: tuple[int, ...]
    eval_curve: tuple[float, ...]


def label(staleness: int, prefix: str = "") -> str:
    return "sync" if staleness == SYNC else f"{prefix}{staleness}"


def fail(message: str) -> None:
    print(f"staleness_sweep: {message}", file=sys.stderr)
    raise SystemExit(2)


WARM_START = """import types; from pathlib import Path; from echo2_sdk.config import load_config
from echo2_sdk.registry import make_task; from echo2_sdk.runtime.driver import setup
cfg = load_config({config!r}, {sets!r} + ["train.seed=0"])
assert cfg.model.warm_start.enabled, "the config has no model.warm_start"
setup.seed_everything(0)
adapter = make_task(cfg.task.name, cfg.task.options, seed=0)
setup.prepare_base_model(cfg, adapter, types.SimpleNamespace(base_model=Path({base!r})), print)
"""
"""The warm start ``echo2 train`` would run at seed 0 (trainer._setup), without the RL that follows."""


def python(args: list[str], log_path: Path, cwd: Path) -> int:
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1"}
    with log_path.open("w") as log:  # cwd outside the checkout: its echo2_sdk/ would shadow the install
        return subprocess.run([sys.executable, *args], cwd=cwd, env=env, stdout=log, stderr=subprocess.STDOUT,
                              check=False).returncode


def done_before(marker: Path, stamp: Path, want: dict) -> bool:
    """``marker`` exists, made with the settings ``want`` (kept in ``stamp``); other settings stop the sweep."""
    if not (marker.exists() and stamp.exists()):
        return False
    if json.loads(stamp.read_text()) != want:
        fail(f"{marker.parent} was made with other settings ({stamp}); use another --out")
    return True


def warm_start(spec: SweepSpec, config: Path) -> Path:
    """OUT/base_model: the config's warm start (seed 0), made once and shared by every run."""
    base, stamp, log = spec.out / "base_model", spec.out / "base_model.json", spec.out / "base_model.log"
    sets = [s for s in spec.sets if s.startswith(("model.", "task."))]
    want = {"config": str(config), "sets": sets}
    if done_before(base / "config.json", stamp, want):
        return base
    shutil.rmtree(base, ignore_errors=True)
    t0 = time.perf_counter()
    rc = python(["-c", WARM_START.format(config=str(config), sets=sets, base=str(base))], log, spec.out)
    if rc != 0 or not (base / "config.json").exists():
        fail(f"warm start failed (exit {rc}); see {log}")
    stamp.write_text(json.dumps(want))
    print(f"warm start: {time.perf_counter() - t0:.0f}s -> {base}", flush=True)
    return base


def run_one(spec: SweepSpec, key: RunKey, config: Path, base: Path) -> Path:
    """Train ``key`` unless its directory already holds the finished run; return the directory."""
    runs, sets = spec.out / "runs", spec.run_sets(key, base)
    run_dir, stamp, log = runs / key.name, runs / f"{key.name}.json", runs / f"{key.name}.log"
    want = {"config": str(config), "sets": sets}
    if done_before(run_dir / "summary.json", stamp, want):
        print(f"{key.name}: done before, skipped", flush=True)
        return run_dir
    shutil.rmtree(run_dir, ignore_errors=True)  # an interrupted or failed run starts over
    runs.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    args = ["-m", "echo2_sdk.runtime.cli", "train", "--config", str(config), "--run-dir", str(run_dir)]
    rc = python(args + [a for s in sets for a in ("--set", s)], log, spec.out)
    if rc != 0 or not (run_dir / "summary.json").exists():
        fail(f"{key.name}: echo2 train exited {rc}; see {log}")
    stamp.write_text(json.dumps(want))  # only a finished run has its stamp
    print(f"{key.name}: {time.perf_counter() - t0:.0f}s", flush=True)
    return run_dir


def load_result(key: RunKey, run_dir: Path) -> RunResult:
    summary = json.loads((run_dir / "summary.json").read_text())
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines() if line.strip()]
    if not rows:
        fail(f"{run_dir}/metrics.jsonl has no steps")
    evals = summary["eval"]
    points = {0: evals["before"]["accuracy"]}
    points.update({int(name[5:]): e["accuracy"] for name, e in evals.items() if name.startswith("step_")})
    points[rows[-1]["step"]] = evals["after"]["accuracy"]
    hist = {int(k): int(v) for k, v in summary["staleness_histogram"].items()}
    passed = summary["samples_accepted"] + summary["samples_dropped_stale_on_arrival"]
    stale_mean, stale_max = hist_mean_max(hist)
    return RunResult(
        key=key, steps=tuple(r["step"] for r in rows), reward=tuple(r["reward_mean"] for r in rows),
        eval_steps=tuple(sorted(points)), eval_accuracy=tuple(points[s] for s in sorted(points)),
        final_reward=summary["reward_last_10pct"], heldout_before=evals["before"]["accuracy"],
        heldout_after=evals["after"]["accuracy"], staleness_histogram=hist,
        staleness_mean=stale_mean, staleness_max=stale_max,
        dropped_stale_frac=summary["samples_dropped_stale"] / max(1, passed), wall_s=summary["wall_s"])


def aggregate(results: list[RunResult]) -> list[Cell]:
    cells: dict[str, list[RunResult]] = {}
    for r in results:
        cells.setdefault(r.key.cell, []).append(r)
    out = []
    for name, group in cells.items():
        k, hist = group[0].key, sum((Counter(r.staleness_histogram) for r in group), Counter())
        stale_mean, stale_max = hist_mean_max(hist)
        n, m = min(len(r.steps) for r in group), min(len(r.eval_steps) for r in group)
        out.append(Cell(
            cell=name, staleness=k.staleness, correction=k.correction, admission=k.admission,
            seeds=tuple(r.key.seed for r in group), final_reward=Spread.of([r.final_reward for r in group]),
            heldout_after=Spread.of([r.heldout_after for r in group]),
            staleness_histogram=dict(sorted(hist.items())), staleness_mean=stale_mean,
            staleness_max=stale_max, dropped_stale_frac=mean(r.dropped_stale_frac for r in group),
            wall_s=mean(r.wall_s for r in group), steps=group[0].steps[:n],
            reward_curve=tuple(mean(r.reward[i] for r in group) for i in range(n)), eval_steps=group[0].eval_steps[:m],
            eval_curve=tuple(mean(r.eval_accuracy[i] for r in group) for i in range(m))))
    return out


def _smooth(values: tuple[float, ...], window: int) -> list[float]:
    return [sum(values[max(0, i - window + 1): i + 1]) / (i + 1 - max(0, i - window + 1)) for i in range(len(values))]


def plot(cells: list[Cell], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    values = sorted({c.staleness for c in cells})
    colour = {s: plt.cm.viridis(i / max(1, len(values) - 1) * 0.9) for i, s in enumerate(values)}
    styles = dict(zip(CORRECTIONS, ("-", "--", ":", "-.")))
    fig, (ax_r, ax_a, ax_h) = plt.subplots(1, 3, figsize=(15, 4.2), gridspec_kw={"width_ratios": [3, 3, 2]})
    for c in cells:
        kw = {"color": colour[c.staleness], "linestyle": styles[c.correction], "lw": 2.2 if c.admission else 1.4,
              "label": ("sync" if c.staleness == SYNC else f"S={c.staleness} {c.correction}") + " adm" * c.admission}
        ax_r.plot(c.steps, _smooth(c.reward_curve, max(1, len(c.steps) // 20)), **kw)
        ax_a.plot(c.eval_steps, c.eval_curve, marker="o", ms=3, **kw)
    ax_r.set(xlabel="learner step", ylabel="training reward (moving avg, mean of seeds)", title="Reward")
    ax_a.set(xlabel="learner step", ylabel="held-out accuracy (mean of seeds)", title="Held-out accuracy")
    ax_a.legend(fontsize=7, ncol=2)
    width = 0.8 / len(values)
    for i, s in enumerate(values):
        hist = sum((Counter(c.staleness_histogram) for c in cells if c.staleness == s and not c.admission), Counter())
        total = sum(hist.values()) or 1
        xs = sorted(hist)
        ax_h.bar([x + (i - (len(values) - 1) / 2) * width for x in xs], [hist[x] / total for x in xs], width,
                 color=colour[s], label=label(s, "S="))
    ax_h.set(xlabel="realised staleness v_t - v", ylabel="share of samples trained on", title="Staleness")
    ax_h.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def table(cells: list[Cell]) -> str:
    lines = ["| S | correction | final reward | held-out after | staleness mean / max | dropped stale | train wall s |",
             "|---|---|---|---|---|---|---|"]
    for c in cells:
        s = label(c.staleness) + (" (adm. on)" if c.admission else "")
        lines.append(f"| {s} | {c.correction} | {c.final_reward.mean:.3f} ± {c.final_reward.half_range:.3f} | "
                     f"{c.heldout_after.mean:.3f} ± {c.heldout_after.half_range:.3f} | {c.staleness_mean:.2f} / "
                     f"{c.staleness_max} | {100 * c.dropped_stale_frac:.1f}% | {c.wall_s:.0f} |")
    return "\n".join(lines)


def _staleness(text: str) -> int:
    if text != "sync" and not (text.isdigit() and int(text) >= 2):
        fail(f"--staleness {text!r}: give 'sync' or an S >= 2 (the async runtime needs S >= 2)")
    return SYNC if text == "sync" else int(text)


def parse_args(argv: list[str] | None) -> tuple[SweepSpec, Path, bool]:
    p = argparse.ArgumentParser(description=" ".join(__doc__.split("\n\n")[0].split()))
    p.add_argument("--out", type=Path, required=True, help="sweep directory (resumed when it exists)")
    p.add_argument("--config", type=Path, default=CONFIG, help="base config (default: examples/quickstart.yaml)")
    p.add_argument("--steps", type=int, default=None, help="learner steps per run (default 400; --quick 12)")
    p.add_argument("--seeds", type=int, nargs="+", default=None, help="train.seed values (default 0 1)")
    p.add_argument("--staleness", nargs="+", default=None, help="'sync' and/or S values (default sync 2 3 6 11)")
    p.add_argument("--corrections", nargs="+", default=None, help="algo.correction values (default tis none icepop)")
    p.add_argument("--admission-on", nargs="*", default=[], metavar="S",
                   help="also run these S with runtime.admission_control=true")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="extra override of every run")
    p.add_argument("--quick", action="store_true", help="smoke test: sync and S=3, tis, one seed, 12 steps")
    p.add_argument("--json", action="store_true", help="print sweep.json instead of the table")
    a = p.parse_args(argv)
    steps = a.steps or (12 if a.quick else 400)
    seeds = tuple(a.seeds or ((0,) if a.quick else (0, 1)))
    staleness = tuple(map(_staleness, a.staleness)) if a.staleness else ((SYNC, 3) if a.quick else (SYNC, 2, 3, 6, 11))
    admission_on = tuple(map(_staleness, a.admission_on))
    corrections = tuple(a.corrections or (("tis",) if a.quick else ("tis", "none", "icepop")))
    for bad in [c for c in corrections if c not in CORRECTIONS][:1]:
        fail(f"--corrections {bad!r}: use any of {list(CORRECTIONS)}")
    for bad in [s for s in a.set if "=" not in s][:1]:
        fail(f"--set {bad!r}: expected KEY=VALUE")
    if steps < 1 or len(set(seeds)) != len(seeds):
        fail("--steps must be >= 1 and --seeds distinct")
    if SYNC in admission_on:
        fail("--admission-on takes S values >= 2 (sync has no admission control)")
    if not a.config.is_file():
        fail(f"--config {a.config}: no such file")
    sets = (*DEFAULT_SETS, *(QUICK_SETS if a.quick else ()), *a.set)
    spec = SweepSpec(a.out.resolve(), steps, seeds, staleness, corrections, admission_on, sets)
    return spec, a.config.resolve(), a.json


def main(argv: list[str] | None = None) -> int:
    spec, config, as_json = parse_args(argv)
    spec.out.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    base = warm_start(spec, config)
    keys, results = spec.runs(), []
    for i, key in enumerate(keys, 1):
        print(f"[{i}/{len(keys)}] {key.name}", flush=True)
        results.append(load_result(key, run_one(spec, key, config, base)))
    cells = aggregate(results)
    for c in [c for c in cells if not math.isfinite(c.final_reward.mean + c.heldout_after.mean)][:1]:
        fail(f"{c.cell}: final reward {c.final_reward.mean} or held-out accuracy {c.heldout_after.mean} is not finite")
    plot(cells, spec.out / "sweep.png")
    report = {
        "spec": {**asdict(spec), "out": str(spec.out), "config": str(config), "eval_every": spec.eval_every},
        "sweep_wall_s": round(time.perf_counter() - t0, 1),
        "cells": [asdict(c) for c in cells],
        "runs": [asdict(r) | {"name": r.key.name} for r in results],
        "table": table(cells),
    }
    (spec.out / "sweep.json").write_text(json.dumps(report, indent=1))
    print(json.dumps(report, indent=1) if as_json else table(cells))
    return 0


if __name__ == "__main__":
    sys.exit(main())
