"""Run safety: the run directory's lock, crash-safe checkpoints and their verified resume, metrics rows
dropped once, reward failures made visible, the evaluation's reward deadline, and the graceful stop on
SIGINT/SIGTERM (end to end, marked slow)."""

from __future__ import annotations

import json
import os
import select
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from echo2_sdk.config import load_config
from echo2_sdk.runtime.driver.resume import load_newest, verified_checkpoints
from echo2_sdk.runtime.driver.reward_failures import RewardFailures
from echo2_sdk.runtime.driver.rundir import RunDir, RunDirError
from echo2_sdk.runtime.learning.checkpoint import CheckpointError, verify_checkpoint
from echo2_sdk.runtime.learning.learner import Learner
from echo2_sdk.runtime.rollout.backends.base import Completion, GenerationBackend
from reward_fixtures import import_path
from test_learner import tiny_model


# ----- the run directory's lock ---------------------------------------------------------------------
def test_a_second_run_on_the_same_directory_is_refused_naming_the_holder(tmp_path):
    first = RunDir(tmp_path / "run")
    with pytest.raises(RunDirError, match=rf"in use by echo2 train PID {os.getpid()} \(started \d{{4}}-\d\d-\d\d "):
        RunDir(tmp_path / "run")
    first.close()
    RunDir(tmp_path / "run").close()  # released by close


