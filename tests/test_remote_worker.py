"""Rollout workers outside Ray: JSON-only replies, mutual authentication, the serve/proxy pair, and a
training run whose pool mixes a Ray worker with an `echo2 worker serve` process."""

import json
import os
import pickle
import re
import socket
import subprocess
import sys
import threading

import pytest

from echo2_sdk.records import group_from_wire, validate_group
from echo2_sdk.registry import make_task
from echo2_sdk.runtime.rollout.backends.base import SamplingParams
from echo2_sdk.runtime.models.modeling import ensure_tiny_qwen3
from echo2_sdk.runtime.rollout.codec import (
    MalformedReply, MalformedSettings, example_from_dict, example_to_dict, result_from_json, result_to_json,
    settings_from_dict, settings_to_dict,
)
from echo2_sdk.config import parse_endpoint
from echo2_sdk.runtime.rollout.remote.protocol import FramedSocket, ProtocolError, authenticate
from echo2_sdk.runtime.rollout.base import GenerationResult, WorkerSettings

TOKEN = "t" * 32


def _result(**changes):
    base = dict(worker="w", groups=[{"prompt_key": "a", "version": 2, "rollouts": []}], version=2, num_tokens=5,
                t_generate_s=0.1, t_reward_s=0.0, t_throttle_s=0.0, reward_status={"ok": 3}, installed={2: 17.5})
    return GenerationResult(**{**base, **changes})


# ---- codec ---------------------------------------------------------------------------------------
def test_result_round_trips_through_json():
    result = _result()
    assert result_from_json(result_to_json(result)) == result


@pytest.mark.parametrize("doc, reason", [
    (b"\x80\x04\x95", "not JSON"),
    (b"[1, 2]", "JSON object"),
    (json.dumps({**json.loads(result_to_json(_result())), "evil": 1}).encode(), "unknown fields"),
    (json.dumps({**json.loads(result_to_json(_result())), "version": -1}).encode(), "version"),
    (json.dumps({**json.loads(result_to_json(_result())), "groups": [3]}).encode(), "groups"),
    (json.dumps({**json.loads(result_to_json(_result())), "t_generate_s": "fast"}).encode(), "t_generate_s"),
    (json.dumps({**json.loads(result_to_json(_result())), "installed": {"x": 1}}).encode(), "installed"),
])
def test_malformed_replies_are_refused_with_the_reason(doc, reason):
    with pytest.raises(MalformedReply, match=reason):
        result_from_json(doc)


def test_a_pickled_reply_is_refused_not_unpickled():
    class Boom:
        def __reduce__(self):
            return (os.system, ("echo pwned > /dev/null",))

    with pytest.raises(MalformedReply, match="not JSON"):
        result_from_json(pickle.dumps(Boom()))


def test_examples_round_trip():
    ex = next(iter(make_task("arith").examples("train")))
    assert example_from_dict(json.loads(json.dumps(example_to_dict(ex)))) == ex
    with pytest.raises(MalformedReply):
        example_from_dict({"id": 3, "prompt": "x"})


# ---- protocol ------------------------------------------------------------------------------------
def _pair():
    a, b = socket.socketpair()
    return FramedSocket(a), FramedSocket(b)


def _auth_both(learner_token: bytes, worker_token: bytes):
    learner, worker = _pair()
    errors = {}

    def side(conn, token, role):
        try:
            authenticate(conn, token, role, timeout_s=5)
        except ProtocolError as exc:
            errors[role] = str(exc)
            conn.close()  # the real server drops a connection that failed authentication

    threads = [threading.Thread(target=side, args=(learner, learner_token, "learner")),
               threading.Thread(target=side, args=(worker, worker_token, "worker"))]
    [t.start() for t in threads]
    [t.join(10) for t in threads]
    return errors


def test_mutual_authentication():
    assert _auth_both(b"k" * 32, b"k" * 32) == {}
    errors = _auth_both(b"k" * 32, b"j" * 32)
    assert "failed authentication" in " ".join(errors.values())


def test_binary_payload_from_a_worker_is_refused():
    learner, worker = _pair()
    worker.send({"op": "reply", "id": 1}, b"\x00" * 8)
    with pytest.raises(ProtocolError, match="binary payload"):
        learner.recv(allow_payload=False)


def test_endpoint_parsing():
    assert parse_endpoint("10.0.0.2:7100") == ("10.0.0.2", 7100)
    for bad in ("10.0.0.2", ":7100", "host:99999", "host:x"):
        with pytest.raises(ValueError, match="HOST:PORT"):
            parse_endpoint(bad)


