"""avg@k / pass@k metrics, the evaluate loop (with a scripted backend, no model) and head-to-head evaluations."""

from __future__ import annotations

import math
import subprocess
import sys

import pytest

from echo2_sdk.checks import render_prompt_ids
from echo2_sdk.evaluation import avg_at_k, pass_at_k_unbiased
from echo2_sdk.registry import make_task
from echo2_sdk.rewards import RewardGuard
from echo2_sdk.runtime.rollout.backends.base import Completion, GenerationBackend, SamplingParams
from echo2_sdk.runtime.driver.evaluation import evaluate


def test_avg_at_k_and_pass_at_k():
    metrics = avg_at_k([[1, 0, 0, 0], [0, 0, 0, 0], [1, 1, 1, 1]], pass_ks=[1, 2, 4])
    assert metrics["k"] == 4 and metrics["num_examples"] == 3
    assert metrics["avg_at_k"] == pytest.approx((0.25 + 0 + 1) / 3)
    assert metrics["accuracy"] == pytest.approx(5 / 12)
    assert metrics["pass_at_k"] == pytest.approx(2 / 3)
    # pass@1 equals avg@k for 0/1 rewards; pass@k (all samples) equals the any-correct share.
    assert metrics["pass_at"][1] == pytest.approx(metrics["avg_at_k"])
    assert metrics["pass_at"][4] == pytest.approx(metrics["pass_at_k"])
    # one correct of 4, 2 drawn: 1 - C(3,2)/C(4,2) = 1/2
    assert metrics["pass_at"][2] == pytest.approx((0.5 + 0 + 1) / 3)


def test_pass_at_k_unbiased_matches_binomials():
    for n, c, k in [(10, 3, 1), (10, 3, 5), (16, 1, 8), (5, 0, 2), (5, 5, 5)]:
        expected = 1 - math.comb(n - c, k) / math.comb(n, k)
        assert pass_at_k_unbiased(n, c, k) == pytest.approx(expected)


def test_partial_rewards_count_as_correct_only_at_max_reward():
    metrics = avg_at_k([[0.5, 1.0]], max_reward=1.0)
    assert metrics["avg_at_k"] == 0.75 and metrics["accuracy"] == 0.5 and metrics["pass_at_k"] == 1.0


@pytest.mark.parametrize(
    "rewards, message",
    [([], "at least one example"), ([[1, 0], [1]], "same k"), ([[float("nan")]], "not finite")],
)
def test_avg_at_k_rejects_bad_input(rewards, message):
    with pytest.raises(ValueError, match=message):
        avg_at_k(rewards)


class ScriptedBackend(GenerationBackend):
    """Answers the first `num_correct` samples of each prompt with the gold answer, then "0"."""

    def __init__(self, tokenizer, gold_by_prompt: dict[tuple, str], num_correct: int):
        self.tokenizer, self.gold_by_prompt, self.num_correct = tokenizer, gold_by_prompt, num_correct
        self.version = 3
        self.seeds = []

    def generate(self, prompts, n, params):
        self.seeds.append(params.seed)
        out = []
        for prompt in prompts:
            samples = []
            for j in range(n):
                text = self.gold_by_prompt[tuple(prompt)] if j < self.num_correct else "0"
                ids = tuple(self.tokenizer.encode(text, add_special_tokens=False)) + (
                    self.tokenizer.eos_token_id,
                )
                samples.append(Completion(ids, (-0.5,) * len(ids), "stop"))
            out.append(samples)
        return out

    def load_weights(self, state_dict, version):
        self.version = version


@pytest.fixture(scope="module")
def arith_setup(tiny_tokenizer):  # tiny_tokenizer: session fixture from conftest.py
    tokenizer = tiny_tokenizer
    adapter = make_task("arith", {"first_operand": [1, 19], "second_operand": [1, 19]})  # no 0 answers, so "0" is always wrong
    gold = {
        tuple(render_prompt_ids(adapter, tokenizer, ex)): ex.answer for ex in adapter.examples("eval")
    }
    return adapter, tokenizer, gold


def test_evaluate_computes_avg_and_pass_at_k(arith_setup):
    adapter, tokenizer, gold = arith_setup
    backend = ScriptedBackend(tokenizer, gold, num_correct=1)
    params = SamplingParams(temperature=1.0, max_new_tokens=4, seed=10)
    result = evaluate(adapter, backend, tokenizer, k=4, params=params, limit=20, batch_size=8)
    assert result["num_examples"] == 20 and result["k"] == 4
    assert result["avg_at_k"] == pytest.approx(0.25) and result["pass_at_k"] == 1.0
    assert result["statuses"] == {"ok": 80} and result["truncated_fraction"] == 0.0
    assert result["version"] == 3
    assert backend.seeds == [10, 11, 12]  # one seed per batch of 8 prompts


def test_evaluate_through_a_guard_gives_the_same_numbers(arith_setup):
    adapter, tokenizer, gold = arith_setup
    backend = ScriptedBackend(tokenizer, gold, num_correct=2)
    params = SamplingParams(temperature=0.0, max_new_tokens=4)
    with RewardGuard("arith", {"first_operand": [1, 19], "second_operand": [1, 19]}, 0) as guard:
        guarded = evaluate(adapter, backend, tokenizer, k=3, params=params, guard=guard, limit=10)
    direct = evaluate(adapter, backend, tokenizer, k=3, params=params, limit=10)
    assert guarded["avg_at_k"] == direct["avg_at_k"] == pytest.approx(2 / 3)


