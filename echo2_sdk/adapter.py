"""``TaskAdapter``: how a task plugs into echo2.

A single-turn task only provides examples and a reward; the defaults implement GRPO (the loss mask
covers every generated token, the advantage group is the prompt). Multi-turn tasks (poker, MOBA)
override :meth:`TaskAdapter.materialize` and drive a text environment.

Where each method runs:

=======================  ==================  ==============================================
method                   side                purpose
=======================  ==================  ==============================================
``examples(split)``      worker + driver     the task's data, split into sft / train / eval
``build_messages(ex)``   worker              chat messages for the prompt x
``reward(ex, text)``     worker (guarded)    r = R(x, y); runs under a deadline in a subprocess
``reference_answer``     driver              gold text, for warm starts and ``check_adapter``
``materialize(...)``     worker              Ω: loss mask and advantage group tag
``open_episode``,        worker              multi-turn only: the episode as a token-level
``to_rollout``                               chat, and its record (return, assistant mask)
``reference_reply``      ``echo2 check``     multi-turn, optional: a scripted player's reply
=======================  ==================  ==============================================
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar, Mapping, Sequence

from echo2_sdk.records import Omega

if TYPE_CHECKING:
    from echo2_sdk.evaluation import HeadToHead

SPLITS = ("sft", "train", "eval")


@dataclass(frozen=True)
class Example:
    """One task instance. ``id`` must be stable across processes and runs."""

    id: str
    prompt: str
    """The user-facing problem text (single-turn) or a description of the episode (multi-turn)."""
    answer: str | None = None
    """Gold answer text, when the task has one."""
    meta: Mapping[str, Any] = field(default_factory=dict)
    """Task-specific extras (e.g. an episode seed)."""


@dataclass(frozen=True)
class NoOptions:
    """A task without options."""


class TaskAdapter:
    """Base class for tasks. Subclasses set ``name`` and usually ``Options``.

    ``Options`` is a frozen dataclass; the YAML mapping ``task.options`` is validated against it
    (unknown keys rejected with the closest valid key, wrong types named with the expected type).
    """

    name: ClassVar[str] = ""
    Options: ClassVar[type] = NoOptions
    max_reward: ClassVar[float] = 1.0
    """The best reward any completion can earn (``check_adapter`` asserts the gold answer earns it)."""
    multi_turn: ClassVar[bool] = False
    system_prompt: ClassVar[str | None] = None

    def __init__(self, options: Any = None, *, seed: int = 0) -> None:
        if options is None:
            options = self.Options()
        elif isinstance(options, Mapping):
            from echo2_sdk.config import build_dataclass

            options = build_dataclass(self.Options, dict(options), path="task.options")
        self.options = options
        self.seed = seed

    # ----- data -------------------------------------------------------------------------------
    def examples(self, split: str) -> Sequence[Example]:
        """Examples of ``split`` (one of ``"sft"``, ``"train"``, ``"eval"``), deterministic under seed."""
        raise NotImplementedError(f"{type(self).__name__} must implement examples(split)")

    def build_messages(self, example: Example) -> list[dict[str, str]]:
        """Chat messages of the prompt x (the generation prompt is added by the tokenizer)."""
        messages = []
        if self.system_prompt:
            messages.append({"role": "system", "content": self.system_prompt})
        messages.append({"role": "user", "content": example.prompt})
        return messages

    # ----- reward -----------------------------------------------------------------------------
    def reward(self, example: Example, completion_text: str) -> float:
        """r = R(x, y). Runs on the rollout worker under a deadline; may raise (scored 0, counted)."""
        raise NotImplementedError(f"{type(self).__name__} must implement reward(example, text)")

    def reference_answer(self, example: Example) -> str | None:
        """The text a perfect assistant would answer (used by warm starts and checks)."""
        return example.answer

    # ----- Ω ----------------------------------------------------------------------------------
    def group_key(self, example: Example) -> str:
        """Advantage group tag written into Ω (default: the prompt id, i.e. GRPO groups)."""
        return example.id

    def materialize(
        self, example: Example, prompt_ids: Sequence[int], completion_ids: Sequence[int]
    ) -> Omega:
        """Ω for one single-turn sample: every generated token is trained on."""
        return Omega(loss_mask=tuple([1] * len(completion_ids)), group=self.group_key(example))

    # ----- multi-turn tasks (``multi_turn = True``) ----------------------------------------------
    def open_episode(self, example: Example, tokenizer) -> Any:
        """Start ``example``'s episode as a token-level chat (an :class:`echo2_sdk.env.ChatEpisode`).

        The runtime (``echo2_sdk.runtime.rollout.episodes``) samples every assistant turn from
        ``episode.context_ids`` and hands it back with ``episode.submit(token_ids, logprobs)``.
        """
        raise NotImplementedError(f"{type(self).__name__} sets multi_turn=True but does not implement "
                                  "open_episode(example, tokenizer); return an echo2_sdk.env.ChatEpisode")

    def to_rollout(self, episode: Any, *, example: Example, version: int,
                   meta: Mapping[str, Any] | None = None) -> Any:
        """τ = (x, y, r, v, Ω) of a finished episode: r = the trajectory return, Ω = assistant-token mask."""
        raise NotImplementedError(f"{type(self).__name__} sets multi_turn=True but does not implement "
                                  "to_rollout(episode, example=..., version=..., meta=...)")

    def reference_reply(self, episode: Any) -> str | None:
        """Multi-turn, optional: a scripted player's next reply in a running ``episode`` (a
        ``ChatEpisode``; ``episode.env`` is the environment) that earns ``max_reward`` over the episode.
        ``echo2 check`` plays it and asserts the return; ``None`` (the default): no such player."""
        return None

    # ----- evaluation -------------------------------------------------------------------------
    @classmethod
    def head_to_head(cls) -> "HeadToHead | None":
        """The task's head-to-head evaluation behind ``echo2 eval --task NAME`` (agents against
        opponents), or ``None`` (the default) when it has none."""
        return None

    # ----- helpers ----------------------------------------------------------------------------
    @classmethod
    def options_fields(cls) -> list[str]:
        return [f.name for f in dataclasses.fields(cls.Options)]

    def describe(self) -> dict[str, Any]:
        return {"task": self.name, "options": dataclasses.asdict(self.options), "seed": self.seed}
