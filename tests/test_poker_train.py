"""Poker through the training system: multi-turn worker rollouts, malformed output, trainer, echo2 eval."""

from __future__ import annotations

import json
import random

import pytest
import torch

from echo2_sdk.chat import chat_token_ids
from echo2_sdk.runtime.cli import main as cli_main
from echo2_sdk.config import load_config, to_dict
from echo2_sdk.records import group_from_wire, validate_group
from echo2_sdk.registry import make_task
from echo2_sdk.runtime.rollout.backends.base import Completion, GenerationBackend, SamplingParams
from echo2_sdk.runtime.rollout.episodes import run_episodes, summarize_rollouts
from echo2_sdk.runtime.models.modeling import ensure_tiny_qwen3
from echo2_sdk.signals import assistant_mask
from echo2_sdk.masks import turn_spans

torch.set_num_threads(1)
OPTIONS = {"num_train": 6, "num_eval": 2, "num_sft": 0, "opponent": "rule:calling"}


class ScriptedBackend(GenerationBackend):
    """Replies from a script (tokenized, closed by <|im_end|>); records every call's batch."""

    def __init__(self, tokenizer, replies):
        self.tok, self.replies, self.calls, self.version = tokenizer, list(replies), [], 0
        self.eos = tokenizer.convert_tokens_to_ids("<|im_end|>")
        self.sent: list[str] = []

    def generate(self, prompts, n, params):
        self.calls.append((len(prompts), n))
        out = []
        for _ in prompts:
            row = []
            for _ in range(n):
                text = self.replies[len(self.sent) % len(self.replies)]
                self.sent.append(text)
                ids = tuple(self.tok.encode(text, add_special_tokens=False)) + (self.eos,)
                row.append(Completion(ids, tuple(-0.25 for _ in ids), "stop"))
            out.append(row)
        return out

    def load_weights(self, state_dict, version):
        self.version = version


class RandomTokenBackend(ScriptedBackend):
    """Uniformly random token ids (special tokens included), often without an end of turn."""

    def generate(self, prompts, n, params):
        rng = random.Random(len(self.calls))
        self.calls.append((len(prompts), n))
        vocab = len(self.tok)
        return [[Completion(ids, tuple(-3.0 for _ in ids), "length")
                 for ids in (tuple(rng.randrange(vocab) for _ in range(params.max_new_tokens)) for _ in range(n))]
                for _ in prompts]


def test_lock_step_episodes_give_valid_records_whose_masks_decode_to_the_actions(tiny_tokenizer):
    tok = tiny_tokenizer
    adapter = make_task("poker", {**OPTIONS, "hands_per_episode": 2})
    examples = adapter.examples("train")[:3]
    backend = ScriptedBackend(tok, ["call", "Action: check", "nonsense", "raise 40", "bet 20", "fold", "all-in"])
    params = SamplingParams(1.0, 1.0, 12, seed=0)
    batch = run_episodes(adapter, backend, tok, examples, 4, params, version=0, worker="t")
    assert backend.calls[0] == (3, 4)  # round 0: one group call from the shared prompts
    assert all(n == 1 for _, n in backend.calls[1:]) and batch.rounds == len(backend.calls)
    assert sum(size * n for size, n in backend.calls) == len(backend.sent)
    assert [g.prompt_key for g in batch.groups] == [e.id for e in examples]
    im = dict(im_start_id=tok.convert_tokens_to_ids("<|im_start|>"), im_end_id=tok.convert_tokens_to_ids("<|im_end|>"),
              newline_id=tok.convert_tokens_to_ids("\n"))
    replies_seen = []
    for group in batch.groups:
        accepted, rejected = validate_group(group, newest_version=0)
        assert len(accepted) == 4 and not rejected
        for rec in group.rollouts:
            example = next(e for e in examples if e.id == rec.prompt_key)
            assert list(rec.prompt_ids) == chat_token_ids(tok, adapter.build_messages(example))
            full = list(rec.prompt_ids + rec.completion_ids)
            assert assistant_mask(full, **im)[len(rec.prompt_ids):] == list(rec.omega.loss_mask)
            turns = [tok.decode(rec.completion_ids[a:b], skip_special_tokens=False) for a, b in turn_spans(rec.omega.loss_mask)]
            assert len(turns) == rec.meta["turns"] and all(t.endswith("<|im_end|>") for t in turns)
            replies_seen += [t.removesuffix("<|im_end|>") for t in turns]
            assert [lp for lp, m in zip(rec.sampler_logprobs, rec.omega.loss_mask) if m] == [-0.25] * sum(rec.omega.loss_mask)
            assert all(lp == 0.0 for lp, m in zip(rec.sampler_logprobs, rec.omega.loss_mask) if not m)
            assert rec.meta["hands_played"] == 2  # R: chips in big blinds, less 1 BB (the default penalty) per refusal
            assert rec.reward == rec.meta["chips"] / 10 - 1.0 * rec.meta["invalid_actions"]
    assert sorted(replies_seen) == sorted(backend.sent)  # every sampled reply is trained on, nothing else
    play = summarize_rollouts([r for g in batch.groups for r in g.rollouts])
    assert 0 < play["legal_action_rate"] < 1  # "nonsense" is refused, the rest mostly accepted


