"""Learner ranks as Ray actors, and the driver-side face that makes them look like one learner.

Why Ray actors and not torchrun: the driver already runs a Ray cluster for the rollout plane, so ranks
are placed with the same resource model (a placement group packing ``num_ranks`` bundles of
``learner.gpus_per_rank`` GPUs onto one node, next to ``runtime.learner_resources``), die with the run,
and need no second launcher around ``echo2 train``. The ranks form their own torch process group
(NCCL on GPUs, gloo on CPU); the driver sends every rank the same batch (one object in Ray's store)
and each rank trains its share (``runtime.learning.learner``). Rank 0 returns the metrics, the
gathered snapshot and writes checkpoints.
"""

from __future__ import annotations

import socket
from typing import Callable

import ray
import torch
from torch import Tensor

from echo2_sdk.runtime.learning.base import TrainBatch
from echo2_sdk.runtime.learning.spec import LearnerSpec


class LearnerRank:
    """One rank: joins the process group, builds its shard of the learner, serves the driver's calls."""

    def __init__(self, rank: int, world_size: int, spec: LearnerSpec, threads: int) -> None:
        torch.set_num_threads(threads)
        self.rank, self.world_size, self.spec = rank, world_size, spec
        self.learner = None

    def address(self) -> tuple[str, int]:
        """Host and a free port for the process group's rendezvous (asked of rank 0)."""
        host = ray.util.get_node_ip_address()
        with socket.socket() as s:
            s.bind(("", 0))
            return host, s.getsockname()[1]

    def join(self, host: str, port: int, backend: str, timeout_s: float) -> str:
        from echo2_sdk.runtime.learning import sharding
        from echo2_sdk.runtime.models.modeling import quiet_libraries

        quiet_libraries()
        use_cuda = torch.cuda.is_available() and backend != "gloo"
        group = sharding.init_rank_group(self.rank, self.world_size, host, port,
                                         backend=None if backend == "auto" else backend, timeout_s=timeout_s)
        lines: list[str] = []
        self.learner, _ = self.spec.build("cuda" if use_cuda else "cpu", group, log=lines.append)
        return "\n".join(lines)

    def train_step(self, batch: TrainBatch) -> tuple[dict[str, float], dict[str, Tensor] | None, int]:
        metrics = self.learner.train_step(batch)
        return metrics, (self.learner.last_agreement if self.rank == 0 else None), self.learner.num_optimizer_steps

    def rollout_state(self) -> dict[str, Tensor]:
        return self.learner.state_dict_for_rollout()

    def save_checkpoint(self, path: str, extra: dict) -> None:
        self.learner.save_checkpoint(path, extra)

    def load_checkpoint(self, path: str) -> tuple[dict, int, int]:
        extra = self.learner.load_checkpoint(path)
        return extra, self.learner.version, self.learner.num_optimizer_steps

    def close(self) -> None:
        import torch.distributed as dist

        if dist.is_initialized():
            dist.destroy_process_group()


class RankedLearner:
    """``num_ranks`` :class:`LearnerRank` actors behind the in-process learner's methods.

    ``train_step``, ``state_dict_for_rollout``, ``save_checkpoint`` / ``load_checkpoint``, ``version``
    and ``last_agreement`` behave as on ``Learner``; ``evaluation_model()`` is a local copy of the
    current weights (in ``model.dtype``) for held-out evaluation in the driver.
    """

    def __init__(self, spec: LearnerSpec, *, gpus_per_rank: float, resources: dict[str, float], backend: str,
                 timeout_s: float, threads: int, log: Callable[[str], None] = print) -> None:
        from ray.util.placement_group import placement_group
        from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

        n = spec.num_ranks
        bundle = {"GPU": gpus_per_rank} if gpus_per_rank else {"CPU": 0.01}  # CPU ranks share the cores
        bundle.update({k: v / n for k, v in resources.items()})  # lands the group on the learner node
        self.group = placement_group([dict(bundle) for _ in range(n)], strategy="STRICT_PACK")
        try:
            ray.get(self.group.ready(), timeout=120)
        except ray.exceptions.GetTimeoutError:
            raise RuntimeError(f"no node can hold {n} learner ranks of {bundle} together (learner.num_ranks={n}, "
                               f"learner.gpus_per_rank={gpus_per_rank}); cluster resources: "
                               f"{ray.cluster_resources()}. Lower learner.num_ranks or add a node that has them") from None
        remote = ray.remote(LearnerRank)
        self.ranks = [  # an actor claims its bundle's GPU to see it; CPU ranks claim nothing
            remote.options(num_cpus=0, num_gpus=gpus_per_rank,
                           scheduling_strategy=PlacementGroupSchedulingStrategy(self.group, i)).remote(i, n, spec, threads)
            for i in range(n)
        ]
        host, port = ray.get(self.ranks[0].address.remote())
        lines = ray.get([r.join.remote(host, port, backend, timeout_s) for r in self.ranks])
        if lines[0]:
            log(lines[0])
        self.spec = spec
        self.version = 0
        self.num_optimizer_steps = 0
        self.last_agreement: dict[str, Tensor] = {}
        self._eval_model = None
        self._eval_version = -1

    def train_step(self, batch: TrainBatch) -> dict[str, float]:
        batch.validate()
        ref = ray.put(batch)
        results = ray.get([r.train_step.remote(ref) for r in self.ranks])
        metrics, agreement, self.num_optimizer_steps = results[0]
        self.last_agreement = agreement or {}
        self.version = int(metrics["version"])
        return metrics

    def state_dict_for_rollout(self) -> dict[str, Tensor]:
        return ray.get([r.rollout_state.remote() for r in self.ranks])[0]

    def save_checkpoint(self, path: str, extra: dict | None = None) -> None:
        ray.get([r.save_checkpoint.remote(path, extra or {}) for r in self.ranks])

    def load_checkpoint(self, path: str) -> dict:
        extra, self.version, self.num_optimizer_steps = ray.get([r.load_checkpoint.remote(path) for r in self.ranks])[0]
        return extra

    def evaluation_model(self) -> torch.nn.Module:
        """A local model holding the current weights (refreshed when the version moved)."""
        if self._eval_model is None or self._eval_version != self.version:
            from echo2_sdk.runtime.models.modeling import load_policy

            state = self.state_dict_for_rollout()
            if self._eval_model is None:
                self._eval_model, _ = load_policy(self.spec.base_path, dtype=self.spec.rollout_dtype)
            self._eval_model.load_state_dict(state, strict=True)
            self._eval_version = self.version
        return self._eval_model.eval()

    @property
    def device(self) -> torch.device:
        return torch.device("cpu")

    def close(self) -> None:
        from ray.util.placement_group import remove_placement_group

        try:
            ray.get([r.close.remote() for r in self.ranks], timeout=30)
        except ray.exceptions.RayError:  # a rank that already died has nothing left to close
            pass
        for r in self.ranks:
            ray.kill(r)
        remove_placement_group(self.group)
