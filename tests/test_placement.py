"""Multi-node placement without a cluster: config fields, the learner-placement rule, the broadcast's
port range and bind host, node ids without Ray, and shipping a local model folder."""

import asyncio
import socket
import sys

import pytest

from echo2_sdk.config import ConfigError, load_config, to_dict


def test_resource_fields_load_round_trip_and_default_empty():
    cfg = load_config(None, [
        "runtime.learner_resources={learner: 1}",
        "rollout.worker_resources={rollout: 1}",
        "rollout.workers=[{name: a, resources: {node_a: 1}}, {name: b}]",
        "broadcast.port_range=[47000, 47099]",
    ])
    assert cfg.runtime.learner_resources == {"learner": 1}
    assert cfg.rollout.worker_resources == {"rollout": 1}
    assert [w.resources for w in cfg.rollout.workers] == [{"node_a": 1}, {}]
    assert cfg.broadcast.port_range == (47000, 47099)
    d = to_dict(cfg)
    assert d["rollout"]["workers"][0]["resources"] == {"node_a": 1} and d["broadcast"]["port_range"] == [47000, 47099]
    default = load_config(None, [])
    assert default.runtime.learner_resources == {} and default.rollout.worker_resources == {}
    assert default.broadcast.bind_host is None and default.broadcast.port_range is None


@pytest.mark.parametrize("override, message", [
    ("runtime.learner_resources={learner: 0}", "learner=0 must be a number > 0"),
    ("runtime.learner_resources={learner: many}", "must be a number > 0"),
    ("rollout.worker_resources={GPU: 1}", "'GPU' is not a custom resource"),
    ("rollout.workers=[{name: a, resources: {node_a: -1}}]", "worker 'a': resources: node_a=-1"),
    ("broadcast.port_range=[47010, 47000]", "broadcast.port_range=\\[47010, 47000\\] must be"),
    ("broadcast.port_range=[47000]", "broadcast.port_range: \\[47000\\] is not a valid tuple"),
    ("runtime.learner_resource={learner: 1}", "Did you mean 'runtime.learner_resources'"),
    ("rollout.workers=[{name: a, resource: {x: 1}}]", "resources"),
])
def test_bad_placement_config_is_rejected_with_the_path(override, message):
    with pytest.raises(ConfigError, match=message):
        load_config(None, [override])


def test_learner_is_placed_only_when_asked():
    from echo2_sdk.runtime.driver.launch import learner_placement

    assert learner_placement(load_config(None, [])) is None
    assert learner_placement(load_config(None, []), "head:6379") is None  # CPU learner: runs in echo2 train
    gpu = load_config(None, ["runtime.require_gpus=1"])
    assert learner_placement(gpu) is None  # local cluster: this machine must have the GPU
    assert learner_placement(gpu, "head:6379") == {"num_cpus": 0, "num_gpus": 1, "resources": None}
    placed = load_config(None, ["runtime.learner_resources={learner: 1}"])
    assert learner_placement(placed) == {"num_cpus": 0, "num_gpus": 0, "resources": {"learner": 1}}


def test_bind_host_is_loopback_locally_and_all_interfaces_when_joining(monkeypatch):
    import ray

    from echo2_sdk.runtime.driver import setup

    monkeypatch.setattr(ray, "nodes", lambda: [{"Alive": True}])
    cfg = load_config(None, [])
    assert setup.broadcast_bind_host(cfg) == "127.0.0.1"
    assert setup.broadcast_bind_host(cfg, "head:6379") == "0.0.0.0"
    assert setup.broadcast_bind_host(load_config(None, ["runtime.ray_address=auto"])) == "0.0.0.0"
    assert setup.broadcast_bind_host(load_config(None, ["broadcast.bind_host=127.0.0.1"]), "head:6379") == "127.0.0.1"
    monkeypatch.setattr(ray, "nodes", lambda: [{"Alive": True}, {"Alive": True}])
    assert setup.broadcast_bind_host(cfg) == "0.0.0.0"  # a multi-node cluster started some other way


def test_listeners_take_the_first_free_ports_of_the_range():
    from echo2_sdk.runtime.broadcast.endpoints import listen_in_range

    async def main():
        taken = socket.socket()
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        first = taken.getsockname()[1]
        servers = []

        async def start(port):
            server = await asyncio.start_server(lambda r, w: None, "127.0.0.1", port)
            servers.append(server)
            return server.sockets[0].getsockname()[1]

        try:
            assert await listen_in_range(start, None) > 0
            got = await listen_in_range(start, (first, first + 50))
            assert first < got <= first + 50  # the taken port was skipped
            with pytest.raises(OSError, match="no free port in broadcast.port_range"):
                await listen_in_range(start, (first, first))
        finally:
            taken.close()
            for s in servers:
                s.close()

    asyncio.run(main())


def test_node_id_is_the_hostname_outside_ray(monkeypatch):
    from echo2_sdk.runtime.rollout.worker import GenerationResult, current_node_id

    monkeypatch.delitem(sys.modules, "ray", raising=False)
    assert current_node_id() == socket.gethostname()
    assert "ray" not in sys.modules  # asking does not import Ray
    assert GenerationResult("w", [], 0, 0, 0.0, 0.0, 0.0).node == ""


def test_a_model_folder_missing_on_a_node_is_written_from_the_shipped_copy(tmp_path, monkeypatch):
    from echo2_sdk.runtime.models import files as model_files

    src = tmp_path / "base_model"
    (src / "sub").mkdir(parents=True)
    (src / "config.json").write_text("{}")
    (src / "sub" / "tok.json").write_bytes(b"\x00\x01")
    payload = {"source": str(src), "files": {"config.json": b"{}", "sub/tok.json": b"\x00\x01"}}

    class FakeRay:
        @staticmethod
        def get(ref):
            return ref

    monkeypatch.setitem(sys.modules, "ray", FakeRay)
    monkeypatch.setenv("ECHO2_MODEL_CACHE", str(tmp_path / "cache"))
    assert model_files.materialize(str(src), [payload]) == str(src)  # present here: used as is
    assert model_files.materialize(str(src), None) == str(src)
    elsewhere = model_files.materialize(str(tmp_path / "on-another-node"), [payload])
    assert elsewhere.startswith(str(tmp_path / "cache" / "base_model-"))
    assert (tmp_path / "cache").joinpath(elsewhere, "sub", "tok.json").read_bytes() == b"\x00\x01"
    assert model_files.materialize(str(tmp_path / "gone"), [payload]) == elsewhere  # once per node