# ---- serve + proxy, no Ray -----------------------------------------------------------------------
@pytest.fixture(scope="module")
def served():
    """An in-process `echo2 worker serve` (one session, arith only) on a free port."""
    from echo2_sdk.runtime.rollout.remote.server import serve_worker

    ready = threading.Event()
    port = []

    def listening(p):
        port.append(p)
        ready.set()

    thread = threading.Thread(target=serve_worker, args=("127.0.0.1", 0, TOKEN.encode()),
                              kwargs=dict(allowed_tasks={"arith"}, once=False, log=lambda m: None,
                                          on_listening=listening), daemon=True)
    thread.start()
    assert ready.wait(10)
    return f"127.0.0.1:{port[0]}"


def settings(model_path: str, **changes) -> WorkerSettings:
    return WorkerSettings(**{**dict(model_path=model_path, task_name="arith", task_options={},
                                    sampling=SamplingParams(1.0, 1.0, 4, seed=0), samples_per_prompt=3, seed=0),
                             **changes})


def test_proxy_generates_installs_and_reports_through_json(served):
    from echo2_sdk.runtime.rollout.remote.proxy import RemoteWorkerProxy

    path = ensure_tiny_qwen3()
    proxy = RemoteWorkerProxy("far", settings(path), endpoint=served, token=TOKEN)
    try:
        assert proxy.ping() == "far"
        examples = list(make_task("arith").examples("train"))[:2]
        result = result_from_json(proxy.generate_wire([example_to_dict(e) for e in examples]))
        assert result.worker == "far" and result.version == 0
        groups = [group_from_wire(g) for g in result.groups]
        assert [g.prompt_key for g in groups] == [e.id for e in examples]
        for g in groups:
            accepted, rejected = validate_group(g, newest_version=0)
            assert len(accepted) == 3 and not rejected
        # A snapshot travels learner -> worker as safetensors bytes and is applied before the next batch.
        from safetensors.torch import load_file

        weights = load_file(os.path.join(path, "model.safetensors"))
        assert proxy.install({k: v + 0.01 for k, v in weights.items()}, 5) == 5
        after = result_from_json(proxy.generate_wire([example_to_dict(examples[0])]))
        assert after.version == 5 and 5 in after.installed
        stats = proxy.stats()
        assert stats["version"] == 5 and "ray_loaded" in stats  # False in a real `echo2 worker serve` process
    finally:
        proxy.close()


def test_wrong_token_and_disallowed_task_are_refused(served):
    from echo2_sdk.runtime.rollout.remote.proxy import RemoteWorkerError, RemoteWorkerProxy

    with pytest.raises(ProtocolError, match="failed authentication"):
        RemoteWorkerProxy("x", settings(ensure_tiny_qwen3()), endpoint=served, token="w" * 32)
    with pytest.raises(RemoteWorkerError, match="not allowed"):
        RemoteWorkerProxy("y", settings(ensure_tiny_qwen3(), task_name="aime24"), endpoint=served, token=TOKEN)


def test_unreachable_endpoint_names_the_fix():
    from echo2_sdk.runtime.rollout.remote.proxy import RemoteWorkerProxy

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        free = s.getsockname()[1]
    with pytest.raises(ConnectionError, match="echo2 worker serve"):
        RemoteWorkerProxy("z", settings("x"), endpoint=f"127.0.0.1:{free}", token=TOKEN)