def test_another_process_holds_the_lock_until_it_dies_even_by_sigkill(tmp_path):
    code = ("import sys, time; from echo2_sdk.runtime.driver.rundir import RunDir; RunDir(sys.argv[1]); "
            "print('locked', flush=True); time.sleep(120)")
    holder = subprocess.Popen([sys.executable, "-c", code, str(tmp_path / "run")], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "locked"
        with pytest.raises(RunDirError, match=f"PID {holder.pid} "):
            RunDir(tmp_path / "run")
    finally:
        holder.kill()
        holder.wait()
    RunDir(tmp_path / "run").close()  # the kernel dropped the dead holder's lock: no stale lock file to remove


def test_resume_of_a_missing_directory_creates_nothing(tmp_path):
    with pytest.raises(RunDirError, match="no such run directory"):
        RunDir(tmp_path / "typo", resume=True)
    assert not (tmp_path / "typo").exists()


def test_a_run_directory_that_cannot_be_created_is_a_one_line_error(tmp_path):
    (tmp_path / "file").write_text("not a folder")
    with pytest.raises(RunDirError, match="cannot create the run directory .* pick another --run-dir"):
        RunDir(tmp_path / "file" / "run")


# ----- checkpoints ----------------------------------------------------------------------------------
@pytest.fixture
def learner():
    return Learner(tiny_model(), lr=1e-3)


def _save(learner, run: RunDir, step: int) -> Path:
    learner.version = step
    folder = run.checkpoint_dir(step)
    learner.save_checkpoint(str(folder), extra={"step": step})
    return folder


def test_a_checkpoint_carries_a_manifest_of_every_file_and_verifies(tmp_path, learner):
    run = RunDir(tmp_path / "run", lock=False)
    folder = _save(learner, run, 1)
    manifest = json.loads((folder / "manifest.json").read_text())["files"]
    assert set(manifest) == {p.name for p in folder.iterdir()} - {"manifest.json"}
    assert all(len(entry["sha256"]) == 64 and entry["bytes"] == (folder / name).stat().st_size
               for name, entry in manifest.items())
    verify_checkpoint(folder)
    assert not [p for p in run.checkpoints.iterdir() if p.name.startswith(".")]  # no temporary folder left


def test_a_truncated_or_damaged_file_fails_verification(tmp_path, learner):
    run = RunDir(tmp_path / "run", lock=False)
    folder = _save(learner, run, 1)
    weights = folder / "model.safetensors"
    data = weights.read_bytes()
    weights.write_bytes(data[: len(data) // 2])
    with pytest.raises(CheckpointError, match=r"model.safetensors has \d+ bytes, its manifest says \d+"):
        verify_checkpoint(folder)
    weights.write_bytes(data[:-1] + bytes([data[-1] ^ 0xFF]))  # same size, one byte changed
    with pytest.raises(CheckpointError, match="model.safetensors does not match its SHA-256"):
        verify_checkpoint(folder)


def test_resume_skips_a_truncated_newest_checkpoint_for_the_previous_intact_one(tmp_path, learner):
    run = RunDir(tmp_path / "run", lock=False)
    _save(learner, run, 1)
    newest = _save(learner, run, 2)
    (newest / "optimizer.pt").write_bytes(b"")
    logs = []
    candidates = verified_checkpoints(run, logs.append)
    assert candidates == [run.checkpoint_dir(1)]
    assert any("skipping" in line and "step_2" in line and "optimizer.pt" in line for line in logs), logs
    fresh = Learner(tiny_model(seed=5), lr=1e-3)
    folder, extra = load_newest(fresh, candidates, run, logs.append)
    assert folder == run.checkpoint_dir(1) and extra == {"step": 1} and fresh.version == 1


def test_a_checkpoint_without_manifest_that_fails_to_load_is_skipped_too(tmp_path, learner):
    """Checkpoints written before manifests pass verification by their file list; a damaged one is found when
    it loads, and the resume falls back all the same."""
    run = RunDir(tmp_path / "run", lock=False)
    _save(learner, run, 1)
    legacy = _save(learner, run, 2)
    (legacy / "manifest.json").unlink()
    (legacy / "model.safetensors").write_bytes(b"\x00" * 10)
    logs = []
    candidates = verified_checkpoints(run, logs.append)
    assert candidates == [legacy, run.checkpoint_dir(1)]
    folder, extra = load_newest(Learner(tiny_model(), lr=1e-3), candidates, run, logs.append)
    assert folder == run.checkpoint_dir(1) and any("step_2" in line and "unreadable" in line for line in logs)


def test_no_intact_checkpoint_is_one_line_naming_what_was_skipped(tmp_path, learner):
    run = RunDir(tmp_path / "run", lock=False)
    with pytest.raises(CheckpointError, match="no checkpoint under .* before its first one"):
        verified_checkpoints(run, print)
    (_save(learner, run, 1) / "trainer_state.pt").unlink()
    with pytest.raises(CheckpointError, match=r"no intact checkpoint .*skipped: .*step_1.*trainer_state.pt") as err:
        verified_checkpoints(run, lambda line: None)
    assert "\n" not in str(err.value)


def test_a_run_killed_while_checkpointing_leaves_nothing_half_written(tmp_path, learner):
    run = RunDir(tmp_path / "run", lock=False)
    intact = _save(learner, run, 2)
    # Killed between parking the old step_2 and renaming its replacement in, and mid-write of step_3:
    parked = run.checkpoints / ".step_2.old-abc"
    parked.mkdir()
    os.rename(intact, parked / "step_2")
    (run.checkpoints / ".step_3.tmp-xyz").mkdir()
    (run.checkpoints / ".step_3.tmp-xyz" / "model.safetensors").write_bytes(b"partial")
    RunDir(tmp_path / "run").close()  # the next run owning the directory repairs it
    assert sorted(p.name for p in run.checkpoints.iterdir()) == ["step_2"]
    verify_checkpoint(run.checkpoint_dir(2))


def test_keep_checkpoints_prunes_the_oldest(tmp_path, learner):
    run = RunDir(tmp_path / "run", lock=False)
    for step in (1, 2, 3):
        _save(learner, run, step)
    _save(learner, run, 9)  # left by a run that was resumed from an earlier checkpoint: not counted
    deleted = run.prune_checkpoints(2, current_step=3)
    assert deleted == [run.checkpoint_dir(1)]
    assert sorted(p.name for p in run.checkpoints.iterdir()) == ["step_2", "step_3", "step_9"]
    assert run.prune_checkpoints(None, current_step=3) == []


@pytest.mark.parametrize("value", [0, -1])
def test_keep_checkpoints_must_be_positive_or_null(value):
    from echo2_sdk.config import ConfigError

    with pytest.raises(ConfigError, match="train.keep_checkpoints=.* must be >= 1 .* or null"):
        load_config(None, [f"train.keep_checkpoints={value}"])
    assert load_config(None, ["train.keep_checkpoints=2"]).train.keep_checkpoints == 2


# ----- metrics.jsonl on resume ------------------------------------------------------------------------
def test_rows_after_the_resumed_step_are_dropped_exactly_once(tmp_path):
    run = RunDir(tmp_path / "run", lock=False)
    for step in range(1, 6):
        run.append_metrics({"step": step})
    with open(run.metrics_path, "a") as fh:
        fh.write('{"step": 6, "rew')  # the driver was SIGKILLed mid-line
    assert run.truncate_metrics(3) == 3  # steps 4, 5 and the torn line
    assert [r["step"] for r in run.read_metrics()] == [1, 2, 3]
    assert run.truncate_metrics(3) == 0
    run.append_metrics({"step": 4})
    assert [r["step"] for r in run.read_metrics()] == [1, 2, 3, 4]


# ----- reward failures and the evaluation's deadline ------------------------------------------------------
def test_the_first_failure_of_each_status_is_shown_once_and_kept():
    lines = []
    failures = RewardFailures(lines.append)
    failures.note("worker w0", {"ok": 3, "error": 2}, {"error": "ValueError: boom"}, step=4)
    failures.note("worker w1", {"error": 5, "timeout": 1}, {"error": "KeyError: x", "timeout": "deadline"}, step=5)
    assert len(lines) == 2 and "ValueError: boom" in lines[0] and "'timeout'" in lines[1]
    assert failures.summary() == {"error": {"detail": "ValueError: boom", "where": "worker w0", "step": 4},
                                  "timeout": {"detail": "deadline", "where": "worker w1", "step": 5}}


class FixedBackend(GenerationBackend):
    """Answers ``text`` to every prompt."""

    version = 0

    def __init__(self, tokenizer, text: str) -> None:
        self.ids = tuple(tokenizer.encode(text, add_special_tokens=False)) + (tokenizer.eos_token_id,)

    def generate(self, prompts, n, params):
        return [[Completion(self.ids, (-0.5,) * len(self.ids), "stop") for _ in range(n)] for _ in prompts]

    def load_weights(self, state_dict, version):
        pass


def _held_out(task: str, tiny_tokenizer, overrides=()):
    from echo2_sdk.registry import make_task
    from echo2_sdk.runtime.driver.evaluation import HeldOutEvaluation

    cfg = load_config(None, [f"task.name={import_path(task)}", "rollout.reward_timeout_s=0.5", *overrides])
    lines = []
    failures = RewardFailures(lines.append)
    return HeldOutEvaluation(cfg, make_task(cfg.task.name, {}), tiny_tokenizer, failures), failures, lines


def test_the_evaluation_reward_runs_under_the_workers_deadline(tiny_tokenizer):
    held_out, failures, lines = _held_out("SlowRewardAdapter", tiny_tokenizer)
    try:
        t0 = time.perf_counter()
        result = held_out.score(FixedBackend(tiny_tokenizer, "1"), step=0)
        elapsed = time.perf_counter() - t0
    finally:
        held_out.close()
    assert result["statuses"] == {"timeout": 2} and result["accuracy"] == 0.0
    assert elapsed < 30, f"a 60 s reward took {elapsed:.0f} s: no deadline"  # 2 x (0.5 s + a restart)
    assert "timeout_s=0.5" in failures.summary()["timeout"]["detail"] and len(lines) == 1


def test_an_evaluation_reward_that_raises_is_reported_with_its_text(tiny_tokenizer):
    held_out, failures, lines = _held_out("ScriptedRewardAdapter", tiny_tokenizer, ["train.eval_max_examples=2"])
    try:
        result = held_out.score(FixedBackend(tiny_tokenizer, "boom"), step=7)
    finally:
        held_out.close()
    assert result["statuses"] == {"error": 2}
    assert result["reward_detail"]["error"] == "ValueError: boom: scripted failure"
    assert failures.summary()["error"] == {"detail": "ValueError: boom: scripted failure",
                                           "where": "held-out evaluation", "step": 7}
    assert "boom: scripted failure" in lines[0]


def test_an_evaluation_whose_reward_process_cannot_start_still_scores_and_says_so(tiny_tokenizer, monkeypatch):
    from echo2_sdk.rewards import RewardWorkerError

    def refuse(*args, **kwargs):
        raise RewardWorkerError("reward process for task 'x' died during start-up (exit code 1)")

    monkeypatch.setattr("echo2_sdk.runtime.driver.evaluation.RewardGuard", refuse)
    held_out, failures, lines = _held_out("ScriptedRewardAdapter", tiny_tokenizer, ["train.eval_max_examples=2"])
    result = held_out.score(FixedBackend(tiny_tokenizer, "0"), step=0)
    assert result["statuses"] == {"ok": 2} and result["accuracy"] == 0.5
    assert len(lines) == 1 and "without rollout.reward_timeout_s" in lines[0]


def test_a_worker_reports_the_text_of_its_reward_failures_and_a_closing_worker_answers_quietly():
    from echo2_sdk.runtime.models.modeling import ensure_tiny_qwen3
    from echo2_sdk.runtime.rollout.backends.base import SamplingParams
    from echo2_sdk.runtime.rollout.base import WorkerSettings
    from echo2_sdk.runtime.rollout.codec import result_from_json, result_to_json
    from echo2_sdk.runtime.rollout.worker import RolloutWorker

    task = import_path("RaisingRewardAdapter")
    worker = RolloutWorker("w", WorkerSettings(model_path=ensure_tiny_qwen3(), task_name=task, task_options={},
                                               sampling=SamplingParams(1.0, 1.0, 4, seed=0), samples_per_prompt=2,
                                               seed=0))
    from echo2_sdk.registry import make_task

    examples = list(make_task(task).examples("train"))[:2]
    try:
        result = result_from_json(result_to_json(worker.generate(examples)))  # what reaches the driver
        assert result.reward_status == {"error": 4}
        assert result.reward_detail == {"error": "KeyError: \"reward bug: no field 'answer_text'\""}
    finally:
        worker.close()
    # A request still running when the pool shuts the worker down answers empty instead of raising
    # (Ray would print that error as an unhandled traceback at the end of every run).
    assert worker.generate(examples).groups == []


# ----- graceful stop, end to end ---------------------------------------------------------------------
TINY = ["train.steps=300", "train.prompts_per_step=2", "rollout.samples_per_prompt=2", "rollout.prompts_per_request=2",
        "rollout.max_new_tokens=4", "train.eval_max_examples=4", "rollout.num_workers=1", "train.checkpoint_every=1"]


def _train(*args: str, sets=TINY) -> subprocess.Popen:
    cmd = [sys.executable, "-m", "echo2_sdk.runtime.cli", "train", *args, *(a for s in sets for a in ("--set", s))]
    env = {k: v for k, v in os.environ.items() if k != "RAY_IGNORE_UNHANDLED_ERRORS"}  # show what Ray would print
    env["OMP_NUM_THREADS"] = "1"
    return subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)


def _wait_for_steps(proc: subprocess.Popen, metrics: Path, steps: int, timeout_s: float = 120) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        assert proc.poll() is None, proc.communicate()[0][-3000:]
        if metrics.exists() and len(metrics.read_text().splitlines()) >= steps:
            return
        time.sleep(0.1)
    proc.kill()
    pytest.fail(f"no {steps} steps within {timeout_s} s: {proc.communicate()[0][-3000:]}")


def _steps(run: Path) -> list[int]:
    return [json.loads(line)["step"] for line in (run / "metrics.jsonl").read_text().splitlines()]


@pytest.mark.slow
def test_sigint_saves_everything_and_resume_continues(tmp_path):
    """Ctrl-C after two steps: exit 130, checkpoint + summary + plots, a resume line; meanwhile a second run on
    the same directory is refused. The stopped step's checkpoint is then truncated: the resume falls back to
    the one before it, drops the rows after it once and trains on to the end."""
    run = tmp_path / "run"
    proc = _train("--run-dir", str(run))
    _wait_for_steps(proc, run / "metrics.jsonl", 2)
    second = subprocess.run([sys.executable, "-m", "echo2_sdk.runtime.cli", "train", "--run-dir", str(run),
                             *(a for s in TINY for a in ("--set", s))], capture_output=True, text=True, timeout=120)
    assert second.returncode == 2 and f"in use by echo2 train PID {proc.pid} (started " in second.stderr
    assert second.stderr.strip().count("\n") == 0, second.stderr
    proc.send_signal(signal.SIGINT)
    out = proc.communicate(timeout=120)[0]
    assert proc.returncode == 130, out[-3000:]
    summary = json.loads((run / "summary.json").read_text())
    stopped = summary["stopped"]
    assert stopped["signal"] == "SIGINT" and stopped["step"] == summary["steps"] >= 2
    assert Path(stopped["checkpoint"]) == run / "checkpoints" / f"step_{stopped['step']}"
    verify_checkpoint(stopped["checkpoint"])
    assert {"reward.png", "staleness.png", "bubble.png"} <= {p.name for p in run.iterdir()}
    assert f"continue with: echo2 train --resume {run}" in out
    assert "Traceback" not in out and "RewardGuard is closed" not in out, out[-3000:]

    last = stopped["step"]
    (Path(stopped["checkpoint"]) / "model.safetensors").write_bytes(b"truncated")
    resumed = _train("--resume", str(run), sets=[f"train.steps={last + 2}"])
    out = resumed.communicate(timeout=240)[0]
    assert resumed.returncode == 0, out[-3000:]
    assert f"skipping {run / 'checkpoints' / f'step_{last}'}: model.safetensors has 9 bytes" in out
    assert f"resumed from {run / 'checkpoints' / f'step_{last - 1}'} at step {last - 1}" in out
    assert "1 metrics rows after step" in out
    assert _steps(run) == list(range(1, last + 3))
    assert "stopped" not in json.loads((run / "summary.json").read_text())


@pytest.mark.slow
def test_sigterm_stops_cleanly_without_a_stack_dump_and_reward_failures_are_shown(tmp_path):
    """SIGTERM: exit 143, no C-level stack dump. The task's reward raises on every sample: the console says
    why once (not only ``reward 0.000``) and the summary keeps the text next to the counts."""
    run = tmp_path / "run"
    task = f"task.name={Path(__file__).resolve().parent / 'reward_fixtures.py'}:RaisingRewardAdapter"
    proc = _train("--run-dir", str(run), sets=[*TINY, task])
    _wait_for_steps(proc, run / "metrics.jsonl", 1)
    proc.send_signal(signal.SIGTERM)
    out = proc.communicate(timeout=120)[0]
    assert proc.returncode == 143, out[-3000:]
    assert "SIGTERM received" not in out and "Traceback" not in out, out[-3000:]  # Ray's C-level dump, Python's
    summary = json.loads((run / "summary.json").read_text())
    stopped = summary["stopped"]
    assert stopped["signal"] == "SIGTERM" and stopped["checkpoint"]
    verify_checkpoint(stopped["checkpoint"])
    warnings = [line for line in out.splitlines() if line.startswith("reward warning:")]
    assert len(warnings) == 1 and "reward bug: no field 'answer_text'" in warnings[0], out[-3000:]
    assert "reward bug: no field 'answer_text'" in summary["reward_failures"]["error"]["detail"]
    assert summary["reward_status"]["error"] >= 4 and not summary["reward_status"].get("ok")


def _read_until(proc: subprocess.Popen, text: str, timeout_s: float = 60) -> str:
    """The process's output until ``text`` has appeared in it (read from the pipe's descriptor, so nothing waits
    in a Python-side buffer that select cannot see; ``communicate`` reads the rest)."""
    seen, deadline, fd = b"", time.monotonic() + timeout_s, proc.stdout.fileno()
    while text.encode() not in seen and time.monotonic() < deadline:
        if select.select([fd], [], [], 1.0)[0]:
            chunk = os.read(fd, 65536)
            if not chunk:  # end of output: the process is gone
                break
            seen += chunk
    if text.encode() not in seen:
        proc.kill()
        pytest.fail(f"no {text!r} within {timeout_s} s: {seen.decode(errors='replace')[-3000:]}")
    return seen.decode()


@pytest.mark.slow
def test_a_second_ctrl_c_aborts_at_once(tmp_path):
    run = tmp_path / "run"
    # A slow checkpoint is not needed: the stop's own teardown (checkpoint, Ray, plots) takes seconds.
    proc = _train("--run-dir", str(run))
    _wait_for_steps(proc, run / "metrics.jsonl", 1)
    proc.send_signal(signal.SIGINT)
    # The second Ctrl-C follows the first one's message, as a person's does. Sent blind 0.2 s later, both can
    # land while the driver's main thread sits in one C call (a Ray wait): CPython then runs the handler once
    # for the two, and the run stops gracefully (the project's CI of 17c9384, on a loaded 2-core machine).
    shown = _read_until(proc, "SIGINT: stopping after the current step")
    proc.send_signal(signal.SIGINT)
    t0 = time.monotonic()
    out = shown + proc.communicate(timeout=60)[0]
    assert proc.returncode == 130, out[-3000:]
    assert "aborted by SIGINT" in out and "Traceback" not in out, out[-3000:]
    assert time.monotonic() - t0 < 30
    # Whatever was being written was discarded whole: every checkpoint left verifies.
    for folder in (run / "checkpoints").glob("*"):  # none at all when the abort came before the first one
        assert not folder.name.startswith("."), folder
        verify_checkpoint(folder)
    RunDir(run).close()  # and the lock went with the process


def test_a_placed_learner_is_asked_to_stop_at_its_next_step():
    """With the learner placed on another node the driver runs in a Ray actor, which no terminal signal
    reaches: ``echo2 train`` forwards the first signal, and the actor's trainer stops as if it got it."""
    from types import SimpleNamespace

    from echo2_sdk.runtime.driver.launch import DriverRunner
    from echo2_sdk.runtime.driver.stop import StopRequest

    runner = DriverRunner()
    runner.request_stop(signal.SIGTERM)  # still setting up: remembered for the trainer to come
    assert runner._stop == signal.SIGTERM
    runner._trainer = SimpleNamespace(stop=StopRequest(lambda line: None))
    runner.request_stop(signal.SIGINT)
    assert runner._trainer.stop.requested == signal.SIGINT

    forwarded = []
    stop = StopRequest(lambda line: None, forward=forwarded.append)
    stop.graceful = True
    stop._handle(signal.SIGINT, None)
    assert forwarded == [signal.SIGINT] and stop.requested == signal.SIGINT
    with pytest.raises(KeyboardInterrupt):  # the second one aborts
        stop._handle(signal.SIGINT, None)
    stop.restore()


@pytest.mark.slow
def test_ctrl_c_during_setup_aborts_at_once_without_a_traceback(tmp_path):
    run = tmp_path / "run"
    proc = _train("--run-dir", str(run))
    for line in proc.stdout:  # the learner is built once Ray is up; the workers are not started yet
        if line.startswith("learner plan"):
            break
    proc.send_signal(signal.SIGINT)
    t0 = time.monotonic()
    out = proc.communicate(timeout=60)[0]
    assert proc.returncode == 130, out[-3000:]
    assert "aborted by SIGINT" in out and "no checkpoint to resume from" in out and "Traceback" not in out, out
    assert time.monotonic() - t0 < 30 and not (run / "metrics.jsonl").exists()
    RunDir(run).close()  # released
