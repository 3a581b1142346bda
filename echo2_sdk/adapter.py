"""Task adapters: how a task plugs into echo2, as two base classes.

- :class:`TaskAdapter`, a **single-turn** task: a prompt, one reply, a reward. It provides examples
  and ``reward``; the defaults implement GRPO (the loss mask covers every generated token, the
  advantage group is the prompt).
- :class:`MultiTurnTaskAdapter`, a **multi-turn** task (poker, MOBA): the model plays an episode turn
  by turn, the reward is the episode's return. It provides examples, ``open_episode`` and
  ``to_rollout``; :class:`echo2_sdk.episodic.EpisodicTaskAdapter` implements them for tasks played in a
  text environment.

Both derive from :class:`BaseTaskAdapter` (name, ``Options``, examples, prompt messages, reference
answer, ``head_to_head``). The runtime tells them apart with ``isinstance(adapter, MultiTurnTaskAdapter)``.
A required method left out fails when the task is built, naming the method.

Where each method runs:

=======================  ==================  ==============================================
method                   side                purpose
=======================  ==================  ==============================================
``examples(split)``      worker + driver     the task's data, split into sft / train / eval
``build_messages(ex)``   worker              chat messages for the prompt x
``reference_answer``     driver              gold text, for warm starts and ``check_adapter``
*single-turn*
``reward(ex, text)``     worker (guarded)    r = R(x, y); runs under a deadline in a subprocess
``materialize(...)``     worker              Ω: loss mask and advantage group tag
*multi-turn*
``open_episode``,        worker              the episode as a token-level chat, and its
``to_rollout``                               record (return, assistant mask)
``reference_reply``      ``echo2 check``     optional: a scripted player's reply
*both*
``tokenizer_corpus``     driver              text a task-fitted tiny tokenizer learns from
=======================  ==================  ==============================================
"""

from __future__ import annotations

import abc
import dataclasses
import inspect
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar, Iterator, Mapping, Sequence

from echo2_sdk.config_loader import build_dataclass
from echo2_sdk.records import Omega, Rollout

if TYPE_CHECKING:
    from echo2_sdk.chat_episode import ChatEpisode
    from echo2_sdk.evaluation import HeadToHead

SPLITS = ("sft", "train", "eval")


@dataclass(frozen=True)
class Example:
    """One task instance. ``id`` must be stable across processes and runs."""

    id: str
    """Stable identifier, unique within its split (keys advantage groups and metrics)."""
    prompt: str
    """The user-facing problem text (single-turn) or a description of the episode (multi-turn)."""
    answer: str | None = None
    """Gold answer text, when the task has one."""
    meta: Mapping[str, Any] = field(default_factory=dict)
    """Task-specific extras (e.g. an episode seed)."""


@dataclass(frozen=True)
class NoOptions:
    """A task without options."""


class BaseTaskAdapter(abc.ABC):
    """What every task has, single- or multi-turn. Subclass :class:`TaskAdapter` or
    :class:`MultiTurnTaskAdapter`, not this class; set ``name`` and usually ``Options``.

    ``Options`` is a frozen dataclass; the YAML mapping ``task.options`` is validated against it
    (unknown keys rejected with the closest valid key, wrong types named with the expected type).
    """

    name: ClassVar[str] = ""
    Options: ClassVar[type] = NoOptions
    max_reward: ClassVar[float] = 1.0
    """The best reward (single-turn) or return (multi-turn) any reply can earn; ``echo2 check`` asserts
    that the gold answer (or scripted player) earns it."""
    system_prompt: ClassVar[str | None] = None

    def __new__(cls, *args: Any, **kwargs: Any):
        # object.__new__ would refuse too, but without saying which base asks for what.
        missing = sorted(getattr(cls, "__abstractmethods__", ()))
        if missing:
            base = next(b for b in cls.__mro__ if any(_is_abstract(b, name) for name in missing))
            wanted = ", ".join(f"{name}{_signature(cls, name)}" for name in missing)
            raise TypeError(f"task class {cls.__qualname__} cannot be built: it does not implement {wanted}, "
                            f"which every {base.__name__} must; define {'them' if len(missing) > 1 else 'it'} "
                            f"in the class (see {base.__module__}.{base.__qualname__})")
        return super().__new__(cls)

    def __init__(self, options: Any = None, *, seed: int = 0) -> None:
        if options is None:
            options = self.Options()
        elif isinstance(options, Mapping):
            options = build_dataclass(self.Options, dict(options), path="task.options")
        self.options = options
        self.seed = seed

    # ----- data -------------------------------------------------------------------------------
    @abc.abstractmethod
    def examples(self, split: str) -> Sequence[Example]:
        """Examples of ``split`` (one of ``"sft"``, ``"train"``, ``"eval"``), deterministic under seed."""

    opponents: tuple[tuple[str, float], ...] = ()
    """Optional: the task's opponent pool as (line-up, base share) pairs, each example having drawn one
    (``meta["opponent"]``); empty (the default) for a task without one. With two or more line-ups the runtime
    may re-draw them by the policy's results (``train.opponent_sampling: prioritized``) through :meth:`against`."""

    def against(self, example: Example, lineup: str) -> Example:
        """``example`` (a train example) played against ``lineup``, one of :attr:`opponents`, instead of the
        line-up it drew. Needed only by a task with an opponent pool."""
        raise NotImplementedError(f"task {self.name!r} has no opponent pool to draw {lineup!r} from")

    def build_messages(self, example: Example) -> list[dict[str, str]]:
        """Chat messages of the prompt x (the generation prompt is added by the tokenizer).

        A function of the example alone (no per-process randomness): the learner renders it too and
        refuses a group whose prompt ids differ from its own (``prompt_mismatch``)."""
        messages = []
        if self.system_prompt:
            messages.append({"role": "system", "content": self.system_prompt})
        messages.append({"role": "user", "content": example.prompt})
        return messages

    def reference_answer(self, example: Example) -> str | None:
        """The text a perfect assistant would answer (used by warm starts and checks)."""
        return example.answer

    # ----- tokenizer --------------------------------------------------------------------------
    corpus_examples: ClassVar[int] = 256
    """Examples per split that the default :meth:`tokenizer_corpus` reads."""

    tokenizer_atoms: ClassVar[str | None] = None
    """A regular expression whose matches the task-fitted tokenizer keeps as pieces of their own (never
    merged with the text around them), or ``None``. For symbols the model must compose: poker's card
    ranks and suits, so ``A`` in ``[Ah, Kd]`` and in ``[As, Ad]`` is one id (see
    :func:`echo2_sdk.task_tokenizer.build_task_tokenizer`)."""

    def tokenizer_corpus(self) -> Iterator[str]:
        """Text the tiny model's task-fitted tokenizer learns its vocabulary from
        (``model.tiny.tokenizer: task``, :mod:`echo2_sdk.task_tokenizer`): what the model will read and write.

        Default: the prompt messages and reference answers of the first ``corpus_examples`` examples of
        every split. Override it (calling ``super()``) to add text those miss, such as feedback the task
        writes back or the answer formats it accepts. Anything missing still encodes, only in more tokens.
        """
        for split in SPLITS:
            for example in list(self.examples(split))[: self.corpus_examples]:
                yield from (m["content"] for m in self.build_messages(example))
                answer = self.reference_answer(example)
                if answer:
                    yield answer

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


