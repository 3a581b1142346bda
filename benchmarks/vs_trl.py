"""echo2 (async and sync) against TRL's ``GRPOTrainer`` on the quickstart problem: reward against wall time.

    python benchmarks/vs_trl.py [--steps 150] [--out DIR] [--quick] [--trl-threads N] [--base-model DIR] [--seed 0]
                                [--echo2-steps-factor 1.5]

What it measures: how long echo2 takes to reach the training reward TRL ends with, as a fraction of TRL's
training wall time, on the quickstart task (``examples/quickstart.yaml``: ``arith``, the tiny offline
Qwen3, 8 prompts × 16 samples per step, temperature 1.0, 6 new tokens, lr 3e-4, 2 optimizer updates per
step, 2 rollout workers, S=3). The acceptance goal of the comparison is a ratio ≤ 0.75; the ratio is
reported whichever way it comes out (``null`` when echo2 never reaches TRL's final reward).

How, back to back (never concurrently), into ``--out``:
  1. ``warm_start/``: ONE base policy, made by echo2's own warm start (``prepare_base_model``: TRL SFT on
     the task's ``sft`` split). All three runs start from this folder (weights, tokenizer, chat template).
  2. ``echo2_async/`` and ``echo2_sync/``: ``echo2 train --config examples/quickstart.yaml`` in a
     subprocess with ``model.name=<warm_start/base_model>``, ``model.warm_start.enabled=false``,
     ``train.checkpoint_every=0`` (no periodic checkpoints; TRL saves none either), and
     ``runtime.mode=sync`` for the second. Then, unless ``--echo2-steps-factor 1``, the same two with a
     step budget F times TRL's (``echo2_async_x1.5/``, ``echo2_sync_x1.5/``; ``train.steps`` = ceil(F ×
     steps), so the lr schedule stretches over the longer run): the question is the wall time to TRL's
     final reward, and with equal steps echo2 can reach it only if it ends at least as high as TRL, a coin
     toss when both learn alike per step. The equal-step runs stay the per-step comparison.
  3. ``trl/``: this script in a subprocess (``--trl-worker``) runs ``GRPOTrainer`` from the same folder on
     the same ``train`` prompts (the adapter's chat messages, rendered by the same chat template, checked
     token for token against echo2's rendering), scored by the same reward (``score_directly`` on the arith
     adapter, with the workers' ``max_answer_chars``). Settings come from the same loaded config:
     ``num_generations`` = samples_per_prompt, generation batch = prompts_per_step × samples_per_prompt,
     ``per_device_train_batch_size`` = that / num_minibatches with ``steps_per_generation`` = num_minibatches
     (echo2's updates per step), ``max_steps`` = steps × num_minibatches, same lr / temperature /
     top_p / max_new_tokens / clip ε / grad clip / weight decay, ``beta=0`` (echo2's kl_coef=0), the same
     lr schedule (``trl_schedule``), ``loss_type=dapo`` (token mean over the update's batch, echo2's ``token-mean``),
     ``scale_rewards=group`` (echo2's ``grpo`` advantage), fp32, no gradient checkpointing, no vLLM.
     TRL runs in one process with ``--trl-threads`` torch threads: by default one per core of the machine
     (torch's own default: what a TRL user gets; echo2 spreads over the same cores as processes, its
     learner and each rollout worker with one thread). ``--trl-threads 1`` gives TRL one thread like each
     echo2 process. Run on an otherwise idle machine: where other jobs share the cores, OpenMP threads
     wait on each other and multi-threaded steps slow down many times over (the load averages are recorded).
Wall time of each run counts training only: from after setup (and echo2's first held-out evaluation) to
the end of the last step; each process's total time is reported too. Held-out accuracy (echo2's
evaluation with the config's ``train.eval_*``: avg@8 at temperature 1.0 on the ``eval`` split,
``train.eval_max_examples`` problems) before and after, for all three.

Output: ``vs_trl.json`` (also printed) — per system its steps, wall_s, reward curve (step, wall_s,
reward_mean), final reward (mean of the last 10% of steps), the time its trailing 10%-of-steps mean first
reaches TRL's final reward, held-out accuracy; the ratios; versions and cores — and ``vs_trl.png``.
Default 150 steps (225 for echo2's longer runs): ~8-10 min for the warm start and the five runs on an idle
2-core machine (echo2 0.25-0.3 s a step with the quickstart's ``learner.shared_prefix``, TRL ~0.5 s; ~30 s
of start-up per echo2 run); ``--quick``: 4 steps of 4 prompts × 8 samples, a smoke run (~2 min).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import signal
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, replace
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
QUICKSTART = ROOT / "examples" / "quickstart.yaml"
GOAL_RATIO = 0.75


@dataclass(frozen=True)
class Settings:
    """What the three runs share on top of the quickstart config (as ``--set`` overrides)."""

    steps: int
    prompts_per_step: int = 8
    samples_per_prompt: int = 16
    warm_start_epochs: float = 15.0
    rl_prompts: int = 128
    """``task.options.max_train``: pinned with the warm start, so that the README's figures stay comparable
    when the quickstart's own values move (it now warm-starts 18 epochs and trains on all 600)."""
    eval_max_examples: int = 100
    echo2_steps_factor: float = 1.5
    """echo2's extra runs get ceil(factor × steps) steps (1: no extra runs)."""
    seed: int = 0
    """``train.seed`` of the three RL runs (sampling, mini-batch order, TRL's data order). The warm start is
    always made at seed 0, so every seed starts from the same weights."""

    def overrides(self) -> list[str]:
        return [f"train.seed={self.seed}", f"train.steps={self.steps}", f"train.prompts_per_step={self.prompts_per_step}",
                f"rollout.samples_per_prompt={self.samples_per_prompt}", f"train.eval_max_examples={self.eval_max_examples}",
                f"model.warm_start.epochs={self.warm_start_epochs}", f"task.options.max_train={self.rl_prompts}",
                "train.checkpoint_every=0", "train.plots=false"]


