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

:func:`echo2_sdk.env_check.check_env` runs gymnasium's checker plus echo2's own contract checks;
:class:`echo2_sdk.chat_episode.ChatEpisode` plays an episode as a token-level chat.
"""

from __future__ import annotations

import math
import string
from dataclasses import dataclass, field
from typing import Any, Callable, ClassVar

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
