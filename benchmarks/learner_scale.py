"""Learner memory and speed at RL batch shapes: micro-batch budget, ranks, precision, and a 4x batch.

    python benchmarks/learner_scale.py --json            # the default sweep (~10 min on 2 CPU cores)
    python benchmarks/learner_scale.py --quick --json    # a 4-configuration subset on a tiny model (tests)
    python benchmarks/learner_scale.py --json --sequences 64 --min-len 64 --max-len 1024 --length-dist uniform
                                                         # the issue's full batch shape (hours on 2 cores)

Each configuration is one ``Learner.train_step`` on a random-init Qwen3-architecture model, run in
fresh processes (torch.multiprocessing spawn, one per rank, gloo on CPU / NCCL on CUDA) so that memory
high-water marks never mix between configurations. Per configuration it reports:

- ``peak_rss_mb``: the rank process's resident-set high-water mark (VmHWM; ``ru_maxrss`` where there is
  no /proc), max over ranks; ``step_peak_rss_mb`` the same mark reset just before the measured step
  (Linux ``clear_refs``), and ``step_peak_increase_mb`` its rise over the RSS before the step;
  on CUDA ``peak_cuda_mb`` is ``torch.cuda.max_memory_allocated``;
- ``step_s`` (wall of the measured step, max over ranks), ``tokens_per_s`` (real tokens of the batch,
  prompt + completion, over ``step_s``), and the learner's ``micro_batches``, ``padding_frac``,
  ``micro_batch_tokens_max``.

Before the measured step each configuration runs a warm-up step (``--warmup``): ``tiny`` (default: a
step on a few short sequences, which allocates the AdamW state and warms the allocator and kernels at a
fraction of the cost), ``full`` (the measured batch itself, twice the time) or ``none`` (the first step
is the measured one). The sweep is micro_batch_tokens x num_ranks x precision, then the
``--scale-factor`` (4) times larger batch (the base batch tiled) at ``--scale-budget`` (2048):
``scale.memory_ratio`` (peak RSS, should stay <= 1.2) and ``scale.time_ratio`` (about 4).

Default shapes (chosen so the default sweep fits about 10 minutes on 2 shared CPU cores, one thread per
rank): Qwen3 with hidden 512, 12 layers, 8 heads / 4 KV heads (head_dim 64), intermediate 1536 and a
synthetic 32,768-token vocabulary with tied embeddings (55 M parameters, 17 M of them the embedding /
head, so the output head matters); a batch of 20 sequences, lengths 32-512 drawn log-uniformly (a
long tail like RL completions: most short, a few long; 4,150 real tokens, 10,240 padded), the first 16
tokens a prompt (loss-masked out), one mini-batch per step (``--minibatches``) so that
``micro_batch_tokens=None`` is one pass over the whole padded batch and 8192 splits it. The default
sweep took 617 s here (torch 2.13 CPU, 2 cores shared with other work). Prints one JSON document with
``--json`` (progress goes to stderr); without it, a table.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import socket
import sys
import tempfile
import time
import traceback
from pathlib import Path

# --------------------------------------------------------------------------- shapes


def parse_budget(text: str) -> int | None:
    return None if text.lower() in ("none", "whole", "0") else int(text)


def batch_lengths(n: int, lo: int, hi: int, dist: str, seed: int) -> list[int]:
    """``n`` deterministic sequence lengths in [lo, hi]: one of exactly ``hi``, one of ``lo`` (when n > 1),
    the rest drawn from [lo, hi) (log-uniform or uniform), so the longest row is unique."""
    import random

    rng = random.Random(seed)
    out = []
    for _ in range(max(n - 2, 0)):
        if dist == "uniform":
            out.append(rng.randrange(lo, hi) if hi > lo else lo)
        else:
            out.append(min(hi - 1, max(lo, int(math.exp(rng.uniform(math.log(lo), math.log(hi)))))) if hi > lo else lo)
    out = [hi] + ([lo] if n > 1 else []) + out
    return out[:n]


def make_batch(spec: dict, factor: int = 1):
    """The benchmark batch (right-padded), the same on every rank; ``factor`` tiles its rows."""
    import torch

    from echo2_sdk.runtime.learning.base import TrainBatch

    lengths = batch_lengths(spec["sequences"], spec["min_len"], spec["max_len"], spec["length_dist"], spec["seed"])
    lengths = lengths * factor
    return _batch_from_lengths(lengths, spec["prompt_len"], spec["vocab"], spec["seed"], TrainBatch, torch)


def _batch_from_lengths(lengths, prompt_len, vocab, seed, TrainBatch, torch):
    g = torch.Generator().manual_seed(seed)
    n, width = len(lengths), max(lengths)
    lens = torch.tensor(lengths)
    cols = torch.arange(width)[None]
    attn = (cols < lens[:, None]).long()
    ids = torch.randint(0, vocab, (n, width), generator=g) * attn
    prompt = torch.clamp(torch.full((n,), prompt_len), max=lens - 1)  # at least one completion token
    loss_mask = ((cols[:, 1:] >= prompt[:, None]) & (cols[:, 1:] < lens[:, None])).float()
    adv = torch.randn(n, 1, generator=g).expand(n, width - 1) * loss_mask
    sampler = -torch.rand(n, width - 1, generator=g) * 3 * loss_mask
    return TrainBatch(ids, attn, loss_mask, adv.contiguous(), sampler, torch.zeros(n, dtype=torch.long))


def warmup_batch(spec: dict, world: int):
    """A few short sequences: enough rows for every rank and mini-batch."""
    import torch

    from echo2_sdk.runtime.learning.base import TrainBatch

    n = 2 * world * spec["minibatches"]
    length = min(64, spec["max_len"])
    return _batch_from_lengths([length] * n, min(spec["prompt_len"], length // 2), spec["vocab"], spec["seed"] + 1,
                               TrainBatch, torch)


def build_model(spec: dict, device=None):
    import torch
    from transformers import Qwen3Config, Qwen3ForCausalLM

    config = Qwen3Config(
        vocab_size=spec["vocab"], hidden_size=spec["hidden"], intermediate_size=spec["intermediate"],
        num_hidden_layers=spec["layers"], num_attention_heads=spec["heads"], num_key_value_heads=spec["kv_heads"],
        head_dim=spec["hidden"] // spec["heads"], max_position_embeddings=max(2048, spec["max_len"]),
        tie_word_embeddings=True,
    )
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(spec["seed"])
        model = Qwen3ForCausalLM(config)
    return model.eval()


def count_params(spec: dict) -> int:
    """Parameters of the benchmark model (tied embedding counted once), from the shapes alone."""
    h, i, v, L = spec["hidden"], spec["intermediate"], spec["vocab"], spec["layers"]
    d = h // spec["heads"]
    q, kv = spec["heads"] * d, spec["kv_heads"] * d
    per_layer = h * q + 2 * h * kv + q * h + 3 * h * i + 2 * h + 2 * d  # attn, mlp, 2 norms, q/k norms
    return v * h + L * per_layer + h


# --------------------------------------------------------------------------- memory probes


def _status_kb(field: str) -> float | None:
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith(field + ":"):
                return float(line.split()[1])
    except OSError:
        pass
    return None


def rss_mb() -> float | None:
    kb = _status_kb("VmRSS")
    return None if kb is None else kb / 1024


def peak_rss_mb() -> float:
    """This process's RSS high-water mark (VmHWM: the process image only; ru_maxrss as a fallback)."""
    kb = _status_kb("VmHWM")
    if kb is None:
        import resource

        kb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / (1024 if sys.platform == "darwin" else 1)
    return kb / 1024


