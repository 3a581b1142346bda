"""The P2P broadcast as the rollout pool's ``SnapshotTransport``: Ray starts the worker nodes and
carries the completion handles; the snapshot itself travels worker to worker over TCP."""

from __future__ import annotations

import pytest
import torch

ray = pytest.importorskip("ray")

from echo2_sdk.runtime.broadcast.ray_transport import BroadcastReceiverMixin, P2PSnapshotTransport  # noqa: E402
from echo2_sdk.runtime.broadcast.base import CONTROL  # noqa: E402


@pytest.mark.slow
def test_p2p_transport_delivers_every_version_to_every_actor():
    class ToyWorker(BroadcastReceiverMixin):
        """Stands in for RolloutWorker: same ``install`` contract, no model. Defined here so Ray
        ships it by value (the workers cannot import test modules)."""

        def __init__(self) -> None:
            self.installed: dict[int, dict] = {}

        def install(self, state_dict: dict, version: int) -> int:
            self.installed[version] = {k: v.clone() for k, v in state_dict.items()}
            return version

        def checksum(self, version: int) -> float:
            return float(sum(t.double().sum() for t in self.installed[version].values()))

    ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False)
    transport = None
    try:
        remote_cls = ray.remote(concurrency_groups={CONTROL: 1})(ToyWorker)
        actors = [remote_cls.options(num_cpus=0).remote() for _ in range(3)]
        transport = P2PSnapshotTransport(topology="chain", uplink_mbps=400, worker_mbps=200, emulate_worker_links=True)
        for version in (1, 2):
            sd = {"w": torch.full((256, 256), float(version)), "b": torch.arange(10, dtype=torch.int64)}
            handles = transport.publish(sd, version, actors)
            assert ray.get(handles, timeout=60) == [version] * 3
            expected = float(sum(t.double().sum() for t in sd.values()))
            assert ray.get([a.checksum.remote(version) for a in actors]) == [expected] * 3
            report = transport.wait(version, timeout_s=30)
            assert sorted(report["installed_s"]) == ["w0", "w1", "w2"] and not report["failed"]
        assert transport.last_publish["workers"] == ["w0", "w1", "w2"]
    finally:
        if transport is not None:
            transport.close()
        ray.shutdown()
