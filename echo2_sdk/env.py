"""Text environments: a small gymnasium contract for tasks that talk to the model in turns.

A :class:`TextEnv` observes and acts in text (``spaces.Text`` on both sides), as a chat model does:
the observation becomes a user message, the model's reply is the action. Subclasses implement
``_reset_episode``, ``_step_text`` and ``legal_actions``; the base class handles what every text
env must get right the same way:

- **seeding**: ``reset(seed=s)`` seeds ``np_random`` (gymnasium semantics) and draws one integer
  *episode seed* from it; everything random in the episode must derive from that integer, so an
  episode is replayable from ``(episode_seed, options, actions)`` alone (:meth:`TextEnv.replay`);
- **malformed actions**: any object is accepted as an action and coerced to text; a subclass
  answers unusable text with a reason in the next observation (and ``info["invalid_reason"]``),
  never with an exception, because the action comes from a model;
- **the episode log**: every step is recorded as a :class:`Turn` (observation seen, action,
  reward, ...), the ``(state, action, reward)`` trail that training and debugging read.

:func:`check_env` runs gymnasium's checker plus echo2's own contract checks.
"""

from __future__ import annotations

import math
import random
import string
import time
import warnings
from dataclasses import dataclass, field
from typing import Any, Callable, ClassVar, Sequence

import gymnasium
from gymnasium import spaces

# What a char-level tokenizer (and any BPE tokenizer) can encode losslessly: printable ASCII, space
# and newline. Observations must stay inside it, so text echoed from a model is sanitized first.
TEXT_CHARSET = "".join(sorted(set(string.printable) - set("\t\r\x0b\x0c")))
_CHARSET_SET = frozenset(TEXT_CHARSET)


def sanitize_text(text: str, max_chars: int = 40) -> str:
    """``text`` cut to ``max_chars`` with characters outside :data:`TEXT_CHARSET` replaced by '?'.

    Used to echo a model's (possibly huge or non-ASCII) output back inside an observation.
    """
    cut = text[: max_chars + 1]
    clean = "".join(c if c in _CHARSET_SET and c != "\n" else "?" for c in cut[:max_chars])
    return clean + ("..." if len(cut) > max_chars else "")


def coerce_action(action: Any) -> str:
    """Any object → action text. Bytes are decoded leniently; ``None`` is the empty action."""
    if isinstance(action, str):
        return str(action)  # str subclasses (numpy.str_) become plain str
    if isinstance(action, (bytes, bytearray)):
        return bytes(action).decode("utf-8", errors="replace")
    if action is None:
        return ""
    try:
        return str(action)
    except Exception:  # an object whose __str__ raises is still just a bad action
        return f"<unprintable {type(action).__name__}>"


@dataclass(frozen=True)
class Turn:
    """One ``step``: the observation the actor saw, what it answered, and what came back."""

    observation: str
    action: str
    reward: float
    terminated: bool
    truncated: bool
    invalid_reason: str | None
    """Why the action was not applied (``None`` when it was)."""


@dataclass
class EpisodeLog:
    """Everything needed to replay an episode: its seed, options and the actions taken."""

    episode_seed: int
    options: dict[str, Any]
    initial_observation: str
    turns: list[Turn] = field(default_factory=list)

    @property
    def actions(self) -> list[str]:
        return [turn.action for turn in self.turns]

    @property
    def total_reward(self) -> float:
        return sum(turn.reward for turn in self.turns)