def reset_peak_rss() -> bool:
    """Reset VmHWM to the current RSS (Linux >= 4.0); False where that is not allowed."""
    try:
        Path("/proc/self/clear_refs").write_text("5")
        return True
    except OSError:
        return False


# --------------------------------------------------------------------------- one rank


def rank_main(rank: int, world: int, port: int, spec: dict, cfg: dict, out_dir: str) -> None:
    """Build model + learner, warm up, run one measured step, write this rank's figures as JSON."""
    out = Path(out_dir) / f"rank{rank}.json"
    try:
        out.write_text(json.dumps(_rank_work(rank, world, port, spec, cfg)))
    except BaseException:
        out.write_text(json.dumps({"rank": rank, "error": traceback.format_exc(limit=8)}))
        raise


def _rank_work(rank: int, world: int, port: int, spec: dict, cfg: dict) -> dict:
    import torch

    torch.set_num_threads(spec["threads"])
    cuda = spec["device"] == "cuda"
    if cuda:
        torch.cuda.set_device(rank)
    from echo2_sdk.runtime.learning.learner import Learner
    from echo2_sdk.runtime.learning.sharding import init_rank_group

    group = init_rank_group(rank, world, "127.0.0.1", port) if world > 1 else None
    device = f"cuda:{rank}" if cuda else "cpu"
    rss_start = rss_mb()
    model = build_model(spec)
    learner = Learner(
        model, lr=1e-6, num_minibatches=spec["minibatches"], loss_kwargs={"loss_agg": spec["loss_agg"]},
        micro_batch_tokens=cfg["micro_batch_tokens"], precision=cfg["precision"],
        gradient_checkpointing=spec["gradient_checkpointing"], device=device, group=group,
        shard=world > 1, seed=spec["seed"],
    )
    rss_model = rss_mb()
    batch = make_batch(spec, cfg.get("factor", 1))

    def step(b):
        if cuda:
            torch.cuda.synchronize()
        t0 = time.perf_counter()
        metrics = learner.train_step(b)
        if cuda:
            torch.cuda.synchronize()
        return metrics, time.perf_counter() - t0

    warm_s = None
    if spec["warmup"] != "none":
        _, warm_s = step(batch if spec["warmup"] == "full" else warmup_batch(spec, world))
    rss_before = rss_mb()
    reset_ok = reset_peak_rss()
    if cuda:
        torch.cuda.reset_peak_memory_stats()
    metrics, step_s = step(batch)
    step_peak = peak_rss_mb() if reset_ok else None
    result = {
        "rank": rank, "step_s": step_s, "warmup_step_s": warm_s, "metrics": metrics,
        "real_tokens": int(batch.attention_mask.sum()), "sequences": len(batch),
        "batch_width": int(batch.input_ids.shape[1]),
        "rss_start_mb": rss_start, "rss_model_mb": rss_model, "rss_before_step_mb": rss_before,
        "step_peak_rss_mb": step_peak, "peak_rss_mb": peak_rss_mb(),
    }
    if cuda:
        result["peak_cuda_mb"] = torch.cuda.max_memory_allocated() / 2**20
    if world > 1:
        torch.distributed.destroy_process_group()
    return result