QUICK = Settings(steps=4, prompts_per_step=4, samples_per_prompt=8, warm_start_epochs=0.5, eval_max_examples=20)


def echo2_runs(settings: Settings) -> list[tuple[str, str, int]]:
    """(system name, runtime.mode, steps) of echo2's runs: equal steps, then the longer budget.

    >>> [name for name, _, _ in echo2_runs(Settings(steps=10, echo2_steps_factor=1.5))]
    ['echo2_async', 'echo2_sync', 'echo2_async_x1.5', 'echo2_sync_x1.5']
    >>> echo2_runs(Settings(steps=10, echo2_steps_factor=1.25))[-1]
    ('echo2_sync_x1.25', 'sync', 13)
    >>> len(echo2_runs(Settings(steps=10, echo2_steps_factor=1.0)))
    2
    """
    runs = [(f"echo2_{mode}", mode, settings.steps) for mode in ("async", "sync")]
    if settings.echo2_steps_factor > 1.0:
        long_steps = math.ceil(settings.echo2_steps_factor * settings.steps - 1e-9)
        runs += [(f"echo2_{mode}_x{settings.echo2_steps_factor:g}", mode, long_steps) for mode in ("async", "sync")]
    return runs


@dataclass(frozen=True)
class Point:
    step: int
    wall_s: float
    reward_mean: float