def test_worker_multi_turn_path_with_real_and_malformed_output(tiny_tokenizer):
    from echo2_sdk.runtime.rollout.base import WorkerSettings
    from echo2_sdk.runtime.rollout.worker import RolloutWorker

    worker = RolloutWorker("w", WorkerSettings(model_path=ensure_tiny_qwen3(), task_name="poker", task_options=OPTIONS,
                                               sampling=SamplingParams(1.0, 1.0, 8, seed=0), samples_per_prompt=2,
                                               seed=0))
    try:
        examples = list(worker.adapter.examples("train"))[:2]
        result = worker.generate(examples)  # the tiny random-init model: real sampled tokens
        groups = [group_from_wire(g) for g in result.groups]
        assert [g.prompt_key for g in groups] == [e.id for e in examples] and result.t_reward_s == 0.0
        records = [r for g in groups for r in g.rollouts]
        for g in groups:
            accepted, rejected = validate_group(g, newest_version=0)
            assert len(accepted) == 2 and not rejected
        assert result.num_tokens == sum(sum(r.omega.loss_mask) for r in records)
        assert result.reward_status == {"ok": 4}
        worker.backend = RandomTokenBackend(worker.tokenizer, [])  # garbage, special tokens included
        result = worker.generate(examples)
        records = [r for g in map(group_from_wire, result.groups) for r in g.rollouts]
        assert all(validate_group(g, newest_version=0)[1] == {} for g in map(group_from_wire, result.groups))
        assert all(r.meta["stop"] == "terminated" and r.meta["invalid_actions"] >= 1 for r in records)
        assert all(r.meta["forced_actions"] >= 1 for r in records)
        play = summarize_rollouts(records)
        assert play["legal_action_rate"] == 0.0 and play["forced_action_rate"] == 1.0
    finally:
        worker.close()


def test_a_too_long_context_stops_the_episode_and_the_record_stays_valid(tiny_tokenizer):
    adapter = make_task("poker", {**OPTIONS, "hands_per_episode": 3})
    backend = ScriptedBackend(tiny_tokenizer, ["check", "call"])
    example = adapter.examples("train")[0]
    prompt_len = len(adapter.open_episode(example, tiny_tokenizer).prompt_ids)
    batch = run_episodes(adapter, backend, tiny_tokenizer, [example], 1, SamplingParams(1.0, 1.0, 12),
                         version=0, max_context_tokens=prompt_len + 300)
    [rec] = batch.groups[0].rollouts
    assert rec.meta["stop"] == "length" and rec.num_tokens <= prompt_len + 300
    assert validate_group(batch.groups[0], newest_version=0)[1] == {}
    with pytest.raises(ValueError, match="max_context_tokens"):
        run_episodes(adapter, backend, tiny_tokenizer, [example], 1, SamplingParams(max_new_tokens=12),
                     version=0, max_context_tokens=10)


def test_echo2_eval_with_rule_agents(capsys):
    from echo2_sdk.runtime.cli import build_parser

    assert "eval" in build_parser().format_help()
    assert cli_main(["eval", "--task", "poker", "--agent", "rule:tag", "--opponents", "rule:calling,rule:lag",
                     "--hands", "8", "--json"]) == 0
    table = json.loads(capsys.readouterr().out)
    cell = table["cells"]["rule:tag"]["rule:calling"]
    assert cell["hands"] == 8 and cell["legal_action_rate"] == 1.0 and set(table["opponents"]) == {"rule:calling", "rule:lag"}
    assert cli_main(["eval", "--agent", "rule:lag", "--opponents", "rule:tag", "--hands", "4"]) == 0
    assert "| rule:lag |" in capsys.readouterr().out
    assert cli_main(["eval", "--task", "arith", "--agent", "rule:tag"]) == 2
    assert cli_main(["eval", "--agent", "rule:tga", "--opponents", "rule:tag", "--hands", "2"]) == 2
    assert "Did you mean 'rule:tag'" in capsys.readouterr().err