# --------------------------------------------------------------------------- driver


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_config(spec: dict, cfg: dict, timeout_s: float) -> dict:
    """Spawn ``cfg["num_ranks"]`` fresh rank processes for one configuration; gather their figures."""
    import torch.multiprocessing as mp

    ctx = mp.get_context("spawn")
    world = cfg["num_ranks"]
    port = free_port()
    with tempfile.TemporaryDirectory(prefix="learner_scale_") as tmp:
        procs = [ctx.Process(target=rank_main, args=(r, world, port, spec, cfg, tmp), daemon=False)
                 for r in range(world)]
        t0 = time.perf_counter()
        for p in procs:
            p.start()
        failed = timed_out = False
        while any(p.is_alive() for p in procs):
            if any(p.exitcode not in (None, 0) for p in procs):
                failed = True
                break
            if time.perf_counter() - t0 > timeout_s:
                timed_out = True
                break
            time.sleep(0.2)
        for p in procs:
            if p.is_alive():
                p.terminate()
                p.join(5)
                if p.is_alive():
                    p.kill()
            p.join()
        wall = time.perf_counter() - t0
        ranks = []
        for r in range(world):
            path = Path(tmp) / f"rank{r}.json"
            ranks.append(json.loads(path.read_text()) if path.exists() else
                         {"rank": r, "error": f"no result (exit code {procs[r].exitcode})"})
    row = {"name": config_name(cfg), **{k: cfg[k] for k in ("precision", "num_ranks", "micro_batch_tokens")},
           "batch_factor": cfg.get("factor", 1), "process_wall_s": round(wall, 1)}
    errors = [r["error"] for r in ranks if "error" in r]
    if timed_out or failed or errors:
        row["ok"] = False
        row["error"] = (f"timed out after {timeout_s:.0f} s" if timed_out and not errors else
                        errors[0] if errors else f"exit codes {[p.exitcode for p in procs]}")
        return row
    m = ranks[0]["metrics"]
    step_s = max(r["step_s"] for r in ranks)
    row.update(
        ok=True,
        sequences=ranks[0]["sequences"],
        real_tokens=ranks[0]["real_tokens"],
        loss_tokens=int(m["num_tokens"]),
        step_s=round(step_s, 3),
        t_train_s=round(max(r["metrics"]["t_train_s"] for r in ranks), 3),
        tokens_per_s=round(ranks[0]["real_tokens"] / step_s, 1),
        warmup_step_s=None if ranks[0]["warmup_step_s"] is None else round(max(r["warmup_step_s"] for r in ranks), 3),
        micro_batches=int(m["micro_batches"]),
        padding_frac=round(m["padding_frac"], 4),
        padded_tokens=round(ranks[0]["real_tokens"] / (1 - m["padding_frac"])),  # of the real passes, all ranks
        micro_batch_tokens_max=int(m["micro_batch_tokens_max"]),
        peak_rss_mb=round(max(r["peak_rss_mb"] for r in ranks), 1),
        step_peak_rss_mb=_max_or_none(r["step_peak_rss_mb"] for r in ranks),
        rss_model_mb=_max_or_none(r["rss_model_mb"] for r in ranks),
        rss_before_step_mb=_max_or_none(r["rss_before_step_mb"] for r in ranks),
        loss=m["loss"],
        grad_norm=m.get("grad_norm"),
    )
    if row["step_peak_rss_mb"] is not None and row["rss_before_step_mb"] is not None:
        row["step_peak_increase_mb"] = round(max(r["step_peak_rss_mb"] - r["rss_before_step_mb"] for r in ranks), 1)
    if "peak_cuda_mb" in ranks[0]:
        row["peak_cuda_mb"] = round(max(r["peak_cuda_mb"] for r in ranks), 1)
    if world > 1:
        row["per_rank_peak_rss_mb"] = [round(r["peak_rss_mb"], 1) for r in ranks]
    return row


