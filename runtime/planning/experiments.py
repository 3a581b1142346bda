"""The ``echo2 simulate`` experiments: one run, the bubble knee (fig. 3c) and the ablation (table 2).

Each writes ``simulate-<experiment>.json`` and ``.png`` into ``out_dir`` and returns the JSON object.

* ``knee``: identical workers, N = min..max, one curve per S (κ from S). The predicted knee is the
  smallest N with N·μ ≥ μ_min(κ) (eq. 2); the measured knee is the smallest N from which on the
  simulated steady-state bubble stays ≤ ``knee.threshold``. Also checked: the largest bubble once
  N·μ ≥ γ·μ_min.
* ``ablation``: full system (cost-aware activation, chain broadcast) vs NoCost (random activation,
  chain) vs NoP2P (cost-aware, star broadcast), ``seeds`` runs each, same κ for all (the full
  system's); reports machines, T_bcast, learner wait, bubble and $ per learner step (pool and total).
"""

from __future__ import annotations

import dataclasses
import json
import math
from pathlib import Path

from echo2_sdk.runtime.planning import capacity
from echo2_sdk.runtime.planning.poolfile import WorkerOffer
from echo2_sdk.runtime.planning.simconfig import SimulateConfig, build_offers, resolve_prices
from echo2_sdk.runtime.planning.simulator import Simulation

VARIANTS = {"full": ("cost", "chain"), "nocost": ("random", "chain"), "nop2p": ("cost", "star")}


def run_experiment(cfg: SimulateConfig) -> dict:
    runner = {"run": run_single, "knee": run_knee, "ablation": run_ablation}[cfg.experiment]
    result = runner(cfg)
    out = Path(cfg.out_dir)
    out.mkdir(parents=True, exist_ok=True)
    stem = out / f"simulate-{cfg.experiment}"
    result["files"] = [str(stem.with_suffix(".json")), str(stem.with_suffix(".png"))]
    _plot(cfg.experiment, result, stem.with_suffix(".png"))
    stem.with_suffix(".json").write_text(json.dumps(result, indent=1))
    return result


def run_single(cfg: SimulateConfig) -> dict:
    result = Simulation(cfg, build_offers(cfg), resolve_prices(cfg)).run()
    return {"experiment": "run", **result}


# ---------------------------------------------------------------------- knee (fig. 3c)
def _sweep_cfg(cfg: SimulateConfig, staleness: int) -> SimulateConfig:
    return dataclasses.replace(cfg, learner=dataclasses.replace(cfg.learner, staleness=staleness, kappa=None),
                               pool=dataclasses.replace(cfg.pool, activate="all", file=None, synthetic=()))


def run_knee(cfg: SimulateConfig) -> dict:
    k, L, prices = cfg.knee, cfg.learner, resolve_prices(cfg)
    curves = []
    for S in k.staleness:
        scfg = _sweep_cfg(cfg, S)
        points, kappa, mu_min = [], None, None
        for n in range(k.min_workers, k.max_workers + 1):
            offers = [WorkerOffer(f"{k.gpu}-{i:03d}", k.gpu, k.rollouts_per_s, k.usd_per_hour) for i in range(n)]
            sim = Simulation(scfg, offers, prices)
            s = sim.run()["summary"]
            kappa = sim.kappa
            t_b = sim.t_bcast_plan
            mu_min = capacity.mu_min(kappa, L.t_train_s, t_b, L.rollouts_per_step)
            points.append({
                "workers": n, "mu_pool": n * k.rollouts_per_s, "t_bcast_s": t_b,
                "bubble_ratio": s["bubble_ratio"],
                "predicted_bubble_ratio": capacity.predicted_bubble_ratio(
                    kappa, L.t_train_s, t_b, L.rollouts_per_step, n * k.rollouts_per_s),
                "groups_dropped_stale": s["groups_dropped_stale"], "staleness_max": s["staleness_max"],
                "staleness_bound_tight": s["staleness_bound_tight"],
                "staleness_bound_conservative": s["staleness_bound_conservative"],
                "usd_per_step": s["usd_per_step"], "wall_s": s["wall_s"],
            })
        predicted = next((p["workers"] for p in points if capacity.overlap_holds(
            kappa, L.t_train_s, p["t_bcast_s"], L.rollouts_per_step, p["mu_pool"])), None)
        gamma_n = next((p["workers"] for p in points
                        if p["mu_pool"] >= cfg.scheduler.gamma * capacity.mu_min(
                            kappa, L.t_train_s, p["t_bcast_s"], L.rollouts_per_step)), None)
        measured = None
        for i, p in enumerate(points):
            if all(q["bubble_ratio"] <= k.threshold for q in points[i:]):
                measured = p["workers"]
                break
        after_gamma = [p["bubble_ratio"] for p in points if gamma_n is not None and p["workers"] >= gamma_n]
        curves.append({
            "staleness_S": S, "kappa": kappa, "mu_min": mu_min,
            "predicted_knee_workers": predicted, "measured_knee_workers": measured,
            "knee_error_workers": None if predicted is None or measured is None else measured - predicted,
            "gamma_workers": gamma_n, "max_bubble_from_gamma": max(after_gamma) if after_gamma else None,
            "points": points,
        })
    return {"experiment": "knee", "threshold": k.threshold, "gamma": cfg.scheduler.gamma,
            "worker": {"gpu": k.gpu, "rollouts_per_s": k.rollouts_per_s, "usd_per_hour": k.usd_per_hour},
            "learner": dataclasses.asdict(L), "broadcast": dataclasses.asdict(cfg.broadcast), "curves": curves}


