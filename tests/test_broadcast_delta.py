"""Delta snapshots: the format (bit-exact round trip, refusals), the learner's decision rule, and real
publishes through the chain between thread-hosted endpoints (no Ray): deltas install bit for bit,
a worker without the base falls back to the full snapshot, late joiners get full snapshots, and
forged or corrupted deltas are refused."""

from __future__ import annotations

import hashlib

import pytest
import torch
from echo2_sdk.runtime.broadcast.delta import (
    DeltaError,
    DeltaSpec,
    apply_delta,
    apply_verified,
    encode_delta,
    segments,
)
from echo2_sdk.runtime.broadcast.delta_plan import (
    DeltaPolicy,
    DeltaPublisher,
    choose_base,
)
from echo2_sdk.runtime.broadcast.endpoints import (
    LearnerBroadcaster,
    WorkerBroadcastEndpoint,
)
from echo2_sdk.runtime.broadcast.manifest import (
    ManifestError,
    build_manifest,
    new_signing_key,
    sign_manifest,
    verify_manifest,
)
from echo2_sdk.runtime.broadcast.session import BroadcastConfig, run_broadcast
from echo2_sdk.runtime.broadcast.snapshot import (
    state_dict_from_bytes,
    state_dict_to_bytes,
)


def _policy_states(steps: int, lr: float = 1e-3, seed: int = 0) -> list[dict[str, torch.Tensor]]:
    """bf16 snapshots of float32 masters taking small steps (a few % of the values change each step)."""
    g = torch.Generator().manual_seed(seed)
    master = {"embed.weight": torch.randn(512, 64, generator=g) * 0.02, "norm.weight": torch.ones(64),
              "proj.weight": torch.randn(64, 256, generator=g) * 0.05, "steps": torch.tensor([0])}
    out = []
    for step in range(steps):
        out.append({k: (v.to(torch.bfloat16) if v.is_floating_point() else v.clone()) for k, v in master.items()})
        for v in master.values():
            if v.is_floating_point():
                v.add_(torch.randn(v.shape, generator=g).sign() * lr * 0.02)
        master["steps"] += 1
    return out


def _sha(data) -> str:
    return hashlib.sha256(data).hexdigest()


# ---- format ---------------------------------------------------------------------------------------
def test_delta_round_trip_is_bit_exact_and_small():
    a, b = (state_dict_to_bytes(sd) for sd in _policy_states(2))
    encoded = encode_delta(a, b)
    assert encoded is not None and 0 < encoded.density < 0.5
    assert len(encoded.payload) < len(b) / 4
    out = apply_delta(a, encoded.payload)
    assert _sha(out) == _sha(b) and bytes(a) != bytes(b)
    restored = state_dict_from_bytes(out)
    assert torch.equal(restored["proj.weight"], state_dict_from_bytes(b)["proj.weight"])


def test_identical_and_dense_changes_both_round_trip():
    a = state_dict_to_bytes({"x": torch.randn(1000).to(torch.bfloat16), "y": torch.zeros(10)})
    same = encode_delta(a, a)
    assert same.changed_elements == 0 and _sha(apply_delta(a, same.payload)) == _sha(a)
    b = state_dict_to_bytes({"x": torch.randn(1000).to(torch.bfloat16), "y": torch.zeros(10)})  # every value new
    dense = encode_delta(a, b)
    assert dense.density > 0.8 and _sha(apply_delta(a, dense.payload)) == _sha(b)


def test_segments_cover_every_byte_with_the_tensor_widths():
    data = state_dict_to_bytes({"a": torch.zeros(3, dtype=torch.bfloat16), "b": torch.zeros(2), "c": torch.zeros(5, dtype=torch.int8)})
    segs = segments(data)
    assert sum(s.length for s in segs) == len(data)
    assert sorted(s.itemsize for s in segs[1:]) == [1, 2, 4]


def test_changed_layout_gives_no_delta():
    a = state_dict_to_bytes({"x": torch.zeros(8)})
    assert encode_delta(a, state_dict_to_bytes({"x": torch.zeros(9)})) is None
    assert encode_delta(a, state_dict_to_bytes({"z": torch.zeros(8)})) is None