def _max_or_none(values) -> float | None:
    values = [v for v in values if v is not None]
    return round(max(values), 1) if values else None


def config_name(cfg: dict) -> str:
    budget = cfg["micro_batch_tokens"]
    factor = f"/x{cfg['factor']}" if cfg.get("factor", 1) != 1 else ""
    return f"{cfg['precision']}/r{cfg['num_ranks']}/mbt={'whole' if budget is None else budget}{factor}"


def scale_summary(base: dict | None, scaled: dict | None, factor: int) -> dict:
    out = {"factor": factor, "base": base and base["name"], "scaled": scaled and scaled["name"]}
    if not (base and scaled and base.get("ok") and scaled.get("ok")):
        out["ok"] = False
        out["error"] = "base or scaled configuration failed"
        return out
    key = "peak_cuda_mb" if "peak_cuda_mb" in base else "peak_rss_mb"
    out.update(
        memory_key=key,
        memory_ratio=round(scaled[key] / base[key], 3),
        time_ratio=round(scaled["step_s"] / base["step_s"], 3),
        tokens_ratio=round(scaled["real_tokens"] / base["real_tokens"], 3),
        padded_tokens_ratio=round(scaled["padded_tokens"] / base["padded_tokens"], 3),
        tokens_per_s_ratio=round(scaled["tokens_per_s"] / base["tokens_per_s"], 3),
    )
    if base.get("step_peak_increase_mb") and scaled.get("step_peak_increase_mb") is not None:
        out["step_peak_increase_ratio"] = round(scaled["step_peak_increase_mb"] / base["step_peak_increase_mb"], 3)
    out["memory_ok"] = out["memory_ratio"] <= 1.2
    return out


def _load_avg() -> list[float] | None:
    return [round(x, 2) for x in os.getloadavg()] if hasattr(os, "getloadavg") else None