# ---------------------------------------------------------------------- ablation (table 2)
def _variant_cfg(cfg: SimulateConfig, variant: str, seed: int) -> SimulateConfig:
    policy, topology = VARIANTS[variant]
    return dataclasses.replace(
        cfg, seed=seed, broadcast=dataclasses.replace(cfg.broadcast, topology=topology),
        scheduler=dataclasses.replace(cfg.scheduler, policy=policy, seed=seed),
        pool=dataclasses.replace(cfg.pool, activate="scheduler"))


def run_ablation(cfg: SimulateConfig) -> dict:
    prices, offers = resolve_prices(cfg), build_offers(cfg)
    kappa = Simulation(_variant_cfg(cfg, "full", cfg.seed), offers, prices).kappa
    rows = {}
    keys = ("machines_mean", "t_bcast_mean_s", "bubble_ratio", "learner_wait_s_per_step", "usd_pool_per_step",
            "usd_per_step", "groups_dropped_stale", "wall_s")
    for variant in cfg.ablation.variants:
        runs = []
        for i in range(cfg.ablation.seeds):
            vcfg = _variant_cfg(cfg, variant, cfg.seed + i)
            runs.append(Simulation(vcfg, build_offers(vcfg), prices, kappa=kappa).run()["summary"])
        rows[variant] = {key: _mean([r[key] for r in runs if isinstance(r[key], (int, float))]) for key in keys}
        rows[variant]["per_seed"] = [{key: r[key] for key in keys} for r in runs]
    ratios = {}
    if "full" in rows and "nocost" in rows:
        full, nocost = rows["full"], rows["nocost"]
        for key in ("usd_pool_per_step", "usd_per_step"):
            if full[key] is not None and nocost[key]:
                ratios[f"{key}_full_over_nocost"] = full[key] / nocost[key]
        ratios["bubble_full_minus_nocost"] = full["bubble_ratio"] - nocost["bubble_ratio"]
    return {"experiment": "ablation", "kappa": kappa, "staleness_S": cfg.learner.staleness,
            "workers_in_pool": len(offers), "rows": rows, "ratios": ratios}


# ---------------------------------------------------------------------- plots
def _plot(experiment: str, result: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    if experiment == "knee":
        fig, ax = plt.subplots(figsize=(6.4, 4.2))
        for c, color in zip(result["curves"], ("tab:blue", "tab:orange", "tab:green", "tab:red")):
            xs = [p["workers"] for p in c["points"]]
            ax.plot(xs, [p["bubble_ratio"] for p in c["points"]], "o", color=color,
                    label=f"simulated, S={c['staleness_S']} (κ={c['kappa']})")
            ax.plot(xs, [p["predicted_bubble_ratio"] for p in c["points"]], "-", color=color, alpha=0.6,
                    label=f"capacity model, knee N={c['predicted_knee_workers']}")
            if c["predicted_knee_workers"]:
                ax.axvline(c["predicted_knee_workers"], color=color, ls="--", lw=0.8)
        ax.axhline(result["threshold"], color="gray", ls=":", lw=0.8)
        ax.set(xlabel="rollout workers N", ylabel="learner bubble ratio", title="Bubble vs pool size (fig. 3c)")
        ax.legend(fontsize=8)
    elif experiment == "ablation":
        rows = result["rows"]
        names = list(rows)
        panels = [("machines_mean", "machines"), ("t_bcast_mean_s", "T_bcast (s)"),
                  ("learner_wait_s_per_step", "learner wait (s/step)"), ("usd_pool_per_step", "pool $ / step"),
                  ("usd_per_step", "total $ / step")]
        fig, axes = plt.subplots(1, len(panels), figsize=(3.0 * len(panels), 3.2))
        for ax, (key, label) in zip(axes, panels):
            ax.bar(names, [_num(rows[n][key]) for n in names], color=["tab:green", "tab:gray", "tab:red"][:len(names)])
            ax.set_title(label, fontsize=9)
            ax.tick_params(labelsize=8)
        fig.suptitle(f"Ablation (table 2), S={result['staleness_S']}, κ={result['kappa']}")
    else:
        tl = result["timeline"]
        fig, axes = plt.subplots(1, 3, figsize=(13, 3.4))
        t_h = [t / 3600 for t in tl["t_s"]]
        if tl["mu_target"]:
            axes[0].plot(t_h, [_num(v) for v in tl["mu_pool_est"]], label="μ_pool (estimated)")
            axes[0].plot(t_h, [_num(v) for v in tl["mu_target"]], label="μ_target = γ·μ_min")
            axes[0].legend(fontsize=8)
        axes[0].set(xlabel="hours", ylabel="rollouts/s")
        axes[1].plot(t_h, tl["active_workers"])
        axes[1].set(xlabel="hours", ylabel="rented workers")
        axes[2].plot(t_h, tl["bubble_ratio"])
        axes[2].set(xlabel="hours", ylabel="cumulative bubble ratio")
        s = result["summary"]
        fig.suptitle(f"{s['steps']} steps, {s['workers_in_pool']} workers in pool, bubble {s['bubble_ratio']:.3f}, "
                     f"${_num(s['usd_per_step']):.2f}/step")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _mean(xs: list) -> float | None:
    return sum(xs) / len(xs) if xs else None


def _num(v) -> float:
    if isinstance(v, str):
        return math.inf if v == "inf" else -math.inf
    return math.nan if v is None else v