class TextEnv(gymnasium.Env):
    """Base class of echo2 text environments (see the module docstring for the contract).

    ``info`` of every ``reset``/``step`` holds ``invalid_reason`` (``None`` when the action was
    applied) and ``legal_actions``; subclasses add their own keys.
    """

    metadata: ClassVar[dict[str, Any]] = {"render_modes": ["ansi"]}
    max_observation_chars: ClassVar[int] = 8192
    max_action_chars: ClassVar[int] = 256
    """Length of the action space's samples; longer actions are still accepted (and refused)."""

    def __init__(self, render_mode: str | None = None) -> None:
        if render_mode not in (None, *self.metadata["render_modes"]):
            raise ValueError(f"render_mode={render_mode!r}; use None or one of {self.metadata['render_modes']}")
        self.render_mode = render_mode
        self.observation_space = spaces.Text(
            max_length=self.max_observation_chars, min_length=0, charset=TEXT_CHARSET
        )
        self.action_space = spaces.Text(max_length=self.max_action_chars, min_length=0, charset=TEXT_CHARSET)
        self.log: EpisodeLog | None = None
        self._observation = ""
        self._done = False

    # ----- to implement -----------------------------------------------------------------------
    def _reset_episode(self, episode_seed: int, options: dict[str, Any]) -> tuple[str, dict[str, Any]]:
        """Start an episode fully determined by ``episode_seed`` and ``options``."""
        raise NotImplementedError

    def _step_text(self, action: str) -> tuple[str, float, bool, bool, dict[str, Any]]:
        """Apply ``action`` (any text). Unusable text must be answered, not raised."""
        raise NotImplementedError

    def legal_actions(self) -> list[str]:
        """Concrete action texts that are legal now (empty once the episode is over)."""
        raise NotImplementedError

    # ----- gymnasium API ----------------------------------------------------------------------
    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        super().reset(seed=seed)
        episode_seed = int(self.np_random.integers(0, 2**62))
        return self.begin_episode(episode_seed, options)

    def step(self, action: Any):
        if self.log is None:
            raise RuntimeError(f"{type(self).__name__}.step() called before reset()")
        if self._done:
            raise RuntimeError(f"{type(self).__name__}.step() called after the episode ended; call reset()")
        text = coerce_action(action)
        seen = self._observation
        obs, reward, terminated, truncated, info = self._step_text(text)
        reward = float(reward)
        if not math.isfinite(reward):
            raise ValueError(f"{type(self).__name__} produced a non-finite reward {reward!r}")
        terminated, truncated = bool(terminated), bool(truncated)
        info = dict(info)
        info.setdefault("invalid_reason", None)
        info["legal_actions"] = [] if (terminated or truncated) else list(self.legal_actions())
        self.log.turns.append(Turn(seen, text, reward, terminated, truncated, info["invalid_reason"]))
        self._observation = obs
        self._done = terminated or truncated
        return obs, reward, terminated, truncated, info

    def render(self) -> str | None:
        return self._observation if self.render_mode == "ansi" else None

    # ----- episodes by seed ---------------------------------------------------------------------
    def begin_episode(self, episode_seed: int, options: dict[str, Any] | None = None):
        """Start the episode of ``episode_seed`` directly (what ``reset`` does after drawing the seed).

        Task adapters use it to play the episode an ``Example`` names; ``np_random`` is untouched.
        """
        options = dict(options or {})
        obs, info = self._reset_episode(episode_seed, options)
        info = dict(info)
        info.setdefault("invalid_reason", None)
        info["legal_actions"] = list(self.legal_actions())
        info["episode_seed"] = episode_seed
        self.log = EpisodeLog(episode_seed, options, obs)
        self._observation, self._done = obs, False
        return obs, info

    def replay(self, log: EpisodeLog) -> EpisodeLog:
        """Play ``log``'s actions again from its episode seed; returns the new log (equal if deterministic)."""
        self.begin_episode(log.episode_seed, log.options)
        for turn in log.turns:
            if self._done:
                break
            self.step(turn.action)
        assert self.log is not None
        return self.log

    @property
    def done(self) -> bool:
        return self._done


Policy = Callable[[list[dict[str, str]]], str]
"""A chat policy: messages (role/content dicts) in, the assistant's reply text out."""


# ----- check_env --------------------------------------------------------------------------------
class EnvCheckError(AssertionError):
    """A text env broke the contract; the message says what and how to fix it."""


MALFORMED_ACTIONS: tuple[Any, ...] = (
    "", "   ", "\n\n", "asdf qwerty", "Action:", "raise", "raise -5", "raise 1e309", "raise 12.5",
    "raise 99999999999999999999999999", "bet NaN", "fold fold fold", "x" * 100_000,
    "é¡⛔ 🂡 ῥαίσε", "\x00\x1b[31m", None, 7, 3.5, b"call", b"\xff\xfe", ["call"], {"a": 1},
)


def _fail(env: TextEnv, what: str, fix: str) -> EnvCheckError:
    return EnvCheckError(f"check_env({type(env).__name__}): {what}. Fix: {fix}")