def print_table(report: dict) -> None:
    m = report["model"]
    print(f"model {m['params_m']} M params (hidden {m['hidden']}, {m['layers']} layers, vocab {m['vocab']}); batch "
          f"{report['batch']['sequences']} sequences, {report['batch']['real_tokens']} real tokens")
    print(f"{'configuration':<30}{'step s':>9}{'tok/s':>9}{'peak MB':>9}{'step +MB':>9}{'mbs':>5}{'padding':>9}")
    for r in report["configs"]:
        if not r["ok"]:
            print(f"{r['name']:<30} FAILED: {r['error'].strip().splitlines()[-1]}")
            continue
        inc = r.get("step_peak_increase_mb")
        print(f"{r['name']:<30}{r['step_s']:>9.2f}{r['tokens_per_s']:>9.1f}{r['peak_rss_mb']:>9.0f}"
              f"{'' if inc is None else f'{inc:.0f}':>9}{r['micro_batches']:>5}{r['padding_frac']:>9.3f}")
    s = report["scale"]
    if s and s.get("memory_ratio") is not None:
        print(f"x{s['factor']} batch: memory ratio {s['memory_ratio']} (<= 1.2: {s['memory_ok']}), "
              f"time ratio {s['time_ratio']}")


QUICK = dict(hidden=64, layers=2, intermediate=128, heads=4, kv_heads=2, vocab=512, sequences=12, min_len=8,
             max_len=128, prompt_len=4, budgets="whole,256", ranks="1,2", precisions="fp32", scale_budget=256)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__.split("\n\n", 1)[1])
    p.add_argument("--json", action="store_true", help="print the JSON document on stdout (default: a table)")
    p.add_argument("--quick", action="store_true", help="tiny model and batch; budgets whole,256; ranks 1,2; fp32")
    p.add_argument("--hidden", type=int, default=512)
    p.add_argument("--layers", type=int, default=12)
    p.add_argument("--intermediate", type=int, default=1536)
    p.add_argument("--heads", type=int, default=8)
    p.add_argument("--kv-heads", type=int, default=4)
    p.add_argument("--vocab", type=int, default=32768)
    p.add_argument("--sequences", type=int, default=20)
    p.add_argument("--min-len", type=int, default=32)
    p.add_argument("--max-len", type=int, default=512)
    p.add_argument("--length-dist", choices=("loguniform", "uniform"), default="loguniform")
    p.add_argument("--prompt-len", type=int, default=16, help="leading tokens of each sequence left out of the loss")
    p.add_argument("--minibatches", type=int, default=1, help="optimizer updates per step (default 1)")
    p.add_argument("--loss-agg", default="token-mean")
    p.add_argument("--budgets", default="whole,8192,2048", help="micro_batch_tokens values; 'whole' = None")
    p.add_argument("--ranks", default="1,2")
    p.add_argument("--precisions", default="fp32,bf16-mixed")
    p.add_argument("--scale-factor", type=int, default=4, help="batch multiple of the scale check (0: skip it)")
    p.add_argument("--scale-budget", type=int, default=2048)
    p.add_argument("--scale-precision", default="fp32")
    p.add_argument("--warmup", choices=("tiny", "full", "none"), default="tiny")
    p.add_argument("--gradient-checkpointing", action="store_true")
    p.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    p.add_argument("--threads", type=int, default=1, help="torch threads per rank process (default 1)")
    p.add_argument("--timeout", type=float, default=600, help="seconds per configuration before its ranks are killed")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", help="also write the JSON document to this file")
    args = p.parse_args(argv)
    if args.quick:
        for key, value in QUICK.items():
            if p.get_default(key) == getattr(args, key):  # flags set to other values win
                setattr(args, key, value)

    spec = {k: getattr(args, k) for k in ("hidden", "layers", "intermediate", "heads", "kv_heads", "vocab", "sequences",
                                         "min_len", "max_len", "length_dist", "prompt_len", "minibatches", "loss_agg",
                                         "warmup", "gradient_checkpointing", "device", "threads", "seed")}
    budgets = [parse_budget(b) for b in args.budgets.split(",") if b]
    ranks = [int(r) for r in args.ranks.split(",") if r]
    precisions = [x for x in args.precisions.split(",") if x]
    configs = [{"precision": pr, "num_ranks": nr, "micro_batch_tokens": b}
               for pr in precisions for nr in ranks for b in budgets]
    base_cfg = {"precision": args.scale_precision, "num_ranks": 1, "micro_batch_tokens": args.scale_budget}
    scale_cfgs = []
    if args.scale_factor > 0:
        if base_cfg not in configs:
            scale_cfgs.append(base_cfg)
        scale_cfgs.append({**base_cfg, "factor": args.scale_factor})
    if args.device == "cuda":
        import torch

        if max(ranks) > torch.cuda.device_count():
            p.error(f"--ranks {args.ranks} needs {max(ranks)} GPUs; {torch.cuda.device_count()} visible")

    t0 = time.perf_counter()
    load_start = _load_avg()

    def log(msg: str) -> None:
        print(f"[{time.perf_counter() - t0:6.1f}s] {msg}", file=sys.stderr, flush=True)

    lengths = batch_lengths(args.sequences, args.min_len, args.max_len, args.length_dist, args.seed)
    rows = []
    for cfg in configs + scale_cfgs:
        row = run_config(spec, cfg, args.timeout)
        rows.append(row)
        if row["ok"]:
            log(f"{row['name']:<28} step {row['step_s']:7.2f} s  {row['tokens_per_s']:8.1f} tok/s  peak "
                f"{row['peak_rss_mb']:7.0f} MB  micro-batches {row['micro_batches']:3d}  padding {row['padding_frac']:.3f}")
        else:
            log(f"{row['name']:<28} FAILED: {row['error'].strip().splitlines()[-1]}")
    by_name = {r["name"]: r for r in rows}
    scale = (scale_summary(by_name.get(config_name(base_cfg)), by_name.get(config_name({**base_cfg, "factor": args.scale_factor})),
                           args.scale_factor) if args.scale_factor > 0 else None)

    import torch
    import transformers

    params = count_params(spec)
    report = {
        "benchmark": "learner_scale",
        "environment": {
            "python": platform.python_version(), "torch": torch.__version__, "transformers": transformers.__version__,
            "platform": platform.platform(), "cpu_count": os.cpu_count(),
            "cpu_affinity": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None,
            "threads_per_rank": args.threads, "device": args.device, "load_avg_start": load_start,
            "load_avg_end": _load_avg(),
        },
        "model": {"architecture": "Qwen3ForCausalLM (random init)", "hidden": args.hidden, "layers": args.layers,
                  "intermediate": args.intermediate, "heads": args.heads, "kv_heads": args.kv_heads,
                  "head_dim": args.hidden // args.heads, "vocab": args.vocab, "tied_embeddings": True,
                  "params": params, "params_m": round(params / 1e6, 2),
                  "embedding_params_m": round(args.vocab * args.hidden / 1e6, 2)},
        "batch": {"sequences": args.sequences, "min_len": args.min_len, "max_len": args.max_len,
                  "length_dist": args.length_dist, "prompt_len": args.prompt_len, "real_tokens": sum(lengths),
                  "padded_tokens": len(lengths) * max(lengths),
                  "padding_frac_whole_batch": round(1 - sum(lengths) / (len(lengths) * max(lengths)), 4)},
        "settings": {"minibatches": args.minibatches, "loss_agg": args.loss_agg, "warmup": args.warmup,
                     "gradient_checkpointing": args.gradient_checkpointing, "quick": args.quick,
                     "memory": "peak_rss_mb: VmHWM of each rank process over its life, max over ranks; "
                               "step_peak_increase_mb: its rise during the measured step",
                     "timing": f"one measured step after a {args.warmup!r} warm-up step; 2-rank configurations "
                               f"share the machine's {os.cpu_count()} cores with any other load",
                     "issue_full_shape": "--sequences 64 --min-len 64 --max-len 1024 --length-dist uniform"},
        "configs": rows,
        "scale": scale,
        "wall_s": round(time.perf_counter() - t0, 1),
    }
    text = json.dumps(report, indent=1)
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(text)
    if args.json:
        print(text)
    else:
        print_table(report)
    return 0 if all(r["ok"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
