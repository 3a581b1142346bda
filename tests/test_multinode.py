"""A multi-node Ray cluster on this machine (``ray.cluster_utils.Cluster``): a head node with the
learner resource and two rollout nodes with distinct custom resources. A short real training run
joins it by address (as ``echo2 train --ray-address`` does): the learner is placed on the head node,
one rollout worker on each rollout node, snapshots travel in a P2P chain between them.
"""

import json

import pytest

from echo2_sdk.config import load_config

pytestmark = pytest.mark.slow

RUN = [
    "train.steps=6",
    "train.prompts_per_step=4",
    "rollout.samples_per_prompt=4",
    "rollout.prompts_per_request=2",
    "rollout.max_new_tokens=4",
    "train.eval_max_examples=4",
    "train.checkpoint_every=0",
    "train.plots=false",
    "runtime.mode=async",
    "runtime.staleness=3",  # κ = 2: versions 2, 4, 6 are published
    "broadcast.transport=p2p",
    "broadcast.topology=chain",
    "runtime.learner_resources={learner: 1}",
    "rollout.worker_resources={rollout: 1}",
    "rollout.workers=[{name: wa, resources: {node_a: 1}}, {name: wb, resources: {node_b: 1}}]",
]


@pytest.fixture(scope="module")
def three_node_cluster():
    import ray
    from ray.cluster_utils import Cluster

    if ray.is_initialized():  # a module-scoped cluster of another test module must not be joined
        ray.shutdown()
    cluster = Cluster(initialize_head=True,
                      head_node_args={"num_cpus": 1, "resources": {"learner": 1}, "include_dashboard": False})
    try:
        nodes = {
            "head": cluster.head_node,
            "a": cluster.add_node(num_cpus=1, resources={"rollout": 2, "node_a": 1}),
            "b": cluster.add_node(num_cpus=1, resources={"rollout": 2, "node_b": 1}),
        }
        cluster.wait_for_nodes()
        yield cluster, {k: n.node_id for k, n in nodes.items()}
    finally:
        ray.shutdown()  # the run disconnects itself; this covers a failure before it did
        cluster.shutdown()


def test_learner_and_workers_placed_by_resources_and_chain_broadcast_crosses_nodes(tmp_path, three_node_cluster):
    import ray

    from echo2_sdk.runtime.driver.launch import train

    cluster, node = three_node_cluster
    cfg = load_config(None, RUN)
    logs: list[str] = []
    summary = train(cfg, str(tmp_path / "run"), ray_address=cluster.address, log=logs.append)
    assert not ray.is_initialized()  # the run joined by address and disconnected at the end

    # The learner ran on the head node (the only one with the `learner` resource) ...
    assert summary["learner_node"] == node["head"], logs
    # ... and each worker's actor on the node its own resource names; its rollouts say so.
    workers = {w["name"]: w for w in summary["workers"]}
    assert {n: w["node"] for n, w in workers.items()} == {"wa": node["a"], "wb": node["b"]}
    assert all(w["samples"] > 0 and not w["dead"] for w in workers.values())
    by_node = summary["samples_trained_by_node"]
    assert set(by_node) == {node["a"], node["b"]}, by_node  # trained rollouts came from two Ray nodes
    assert sum(by_node.values()) == 6 * 4 * 4

    # The chain broadcast delivered every published version across the nodes to both workers.
    run_dir = tmp_path / "run"
    deliveries = [json.loads(line) for line in (run_dir / "broadcasts.jsonl").read_text().splitlines()]
    assert [d["version"] for d in deliveries] == [2, 4, 6]
    assert [r["version"] for r in summary["broadcast"]["by_version"]] == [2, 4, 6]
    assert summary["broadcast"]["transport"] == "p2p" and summary["broadcast"]["topology"] == "chain"
    for d in deliveries:
        assert not d["failed"], d
        if d["superseded_by"] is None:
            assert set(d["installed_s"]) == {"wa", "wb"}, d
            assert 0 < d["t_bcast_s"] <= d["t_all_s"]
    installed = {(w, v) for w, v, _ in json.loads((run_dir / "summary.json").read_text()).get("installs", [])}
    if installed:  # the per-worker install log, when the summary carries it
        assert {("wa", 6), ("wb", 6)} <= installed
    assert json.loads((run_dir / "summary.json").read_text())["steps"] == 6


def test_unplaceable_worker_fails_fast_with_the_fix(tmp_path, three_node_cluster):
    from echo2_sdk.runtime.driver.launch import train
    from echo2_sdk.runtime.driver.setup import ResourceError

    cluster, _ = three_node_cluster
    cfg = load_config(None, ["rollout.workers=[{name: w0, resources: {gpu_box: 1}}]", "train.steps=1"])
    with pytest.raises(ResourceError, match="gpu_box.*no node of the cluster offers them"):
        train(cfg, str(tmp_path / "run"), ray_address=cluster.address, log=lambda m: None)


def test_a_run_without_an_address_starts_its_own_ray_beside_a_running_cluster(three_node_cluster):
    # The cluster above is the newest on this machine (Ray records it), which a bare ray.init() would join.
    import subprocess
    import sys

    cluster, _ = three_node_cluster
    probe = ("import ray; from echo2_sdk.config import Echo2Config; from echo2_sdk.runtime.driver import setup; "
             "owns = setup.init_ray(Echo2Config(), None); "
             "print('GCS', owns, ray.get_runtime_context().gcs_address); setup.shutdown_ray()")
    proc = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=180)
    assert proc.returncode == 0, proc.stderr[-3000:]
    [line] = [line for line in proc.stdout.splitlines() if line.startswith("GCS ")]
    _, owns, address = line.split()
    assert owns == "True" and address != cluster.address, line
