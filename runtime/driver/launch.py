"""Where the learner runs: in this process, or as a Ray actor placed on a learner node.

``train`` is what ``echo2 train`` calls. With ``runtime.learner_resources`` set (or a Ray address and
``runtime.require_gpus`` > 0), the whole training driver — learner, replay buffer, pool driver and
broadcast source — runs inside a ``DriverRunner`` actor that Ray places on a node offering those
resources (verl's "TaskRunner" pattern); this process only waits for it and prints its log lines. The
run directory is then written on the learner's node. Otherwise the driver runs here, as before.
"""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path
from typing import Any, Callable

from echo2_sdk.config import Echo2Config
from echo2_sdk.runtime.driver import setup


def learner_placement(cfg: Echo2Config, address: str | None = None) -> dict | None:
    """Ray actor options for a placed learner, or None to run the driver in this process."""
    rt = cfg.runtime
    joined = bool(address or rt.ray_address)
    if cfg.learner.num_ranks > 1:  # the rank actors are placed on the learner node; the driver stays here
        return None
    if not rt.learner_resources and not (joined and rt.require_gpus > 0):
        return None
    return {"num_cpus": 0, "num_gpus": rt.require_gpus, "resources": dict(rt.learner_resources) or None}


def check_learner_placement(cfg: Echo2Config) -> str:
    """The id of a live node offering the learner's resources; ResourceError naming the fix if none does."""
    import ray

    want = dict(cfg.runtime.learner_resources)
    if cfg.runtime.require_gpus > 0:
        want["GPU"] = float(cfg.runtime.require_gpus)
    nodes = [n for n in ray.nodes() if n.get("Alive")]
    for node in nodes:
        if setup.node_offers(node, want):
            return node["NodeID"]
    offered = {n["NodeManagerAddress"] + " " + n["NodeID"][:8]: {k: v for k, v in n.get("Resources", {}).items()
                                                                  if not k.startswith("node:")} for n in nodes}
    raise setup.ResourceError(
        f"the learner needs Ray resources {want} (runtime.learner_resources={dict(cfg.runtime.learner_resources)}, "
        f"runtime.require_gpus={cfg.runtime.require_gpus}), but no node of the cluster offers them; nodes: {offered}. "
        "Start the learner node with them, e.g. `ray start --head --port=6379 --resources='{\"learner\": 1}'` "
        "(GPUs are detected), or change runtime.learner_resources"
    )


class DriverRunner:
    """Runs ``Trainer(...).fit()`` inside a Ray actor; ``logs`` hands its log lines to the caller."""

    def __init__(self) -> None:
        self._lines: list[str] = []
        self._lock = threading.Lock()
        self._trainer = None
        self._stop: int | None = None

    def request_stop(self, signum: int) -> None:
        """``echo2 train`` got SIGINT/SIGTERM: end the run at the next step boundary, with a checkpoint."""
        self._stop = self._stop or signum
        if self._trainer is not None:
            self._trainer.stop.requested = self._trainer.stop.requested or signum

    def _log(self, line: str) -> None:
        with self._lock:
            self._lines.append(str(line))

    def logs(self, offset: int) -> tuple[list[str], int]:
        """Log lines from ``offset`` on and the next offset."""
        with self._lock:
            return self._lines[offset:], len(self._lines)

    def where(self) -> dict[str, str]:
        import socket

        import ray

        return {"node": ray.get_runtime_context().get_node_id(), "host": socket.gethostname()}

    def run(self, cfg: Echo2Config, run_dir: str, resume: bool, address: str | None, cwd: str | None) -> dict:
        if cwd and os.path.isdir(cwd):  # relative paths in the config mean what they meant for the caller
            os.chdir(cwd)
        os.environ.setdefault("OMP_NUM_THREADS", "1")
        setup.check_resources(cfg)  # the GPUs Ray gave this actor are visible here
        from echo2_sdk.runtime.driver.trainer import Trainer

        where = self.where()
        self._log(f"learner on node {where['node'][:12]} ({where['host']}); run directory {run_dir} on that node")
        self._trainer = Trainer(cfg, run_dir, resume=resume, ray_address=address, log=self._log)
        if self._stop:  # asked to stop while setting up: fit() ends before the first step
            self._trainer.stop.requested = self._stop
        summary = self._trainer.fit()
        summary["learner_node"] = where["node"]
        return summary


def train(cfg: Echo2Config, run_dir: str, *, resume: bool = False, ray_address: str | None = None,
          log: Callable[[str], None] = print) -> dict[str, Any]:
    """Train and return the summary; the learner runs here or, when placed, on a learner node."""
    placement = learner_placement(cfg, ray_address)
    if placement is None:
        from echo2_sdk.runtime.driver.trainer import Trainer

        setup.check_resources(cfg, ray_address)
        return Trainer(cfg, run_dir, resume=resume, ray_address=ray_address, log=log).fit()
    return _train_placed(cfg, str(Path(run_dir).resolve()), resume, ray_address, placement, log)


def _train_placed(cfg: Echo2Config, run_dir: str, resume: bool, address: str | None, placement: dict,
                  log: Callable[[str], None]) -> dict[str, Any]:
    import ray

    from echo2_sdk.runtime.driver.stop import StopRequest

    owns = setup.init_ray(cfg, address)
    stop = StopRequest(log)
    stop.install()  # after ray.init, which sets its own SIGTERM handler
    runner = None
    try:
        node = check_learner_placement(cfg)
        log(f"placing the learner with {placement} (e.g. node {node[:12]})")
        # Three threads: run, the log polling, and a stop request.
        runner = ray.remote(DriverRunner).options(max_concurrency=3, **placement).remote()
        stop.forward, stop.graceful = runner.request_stop.remote, True
        done = runner.run.remote(cfg, run_dir, resume, address or cfg.runtime.ray_address, os.getcwd())
        offset, t0, warned = 0, time.monotonic(), False
        while True:
            ready, _ = ray.wait([done], timeout=0.5)
            try:
                lines, offset = ray.get(runner.logs.remote(offset), timeout=30)
            except ray.exceptions.GetTimeoutError:  # the actor is not up yet (waiting for its node)
                lines = []
            for line in lines:
                log(line)
            if ready:
                break
            if not warned and offset == 0 and time.monotonic() - t0 > 60:
                log("still waiting for the learner actor to start; is the learner node busy? (`ray status`)")
                warned = True
        return ray.get(done)
    finally:
        stop.restore()
        if runner is not None:
            ray.kill(runner)  # its rollout workers are its children and go with it
        if owns:
            setup.shutdown_ray()
