"""How long a snapshot broadcast takes, for the planner and the simulator (a model, not the transport).

The chain/star structure comes from the runtime's broadcast planner
(:func:`echo2_sdk.runtime.broadcast.topology.plan_broadcast`); this module only turns a plan into time.
With G the snapshot size, B0 the learner's uplink and Bw the slowest worker link (megabits/s):

* ``chain`` (peer-assisted, pipelined): k stripes each stream at rate r = min(B0/k, Bw) down chains of
  length L; T ≈ G/r + (L − 1)·c/r + L·latency, close to G/Bw whatever N is;
* ``star`` (NoP2P): the learner sends to all N at once, r = min(B0/N, Bw); T ≈ G/r + latency, which
  grows as N·G/B0 once N·Bw > B0;
* ``fixed``: a measured or assumed constant T_bcast.
"""

from __future__ import annotations

import math

from echo2_sdk.runtime.broadcast.topology import plan_broadcast

MEGABITS_PER_GB = 8000.0  # 1 GB = 1e9 bytes = 8000 megabits


def broadcast_time_s(topology: str, num_workers: int, *, snapshot_gb: float, learner_uplink_mbps: float,
                     worker_mbps: float, hop_latency_s: float = 0.0, fixed_t_bcast_s: float = 0.0) -> float:
    """T_bcast in seconds for ``num_workers`` receivers (0 receivers → 0 s)."""
    if topology == "fixed":
        return fixed_t_bcast_s
    if num_workers <= 0:
        return 0.0
    if not (snapshot_gb > 0 and learner_uplink_mbps > 0 and worker_mbps > 0):
        raise ValueError(f"broadcast model needs snapshot_gb, learner_uplink_mbps and worker link > 0; got "
                         f"{snapshot_gb!r}, {learner_uplink_mbps!r}, {worker_mbps!r}")
    size_bytes = int(snapshot_gb * 1e9)
    names = [f"w{i}" for i in range(num_workers)]
    plan = plan_broadcast(names, size_bytes, topology, uplink_mbps=learner_uplink_mbps, worker_mbps=worker_mbps)
    rate = plan.stripe_mbps
    megabits = snapshot_gb * MEGABITS_PER_GB
    if topology == "star":
        return megabits / rate + hop_latency_s
    length = plan.notes.get("chain_length", math.ceil(num_workers / plan.stripes))
    chunk_megabits = plan.chunk_size * 8 / 1e6
    return megabits / rate + (length - 1) * chunk_megabits / rate + length * hop_latency_s


def single_download_s(snapshot_gb: float, learner_uplink_mbps: float, downlink_mbps: float) -> float:
    """A late joiner fetching the current snapshot on its own: G / min(B0, its downlink)."""
    return snapshot_gb * MEGABITS_PER_GB / min(learner_uplink_mbps, downlink_mbps)