def test_echo2_eval_with_a_run_checkpoint(tmp_path, capsys):
    """A run's checkpoint folder (weights + config.json, no tokenizer) works as an agent as is."""
    from transformers import AutoModelForCausalLM

    import yaml

    run = tmp_path / "run"
    ckpt = run / "checkpoints" / "step_2"
    AutoModelForCausalLM.from_pretrained(ensure_tiny_qwen3()).save_pretrained(ckpt)
    (run / "config.yaml").write_text(yaml.safe_dump(to_dict(load_config(None, ["task.name=poker"]))))
    assert not (ckpt / "tokenizer.json").exists()
    assert cli_main(["eval", "--agent", str(ckpt), "--opponents", "rule:calling", "--hands", "2", "--json",
                     "--max-new-tokens", "4"]) == 0
    table = json.loads(capsys.readouterr().out)
    label = f"llm:{ckpt}"
    cell = table["cells"][label]["rule:calling"]
    assert cell["hands"] == 2 and cell["legal_action_rate"] is not None and cell["invalid_actions"] >= 1
    # The run directory itself means its latest checkpoint.
    assert cli_main(["eval", "--agent", f"llm:{run}", "--opponents", "rule:calling", "--hands", "2",
                     "--max-new-tokens", "4"]) == 0
    assert cli_main(["eval", "--agent", f"llm:{tmp_path / 'nope'}", "--opponents", "rule:calling", "--hands", "2"]) == 2
    assert "neither an existing folder" in capsys.readouterr().err


def test_a_runs_policies_answer_at_the_runs_reply_length(tmp_path):
    from echo2_sdk.runtime.rollout.chat_policy import reply_tokens, run_of

    import yaml

    run = tmp_path / "run"
    (run / "checkpoints" / "step_4").mkdir(parents=True)
    (run / "base_model").mkdir()
    (run / "config.yaml").write_text(yaml.safe_dump(to_dict(load_config(None, ["rollout.max_new_tokens=6"]))))
    for spec in (run, run / "base_model", run / "checkpoints" / "step_4"):
        assert run_of(str(spec)) == run and reply_tokens(str(spec), 16) == 6
    assert run_of(str(tmp_path)) is None and reply_tokens("tiny-qwen3", 16) == 16


@pytest.mark.slow
@pytest.mark.parametrize("sampling", ["fixed", "prioritized"])
def test_two_trainer_steps_on_the_poker_config(tmp_path, sampling, ray_cluster):
    """examples/poker.yaml as shipped (warm start off), two steps: also the example-config run for poker that
    test_moba_env.py does for MOBA."""
    from echo2_sdk.runtime.driver.trainer import Trainer

    cfg = load_config("examples/poker.yaml", [
        "model.warm_start.enabled=false", "train.steps=2", "train.prompts_per_step=2", "rollout.samples_per_prompt=2",
        "rollout.prompts_per_request=1", "rollout.num_workers=1", "train.eval_max_examples=2", "train.plots=false",
        "rollout.max_new_tokens=6", "train.checkpoint_every=0", "task.options={num_train: 8, num_eval: 2}",
        f"train.opponent_sampling={sampling}",
    ])
    summary = Trainer(cfg, str(tmp_path / "poker"), log=lambda m: None).fit()
    assert summary["steps"] == 2 and summary["samples_accepted"] >= 2 * 2 * 2 and summary["samples_rejected"] == 0
    for when in ("before", "after"):
        ev = summary["eval"][when]
        assert ev["episodes"] == 2 and ev["legal_action_rate"] is not None and "mean_return" in ev
    assert (tmp_path / "poker" / "checkpoints" / "step_2" / "model.safetensors").exists()
    rows = [json.loads(line) for line in (tmp_path / "poker" / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [1, 2] and all(r["samples"] == 4 for r in rows)
    shares = [{k: v for k, v in r.items() if k.startswith("opponent_share/")} for r in rows]
    if sampling == "fixed":
        assert shares == [{}, {}]
    else:  # one share per line-up of the example's pool, and the trained line-ups' running returns
        assert all(sorted(s) == [f"opponent_share/rule:{n}" for n in ("calling", "lag", "tag")] for s in shares)
        assert all(sum(s.values()) == pytest.approx(1.0, abs=1e-3) for s in shares)
        assert any(k.startswith("opponent_return/") for k in rows[-1])