# ---- a training run with one Ray worker and one remote worker ------------------------------------
@pytest.mark.slow
def test_training_pool_mixes_a_ray_worker_and_a_remote_worker(tmp_path, ray_cluster, monkeypatch):
    from echo2_sdk.config import load_config
    from echo2_sdk.runtime.driver.trainer import Trainer

    monkeypatch.setenv("ECHO2_WORKER_TOKEN", TOKEN)
    with socket.socket() as s:  # the snapshot port the remote machine would open in its firewall
        s.bind(("127.0.0.1", 0))
        chunk_port = s.getsockname()[1]
    server = subprocess.Popen(
        [sys.executable, "-m", "echo2_sdk.runtime.cli", "worker", "serve", "--listen", "127.0.0.1:0", "--once",
         "--advertise-host", "127.0.0.1", "--broadcast-ports", f"{chunk_port}-{chunk_port}"],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env={**os.environ, "OMP_NUM_THREADS": "1"})
    try:
        line = server.stdout.readline()
        port = int(re.search(r"listening on 127\.0\.0\.1:(\d+)", line).group(1))
        cfg = load_config(None, [
            "train.steps=4", "train.prompts_per_step=4", "rollout.samples_per_prompt=4",
            "rollout.prompts_per_request=2", "rollout.max_new_tokens=4", "train.eval_max_examples=4",
            f"rollout.workers=[{{name: local}}, {{name: far, endpoint: '127.0.0.1:{port}'}}]",
            "rollout.reward_audit_fraction=1.0",  # the learner re-scores every remote sample
        ])
        trainer = Trainer(cfg, str(tmp_path / "run"), log=lambda m: None)
        summary = trainer.fit()
    finally:
        server.terminate()
        out = server.communicate(timeout=30)[0]
    workers = {w["name"]: w for w in summary["workers"]}
    assert workers["far"]["samples"] > 0 and workers["far"]["errors"] == 0, out
    assert sum(w["samples"] for w in workers.values()) >= 4 * 4 * 4
    # Its rollouts were trained on and its log-probs agree with the learner's (same numerics here).
    far = summary["sampler_agreement"]["workers"]["far"]
    assert far["same_version"]["tokens"] + far["older_versions"]["tokens"] > 0 and not summary["sampler_agreement"]["flagged"]
    # Every snapshot went down the P2P chain to the remote worker too.
    deliveries = [json.loads(l) for l in (tmp_path / "run" / "broadcasts.jsonl").read_text().splitlines()]
    done = [d for d in deliveries if d["superseded_by"] is None]
    assert done and all({"local", "far"} <= set(d["installed_s"]) for d in done), deliveries
    assert "learner connected" in out and "Ray loaded in this process: False" in out
    audit = summary["reward_audit"]  # an honest worker: every recomputed reward matches
    assert audit["workers"] == ["far"] and audit["checked"]["far"] == workers["far"]["samples"]
    assert audit["mismatched_groups"] == {} and audit["evicted"] == []


def test_a_reply_speaking_for_another_worker_is_rejected_and_counted():
    """Per-worker accounting trusts worker names, so a worker may not hand in groups under another's."""
    from types import SimpleNamespace

    from echo2_sdk.records import Omega, RecordLimits, Rollout, RolloutGroup, group_to_wire
    from echo2_sdk.runtime.admission.gate import AdmissionGate

    def group(worker_id, meta_worker):
        rollout = Rollout(prompt_ids=(1, 2), completion_ids=(3,), reward=1.0, version=0, omega=Omega((1,), None),
                          sampler_logprobs=(-0.5,), prompt_key="p", meta={"worker": meta_worker})
        return group_to_wire(RolloutGroup("p", 0, (rollout,), worker_id=worker_id))

    gate = AdmissionGate(staleness=3, limits=RecordLimits(), audit=SimpleNamespace(check=lambda group: True))
    result = _result(worker="a", groups=[group("a", "a"), group("b", "b"), group("a", "b")], installed={})
    # The reply arrives through a result_from_json round trip, as every worker's reply does.
    gate.admit("a", result_from_json(result_to_json(result)), newest_version=0, learner_version=0)
    assert gate.counters.accepted == 1
    assert gate.counters.reject_reasons["wrong_worker"] == 2 and gate.counters.rejected == 2


# ---- worker settings (learner -> worker) -------------------------------------------------------------
def test_worker_settings_round_trip_through_json():
    from echo2_sdk.config import VLLMOptions

    for value in (settings("m"), settings("m", backend="vllm", vllm_options=VLLMOptions(max_model_len=256),
                                          max_tokens_per_s=40.0, task_options={"digits": 2})):
        assert settings_from_dict(json.loads(json.dumps(settings_to_dict(value)))) == value


@pytest.mark.parametrize("change, reason", [
    (lambda d: {**d, "evil": 1}, "unknown fields"),
    (lambda d: {k: v for k, v in d.items() if k != "task_name"}, "lack fields"),
    (lambda d: {**d, "samples_per_prompt": "3"}, "samples_per_prompt"),
    (lambda d: {**d, "seed": True}, "seed"),
    (lambda d: {**d, "task_options": [1]}, "task_options"),
    (lambda d: {**d, "sampling": {**d["sampling"], "beam": 4}}, "sampling has unknown fields"),
    (lambda d: {**d, "sampling": {**d["sampling"], "max_new_tokens": 4.5}}, "sampling.max_new_tokens"),
    (lambda d: {**d, "sampling": {**d["sampling"], "top_p": 0.0}}, "top_p"),
    (lambda d: {**d, "vllm_options": {"swap_space": 4}}, "vllm_options has unknown fields"),
    (lambda d: {**d, "vllm_options": {"gpu_memory_utilization": 2.0}}, "gpu_memory_utilization"),
    (lambda d: {**d, "max_tokens_per_s": -1}, "max_tokens_per_s"),
    (lambda d: [d], "JSON object"),
])
def test_malformed_worker_settings_are_refused_with_the_reason(change, reason):
    with pytest.raises(MalformedSettings, match=reason):
        settings_from_dict(change(settings_to_dict(settings("m"))))
