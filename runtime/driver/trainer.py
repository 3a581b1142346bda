"""The training driver: learner + replay buffer + rollout pool, in async (ECHO-2) or sync mode.

Async: every worker keeps generate requests queued; finished groups are validated and admitted to
the buffer (v ≥ v_t − S); the learner trains whenever P admissible groups exist and publishes a
snapshot every κ steps without waiting for its delivery. Time spent waiting for admissible groups is
the bubble. Sync: generate P groups with the current weights, train one step, publish and wait for
every worker to install it, repeat (the verl-sync baseline) — same workers, buffer and learner.

SIGINT/SIGTERM stop a run between steps with a checkpoint, the summary and the plots (stop.py); the run
directory is locked for the run's life (rundir.py); ``resume`` continues from the newest verified
checkpoint (resume.py).
"""

from __future__ import annotations

import time
from typing import Any, Callable

import yaml

from echo2_sdk.algos import get_advantage, get_policy_loss
from echo2_sdk.config import Echo2Config, resolve_kappa, to_dict
from echo2_sdk.records import RolloutGroup
from echo2_sdk.registry import make_task
from echo2_sdk.runtime.admission.base import AdmissionCounters
from echo2_sdk.runtime.admission.gate import AdmissionGate
from echo2_sdk.runtime.admission.request import PromptRenderer
from echo2_sdk.runtime.driver import setup
from echo2_sdk.runtime.learning.batching import collate, record_turn_states
from echo2_sdk.runtime.driver.data import PromptStream
from echo2_sdk.runtime.driver.dispatch import Dispatcher
from echo2_sdk.runtime.admission.dispatch import DispatchControl
from echo2_sdk.runtime.driver.evaluation import format_eval
from echo2_sdk.runtime.broadcast.delivery import DeliveryTracker, delivery_summary
from echo2_sdk.runtime.driver.opponents import OpponentSampler
from echo2_sdk.runtime.driver.metrics import RunStats, group_signals, progress_line, summarize
from echo2_sdk.runtime.rollout.league import seat_warm_start
from echo2_sdk.runtime.rollout.pool import RolloutPool
from echo2_sdk.runtime.rollout.install_wait import wait_installed
from echo2_sdk.runtime.rollout.supervisor import WorkerSupervisor, WorkersExhausted
from echo2_sdk.runtime.planning.control import PoolController
from echo2_sdk.runtime.driver.resume import load_newest, verified_checkpoints
from echo2_sdk.runtime.driver.run_state import RunLedger, restore_pool, stats_at_checkpoint
from echo2_sdk.runtime.driver.reward_failures import RewardFailures
from echo2_sdk.runtime.driver.rundir import RunDir
from echo2_sdk.runtime.driver.stop import StopRequest
from echo2_sdk.runtime.models.modeling import quiet_libraries


