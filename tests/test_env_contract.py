"""The TextEnv contract and check_env, on a tiny counting env and on envs that break the contract."""

from __future__ import annotations

import pytest

from echo2_sdk.env import (TEXT_CHARSET, ChatEpisode, EnvCheckError, TextEnv, check_env, coerce_action,
                           sanitize_text)


class GuessEnv(TextEnv):
    """Guess a number in 0..9 drawn from the episode seed; 3 guesses; reward 1 for a hit."""

    def _reset_episode(self, episode_seed, options):
        self.secret, self.guesses_left = episode_seed % 10, 3
        return "Guess a digit.", {}

    def _step_text(self, action):
        text = action.strip()
        if not (len(text) == 1 and text.isdigit()):
            return f"Not a digit: {sanitize_text(text)!r}. Guess a digit.", 0.0, False, False, {
                "invalid_reason": "expected one digit"}
        self.guesses_left -= 1
        if int(text) == self.secret:
            return "Correct.", 1.0, True, False, {}
        hint = "higher" if int(text) < self.secret else "lower"
        return f"Wrong, go {hint}.", 0.0, False, self.guesses_left == 0, {}

    def legal_actions(self):
        return [] if self.done else [str(d) for d in range(10)]


def test_check_env_passes_on_a_well_behaved_env():
    report = check_env(GuessEnv())
    assert report["episodes"] == 6 and report["steps"] > 20


def test_reset_seed_determinism_log_and_replay():
    env = GuessEnv()
    obs, info = env.reset(seed=5)
    assert info["legal_actions"] == [str(d) for d in range(10)] and "episode_seed" in info
    secret = env.secret
    env.step("x")
    env.step(str((secret + 1) % 10))
    log = env.log
    assert [t.action for t in log.turns] == ["x", str((secret + 1) % 10)]
    assert log.turns[0].invalid_reason == "expected one digit" and log.turns[1].invalid_reason is None
    again = GuessEnv()
    again.reset(seed=5)
    assert again.secret == secret
    assert [t.observation for t in again.replay(log).turns] == [t.observation for t in log.turns]


def test_step_outside_an_episode_raises_but_bad_actions_do_not():
    env = GuessEnv()
    with pytest.raises(RuntimeError, match="before reset"):
        env.step("1")
    env.reset(seed=0)
    for bad in (None, 3.5, b"\xff", ["1"], "é" * 10_000):
        env.step(bad)
    env.step(str(env.secret))
    with pytest.raises(RuntimeError, match="after the episode ended"):
        env.step("1")


def test_coerce_and_sanitize():
    assert coerce_action(b"call") == "call" and coerce_action(None) == "" and coerce_action(7) == "7"
    clean = sanitize_text("héllo\nworld" * 10, max_chars=12)
    assert clean == "h?llo?worldh..." and set(clean) <= set(TEXT_CHARSET)


class CrashesOnGarbage(GuessEnv):
    def _step_text(self, action):
        int(action)  # raises on malformed text
        return super()._step_text(action)


class Nondeterministic(GuessEnv):
    calls = 0

    def _reset_episode(self, episode_seed, options):
        Nondeterministic.calls += 1
        obs, info = super()._reset_episode(episode_seed, options)
        return f"{obs} ({Nondeterministic.calls})", info


class BothFlags(GuessEnv):
    def _step_text(self, action):
        obs, reward, terminated, truncated, info = super()._step_text(action)
        return obs, reward, terminated, terminated, info


class UnicodeObservation(GuessEnv):
    def _step_text(self, action):
        obs, *rest = super()._step_text(action)
        return obs + " ✓", *rest


@pytest.mark.parametrize("env_cls, match", [
    (CrashesOnGarbage, "raised ValueError"),
    (Nondeterministic, "non-deterministic|differ"),
    (BothFlags, "both True"),
    (UnicodeObservation, "observation"),
])
def test_check_env_catches_contract_violations(env_cls, match):
    with pytest.raises(EnvCheckError, match=match):
        check_env(env_cls())


def test_chat_episode_tokens_align_with_the_template(tiny_tokenizer):
    tok = tiny_tokenizer
    env = GuessEnv()
    episode = ChatEpisode(env, tok, episode_seed=13, system_prompt="Guess.")
    episode.submit_text("9")  # secret is 3: wrong
    episode.submit(tok.encode("2", add_special_tokens=False))  # no <|im_end|>: as if cut by max_new_tokens
    episode.submit_text("3")
    assert episode.done and episode.stop_reason == "terminated" and episode.total_reward == 1.0
    full = tok.apply_chat_template(episode.messages, tokenize=True)
    full = list(full["input_ids"] if hasattr(full, "keys") else full)
    assert episode.prompt_ids + episode.completion_ids == full
    trained = [t for t, m in zip(episode.completion_ids, episode.loss_mask) if m]
    assert tok.decode(trained, skip_special_tokens=False) == "9<|im_end|>23<|im_end|>"
    assert len(episode.logprobs) == len(episode.completion_ids)


def test_chat_episode_stop_drops_the_unanswered_turn(tiny_tokenizer):
    episode = ChatEpisode(GuessEnv(), tiny_tokenizer, episode_seed=13)
    episode.submit_text("9")
    before_stop = len(episode.completion_ids)
    episode.stop("length")
    assert episode.done and episode.stop_reason == "length"
    assert len(episode.completion_ids) < before_stop and episode.loss_mask[-1] == 0
    assert tiny_tokenizer.decode(episode.completion_ids, skip_special_tokens=False) == "9<|im_end|>\n"
    with pytest.raises(RuntimeError, match="over"):
        episode.submit_text("3")


# Like Qwen3's template: the assistant turn after the last user message gets an empty think block.
THINK_TEMPLATE = (
    "{%- set ns = namespace(last_user=0) %}"
    "{%- for m in messages %}{%- if m['role'] == 'user' %}{%- set ns.last_user = loop.index0 %}{%- endif %}{%- endfor %}"
    "{%- for m in messages %}"
    "{%- if m['role'] == 'assistant' and loop.index0 > ns.last_user %}"
    "{{- '<|im_start|>assistant\\n<think>\\n\\n</think>\\n\\n' + m['content'] + '<|im_end|>\\n' }}"
    "{%- else %}{{- '<|im_start|>' + m['role'] + '\\n' + m['content'] + '<|im_end|>\\n' }}{%- endif %}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}"
)


def test_chat_episode_handles_templates_that_special_case_the_last_turn():
    from echo2_sdk.tiny_tokenizer import build_tiny_tokenizer

    tok = build_tiny_tokenizer()
    tok.chat_template = THINK_TEMPLATE
    episode = ChatEpisode(GuessEnv(), tok, episode_seed=13, system_prompt="Guess.")
    episode.submit_text("9")
    episode.submit_text("8")
    # Mid-episode, the model's context equals the template's rendering of the history.
    expected = tok.apply_chat_template(episode.messages, tokenize=False, add_generation_prompt=True)
    assert tok.decode(episode.context_ids, skip_special_tokens=False) == expected