def _check_step_output(env: TextEnv, out: Any, action: Any) -> tuple[str, float, bool, bool, dict]:
    if not (isinstance(out, tuple) and len(out) == 5):
        raise _fail(env, f"step({action!r:.40}) returned {type(out).__name__}", "return (obs, reward, terminated, truncated, info)")
    obs, reward, terminated, truncated, info = out
    if not isinstance(obs, str) or obs not in env.observation_space:
        raise _fail(env, f"step({action!r:.40}) returned an observation outside observation_space: {obs!r:.80}",
                    "observations must be str within TEXT_CHARSET and max_observation_chars; sanitize echoed text")
    if not isinstance(reward, float) or not math.isfinite(reward):
        raise _fail(env, f"step returned reward {reward!r}", "return a finite float")
    if type(terminated) is not bool or type(truncated) is not bool:
        raise _fail(env, f"terminated={terminated!r}, truncated={truncated!r}", "return two separate bools")
    if terminated and truncated:
        raise _fail(env, "terminated and truncated are both True",
                    "terminated = the task ended; truncated = cut short by a limit; never both")
    if not isinstance(info, dict) or "invalid_reason" not in info:
        raise _fail(env, "info lacks 'invalid_reason'", "use TextEnv.step, which fills it")
    return obs, reward, terminated, truncated, info


def _play(env: TextEnv, seed: int, *, max_steps: int, malformed_every: int) -> list[tuple]:
    """One episode with seeded random legal actions, malformed ones mixed in; the trail of outputs."""
    chooser = random.Random(seed)
    obs, info = env.reset(seed=seed)
    trail: list[tuple] = [(obs,)]
    for step in range(max_steps):
        legal = env.legal_actions()
        if not legal or not all(isinstance(a, str) for a in legal):
            raise _fail(env, f"legal_actions() returned {legal!r} before the episode ended",
                        "return a non-empty list of action texts while the episode runs")
        malformed = malformed_every and step % malformed_every == malformed_every - 1
        action = MALFORMED_ACTIONS[chooser.randrange(len(MALFORMED_ACTIONS))] if malformed else chooser.choice(legal)
        try:
            out = env.step(action)
        except Exception as exc:
            raise _fail(env, f"step({action!r:.60}) raised {type(exc).__name__}: {exc}",
                        "answer unusable actions with a reason in the observation, never an exception") from exc
        obs, reward, terminated, truncated, info = _check_step_output(env, out, action)
        if not malformed and info["invalid_reason"] is not None:
            raise _fail(env, f"legal action {action!r} was refused: {info['invalid_reason']}",
                        "legal_actions() must only list actions that step() accepts")
        trail.append((obs, reward, terminated, truncated, info["invalid_reason"]))
        if terminated or truncated:
            return trail
    raise _fail(env, f"the episode did not end within {max_steps} steps", "bound episodes (truncate after a step limit)")


def check_env(env: TextEnv, *, seeds: Sequence[int] = (0, 1, 2), max_steps: int = 2000,
              gymnasium_checks: bool = True) -> dict[str, Any]:
    """Check ``env`` against gymnasium's API and echo2's text-env contract; raise :class:`EnvCheckError`.

    echo2's checks: determinism (same seed and actions → same observations, rewards and flags, also
    through :meth:`TextEnv.replay`); malformed actions (garbage, empty, huge, unicode, non-text)
    never raise and keep observations inside the observation space; terminated and truncated are
    separate bools; rewards are finite; legal actions are accepted; episodes end.
    Returns ``{"episodes", "steps", "gymnasium_warnings", "seconds"}``.
    """
    started = time.perf_counter()
    if not isinstance(env, TextEnv):
        raise EnvCheckError(f"check_env expects a TextEnv, got {type(env).__name__}")
    # echo2's checks first: their messages name the offending action and the fix.
    steps = sum(_check_seed(env, seed, max_steps) for seed in seeds)
    gym_warnings: list[str] = []
    if gymnasium_checks:
        from gymnasium.utils.env_checker import check_env as gymnasium_check_env

        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            try:
                gymnasium_check_env(env, skip_render_check=True, skip_close_check=True)
            except Exception as exc:  # its asserts, or whatever the env raised under its calls
                raise _fail(env, f"gymnasium's check_env failed: {type(exc).__name__}: {exc}",
                            "see gymnasium.utils.env_checker") from exc
        gym_warnings = sorted({str(w.message) for w in caught})
    return {"episodes": 2 * len(seeds), "steps": steps, "gymnasium_warnings": gym_warnings,
            "seconds": round(time.perf_counter() - started, 3)}