def test_delta_against_another_base_is_refused_by_the_target_hash():
    s0, s1, s2 = (state_dict_to_bytes(sd) for sd in _policy_states(3))
    encoded = encode_delta(s1, s2)
    spec = DeltaSpec(1, _sha(s1), _sha(s2), len(s2))
    assert _sha(apply_verified(s1, encoded.payload, spec)) == _sha(s2)
    with pytest.raises(DeltaError, match="not the signed target"):
        apply_verified(s0, encoded.payload, spec)  # same layout, other bytes: applies, wrong result
    with pytest.raises(DeltaError):
        apply_verified(s1, encoded.payload[:-7], spec)  # truncated payload


def test_forged_or_altered_delta_manifest_is_refused():
    s1, s2 = (state_dict_to_bytes(sd) for sd in _policy_states(2))
    payload = encode_delta(s1, s2).payload
    learner, rogue = new_signing_key(), new_signing_key()
    spec = DeltaSpec(1, _sha(s1), _sha(s2), len(s2))
    manifest = build_manifest(payload, 2, 4096, spec.to_metadata(), public_key=learner.public_key())
    wire = sign_manifest(manifest, learner)
    assert DeltaSpec.from_metadata(verify_manifest(wire, learner.public_key()).metadata) == spec
    with pytest.raises(ManifestError, match="does not verify"):
        verify_manifest(sign_manifest(manifest, rogue), learner.public_key())  # signed by someone else
    altered = wire.replace(b'"base_version":1', b'"base_version":0')
    assert altered != wire
    with pytest.raises(ManifestError, match="does not verify"):
        verify_manifest(altered, learner.public_key())  # a relay re-pointing the base


# ---- decision rule ----------------------------------------------------------------------------------
def test_decision_full_for_new_workers_missed_versions_keyframes_and_large_deltas():
    assert choose_base(["a"], {}, held={1})[0] is None  # a new worker alone: nothing to delta against
    assert choose_base(["a", "b"], {"a": [3, 4], "b": [4]}, held={2, 3, 4}) == (4, "delta")
    # two of three missed versions: a full snapshot for everyone; one of four: it alone fetches the full one
    assert choose_base(["a", "b", "c"], {"a": [3, 4], "b": [1, 2], "c": [1]}, held={2, 3, 4})[0] is None
    base, why = choose_base(["a", "b", "c", "d"], {"a": [3, 4], "b": [3, 4], "c": [3, 4], "d": [1]}, held={2, 3, 4})
    assert base == 4 and "d" in why and "fetches the full snapshot" in why
    assert choose_base(["a"], {"a": [1]}, held={2})[0] is None  # the learner no longer holds a's base

    snaps = [state_dict_to_bytes(sd) for sd in _policy_states(4)]
    pub = DeltaPublisher(DeltaPolicy(keyframe_every=3))
    kinds = []
    for v, data in enumerate(snaps, start=1):
        installs = {"a": list(range(1, v))}
        kinds.append(pub.prepare(data, _sha(data), v, ["a"], installs, None).publication.kind)
    assert kinds == ["full", "delta", "delta", "full"]  # first: nothing installed; 4th: keyframe
    tight = DeltaPublisher(DeltaPolicy(max_fraction=1e-6))
    tight.prepare(snaps[0], _sha(snaps[0]), 1, ["a"], {}, None)
    second = tight.prepare(snaps[1], _sha(snaps[1]), 2, ["a"], {"a": [1]}, None).publication
    assert second.kind == "full" and "of the full snapshot" in second.reason


# ---- through the chain (thread-hosted endpoints) ------------------------------------------------
class _Run:
    """A learner broadcaster with deltas on and ``n`` worker endpoints on loopback."""

    def __init__(self, n: int) -> None:
        self.learner = LearnerBroadcaster(topology="chain", uplink_mbps=800, worker_mbps=400, stall_timeout_s=1.0,
                                          delta=DeltaPolicy())
        self.workers: dict[str, WorkerBroadcastEndpoint] = {}
        for i in range(n):
            self.add(f"w{i}")

    def add(self, wid: str) -> WorkerBroadcastEndpoint:
        endpoint = WorkerBroadcastEndpoint(wid, self.learner.control_address, self.learner.public_key,
                                           self.learner.credential_for(wid), stall_timeout_s=1.0)
        self.workers[wid] = endpoint
        self.learner.wait_registered([wid])
        return endpoint

    def publish(self, state_dict: dict, version: int, ids: list[str] | None = None) -> dict:
        ids = ids or list(self.workers)
        self.learner.publish(state_dict, version, ids)
        self.learner.wait(version, timeout_s=60)
        report = self.learner.progress(version)
        expected = _sha(state_dict_to_bytes(state_dict))
        for w in ids:  # every installed snapshot is bit for bit the full one
            got, sd = self.workers[w].wait_installed(version, timeout_s=30)
            assert got == version and _sha(self.workers[w].bases.bases[version][0]) == expected, w
            assert torch.equal(sd["proj.weight"], state_dict["proj.weight"])
        return report

    def close(self) -> None:
        for endpoint in self.workers.values():
            endpoint.close()
        self.learner.close()


