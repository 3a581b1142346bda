"""Delta snapshots on a real training sequence: density, bytes, encode/apply time, and T_bcast full vs delta.

    python benchmarks/delta_broadcast.py --json            # the issue's setting (~3 min on 2 CPU cores)
    python benchmarks/delta_broadcast.py --quick --json    # a tiny model, 3 publishes, 4 workers (tests)

A random-init Qwen3-architecture model (default: hidden 512, 6 layers, 8 / 4 heads, intermediate 1536,
32,768-token vocabulary, tied embeddings: 35.7 M parameters, a 68 MiB bf16 snapshot) trains with the
project's ``Learner`` (GRPO loss on synthetic RL batches, AdamW, ``precision="bf16-mixed"``: float32
masters, bf16 snapshots) at each ``--lrs`` for ``--publishes`` steps, one publish per step. Every
publish goes through the learner's real decision (``DeltaPublisher.prepare``, every worker having
installed the previous version) and every delta is applied to its base and checked against the full
snapshot's SHA-256 (``apply_verified``). Reported per learning rate: delta density (changed elements /
all), compressed bytes vs full (``median_bytes_sent``: over the publishes after the first, which is
necessarily full), encode and apply seconds, and the delta size against older bases (``by_gap``: why a
worker several versions behind gets a full snapshot).

T_bcast is measured with the existing broadcast benchmark (``session.run_broadcast``: N worker nodes in
host processes, every byte over loopback TCP through token-bucket-shaped links, hashed at every hop)
over the same links for the full snapshot and for each learning rate's median delta, the real bytes
with their signed delta manifest. Hosts only verify (``install="none"``) in both runs: the emulated
workers share two cores, whereas each real worker applies its delta on its own machine in parallel, so
``t_bcast_delta_total_s`` = chain time of the delta + the learner's encode + one worker's apply.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import platform
import statistics
import sys
import time

MIB = 1 << 20


def _log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def build_learner(spec: dict, lr: float):
    import torch
    from echo2_sdk.runtime.learning.learner import Learner
    from transformers import Qwen3Config, Qwen3ForCausalLM

    config = Qwen3Config(
        vocab_size=spec["vocab"], hidden_size=spec["hidden"], intermediate_size=spec["intermediate"],
        num_hidden_layers=spec["layers"], num_attention_heads=spec["heads"], num_key_value_heads=spec["kv_heads"],
        head_dim=spec["hidden"] // spec["heads"], max_position_embeddings=1024, tie_word_embeddings=True,
    )
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(spec["seed"])
        model = Qwen3ForCausalLM(config).to(torch.bfloat16).eval()  # the rollout dtype: bf16
    return Learner(model, lr=lr, num_minibatches=1, precision="bf16-mixed", rollout_dtype=torch.bfloat16,
                   seed=spec["seed"])


def rl_batch(spec: dict, step: int):
    """A GRPO-shaped batch: prompt then completion tokens, a per-sequence advantage, sampler log-probs."""
    import torch
    from echo2_sdk.runtime.learning.base import TrainBatch

    g = torch.Generator().manual_seed(spec["seed"] * 1000 + step)
    n, width, prompt = spec["sequences"], spec["seq_len"], spec["seq_len"] // 4
    ids = torch.randint(0, spec["vocab"], (n, width), generator=g)
    attn = torch.ones(n, width, dtype=torch.long)
    loss_mask = torch.zeros(n, width - 1)
    loss_mask[:, prompt:] = 1.0
    adv = (torch.randn(n, 1, generator=g).expand(n, width - 1) * loss_mask).contiguous()
    sampler = -torch.rand(n, width - 1, generator=g) * 3 * loss_mask
    return TrainBatch(ids, attn, loss_mask, adv, sampler, torch.zeros(n, dtype=torch.long))


def train_sequence(spec: dict, lr: float, publishes: int) -> dict:
    """Train, publish after every step, encode/apply every delta; the snapshots for T_bcast."""
    from echo2_sdk.runtime.broadcast.delta import (
        DeltaSpec,
        apply_verified,
        encode_delta,
    )
    from echo2_sdk.runtime.broadcast.delta_plan import DeltaPolicy, DeltaPublisher
    from echo2_sdk.runtime.broadcast.snapshot import state_dict_to_bytes

    learner = build_learner(spec, lr)
    params = sum(p.numel() for p in learner.model.parameters())
    publisher = DeltaPublisher(DeltaPolicy())
    snaps: list[bytes] = []
    rows, median_delta = [], None
    for version in range(publishes + 1):
        t_train = 0.0
        if version:
            t0 = time.perf_counter()
            learner.train_step(rl_batch(spec, version))
            t_train = time.perf_counter() - t0
        data = state_dict_to_bytes(learner.state_dict_for_rollout())
        sha = hashlib.sha256(data).hexdigest()
        prepared = publisher.prepare(data, sha, version, ["w"], {"w": list(range(version))}, None)
        pub, row = prepared.publication, {"version": version, "train_s": round(t_train, 3)}
        row.update(kind=pub.kind, reason=pub.reason, bytes_full=pub.bytes_full, bytes_sent=pub.bytes_sent,
                   fraction=round(pub.bytes_sent / pub.bytes_full, 5), density=pub.density, encode_s=pub.encode_s)
        if prepared.spec is not None:
            base = snaps[prepared.spec.base_version]
            t0 = time.perf_counter()
            out = apply_verified(base, prepared.payload, prepared.spec)  # raises unless bit-identical
            row["apply_s"] = round(time.perf_counter() - t0, 4)
            row["installed_sha256_ok"] = hashlib.sha256(out).hexdigest() == sha
            del out
        snaps.append(data)
        rows.append(row)
        _log(f"lr {lr:g} v{version}: {row['kind']} {row['fraction']:.4f} of full, density {row['density']}, "
             f"encode {row['encode_s']} s, apply {row.get('apply_s')} s")
    deltas = [r for r in rows if r["kind"] == "delta"]
    if deltas:  # the median-sized delta, re-encoded for the broadcast run (with its manifest metadata)
        mid = sorted(deltas, key=lambda r: r["bytes_sent"])[len(deltas) // 2]["version"]
        encoded = encode_delta(snaps[mid - 1], snaps[mid])
        spec_ = DeltaSpec(mid - 1, hashlib.sha256(snaps[mid - 1]).hexdigest(), hashlib.sha256(snaps[mid]).hexdigest(),
                          len(snaps[mid]))
        median_delta = (encoded.payload, spec_.to_metadata())
    last = len(snaps) - 1
    by_gap = {}
    for gap in (1, 2, 4, 8):
        if last - gap >= 0:
            enc = encode_delta(snaps[last - gap], snaps[last])
            by_gap[str(gap)] = {"fraction": round(len(enc.payload) / len(snaps[last]), 5),
                                "density": round(enc.density, 5)}
    fractions = [r["fraction"] for r in deltas]
    summary = {
        "lr": lr, "params": params, "publishes": publishes, "deltas": len(deltas), "rows": rows,
        "median_bytes_sent": statistics.median(r["bytes_sent"] for r in rows[1:]) if publishes else None,
        "median_fraction": statistics.median(fractions) if fractions else None,
        "median_density": statistics.median(r["density"] for r in deltas) if deltas else None,
        "encode_s_median": statistics.median(r["encode_s"] for r in deltas) if deltas else None,
        "apply_s_median": statistics.median(r["apply_s"] for r in deltas) if deltas else None,
        "all_installed_hashes_equal_full": all(r["installed_sha256_ok"] for r in deltas),
        "by_gap": by_gap,
    }
    return {"summary": summary, "full": snaps[-1], "median_delta": median_delta}


def measure_bcast(payload: bytes, metadata: dict, args) -> dict:
    from echo2_sdk.runtime.broadcast.session import BroadcastConfig, run_broadcast

    cfg = BroadcastConfig(workers=args.workers, size_mb=len(payload) / MIB, topology="chain",
                          worker_mbps=args.worker_mbps, uplink_mbps=args.uplink_mbps, install="none",
                          payload=payload, metadata=metadata, hosts=args.hosts)
    r = run_broadcast(cfg)
    return {k: r[k] for k in ("size_bytes", "t_bcast_s", "t_all_s", "lower_bound_s", "ratio", "t_prepare_s",
                              "installed_workers", "live_workers", "rejected_chunks_total")} | {
        "plan": {k: r["plan"][k] for k in ("stripes", "chain_length", "chunk_size")},
        "machine_busy_fraction": r["cpu"].get("machine_busy_fraction")}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--lrs", type=float, nargs="+", default=[1e-6, 1e-5])
    p.add_argument("--publishes", type=int, default=12, help="training steps, one publish after each")
    p.add_argument("--workers", type=int, default=16, metavar="N")
    p.add_argument("--uplink-mbps", type=float, default=400.0, metavar="B0")
    p.add_argument("--worker-mbps", type=float, default=100.0, metavar="Bw")
    p.add_argument("--hosts", type=int, default=None, help="host processes for the worker nodes (default: cores)")
    p.add_argument("--quick", action="store_true", help="tiny model, 3 publishes, 4 workers at 400/200 Mb/s")
    p.add_argument("--json", action="store_true", help="print one JSON document (progress on stderr)")
    args = p.parse_args(argv)
    import torch

    torch.set_num_threads(max(1, min(2, os.cpu_count() or 1)))
    spec = {"vocab": 32768, "hidden": 512, "intermediate": 1536, "layers": 6, "heads": 8, "kv_heads": 4, "seq_len": 64,
                "sequences": 8, "seed": 0}
    if args.quick:
        spec.update(vocab=2048, hidden=64, intermediate=128, layers=2, heads=4, kv_heads=2, seq_len=16, sequences=4)
        args.publishes, args.workers, args.uplink_mbps, args.worker_mbps = 3, 4, 400.0, 200.0
    t0 = time.perf_counter()
    runs, full, medians = {}, None, {}
    for lr in args.lrs:
        out = train_sequence(spec, lr, args.publishes)
        runs[f"{lr:g}"], full = out["summary"], out["full"]
        medians[f"{lr:g}"] = out["median_delta"]
    _log("broadcasting the full snapshot ...")
    bcast_full = measure_bcast(full, {}, args)
    for key, run in runs.items():
        if medians[key] is None:
            continue
        _log(f"broadcasting the median delta at lr {key} ...")
        b = measure_bcast(*medians[key], args)
        run["bcast_delta"] = b
        total = b["t_bcast_s"] + run["encode_s_median"] + run["apply_s_median"] if b["t_bcast_s"] else None
        run["t_bcast_delta_total_s"] = None if total is None else round(total, 4)
        tf = bcast_full["t_bcast_s"]
        run["acceptance"] = {
            "median_sent_over_full": round(run["median_bytes_sent"] / len(full), 5),
            "median_sent_le_tenth": run["median_bytes_sent"] <= len(full) / 10,
            "t_bcast_delta_total_over_full": None if total is None or not tf else round(total / tf, 4),
            "t_bcast_delta_le_0_15_full": bool(total is not None and tf and total <= 0.15 * tf),
            "encode_plus_apply_over_t_bcast_full": round((run["encode_s_median"] + run["apply_s_median"]) / tf, 4) if tf else None,
            "encode_plus_apply_le_10pct": bool(tf and run["encode_s_median"] + run["apply_s_median"] <= 0.1 * tf),
            "all_installed_hashes_equal_full": run["all_installed_hashes_equal_full"],
        }
    result = {
        "environment": {"python": platform.python_version(), "torch": torch.__version__, "cpu_count": os.cpu_count(),
                        "platform": platform.platform()},
        "model": {k: spec[k] for k in ("vocab", "hidden", "intermediate", "layers", "heads", "kv_heads")} | {
            "params": next(iter(runs.values()))["params"], "snapshot_bytes": len(full), "dtype": "bfloat16",
            "masters": "float32"},
        "links": {"workers": args.workers, "uplink_mbps": args.uplink_mbps, "worker_mbps": args.worker_mbps,
                  "topology": "chain"},
        "bcast_full": bcast_full,
        "runs": runs,
        "wall_s": round(time.perf_counter() - t0, 1),
    }
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        for key, run in runs.items():
            print(f"lr {key}: median sent {run['acceptance']['median_sent_over_full'] if 'acceptance' in run else '-'} "
                  f"of full; T_bcast delta {run.get('t_bcast_delta_total_s')} s vs full {bcast_full['t_bcast_s']} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