def _check_seed(env: TextEnv, seed: int, max_steps: int) -> int:
    """Determinism, replay and malformed actions for one seed; returns the steps taken."""
    first = _play(env, seed, max_steps=max_steps, malformed_every=3)
    assert env.log is not None
    log = env.log
    second = _play(env, seed, max_steps=max_steps, malformed_every=3)
    if first != second:
        where = next((i for i, (a, b) in enumerate(zip(first, second)) if a != b), "the end")
        raise _fail(env, f"two episodes with seed={seed} and the same actions differ (at step {where})",
                    "derive all randomness from the episode seed passed to _reset_episode")
    replayed = env.replay(log)
    if [(t.observation, t.reward) for t in replayed.turns] != [(t.observation, t.reward) for t in log.turns]:
        raise _fail(env, f"replaying the log of seed={seed} gives different observations or rewards",
                    "keep no state across episodes other than np_random")
    if len(log.turns) != len(first) - 1:
        raise _fail(env, f"the episode log holds {len(log.turns)} turns for {len(first) - 1} steps",
                    "let TextEnv.step record turns (do not override step)")
    steps = len(first) - 1
    # Every malformed action at the first decision point: answered, never raised.
    env.reset(seed=seed)
    for bad in MALFORMED_ACTIONS:
        if env.done:
            env.reset(seed=seed)
        try:
            out = env.step(bad)
        except Exception as exc:
            raise _fail(env, f"step({bad!r:.60}) raised {type(exc).__name__}: {exc}",
                        "answer unusable actions with a reason in the observation, never an exception") from exc
        _check_step_output(env, out, bad)
        steps += 1
    return steps


# ----- token-level chat episodes ----------------------------------------------------------------
def _render(tokenizer, messages: list[dict[str, str]], generation_prompt: bool) -> str:
    return tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=generation_prompt)


def _encode(tokenizer, text: str) -> list[int]:
    return list(tokenizer.encode(text, add_special_tokens=False))


# Plain ASCII that every tokenizer and template passes through verbatim.
_ANCHOR = "ECHO2-TURN-ANCHOR"


def _turn_suffix(tokenizer, user: str | None, generation_prompt: bool) -> tuple[str, str]:
    """The template's text after an assistant turn's content: (closing, opening).

    ``closing`` ends the assistant turn (ChatML: ``<|im_end|>\\n``); ``opening`` is the next user
    turn and, with ``generation_prompt``, the next assistant header. Rendered around an anchor
    assistant message in a stand-in conversation, so templates that treat the *last* assistant
    turn specially (Qwen3's empty think block) or add a default system prompt give the same
    suffix they give inside the real conversation, where the turn is history.
    """
    base = [{"role": "user", "content": "?"}, {"role": "assistant", "content": _ANCHOR}]
    alone = _render(tokenizer, base, False)
    closing = alone[alone.rindex(_ANCHOR) + len(_ANCHOR):]
    if user is None:
        return closing, ""
    full = _render(tokenizer, base + [{"role": "user", "content": user}], generation_prompt)
    after = full[full.rindex(_ANCHOR) + len(_ANCHOR):]
    if not after.startswith(closing):
        raise ValueError(f"the chat template closes an assistant turn with {closing!r} when it is last but "
                         f"not when it is history ({after[:len(closing)]!r}); ChatEpisode cannot align turns")
    return closing, after[len(closing):]