@pytest.fixture
def run3():
    run = _Run(3)
    yield run
    run.close()


def test_deltas_install_bit_for_bit_and_cost_a_fraction(run3):
    states = _policy_states(4)
    first = run3.publish(states[0], 1)
    assert first["snapshot"] == "full" and "installed no version" in first["snapshot_reason"]
    for v in (2, 3, 4):
        report = run3.publish(states[v - 1], v)
        assert report["snapshot"] == "delta" and report["delta_base"] == v - 1, report
        assert report["bytes_sent"] < report["bytes_full"] / 4
        assert report["delta_fallbacks"] == 0 and not report["failed"]


def test_worker_without_the_base_fetches_the_full_snapshot(run3):
    states = _policy_states(2)
    run3.publish(states[0], 1)
    run3.workers["w1"].bases.clear()  # w1 lost its base (the learner does not know)
    report = run3.publish(states[1], 2)
    assert report["snapshot"] == "delta" and report["delta_fallbacks"] == 1
    assert report["bytes_fallback"] == report["bytes_full"]
    assert run3.learner.coordinator.broadcasts[2].installed["w1"]["delta_fallback"].startswith("base version 1")


def test_late_joiner_gets_a_full_snapshot(run3):
    states = _policy_states(3)
    run3.publish(states[0], 1)
    assert run3.publish(states[1], 2)["snapshot"] == "delta"
    run3.add("w3")  # one late joiner of four: the others get the delta, it fetches the full snapshot alone
    report = run3.publish(states[2], 3)
    assert report["snapshot"] == "delta" and report["delta_fallbacks"] == 1, report
    assert run3.learner.coordinator.broadcasts[3].installed["w3"]["delta_fallback"].startswith("base version 2")
    run3.add("w4")
    run3.add("w5")  # two of six hold nothing: a full snapshot for everyone
    states = _policy_states(4)
    report = run3.publish(states[3], 4)
    assert report["snapshot"] == "full" and "w4 has installed no version yet" in report["snapshot_reason"]
    assert report["bytes_sent"] == report["bytes_full"]


# ---- delta bytes are verified hop by hop like any snapshot (the benchmark machinery) ---------------
def _delta_payload() -> tuple[bytes, dict]:
    s1, s2 = (state_dict_to_bytes(sd) for sd in _policy_states(2))
    payload = encode_delta(s1, s2).payload
    return payload, DeltaSpec(1, _sha(s1), _sha(s2), len(s2)).to_metadata()


FAST = {"worker_mbps": 300, "uplink_mbps": 600, "hosts": 0, "report_digest": True, "stall_timeout_s": 1.0, "install": "none",
            "chunk_kb": 4}


def test_corrupted_delta_chunk_is_refused_before_forwarding():
    payload, metadata = _delta_payload()
    result = run_broadcast(BroadcastConfig(workers=4, size_mb=len(payload) / 2**20, stripes=1, payload=payload,
                                           metadata=metadata, faults={"w1": {"corrupt_chunks": [1]}}, **FAST))
    workers = result["per_worker"]
    assert workers["w2"]["rejected_chunks"] == 1 and workers["w3"]["rejected_chunks"] == 0
    assert all(p["sha256"] == result["manifest_sha256"] == _sha(payload) for p in workers.values())


def test_forged_delta_manifest_is_refused_by_every_worker():
    payload, metadata = _delta_payload()
    result = run_broadcast(BroadcastConfig(workers=4, size_mb=len(payload) / 2**20, stripes=2, payload=payload,
                                           metadata=metadata, forge_manifest=True, **FAST))
    assert result["installed_workers"] == 0
    assert all("refused" in p["failure"] for p in result["per_worker"].values())


def test_doctests():
    import doctest

    from echo2_sdk.runtime.broadcast import delivery, delta, delta_plan

    for module in (delta, delta_plan, delivery):
        assert doctest.testmod(module).failed == 0, module.__name__


