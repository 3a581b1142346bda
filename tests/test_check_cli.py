"""``echo2 check``: every registered task and generated tasks pass; broken tasks fail with the fix."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from echo2_sdk import registry
from echo2_sdk.adapter import MultiTurnTaskAdapter
from echo2_sdk.runtime.cli import main
from echo2_sdk.scaffold import new_task

SHARED_AIME24 = Path(__file__).resolve().parents[2] / "shared" / "data" / "aime24.jsonl"
# Options that keep a check fast and offline, per built-in task (others run with their defaults).
OFFLINE = {"aime24": [f"task.options.path={SHARED_AIME24}"]}


# Parametrized over the registry's built-ins, so a newly registered task is checked automatically.
@pytest.mark.parametrize("task", sorted(registry._BUILTINS))
def test_every_builtin_task_passes(task, capsys):
    if task == "aime24" and not SHARED_AIME24.exists():
        pytest.skip(f"aime24 needs its data offline and the shared file {SHARED_AIME24} is absent "
                    "(the project does not ship it; the Hub download needs network)")
    args = ["check", "--task", task]
    for override in OFFLINE.get(task, []):
        args += ["--set", override]
    code = main(args)
    out = capsys.readouterr().out
    assert code == 0, out
    assert f"echo2 check: {task}" in out and " 0 failed" in out and "FAIL" not in out
    assert "PASS  data, seeding, rewards, masks, records (check_adapter)" in out
    if issubclass(registry.get_task_class(task), MultiTurnTaskAdapter):
        assert "PASS  environment (check_env)" in out and "PASS  episodes:" in out


@pytest.mark.parametrize("kind", ["single-turn", "multi-turn"])
def test_generated_tasks_pass(tmp_path, capsys, kind):
    name = "gen_" + kind.replace("-", "_")  # module names are process-wide: one per generated task
    new_task(name, kind, tmp_path / name)
    assert main(["check", "--config", str(tmp_path / name / f"{name}.yaml")]) == 0
    out = capsys.readouterr().out
    assert f"{name}_task.py:" in out and " 0 failed, 0 skipped" in out
    passes = out.count("  PASS  ")
    assert passes == (4 if kind == "multi-turn" else 1)
    if kind == "multi-turn":
        assert "by the scripted player (reference_reply); returns [1.0, 1.0, 1.0, 1.0]" in out


def _write(path: Path, text: str) -> str:
    path.write_text(textwrap.dedent(text))
    return str(path)


def test_a_reward_that_rejects_the_gold_answer_fails_with_the_fix(tmp_path, capsys):
    spec = _write(tmp_path / "bad_gold.py", """
        from echo2_sdk.adapter import Example, TaskAdapter

        class BadGold(TaskAdapter):
            name = "bad_gold"
            def examples(self, split):
                return [Example(id=f"b:{i}", prompt=f"{i}+1=", answer=str(i + 1)) for i in range(3)]
            def reward(self, example, text):
                return float(text == "never")
        """) + ":BadGold"
    assert main(["check", "--task", spec]) == 1
    out = capsys.readouterr().out
    assert "FAIL  data, seeding" in out and "below max_reward=1.0" in out and "Fix:" in out
    assert "1 failed" in out and out.rstrip().endswith("FAILED")


def _break_generated(tmp_path: Path, task: str, old: str, new: str) -> str:
    """A generated multi-turn task named ``task`` (unique: module names are process-wide), one edit made."""
    new_task(task, "multi-turn", tmp_path / task)
    for name in (f"{task}_env.py", f"{task}_task.py"):
        path = tmp_path / task / name
        text = path.read_text()
        if old in text:
            path.write_text(text.replace(old, new))
            return str(tmp_path / task / f"{task}.yaml")
    raise AssertionError(f"{old!r} not in the templates")


def test_an_expert_that_loses_fails_the_max_reward_check(tmp_path, capsys):
    config = _break_generated(tmp_path, "brk_expert", "return str((self.lo + self.hi) // 2)", "return str(self.lo)")
    assert main(["check", "--config", config]) == 1
    out = capsys.readouterr().out
    assert "FAIL  scripted player earns max_reward=1.0" in out and "fix the player (expert_action)" in out
    assert "PASS  episodes:" in out


def test_a_mask_over_environment_tokens_fails(tmp_path, capsys):
    # A task whose records train on every completion token, environment text included.
    override = (
        "    def to_rollout(self, episode, **kwargs):\n"
        "        import dataclasses\n"
        "        r = super().to_rollout(episode, **kwargs)\n"
        "        bad = dataclasses.replace(r.omega, loss_mask=tuple(1 for _ in r.omega.loss_mask))\n"
        "        return dataclasses.replace(r, omega=bad)\n\n"
        "    def reference_reply("
    )
    config = _break_generated(tmp_path, "brk_mask", "    def reference_reply(", override)
    assert main(["check", "--config", config]) == 1
    out = capsys.readouterr().out
    assert "FAIL  episodes:" in out and "the loss mask covers" in out


def test_nondeterministic_seeding_fails(tmp_path, capsys):
    config = _break_generated(tmp_path, "brk_seed", "rng = random.Random(episode_seed)", "rng = random.Random()")
    assert main(["check", "--config", config]) == 1
    out = capsys.readouterr().out
    assert "FAIL  environment (check_env)" in out and "seed" in out


def test_usage_errors_exit_2(capsys):
    assert main(["check"]) == 2
    assert "--task NAME" in capsys.readouterr().err
    assert main(["check", "--task", "arithh"]) == 2
    assert "Did you mean 'arith'" in capsys.readouterr().err


def test_checking_a_task_never_imports_ray(tmp_path):
    new_task("noray", "multi-turn", tmp_path / "noray")
    code = ("import sys; from echo2_sdk.task_check import run_check, load_tokenizer; "
            f"report, ok = run_check({str(tmp_path / 'noray' / 'noray_task.py') + ':NorayTask'!r}, "
            "{'num_train': 4, 'num_eval': 2, 'num_sft': 2}, 0, load_tokenizer('tiny')); "
            "assert ok, report; assert 'ray' not in sys.modules, 'ray was imported'")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