class ChatEpisode:
    """One episode of a :class:`TextEnv` as a chat, built token by token for a sampler.

    The conversation is ``[system], user(obs_0), assistant(a_0), user(obs_1), ...``. ``prompt_ids``
    is the chat template of the system and first user message plus the assistant header; the
    completion then grows by each turn's *sampled* token ids (loss mask 1, sampler logprobs kept;
    never re-tokenized from text) and the template text between turns (``<|im_end|>\\n<|im_start|>user\\n...<|im_start|>assistant\\n``,
    mask 0, logprob 0.0). The model always conditions on exactly the tokens it sampled, and every
    per-token list stays aligned to ``completion_ids`` (the ``Rollout`` convention).

    Loop: ``while not ep.done: ids, lps, finish = sample(ep.context_ids); ep.submit(ids, lps)``.
    """

    def __init__(self, env: TextEnv, tokenizer, episode_seed: int, *, system_prompt: str | None = None,
                 options: dict[str, Any] | None = None, final_observation: bool = False) -> None:
        self.env, self.tokenizer = env, tokenizer
        self.final_observation = final_observation
        """Append the closing observation as a last user turn (bookkeeping text, mask 0)."""
        obs, info = env.begin_episode(episode_seed, options)
        self.messages: list[dict[str, str]] = [{"role": "system", "content": system_prompt}] if system_prompt else []
        self.messages.append({"role": "user", "content": obs})
        self.prompt_ids = _encode(tokenizer, _render(tokenizer, self.messages, True))
        self.completion_ids: list[int] = []
        self.loss_mask: list[int] = []
        self.logprobs: list[float] = []
        self.rewards: list[float] = []
        self.infos: list[dict[str, Any]] = [info]
        self.done = False
        self._opening_tokens = 0
        self.stop_reason: str | None = None
        """``terminated``, ``truncated`` (env limit) or the reason given to :meth:`stop`."""
        end = tokenizer.convert_tokens_to_ids("<|im_end|>")
        self._eos_id = end if isinstance(end, int) and end != tokenizer.unk_token_id else tokenizer.eos_token_id

    @property
    def context_ids(self) -> list[int]:
        """The prompt for the next assistant turn: ``prompt_ids + completion_ids``."""
        return self.prompt_ids + self.completion_ids

    def submit(self, token_ids: Sequence[int], logprobs: Sequence[float] | None = None) -> str:
        """Record one sampled assistant turn, step the env with its text; returns the text."""
        if self.done:
            raise RuntimeError(f"the episode is over ({self.stop_reason}); open a new ChatEpisode")
        token_ids = list(token_ids)
        logprobs = [0.0] * len(token_ids) if logprobs is None else [float(x) for x in logprobs]
        if len(logprobs) != len(token_ids):
            raise ValueError(f"{len(logprobs)} logprobs for {len(token_ids)} sampled tokens")
        text = self.tokenizer.decode(token_ids, skip_special_tokens=True)
        obs, reward, terminated, truncated, info = self.env.step(text)
        self.rewards.append(reward)
        self.infos.append(info)
        self.messages.append({"role": "assistant", "content": text})
        if terminated or truncated:
            self.done, self.stop_reason = True, "terminated" if terminated else "truncated"
        if not self.done or self.final_observation:
            self.messages.append({"role": "user", "content": obs})
        closing, opening = _turn_suffix(self.tokenizer, obs if self.messages[-1]["role"] == "user" else None,
                                        generation_prompt=not self.done)
        if token_ids and token_ids[-1] == self._eos_id:
            eos_text = self.tokenizer.decode([self._eos_id], skip_special_tokens=False)
            closing = closing.removeprefix(eos_text)  # the model wrote <|im_end|> itself
        opening_ids = _encode(self.tokenizer, opening) if opening else []
        between = _encode(self.tokenizer, closing) + opening_ids
        self._opening_tokens = 0 if self.done else len(opening_ids)
        self.completion_ids += token_ids + between
        self.loss_mask += [1] * len(token_ids) + [0] * len(between)
        self.logprobs += logprobs + [0.0] * len(between)
        return text

    def submit_text(self, text: str) -> str:
        """Submit a reply given as text (a scripted or API policy): tokenized as if sampled, logprobs 0."""
        return self.submit(_encode(self.tokenizer, text) + [self._eos_id])

    def stop(self, reason: str) -> None:
        """End the conversation early (e.g. ``"length"``: the next prompt would not fit the context)."""
        if self.done:
            return
        self.done, self.stop_reason = True, reason
        if self._opening_tokens:  # drop the unanswered user turn and assistant header
            del self.completion_ids[-self._opening_tokens:], self.loss_mask[-self._opening_tokens:]
            del self.logprobs[-self._opening_tokens:]
            self.messages.pop()
            self._opening_tokens = 0

    @property
    def total_reward(self) -> float:
        return float(sum(self.rewards))