class TaskAdapter(BaseTaskAdapter):
    """A single-turn task: prompt x → one reply y → r = R(x, y). Implement ``examples`` and ``reward``."""

    # ----- reward -----------------------------------------------------------------------------
    @abc.abstractmethod
    def reward(self, example: Example, completion_text: str) -> float:
        """r = R(x, y). Runs on the rollout worker under a deadline; may raise (scored 0, counted)."""

    def quick_reward(self, example: Example, completion_text: str) -> float | None:
        """R(x, y) when it can be decided cheaply, else ``None`` (the default: always ``reward``).

        Runs in the worker's own process, before and instead of the guarded ``reward``, so that a
        reward a bare comparison decides costs no round trip to the reward process (for a small
        model's short answers that round trip is a visible share of the worker's time). It has no
        deadline: keep it to code whose cost is linear in ``len(completion_text)`` (at most the
        guard's ``max_chars``) — a regex fullmatch, an integer comparison — and return ``None`` for
        anything needing a parser. It must agree with ``reward`` wherever it answers. A raise or a
        non-number hands the item to ``reward``; NaN/inf score 0 (``non_finite``). It is used only
        when defined with ``reward`` (by the same class or a subclass): a subclass that overrides
        ``reward`` alone turns an inherited ``quick_reward`` off.
        """
        return None

    # ----- Ω ----------------------------------------------------------------------------------
    def group_key(self, example: Example) -> str:
        """Advantage group tag written into Ω (default: the prompt id, i.e. GRPO groups)."""
        return example.id

    def materialize(
        self, example: Example, prompt_ids: Sequence[int], completion_ids: Sequence[int]
    ) -> Omega:
        """Ω for one single-turn sample: every generated token is trained on."""
        return Omega(loss_mask=tuple([1] * len(completion_ids)), group=self.group_key(example))


class MultiTurnTaskAdapter(BaseTaskAdapter):
    """A multi-turn task: the model plays an episode; r = its return, Ω = the model's own tokens.

    Implement ``examples``, ``open_episode`` and ``to_rollout`` (or subclass
    :class:`echo2_sdk.episodic.EpisodicTaskAdapter`, which implements them over a text environment).
    The runtime (``echo2_sdk.runtime.rollout.episodes``) samples every assistant turn from
    ``episode.context_ids`` and hands it back with ``episode.submit(token_ids, logprobs)``.
    """

    @abc.abstractmethod
    def open_episode(self, example: Example, tokenizer) -> "ChatEpisode":
        """Start ``example``'s episode as a token-level chat (an :class:`echo2_sdk.env.ChatEpisode`)."""

    @abc.abstractmethod
    def to_rollout(self, episode: "ChatEpisode", *, example: Example, version: int,
                   meta: Mapping[str, Any] | None = None) -> Rollout:
        """τ = (x, y, r, v, Ω) of a finished episode: r = the trajectory return, Ω = assistant-token mask."""

    def reference_reply(self, episode: "ChatEpisode") -> str | None:
        """Optional: a scripted player's next reply in a running ``episode`` (``episode.env`` is the
        environment) that earns ``max_reward`` over the episode. ``echo2 check`` plays it and asserts
        the return; ``None`` (the default): no such player."""
        return None


def _is_abstract(cls: type, name: str) -> bool:
    return getattr(vars(cls).get(name), "__isabstractmethod__", False)


def _signature(cls: type, name: str) -> str:
    """``(example, completion_text)``: the parameters of ``cls.name`` after ``self``, for error messages."""
    try:
        params = list(inspect.signature(getattr(cls, name)).parameters.values())[1:]
    except (TypeError, ValueError):
        return "(...)"
    return "(" + ", ".join(p.name if p.kind is not p.KEYWORD_ONLY else f"{p.name}=..." for p in params) + ")"