@dataclass(frozen=True)
class RunResult:
    system: str
    steps: int
    wall_s: float
    process_s: float
    curve: tuple[Point, ...]
    heldout_before: float | None
    heldout_after: float | None

    @property
    def final_reward(self) -> float:
        return mean_reward(self.curve[-window(len(self.curve)):])

    @property
    def step_s_median(self) -> float:
        """Median seconds per step (the first one includes any warm-up of the system)."""
        ends = [p.wall_s for p in self.curve]
        gaps = sorted(b - a for a, b in zip([0.0, *ends], ends))
        return (gaps[(len(gaps) - 1) // 2] + gaps[len(gaps) // 2]) / 2


def window(num_steps: int) -> int:
    """Steps averaged for the final reward and the trailing mean: 10% of the run (at least one)."""
    return max(1, num_steps // 10)


def mean_reward(points) -> float:
    return sum(p.reward_mean for p in points) / len(points)


def time_to_reach(curve: tuple[Point, ...], target: float) -> float | None:
    """Wall time at which the trailing mean over ``window`` steps first reaches ``target`` (None: never)."""
    k = window(len(curve))
    for i in range(k - 1, len(curve)):
        if mean_reward(curve[i - k + 1 : i + 1]) >= target - 1e-12:
            return curve[i].wall_s
    return None


# ----- the runs ---------------------------------------------------------------------------------------
def trl_schedule(algo) -> dict:
    """echo2's lr schedule in TRL's terms (its schedulers count optimizer updates, ours learner steps; with a
    warm-up TRL's first update is at lr 0, ours at lr / warmup_steps)."""
    if algo.lr_min_ratio > 0 and algo.lr_schedule != "cosine":
        raise SystemExit(f"algo.lr_min_ratio={algo.lr_min_ratio} with lr_schedule={algo.lr_schedule} has no "
                         "TRL equivalent; use lr_schedule=cosine or lr_min_ratio=0")
    kind = "cosine_with_min_lr" if algo.lr_min_ratio > 0 else algo.lr_schedule
    extra = {"lr_scheduler_kwargs": {"min_lr_rate": algo.lr_min_ratio}} if algo.lr_min_ratio > 0 else {}
    return {"lr_scheduler_type": kind, "warmup_steps": algo.lr_warmup_steps * algo.num_minibatches, **extra}


def make_base_model(settings: Settings, out: Path) -> tuple[str, float]:
    """echo2's warm start (prepare_base_model) on the quickstart config, once; (path, seconds)."""
    import torch
    from echo2_sdk.runtime.driver.rundir import RunDir
    from echo2_sdk.runtime.driver.setup import prepare_base_model, seed_everything

    from echo2_sdk.config import load_config
    from echo2_sdk.registry import make_task

    cfg = load_config(str(QUICKSTART), replace(settings, seed=0).overrides())
    seed_everything(cfg.train.seed)
    torch.set_num_threads(cfg.runtime.learner_threads)  # as `echo2 train` runs its warm start
    adapter = make_task(cfg.task.name, cfg.task.options, seed=cfg.train.seed)
    run = RunDir(out / "warm_start")
    t0 = time.perf_counter()
    try:
        path = prepare_base_model(cfg, adapter, run, lambda m: print(f"[vs_trl] {m}", file=sys.stderr, flush=True))
    finally:
        run.close()
    return path, time.perf_counter() - t0


def _subprocess(cmd: list[str], log: Path, what: str, env: dict | None = None) -> float:
    t0 = time.perf_counter()
    with log.open("w") as f:  # cwd outside the checkout: the source folder would shadow the installed package
        proc = subprocess.Popen(cmd, cwd=log.parent, stdout=f, stderr=subprocess.STDOUT, text=True,
                                env={**os.environ, "OMP_NUM_THREADS": "1", **(env or {})})
        try:
            proc.wait()
        finally:  # this script stopped (Ctrl-C, SIGTERM): stop the run too, it saves and exits at a step boundary
            if proc.poll() is None:
                proc.terminate()
                try:
                    proc.wait(timeout=60)
                except subprocess.TimeoutExpired:
                    proc.kill()
    if proc.returncode != 0:
        tail = " | ".join(log.read_text().strip().splitlines()[-3:])[-600:]
        raise SystemExit(f"vs_trl: {what} exited {proc.returncode} (log {log}): {tail}")
    return time.perf_counter() - t0


def run_echo2(name: str, mode: str, steps: int, overrides: list[str], out: Path) -> RunResult:
    run_dir = out / name
    sets = [x for o in [*overrides, f"runtime.mode={mode}", f"train.steps={steps}"] for x in ("--set", o)]
    cmd = [sys.executable, "-m", "echo2_sdk.runtime.cli", "train", "--config", str(QUICKSTART),
           "--run-dir", str(run_dir), *sets]
    process_s = _subprocess(cmd, out / f"{name}.log", f"echo2 train ({name})")
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines() if line.strip()]
    summary = json.loads((run_dir / "summary.json").read_text())
    evals = summary.get("eval", {})
    return RunResult(name, steps=summary["steps"], wall_s=summary["wall_s"], process_s=process_s,
                     curve=tuple(Point(r["step"], r["wall_s"], r["reward_mean"]) for r in rows),
                     heldout_before=evals.get("before", {}).get("accuracy"),
                     heldout_after=evals.get("after", {}).get("accuracy"))


def run_trl(overrides: list[str], threads: int, out: Path) -> RunResult:
    work = out / "trl"
    work.mkdir()
    spec = work / "spec.json"
    spec.write_text(json.dumps({"config": str(QUICKSTART), "overrides": overrides, "threads": threads}))
    cmd = [sys.executable, str(Path(__file__).resolve()), "--trl-worker", str(spec)]
    process_s = _subprocess(cmd, out / "trl.log", "TRL GRPOTrainer", env={"OMP_NUM_THREADS": str(threads)})
    r = json.loads((work / "result.json").read_text())
    return RunResult("trl", steps=r["steps"], wall_s=r["wall_s"], process_s=process_s,
                     curve=tuple(Point(**p) for p in r["curve"]), heldout_before=r["heldout_before"],
                     heldout_after=r["heldout_after"])


def trl_worker(spec_path: Path) -> None:
    """The TRL run (in its own process): GRPOTrainer with echo2's settings; writes result.json beside the spec."""
    spec = json.loads(spec_path.read_text())
    for k, v in {"HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false",
                 "TRANSFORMERS_VERBOSITY": "error", "HF_HUB_DISABLE_PROGRESS_BARS": "1"}.items():
        os.environ.setdefault(k, v)
    import torch
    from datasets import Dataset, disable_progress_bars
    from echo2_sdk.runtime.driver.evaluation import eval_answer_char_limit, evaluate
    from echo2_sdk.runtime.rollout.backends.base import SamplingParams
    from echo2_sdk.runtime.rollout.backends.hf import HFBackend
    from transformers import AutoModelForCausalLM, AutoTokenizer, TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    from echo2_sdk.checks import render_prompt_ids
    from echo2_sdk.config import load_config
    from echo2_sdk.registry import make_task
    from echo2_sdk.rewards import score_directly

    disable_progress_bars()
    torch.set_num_threads(spec["threads"])
    cfg = load_config(spec["config"], spec["overrides"])
    r, a, t = cfg.rollout, cfg.algo, cfg.train
    per_step = t.prompts_per_step * r.samples_per_prompt
    if per_step % a.num_minibatches:
        raise SystemExit(f"vs_trl: {per_step} samples per step do not split into algo.num_minibatches="
                         f"{a.num_minibatches} equal TRL batches; pick sizes that divide")
    adapter = make_task(cfg.task.name, cfg.task.options, seed=t.seed)
    base = cfg.model.name
    tokenizer = AutoTokenizer.from_pretrained(base)
    model = AutoModelForCausalLM.from_pretrained(base, dtype=torch.float32)
    train = list(adapter.examples("train"))
    by_id = {ex.id: ex for ex in train}
    rows = [{"prompt": adapter.build_messages(ex), "example_id": ex.id} for ex in train]
    # TRL's own prompt tokenization (GRPOTrainer._tokenize_prompts) must give echo2's prompt ids
    trl_ids = tokenizer.apply_chat_template(conversation=[row["prompt"] for row in rows], add_generation_prompt=True,
                                            tokenize=True, return_dict=True)["input_ids"]
    for ids, ex in zip(trl_ids, train):
        if list(ids) != render_prompt_ids(adapter, tokenizer, ex):
            raise SystemExit(f"vs_trl: TRL's rendering of prompt {ex.id!r} differs from echo2's; not comparable")

    def heldout() -> float:
        params = SamplingParams(temperature=t.eval_temperature, top_p=1.0,
                                max_new_tokens=t.eval_max_new_tokens or r.max_new_tokens, seed=t.seed)
        result = evaluate(adapter, HFBackend(model, tokenizer, device="cpu"), tokenizer, split="eval",
                          k=t.eval_samples, params=params, limit=t.eval_max_examples, max_chars=eval_answer_char_limit(cfg))
        model.train()
        return result["accuracy"]

    rewards: list[float] = []
    walls: list[float] = []
    max_chars = r.effective_max_answer_chars

    def arith_reward(prompts, completions, example_id, **_):
        texts = [c[-1]["content"] if isinstance(c, list) else c for c in completions]
        scores = [score_directly(adapter, by_id[i], text, max_chars=max_chars).reward for i, text in zip(example_id, texts)]
        rewards.append(sum(scores) / len(scores))
        return scores

    class Clock(TrainerCallback):
        t0 = 0.0

        def on_train_begin(self, args, state, control, **kwargs):
            Clock.t0 = time.perf_counter()

        def on_step_end(self, args, state, control, **kwargs):
            if state.global_step % a.num_minibatches == 0:  # one echo2 step = num_minibatches updates
                walls.append(time.perf_counter() - Clock.t0)

    before = heldout()
    args = GRPOConfig(
        output_dir=str(spec_path.parent / "out"), max_steps=t.steps * a.num_minibatches,
        per_device_train_batch_size=per_step // a.num_minibatches, steps_per_generation=a.num_minibatches,
        gradient_accumulation_steps=1, num_iterations=1, num_generations=r.samples_per_prompt,
        max_completion_length=r.max_new_tokens, temperature=r.temperature, top_p=r.top_p, learning_rate=a.lr,
        **trl_schedule(a), weight_decay=a.weight_decay, max_grad_norm=a.max_grad_norm,
        beta=a.kl_coef, epsilon=a.clip_eps_low, epsilon_high=a.clip_eps_high, loss_type="dapo",
        scale_rewards="group", use_vllm=False, use_cpu=True, bf16=False, gradient_checkpointing=False,
        report_to="none", save_strategy="no", logging_strategy="no", disable_tqdm=True, seed=t.seed,
        data_seed=t.seed, dataloader_num_workers=0, push_to_hub=False, log_completions=False,
    )
    trainer = GRPOTrainer(model=model, reward_funcs=arith_reward, args=args, train_dataset=Dataset.from_list(rows),
                          processing_class=tokenizer, callbacks=[Clock()])
    trainer.train()
    model = trainer.model
    after = heldout()
    n = min(len(rewards), len(walls))
    result = {"steps": n, "wall_s": walls[n - 1] if n else 0.0, "heldout_before": before, "heldout_after": after,
              "curve": [{"step": i + 1, "wall_s": walls[i], "reward_mean": rewards[i]} for i in range(n)]}
    (spec_path.parent / "result.json").write_text(json.dumps(result))


# ----- the report -------------------------------------------------------------------------------------
def environment(trl_threads: int, load_at_start: tuple[float, ...]) -> dict:
    import torch
    import transformers
    import trl

    return {"torch": torch.__version__, "transformers": transformers.__version__, "trl": trl.__version__,
            "python": platform.python_version(), "cores": len(os.sched_getaffinity(0)),
            "trl_threads": trl_threads, "load_average_start": [round(x, 2) for x in load_at_start],
            "load_average_end": [round(x, 2) for x in os.getloadavg()]}


def report(results: dict[str, RunResult], settings: Settings, base: str, warm_s: float, env: dict) -> dict:
    trl = results["trl"]
    target = trl.final_reward
    systems = {}
    for name, res in results.items():
        reach = time_to_reach(res.curve, target)
        systems[name] = {
            "steps": res.steps, "wall_s": round(res.wall_s, 2), "process_s": round(res.process_s, 2),
            "step_s_median": round(res.step_s_median, 3), "first_step_s": round(res.curve[0].wall_s, 3),
            "final_reward": round(res.final_reward, 4), "time_to_trl_final_s": None if reach is None else round(reach, 2),
            "heldout_before": res.heldout_before, "heldout_after": res.heldout_after,
            "curve": [asdict(p) for p in res.curve],
        }
    ratios = {}
    for name in (n for n in results if n != "trl"):
        reach = systems[name]["time_to_trl_final_s"]
        ratios[name] = None if reach is None or trl.wall_s <= 0 else round(reach / trl.wall_s, 3)
    befores = {res.heldout_before for res in results.values()}
    return {"task": "arith (examples/quickstart.yaml)", "settings": asdict(settings), "base_model": base,
            "warm_start_s": round(warm_s, 2), "same_start_heldout": len(befores) == 1, "trl_final_reward": round(target, 4),
            "ratio_time_to_trl_final_over_trl_wall": ratios, "goal_ratio": GOAL_RATIO,
            "systems": systems, "environment": env}


def plot(results: dict[str, RunResult], target: float, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (by_time, by_step) = plt.subplots(1, 2, figsize=(11, 4))
    for name, res in results.items():
        k = window(len(res.curve))
        smooth = [mean_reward(res.curve[max(0, i - k + 1) : i + 1]) for i in range(len(res.curve))]
        by_time.plot([p.wall_s for p in res.curve], smooth, label=name)
        by_step.plot([p.step for p in res.curve], smooth, label=name)
    for ax, xlabel in ((by_time, "training wall time (s)"), (by_step, "step (128 samples by default)")):
        ax.axhline(target, color="grey", linestyle="--", linewidth=0.8, label="TRL final reward")
        ax.set(xlabel=xlabel, ylabel="train reward (trailing 10%-of-steps mean)")
        ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--steps", type=int, default=None, help="learner steps per run (default 150; --quick: 4)")
    ap.add_argument("--out", type=Path, default=Path("vs_trl_out"), help="empty or new folder for runs and report")
    ap.add_argument("--quick", action="store_true", help="tiny settings: 4 prompts x 8 samples, short warm start")
    ap.add_argument("--trl-threads", type=int, default=len(os.sched_getaffinity(0)),
                    help="torch threads of the TRL process (default: one per core)")
    ap.add_argument("--base-model", type=Path, help="skip step 1: start all three runs from this model folder "
                    "(e.g. an earlier run's warm_start/base_model)")
    ap.add_argument("--seed", type=int, default=0, help="train.seed of the RL runs (the warm start: seed 0)")
    ap.add_argument("--echo2-steps-factor", type=float, default=1.5,
                    help="also run echo2 (async, sync) for ceil(F x steps) steps; 1: equal steps only (default 1.5)")
    ap.add_argument("--trl-worker", type=Path, help=argparse.SUPPRESS)
    args = ap.parse_args()
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(128 + signum))  # unwind: stop the child run
    if args.trl_worker is not None:
        return trl_worker(args.trl_worker)
    base_settings = QUICK if args.quick else Settings(steps=150)
    steps = args.steps if args.steps is not None else base_settings.steps
    if steps < 1 or args.trl_threads < 1:
        raise SystemExit(f"vs_trl: --steps={steps} and --trl-threads={args.trl_threads} must be >= 1")
    if not 1.0 <= args.echo2_steps_factor <= 10.0:
        raise SystemExit(f"vs_trl: --echo2-steps-factor={args.echo2_steps_factor} must be in [1, 10] "
                         "(1: echo2 runs TRL's steps only)")
    settings = Settings(**{**asdict(base_settings), "steps": steps, "seed": args.seed,
                           "echo2_steps_factor": args.echo2_steps_factor})
    if args.base_model is not None and not (args.base_model / "config.json").is_file():
        raise SystemExit(f"vs_trl: --base-model {str(args.base_model)!r} holds no config.json; give a model "
                         "folder, e.g. an earlier run's warm_start/base_model")
    out = args.out.resolve()
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise SystemExit(f"vs_trl: --out {str(args.out)!r} is not an empty folder; give a new one")
    out.mkdir(parents=True, exist_ok=True)
    load_at_start = os.getloadavg()  # 1, 5, 15 minutes: other jobs on the machine skew every wall time

    if args.base_model is not None:
        base, warm_s = str(args.base_model.resolve()), 0.0
    else:
        base, warm_s = make_base_model(settings, out)
    overrides = [*settings.overrides(), f"model.name={base}", "model.warm_start.enabled=false"]
    results: dict[str, RunResult] = {}
    for name, mode, run_steps in echo2_runs(settings):
        print(f"[vs_trl] {name}: {run_steps} steps", file=sys.stderr, flush=True)
        results[name] = run_echo2(name, mode, run_steps, overrides, out)
    print(f"[vs_trl] TRL GRPOTrainer: {steps} steps", file=sys.stderr, flush=True)
    results["trl"] = run_trl(overrides, args.trl_threads, out)
    for name in results:
        if not results[name].curve:
            raise SystemExit(f"vs_trl: {name} recorded no steps; see {out}/{name}.log")
    doc = report(results, settings, base, warm_s, environment(args.trl_threads, load_at_start))
    plot(results, doc["trl_final_reward"], out / "vs_trl.png")
    doc["plot"] = str(out / "vs_trl.png")
    text = json.dumps(doc, indent=1, allow_nan=False)
    (out / "vs_trl.json").write_text(text)
    print(text)


if __name__ == "__main__":
    main()