class Trainer:
    def __init__(self, cfg: Echo2Config, run_dir: str, *, resume: bool = False,
                 ray_address: str | None = None, log: Callable[[str], None] = print) -> None:
        self.cfg, self.log = cfg, log
        setup.check_resources(cfg, ray_address)
        self.stop = StopRequest(log)  # during setup a signal aborts at once: there is nothing to save yet
        self.stop.install()
        # Locked for this run's life; a mistyped --resume path creates nothing.
        self.run = RunDir(run_dir, cfg, resume=resume)  # also starts the train.report_to trackers
        self.pool = self.held_out = self.owns_ray = None
        self._released = False
        try:
            self._setup(run_dir, resume, ray_address)
        except BaseException:
            self._release(aborting=True)
            raise

    def _setup(self, run_dir: str, resume: bool, ray_address: str | None) -> None:
        cfg, log = self.cfg, self.log
        candidates = verified_checkpoints(self.run, log) if resume else []  # before anything slow starts
        quiet_libraries()
        setup.seed_everything(cfg.train.seed)
        (self.run.path / "config.yaml").write_text(yaml.safe_dump(to_dict(cfg), sort_keys=False))
        self.adapter = make_task(cfg.task.name, cfg.task.options, seed=cfg.train.seed)
        # Names resolve after the task module is imported (it may register its own); a typo fails here,
        # before the warm start, with the closest registered name.
        get_policy_loss(cfg.algo.loss), get_advantage(cfg.algo.advantage)
        self.opponents = OpponentSampler.from_config(cfg.train, self.adapter)  # None: the examples' own draws
        self.sync = cfg.runtime.mode == "sync"
        self.kappa = 1 if self.sync else resolve_kappa(cfg.runtime.staleness, cfg.runtime.kappa)
        self.staleness = 0 if self.sync else cfg.runtime.staleness
        import torch

        torch.set_num_threads(cfg.runtime.learner_threads)
        self.base_path = setup.prepare_base_model(cfg, self.adapter, self.run, log)
        seat_warm_start(self.adapter, str(self.base_path), cfg.rollout.max_new_tokens)  # llm:league in evaluation
        self.owns_ray = setup.init_ray(cfg, ray_address)  # before the learner: its ranks may be Ray actors
        self.stop.install()  # again: ray.init replaced the SIGTERM handler
        self.learner, self.tokenizer = setup.build_learner(cfg, self.base_path, log)
        self.stats, counters = RunStats(), AdmissionCounters()
        self.step, position = 0, 0
        self.checkpointed_step: int | None = None
        if resume:
            ckpt, extra = load_newest(self.learner, candidates, self.run, log)
            self.step, position = extra["step"], extra["data_position"]
            self.checkpointed_step = self.step
            self.stats = RunStats.from_dict(extra["stats"])
            # Checkpoints written before the admission gate kept its counters with the run statistics.
            counters = AdmissionCounters.from_dict(extra.get("admission", extra["stats"]), step=self.step)
            dropped = self.run.truncate_metrics(self.step)
            again = f"; {dropped} metrics rows after step {self.step} dropped (those steps run again)" if dropped else ""
            log(f"resumed from {ckpt} at step {self.step}, version {self.learner.version}{again}")
        self.reward_failures = RewardFailures(log)
        self.stream = PromptStream(self.adapter.examples("train"), cfg.train.seed, position)
        self.published = self.learner.version
        r = cfg.rollout
        specs = setup.worker_specs(cfg)
        setup.check_placement(cfg, specs)
        model_files = None
        if setup.joined_cluster(cfg, ray_address):  # workers on other nodes may lack a local base model
            from echo2_sdk.runtime.models.files import pack

            model_files = pack(self.base_path)
        self.pool = RolloutPool(
            specs,
            setup.worker_settings(cfg, self.base_path),
            gpus_per_worker=r.gpus_per_worker,
            resources=r.worker_resources,
            model_files=model_files,
            transport=setup.build_transport(cfg, ray_address),
            lazy=cfg.scheduler.enabled,  # the pool scheduler starts the workers it activates
            start_timeout_s=r.worker_start_timeout_s,
        )
        self.controller = (PoolController.from_config(cfg, self.pool, self.run.path, kappa=self.kappa, log=log)
                           if cfg.scheduler.enabled else None)
        if self.controller is not None:  # initial plan; like an eager pool, wait until those workers are up
            restore_pool(self.controller, extra if resume else {}, log)  # cost so far, measured μ_i
            self.controller.start(time.perf_counter())
            self.pool.wait_started()
        # Without the scheduler nothing else replaces a worker: dead and hung ones are restarted.
        self.supervisor = None if self.controller is not None else WorkerSupervisor(
            self.pool, r.worker_restarts, r.worker_restart_backoff_s, r.worker_stall_timeout_s, log=log)
        self.failed: str | None = None
        self.deliveries = DeliveryTracker(self.pool.transport, gamma=cfg.broadcast.gamma,
                                          timeout_s=cfg.broadcast.receive_timeout_s)
        self._fresh_delivery: dict | None = None
        from echo2_sdk.runtime.learning.agreement import SamplerAgreement

        self.agreement = SamplerAgreement(r.logprob_tolerance, r.logprob_check_min_tokens, log=log)
        self.audit = setup.reward_audit(cfg, self.adapter, self.tokenizer, specs, log)
        self.gate = AdmissionGate(staleness=self.staleness, limits=setup.record_limits(cfg, self.adapter, self.tokenizer),
                                  audit=self.audit, counters=counters,
                                  prompt_ids=PromptRenderer(self.adapter, self.tokenizer),
                                  buffer_order=cfg.runtime.buffer_order)
        self.buffer = self.gate.buffer  # what the gate admitted, drawn from by the learner
        if resume and self.opponents is not None:
            self.opponents.restore(extra.get("opponent_sampler", {}))
        self.ledger = RunLedger(self.gate, self.pool, self.controller)  # the per-worker sample ledger (admission.accounting)
        if resume:  # the checkpoint's buffered groups, checked again (run_state.py says why not regenerated)
            self.ledger.restore(extra, self.learner.version, log)
        self.dispatch = Dispatcher(self.pool, self.stream, self.buffer, DispatchControl(
            self.staleness, cfg.train.prompts_per_step, enabled=cfg.runtime.admission_control and not self.sync,
            margin_devs=cfg.runtime.admission_margin_devs, margin_max_devs=cfg.runtime.admission_margin_max_devs,
            wasted_seen=self.gate.counters.dropped_stale),  # a resumed run's earlier drops are not news
            r.prompts_per_request, holds=self.deliveries.holds, opponents=self.opponents)
        self.t_start = time.perf_counter()
        if self.learner.version > 0:  # resumed: workers start from the restored weights
            self._wait_installed(self._publish())

    # ------------------------------------------------------------------------------------------
    def fit(self) -> dict[str, Any]:
        """Train to ``train.steps`` (or to a graceful stop: see ``summary["stopped"]``; or until no rollout
        worker can be kept alive: ``summary["failed"]``) and return the summary."""
        self.stop.graceful = True  # from now on the first signal stops at a step boundary, with a checkpoint
        try:
            try:
                workers = self._fit()
            except WorkersExhausted as exc:  # the run cannot go on: save what it did, fail with one line
                workers = self._fail(exc)
            except BaseException:
                self._release(aborting=True)
                raise
            self._release(aborting=False)
            return self._summarize(workers)
        finally:
            self.run.close()
            self.stop.restore()

    def _fit(self) -> list[dict]:
        if self.step == 0 and not self.stop.requested:
            before = self.evaluate()
            self.stats.on_eval("before", before)
            self.log(f"held-out before training: {format_eval(before)}")
        # wall_s counts training only: the clock starts after setup and the first evaluation.
        self.t_start = time.perf_counter() - self.stats.wall_offset_s
        (self._run_sync if self.sync else self._run_async)()
        if not self.stop.requested:
            after = self.evaluate()
            self.stats.on_eval("after", after)
            self.log(f"held-out after training:  {format_eval(after)}")
        if self.step > 0:  # stopped before the first step: nothing was learned, nothing to resume
            self._checkpoint()
        # A graceful stop does not wait long for snapshots still travelling: the next run republishes.
        self._delivered(self.deliveries.finish_all(timeout_s=5.0 if self.stop.requested else 30.0))
        return self.pool.worker_report()

    def _fail(self, exc: WorkersExhausted) -> list[dict]:
        self.failed = str(exc)
        self.log(f"run failed at step {self.step}: {exc}")
        workers = self.pool.worker_report()
        if self.step > 0:
            self._checkpoint()
        self._delivered(self.deliveries.finish_all(timeout_s=0.0))
        return workers

    def _release(self, *, aborting: bool) -> None:
        """Stop everything the run started (idempotent). ``aborting``: also release the run directory and the
        signal handlers now (a clean end does that after writing the summary)."""
        if self._released:
            return
        self._released = True  # the pool object stays: the summary reads its transport's counters
        for close in (self.pool and self.pool.shutdown, getattr(self, "audit", None) and self.audit.close,
                      self.held_out and self.held_out.close, getattr(self, "learner", None) and self.learner.close):
            if close:
                try:
                    close()
                except Exception as exc:  # one failing part must not keep the others (or Ray) running
                    self.log(f"shutdown: {type(exc).__name__}: {str(exc)[:200]}")
        self.held_out = None
        if self.owns_ray:
            self.owns_ray = False
            setup.shutdown_ray()  # and the reaper: nothing of this run's Ray outlives it
        if aborting:
            self.run.close()
            self.stop.restore()

    def _summarize(self, workers: list[dict]) -> dict[str, Any]:
        cfg = self.cfg
        rows = self.run.read_metrics()
        summary = summarize(cfg, rows, stats=self.stats, admission=self.gate.counters, staleness=self.staleness,
                            kappa=self.kappa, steps=self.step, version=self.learner.version,
                            base_model=self.base_path, workers=workers,
                            pool=self.controller.summary() if self.controller is not None else None)
        summary["broadcast"] = {
            "transport": cfg.broadcast.transport, "topology": cfg.broadcast.topology,
            **delivery_summary(self.stats.deliveries), "by_version": self.stats.version_table(),
            "refused": self.pool.transport.refusals(),
        }
        summary["accounting"] = self.ledger.summary(self.pool.in_flight_at_shutdown)
        summary["dispatch"] = self.dispatch.control.summary(time.perf_counter())
        summary["sampler_agreement"] = self.agreement.summary()
        summary["reward_audit"] = self.audit.summary()
        summary["reward_failures"] = self.reward_failures.summary()
        if self.supervisor is not None:
            summary["worker_restarts"] = self.supervisor.summary()
        ckpt = self.run.checkpoint_dir(self.step) if self.checkpointed_step == self.step else None
        ended_at = {"step": self.step, "checkpoint": str(ckpt) if ckpt is not None else None}
        if self.failed is not None:
            summary["failed"] = {"error": self.failed, **ended_at}
        if self.stop.requested:
            summary["stopped"] = {"signal": self.stop.name, **ended_at}
        if cfg.train.plots:
            from echo2_sdk.runtime.driver.plots import write_plots

            summary["plots"] = write_plots(rows, self.stats.staleness_counts, self.run.path)
        self.run.write_summary(summary)
        return summary

    # ------------------------------------------------------------------------------------------
    def _ingest(self, results) -> None:
        for finished in results:
            slot, result = finished.slot, finished.result
            if isinstance(result, Exception):
                self.ledger.on_failed(slot.name, finished.request)  # its samples count as lost in flight
                what = "died; its requests are lost" if slot.dead else "request failed; continuing"
                first = (str(result).strip().splitlines() or [""])[0][:300]  # Ray's error texts run to many lines
                self.log(f"worker {slot.name} {what} ({type(result).__name__}: {first})")
                if self.pool.exhausted() and self.supervisor is None:  # the scheduler has no worker left to rent
                    raise WorkersExhausted("every rollout worker has died or was lost; see the errors above")
                continue
            self.reward_failures.note(f"worker {slot.name}", result.reward_status, result.reward_detail, self.step)
            if self.controller is not None:  # μ_i = rollouts per generating second (throttle included)
                self.controller.on_result(slot.name, result.num_rollouts, result.t_generate_s + result.t_throttle_s)
            admitted = self.gate.admit(slot.name, result, newest_version=self.published,
                                       learner_version=self.learner.version, request=finished.request)
            self.dispatch.on_reply(slot, result.t_generate_s + result.t_throttle_s,  # scoring overlaps the next
                                   wasted_total=self.gate.counters.dropped_stale)
            self.stats.on_result(slot.name, result.installed, admitted.arrived_versions,
                                 time.perf_counter() - self.t_start)
        for name in self.audit.to_evict():
            self.log(f"reward audit: evicting worker {name} from the pool: {self.pool.mark_lost(name)}")

    def _run_async(self) -> None:
        self.dispatch.fill_all(self.learner.version)
        while self.step < self.cfg.train.steps and not self.stop.requested:
            self._collect(0.0)
            groups = self.buffer.take(self.cfg.train.prompts_per_step, self.learner.version)
            if groups is None:
                t0 = time.perf_counter()
                self._collect(0.5)
                self.stats.on_idle(time.perf_counter() - t0)
                continue
            self._train(groups)
            if self.learner.version % self.kappa == 0:
                self._publish()
            self.dispatch.fill_all(self.learner.version)  # a step freed P places in the queue

    def _run_sync(self) -> None:
        P = self.cfg.train.prompts_per_step
        while self.step < self.cfg.train.steps and not self.stop.requested:
            t0 = time.perf_counter()
            while self.buffer.num_admissible(self.learner.version) < P and not self.stop.requested:
                if not self.dispatch.fill_sync(P - len(self.buffer)):  # every worker down: wait for a restart
                    self._collect(0.5)
                    continue
                while self.pool.pending() and not self.stop.requested:
                    self._collect(0.5)
            self.stats.on_idle(time.perf_counter() - t0)
            if self.stop.requested:  # abandon the step still waiting for rollouts
                break
            self._train(self.buffer.take(P, self.learner.version))
            t1 = time.perf_counter()
            self._wait_installed(self._publish())
            self.stats.on_idle(time.perf_counter() - t1)

    def _wait_installed(self, handles: list) -> None:
        """Sync mode and resume: wait for the installs, but not for a worker far behind its peers (hung)."""
        wait_installed(self.pool, handles, self.cfg.broadcast.receive_timeout_s, self.log,
                       laggard_s=self.cfg.rollout.worker_stall_timeout_s)

    def _publish(self) -> list:
        """Start delivering the current weights; the learner does not wait (except in sync mode)."""
        v = self.learner.version
        handles = self.pool.publish(self.learner.state_dict_for_rollout(), v)
        self.deliveries.published(v, self.step, handles, self.pool.last_publish_names)
        self.stats.on_publish(v, time.perf_counter() - self.t_start, time.time())
        self.published = v
        return handles

    def _delivered(self, records: list[dict]) -> None:
        released = self.pool.released_names()
        for rec in records:
            rec["t_publish_s"] = round(self.stats.publish_time_s(rec["version"]), 4)
            # A worker the scheduler released mid-delivery did not fail: it left on purpose.
            rec["released"] = sorted(w for w in rec["failed"] if w in released)
            rec["failed"] = {w: r for w, r in rec["failed"].items() if w not in released}
            self.stats.on_delivery(rec)
            self.run.append_jsonl("broadcasts.jsonl", rec)
            self._fresh_delivery = rec
            if self.controller is not None and rec["t_bcast_s"] is not None:
                self.controller.on_broadcast(rec["t_bcast_s"], time.perf_counter())
            if rec["failed"] and rec["superseded_by"] is None:
                self.log(f"snapshot v{rec['version']}: {rec['installed']}/{rec['live']} workers installed "
                         f"(failed: {rec['failed']})")

    def _collect(self, timeout_s: float) -> None:
        self._delivered(self.deliveries.poll())
        results = self.pool.collect(timeout_s)
        self._ingest(results)
        if self.controller is not None:  # heartbeat round when due
            self.controller.tick(time.perf_counter())
        elif self.supervisor is not None:  # dead and hung workers restart (or the run fails: none can)
            for name in self.supervisor.check():
                self.dispatch.on_restart(name)
        if not self.sync:  # finished, newly started and restarted workers get work (if admission allows)
            self.dispatch.fill_all(self.learner.version)

    def _train(self, groups: list[RolloutGroup]) -> None:
        v_t = self.learner.version
        records = [r for g in groups for r in g.rollouts]
        t0 = time.perf_counter()
        turn_states = record_turn_states(records)  # for the turn-level advantages and the step's metrics
        batch, _ = collate(records, pad_id=self.tokenizer.pad_token_id,
                           grouping=self.cfg.algo.grouping, estimator=self.cfg.algo.advantage,
                           turn_advantage_weight=self.cfg.algo.turn_advantage_weight, turn_states=turn_states)
        metrics = self.learner.train_step(batch)
        t_train = time.perf_counter() - t0
        self.step += 1
        self.gate.count_trained(groups)
        if self.opponents is not None:
            self.opponents.observe(groups)
        row = self.stats.on_step(step=self.step, version=self.learner.version, records=records, v_t=v_t,
                                 t_train_s=t_train, wall_s=time.perf_counter() - self.t_start,
                                 published_version=self.published, buffer_groups=len(self.buffer),
                                 learner_metrics=metrics, admission=self.gate.counters)
        row.update(group_signals(records, self.cfg.algo.grouping, turn_states))
        row.update(self.agreement.update([str(r.meta.get("worker", "")) for r in records],
                                         [v_t - r.version for r in records], self.learner.last_agreement))
        row.update(self.ledger.row())
        row.update(self.dispatch.row())
        if self.opponents is not None:
            row.update(self.opponents.row())
        if self.controller is not None:
            row.update(self.controller.on_step(time.perf_counter(), t_train,
                                               row["accepted"], row["reward_mean"]))
        fresh, self._fresh_delivery = self._fresh_delivery, None
        if fresh is not None:  # the broadcast measured complete since the previous step
            row.update(bcast_version=fresh["version"], t_bcast_s=fresh["t_bcast_s"], t_bcast_all_s=fresh["t_all_s"])
        self.run.append_metrics(row)
        every = max(1, self.cfg.train.steps // 25)
        if self.step % every == 0 or self.step == 1 or self.step == self.cfg.train.steps:
            rate = self.stats.progress_rate(self.gate.counters.tokens, row["wall_s"])
            self.log(progress_line(row, self.cfg.train.steps, tokens_per_s=rate))
        if self.cfg.train.eval_every and self.step % self.cfg.train.eval_every == 0 and not self.stop.requested:
            self.stats.on_eval(f"step_{self.step}", self.evaluate())
        if self.cfg.train.checkpoint_every and self.step % self.cfg.train.checkpoint_every == 0:
            self._checkpoint()

    def _checkpoint(self) -> None:
        if self.checkpointed_step == self.step:  # the periodic one of this step is already on disk
            return
        self.stats.on_checkpoint(time.perf_counter() - self.t_start)
        self.learner.save_checkpoint(
            str(self.run.checkpoint_dir(self.step)),
            extra={"step": self.step, "data_position": self.stream.position,
                   "stats": stats_at_checkpoint(self.stats, self.deliveries),
                   **self.ledger.checkpoint_extra(),  # admission counters, buffered groups, pool state
                   **({"opponent_sampler": self.opponents.state()} if self.opponents is not None else {})},
        )
        self.checkpointed_step = self.step
        self.run.prune_checkpoints(self.cfg.train.keep_checkpoints, self.step)

    def evaluate(self) -> dict[str, Any]:
        """Held-out accuracy of the learner's current weights (greedy by default)."""
        if self.held_out is None:
            from echo2_sdk.runtime.driver.evaluation import HeldOutEvaluation

            self.held_out = HeldOutEvaluation(self.cfg, self.adapter, self.tokenizer, self.reward_failures)
        return self.held_out.run(self.learner, self.step)