def test_evaluate_rejects_an_empty_split(arith_setup):
    adapter, tokenizer, gold = arith_setup
    with pytest.raises(ValueError, match="no examples in split 'eval'"):
        evaluate(adapter, ScriptedBackend(tokenizer, gold, 1), tokenizer,
                 params=SamplingParams(), limit=0)


# ----- head-to-head evaluations: the HeadToHead contract and how `echo2 eval` finds one -----------------
THIRD_PARTY_TASK = '''
from echo2_sdk.adapter import TaskAdapter
from echo2_sdk.evaluation import HeadToHead


def _run(args, llm_policy_factory):
    return (f"{args.agents} vs {args.opponents}: {args.flips} flips at bias {args.bias}, seed {args.seed}, "
            f"json {args.json}, models {callable(llm_policy_factory)}")


class CoinAdapter(TaskAdapter):
    """Coin flips, evaluated head to head."""

    @classmethod
    def head_to_head(cls):
        return HeadToHead(run=_run, default_agents="rule:heads", default_opponents="rule:tails", games_arg="flips",
                          default_games=10, add_arguments=lambda p: p.add_argument("--bias", type=float, default=0.5))


class WrongHeadToHeadAdapter(TaskAdapter):
    """Returns the wrong kind of object."""

    @classmethod
    def head_to_head(cls):
        return {"run": _run}
'''


def _noop_run(args, llm_policy_factory) -> str:
    return ""


def test_head_to_head_rejects_a_bad_games_argument_or_count():
    from echo2_sdk.evaluation import HeadToHead

    with pytest.raises(ValueError, match="games_arg='hands per cell'"):
        HeadToHead(run=_noop_run, default_agents="a", default_opponents="b", games_arg="hands per cell", default_games=5)
    with pytest.raises(ValueError, match="default_games=0"):
        HeadToHead(run=_noop_run, default_agents="a", default_opponents="b", games_arg="hands", default_games=0)
    assert HeadToHead(run=_noop_run, default_agents="a", default_opponents="b", games_arg="max_games",
                      default_games=1).games_flag == "--max-games"


def test_echo2_eval_finds_a_third_party_tasks_head_to_head(tmp_path, capsys):
    from echo2_sdk.runtime.cli import main

    task_file = tmp_path / "coin_flip_head_to_head_task.py"
    task_file.write_text(THIRD_PARTY_TASK)
    task = f"{task_file}:CoinAdapter"
    assert main(["eval", "--task", task, "--flips", "3", "--bias", "0.25", "--seed", "7", "--json"]) == 0
    assert capsys.readouterr().out.strip() == ("rule:heads vs rule:tails: 3 flips at bias 0.25, seed 7, json True, "
                                               "models True")
    # A model folder given as an agent reaches the task as an llm: spec.
    assert main(["eval", "--task", task, "--agents", str(tmp_path), "--opponents", "rule:edge"]) == 0
    assert capsys.readouterr().out.startswith(f"llm:{tmp_path} vs rule:edge: 10 flips at bias 0.5")
    assert main(["eval", "--task", task, "--flips", "0"]) == 2
    assert capsys.readouterr().err.strip() == "echo2 eval: --flips 0 must be >= 1"
    assert main(["eval", "--task", f"{task_file}:WrongHeadToHeadAdapter"]) == 2
    assert "head_to_head() returned dict, not an echo2_sdk.evaluation.HeadToHead" in capsys.readouterr().err
    with pytest.raises(SystemExit):  # the other task's arguments are not this task's
        main(["eval", "--task", task, "--hands", "3"])


def test_echo2_eval_of_a_task_without_one_names_the_tasks_that_have_one(capsys):
    from echo2_sdk.runtime.cli import main

    assert main(["eval", "--task", "arith"]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and err.startswith("echo2 eval: task 'arith' has no head-to-head evaluation")
    with_one = err.split("tasks with one: ")[1].split(" (")[0].split(", ")
    assert {"poker", "moba"} <= set(with_one) and "arith" not in with_one
    assert main(["eval", "--task", "pokr"]) == 2
    assert "Did you mean 'poker'" in capsys.readouterr().err


def test_echo2_eval_reads_an_abbreviated_task_option_as_the_task(capsys):
    from echo2_sdk.runtime.cli import main

    assert main(["eval", "--ta", "moba", "--episodes", "2", "--opponents", "rule:pusher"]) == 0
    assert "games per cell" in capsys.readouterr().out


def test_echo2_eval_help_is_the_tasks_and_loads_no_torch_or_ray():
    code = ("import sys\nfrom echo2_sdk.runtime.cli import main\n"
            "try:\n    main(['eval', '--task', 'moba', '--help'])\nexcept SystemExit:\n    pass\n"
            "print('HEAVY', sorted({m.split('.')[0] for m in sys.modules} & {'torch', 'ray', 'transformers'}))")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert "--episodes" in proc.stdout and "--team-size" in proc.stdout and "--hands" not in proc.stdout
    assert proc.stdout.strip().splitlines()[-1] == "HEAVY []"