# ---- a training run with deltas (Ray, tiny model) ---------------------------------------------------
@pytest.mark.slow
def test_training_run_with_deltas_reports_bytes_per_publish(tmp_path, ray_cluster):
    import json

    from echo2_sdk.runtime.driver.trainer import Trainer

    from echo2_sdk.config import load_config

    # Sync mode: every publish is installed before the next, so versions 2.. are deltas deterministically.
    cfg = load_config(None, ["train.steps=4", "train.prompts_per_step=4", "rollout.samples_per_prompt=4",
                             "rollout.prompts_per_request=2", "rollout.max_new_tokens=4", "train.eval_max_examples=8",
                             "rollout.num_workers=2", "runtime.mode=sync", "model.dtype=bfloat16", "algo.lr=1e-6",
                             "broadcast.delta=true"])
    summary = Trainer(cfg, str(tmp_path / "d"), log=lambda m: None).fit()
    rows = [json.loads(line) for line in (tmp_path / "d" / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [1, 2, 3, 4]
    records = [json.loads(line) for line in (tmp_path / "d" / "broadcasts.jsonl").read_text().splitlines()]
    assert [r["version"] for r in records] == [1, 2, 3, 4]
    assert all(r["installed"] == 2 and not r["failed"] for r in records)
    assert records[0]["snapshot"] == "full" and records[0]["bytes_sent"] == records[0]["bytes_full"]
    assert [r["snapshot"] for r in records[1:]] == ["delta"] * 3
    assert all(r["bytes_sent"] < r["bytes_full"] / 4 and r["delta_fallbacks"] == 0 for r in records[1:])
    totals = summary["broadcast"]["snapshot_bytes"]
    assert totals["publishes"] == 4 and totals["deltas"] == 3
    assert totals["sent_bytes_total"] == sum(r["bytes_sent"] for r in records)
    assert totals["sent_fraction"] < 0.5


@pytest.mark.slow
def test_benchmark_quick_reports_bytes_times_and_verified_installs():
    import json
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parent.parent
    proc = subprocess.run([sys.executable, str(root / "benchmarks" / "delta_broadcast.py"), "--quick", "--json"],
                          check=False, cwd=root, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-4000:]
    result = json.loads(proc.stdout)
    assert result["bcast_full"]["installed_workers"] == result["links"]["workers"] == 4
    for run in result["runs"].values():
        assert run["deltas"] == run["publishes"] == 3 and run["all_installed_hashes_equal_full"]
        assert 0 < run["median_fraction"] < 0.5 and run["encode_s_median"] > 0 and run["apply_s_median"] > 0
        assert run["bcast_delta"]["installed_workers"] == 4
        assert run["bcast_delta"]["size_bytes"] < result["bcast_full"]["size_bytes"]
        assert set(run["by_gap"]) == {"1", "2"}


@pytest.mark.slow
def test_ray_actors_install_deltas_bit_for_bit(ray_cluster):
    import ray
    from echo2_sdk.runtime.broadcast.base import CONTROL
    from echo2_sdk.runtime.broadcast.ray_transport import (
        BroadcastReceiverMixin,
        P2PSnapshotTransport,
    )

    class ToyWorker(BroadcastReceiverMixin):
        """Stands in for RolloutWorker (same ``install`` contract); defined here so Ray ships it by value."""

        def __init__(self) -> None:
            self.digests: dict[int, str] = {}

        def install(self, state_dict: dict, version: int) -> int:
            from echo2_sdk.runtime.broadcast.snapshot import state_dict_to_bytes

            self.digests[version] = hashlib.sha256(state_dict_to_bytes(state_dict)).hexdigest()
            return version

        def digest(self, version: int) -> str:
            return self.digests[version]

    remote_cls = ray.remote(concurrency_groups={CONTROL: 1})(ToyWorker)
    actors = [remote_cls.options(num_cpus=0).remote() for _ in range(3)]
    transport = P2PSnapshotTransport(topology="chain", uplink_mbps=400, worker_mbps=200, delta=DeltaPolicy())
    try:
        for version, sd in enumerate(_policy_states(3), start=1):
            assert ray.get(transport.publish(sd, version, actors), timeout=60) == [version] * 3
            transport.wait(version, timeout_s=30)
            report = transport.progress(version)
            assert report["snapshot"] == ("full" if version == 1 else "delta") and report["delta_fallbacks"] == 0
            expected = _sha(state_dict_to_bytes(sd))
            assert ray.get([a.digest.remote(version) for a in actors]) == [expected] * 3
    finally:
        transport.close(actors)
