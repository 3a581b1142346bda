"""``EpisodicTaskAdapter``: the shared body of multi-turn tasks played in a text environment.

It implements :class:`echo2_sdk.adapter.MultiTurnTaskAdapter` over a :class:`echo2_sdk.env.TextEnv`.

A task of this kind (``poker``, ``moba``) names one episode per example (``meta["episode_seed"]``) and
plays it in an env with ``begin_episode(seed)``, ``system_prompt`` and gymnasium ``step``. A subclass
supplies only what differs: the env (``make_env``), how an example is described (``_example``), the
advantage group of an episode (``episode_group``), how a rule-based player acts (``bot_reply``) and
which info keys summarize an episode (``SUMMARY_KEYS``). This base provides the rest:

- splits ``train`` / ``eval`` (episode seeds) and ``sft`` (a ``demonstrator`` episode's conversation up to
  one of its decisions, the demonstrator's reply there as the answer), cached per adapter;
- the prompt x (rules + first observation), ``group_key``;
- token level, for the runtime's multi-turn loop: ``open_episode`` → :class:`echo2_sdk.env.ChatEpisode`,
  ``to_rollout`` → τ with Ω.loss_mask on the sampled assistant tokens only;
- text level, for demonstrations, evaluation and API policies: ``play_episode``, ``episode_to_tokens``,
  ``episode_to_rollout``.

Options a subclass's ``Options`` must have: ``num_train``, ``num_eval``, ``num_sft``, ``demonstrator`` (one
rule spec, or a weighted mixture ``"2 rule:tag, rule:lag"``: :func:`weighted_specs`, one spec drawn per
demonstration episode), ``final_observation``.

Optional: ``opponent``, an opponent pool — a weighted mixture of line-ups (:func:`opponent_pool`), e.g.
``"2 rule:tag, rule:lag, llm:runs/old/base_model"``. A line-up is one spec for every other seat or
``A+B``, one per seat. Each example (a deal, with its n samples) draws one line-up, seeded by the example;
it is recorded in ``meta["opponent"]``, and with more than one line-up Ω.group becomes
``GROUP|vs LINEUP``, so advantages compare episodes played against the same opponents. A subclass whose
options have ``opponent`` builds envs with ``make_env(opponent=LINEUP)`` (``None``: the first line-up).
"""

from __future__ import annotations

import abc
import dataclasses
import math
import random
import re
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator, Sequence

from echo2_sdk.adapter import Example, MultiTurnTaskAdapter
from echo2_sdk.chat import chat_markers, chat_token_ids
from echo2_sdk.chat_episode import ChatEpisode
from echo2_sdk.records import Omega, Rollout
from echo2_sdk.masks import assistant_mask
from echo2_sdk.text_env import EpisodeLog, Policy


def weighted_specs(text: str, *, option: str = "task.options.demonstrator") -> tuple[tuple[str, float], ...]:
    """Parse a weighted mixture of player specs, ``"[WEIGHT] SPEC, ..."`` (weight 1 when left out), into
    (spec, share) pairs whose shares sum to 1. Raises ValueError naming ``option`` on a bad entry.

    >>> weighted_specs("rule:tag")
    (('rule:tag', 1.0),)
    >>> weighted_specs("3 rule:tag, rule:lag")
    (('rule:tag', 0.75), ('rule:lag', 0.25))
    """
    entries = []
    for part in text.split(","):
        words = part.split()
        if not words or len(words) > 2:
            raise ValueError(f"{option}={text!r}: each entry is '[WEIGHT] SPEC' (e.g. '2 rule:tag, rule:lag'), "
                             f"not {part.strip()!r}")
        try:
            weight = float(words[0]) if len(words) == 2 else 1.0
        except ValueError:
            raise ValueError(f"{option}={text!r}: weight {words[0]!r} is not a number (e.g. '2 rule:tag')") from None
        if not (weight > 0 and math.isfinite(weight)):  # also refuses nan
            raise ValueError(f"{option}={text!r}: weight {words[0]!r} must be a positive finite number")
        entries.append((words[-1], weight))
    total = sum(w for _, w in entries)
    return tuple((spec, w / total) for spec, w in entries)


def opponent_pool(text: str, *, option: str = "task.options.opponent") -> tuple[tuple[str, float], ...]:
    """Parse an opponent pool, ``"[WEIGHT] LINEUP, ..."``, into (line-up, share) pairs; a line-up is one
    spec for every other seat or ``A+B`` (one per seat, spaces around ``+`` allowed).

    >>> opponent_pool("3 rule:tag, rule:tag + rule:lag")
    (('rule:tag', 0.75), ('rule:tag+rule:lag', 0.25))
    """
    return weighted_specs(re.sub(r"\s*\+\s*", "+", text), option=option)


def lineup_seats(lineup: str) -> tuple[str, ...]:
    """The specs of one line-up, ``"A+B"`` → ``("A", "B")`` (one spec: every other seat plays it).

    >>> lineup_seats("rule:tag+rule:lag")
    ('rule:tag', 'rule:lag')
    """
    return tuple(part.strip() for part in lineup.split("+"))


def opponent_columns(text: str) -> str:
    """The line-ups of an opponent pool as ``echo2 eval --opponents`` columns (weights dropped).

    >>> opponent_columns("3 rule:tag, rule:tag + rule:lag")
    'rule:tag,rule:tag+rule:lag'
    """
    return ",".join(lineup for lineup, _ in opponent_pool(text))


def pick_spec(mixture: Sequence[tuple[str, float]], key: str) -> str:
    """The spec of ``mixture`` drawn for ``key`` (deterministic: one key, one spec).

    >>> pick_spec([("rule:tag", 1.0)], "any")
    'rule:tag'
    >>> {pick_spec([("a", 0.5), ("b", 0.5)], f"k{i}") for i in range(20)} == {"a", "b"}
    True
    """
    if len(mixture) == 1:
        return mixture[0][0]
    specs, weights = zip(*mixture)
    return random.Random(key).choices(specs, weights=weights)[0]


def _with_opponent(example: Example, lineup: str) -> Example:
    """``example`` played against ``lineup`` (``meta["opponent"]``)."""
    return Example(id=example.id, prompt=example.prompt, answer=example.answer,
                   meta={**example.meta, "opponent": lineup})


@dataclass(frozen=True)
class TextEpisode:
    """A finished text-level episode."""

    example_id: str
    messages: tuple[dict[str, str], ...]
    rewards: tuple[float, ...]
    """r_t as the env paid them, one per env step (assistant turn)."""
    reward: float
    """R = Σ r_t in the adapter's reward unit."""
    group: str
    info: dict[str, Any]
    log: EpisodeLog | None = field(default=None, compare=False)


@dataclass(frozen=True)
class EpisodeTokens:
    prompt_ids: list[int]
    completion_ids: list[int]
    loss_mask: list[int]


class EpisodicTaskAdapter(MultiTurnTaskAdapter):
    """A multi-turn task played in a text env; a subclass implements ``make_env``, ``_example``,
    ``make_bot`` and ``bot_reply`` (see the module docstring)."""

    SUMMARY_KEYS: tuple[str, ...] = ("invalid_actions", "forced_actions", "opponent_invalid_actions")
    """Keys of the env's final info copied into each record's meta (and evaluation summaries)."""
    reward_scale: float = 1.0
    """R = Σ r_t / reward_scale (poker: chips → big blinds), less the refusal penalty (:meth:`episode_return`)."""

    def __init__(self, options: Any = None, *, seed: int = 0) -> None:
        super().__init__(options, seed=seed)
        opts = self.options
        if opts.num_train < 1 or opts.num_eval < 1 or opts.num_sft < 0:
            raise ValueError(f"task.options.num_train={opts.num_train} and num_eval={opts.num_eval} must be >= 1, "
                             f"num_sft={opts.num_sft} >= 0")
        self.invalid_action_penalty = float(getattr(opts, "invalid_action_penalty", 0.0))
        """R lost per refused reply (:meth:`episode_return`); 0 for a task whose Options lack the field."""
        if not math.isfinite(self.invalid_action_penalty) or self.invalid_action_penalty < 0:
            raise ValueError(f"task.options.invalid_action_penalty={self.invalid_action_penalty!r} must be a finite "
                             "number >= 0 (a negative one would pay for unusable replies); use e.g. 1.0")
        self.demonstrators = weighted_specs(opts.demonstrator)
        """The demonstrator mixture: one spec is drawn per demonstration (and per tokenizer-corpus) episode."""
        pool = getattr(opts, "opponent", None)
        self.opponents = opponent_pool(pool) if isinstance(pool, str) else ()
        self.llm_policy_factory: Callable[[str], Policy] | None = None
        """Set by the runtime when opponents are ``llm:PATH`` (path → policy)."""
        self._splits: dict[str, list[Example]] = {}
        self._envs: dict[str | None, Any] = {}

    # ----- what a subclass supplies ----------------------------------------------------------
    @abc.abstractmethod
    def make_env(self):
        """A fresh environment for this adapter's options (one per concurrent episode). With an opponent
        pool it takes ``opponent`` (a line-up, ``None``: the first)."""

    @abc.abstractmethod
    def _example(self, split: str, index: int) -> Example:
        """Example ``index`` of ``split``; ``meta["episode_seed"]`` must name the episode."""

    def episode_group(self, env) -> str:
        """Ω.group of the episode ``env`` is playing (or has played)."""
        return "none"

    @abc.abstractmethod
    def bot_reply(self, player, env, feedback: str | None) -> str:
        """A rule-based player's reply in ``env``'s current state (``feedback``: the last refusal)."""

    @abc.abstractmethod
    def make_bot(self, spec: str, env):
        """A rule-based player from its spec (``rule:NAME``; the demonstrator and rule opponents)."""

    def check_players(self) -> None:
        """Build every demonstrator and every opponent line-up once, so that a misspelled one fails at
        construction (named by its option), not when a rare draw first plays it. A subclass calls it at the
        end of ``__init__``; ``llm:`` seats are only checked for their place (their models load later)."""
        def stub(name: str) -> Policy:
            return lambda messages: ""

        factory, self.llm_policy_factory = self.llm_policy_factory, self.llm_policy_factory or stub
        try:
            for lineup, _ in self.opponents if self.pooled else ():
                try:
                    self.make_env(opponent=lineup)
                except (ValueError, TypeError) as exc:
                    raise ValueError(f"task.options.opponent: line-up {lineup!r}: {exc}") from None
            env = self.make_env()
            for spec, _ in self.demonstrators:
                try:
                    self.make_bot(spec, env)
                except (ValueError, TypeError) as exc:
                    raise ValueError(f"task.options.demonstrator: {spec!r}: {exc}") from None
        finally:
            self.llm_policy_factory = factory

    @property
    def scripted_opponents(self) -> tuple[tuple[str, float], ...]:
        """The line-ups that demonstrations and the tokenizer corpus play against: the pool's line-ups
        without a model seat (a model seat, ``llm:self`` above all, has no model before training), or the
        demonstrators' styles when every line-up seats a model."""
        scripted = tuple((lineup, share) for lineup, share in self.opponents
                         if not any(seat.startswith("llm:") for seat in lineup_seats(lineup)))
        return scripted or tuple(self.demonstrators)

    @property
    def pooled(self) -> bool:
        """Whether episodes draw their opponents from a pool of more than one line-up."""
        return len(self.opponents) > 1

    def config_against(self, opponent: str | None):
        """``self.config`` (an env config with an ``opponents`` field) with the line-up ``opponent`` in the
        other seats; ``None``: as configured."""
        return self.config if opponent is None else dataclasses.replace(self.config, opponents=lineup_seats(opponent))

    def env_for(self, example: Example):
        """A fresh env for ``example``: against the line-up it drew (``meta["opponent"]``), if any."""
        opponent = example.meta.get("opponent")
        return self.make_env(opponent=opponent) if self.opponents and opponent else self.make_env()

    def group_of(self, env, example: Example) -> str:
        """Ω.group of ``example``'s episode in ``env``: :meth:`episode_group`, and the line-up when pooled."""
        group = self.episode_group(env)
        opponent = example.meta.get("opponent")
        return f"{group}|vs {opponent}" if self.pooled and opponent else group

    # ----- data -------------------------------------------------------------------------------
    def episode_seed(self, split: str, index: int) -> int:
        return random.Random(f"{self.name}:{self.seed}:{split}:{index}").getrandbits(62)

    def examples(self, split: str) -> Sequence[Example]:
        if split not in ("sft", "train", "eval"):
            raise ValueError(f"unknown split {split!r}; {self.name} has 'sft', 'train' and 'eval'")
        if split not in self._splits:
            if split == "sft":
                self._splits[split] = [self._demonstration(i) for i in range(self.options.num_sft)]
            else:
                count = {"train": self.options.num_train, "eval": self.options.num_eval}[split]
                self._splits[split] = [self._drawn_example(split, i) for i in range(count)]
        return self._splits[split]

    def _drawn_example(self, split: str, index: int, pool: Sequence[tuple[str, float]] | None = None) -> Example:
        """:meth:`_example` with the opponent line-up it drew (``meta["opponent"]``) from ``pool`` (default:
        the task's) when there is one."""
        example = self._example(split, index)
        if not self.opponents:
            return example
        lineup = pick_spec(pool or self.opponents, f"{self.name}:{self.seed}:{split}:opponent:{index}")
        return _with_opponent(example, lineup)

    def against(self, example: Example, lineup: str) -> Example:
        if lineup not in dict(self.opponents):
            raise ValueError(f"line-up {lineup!r} is not in task.options.opponent ({', '.join(dict(self.opponents))})")
        return _with_opponent(example, lineup)

    def _demonstration(self, index: int) -> Example:
        """An sft example: a ``demonstrator`` episode's conversation up to one of its decisions (picked
        by the seed), the demonstrator's reply there as the answer."""
        base = self._drawn_example("sft", index, self.scripted_opponents)  # without model seats: the pool's draws
        episode = self.play_episode(base, pick_spec(self.demonstrators, f"{self.name}:{self.seed}:sft-player:{index}"))
        replies = [i for i, m in enumerate(episode.messages) if m["role"] == "assistant"]
        at = replies[random.Random(f"{self.name}:{self.seed}:sft-turn:{index}").randrange(len(replies))]
        return Example(id=base.id, prompt=base.prompt, answer=episode.messages[at]["content"],
                       meta={**base.meta, "messages": tuple(dict(m) for m in episode.messages[:at])})

    def _shared_env(self, example: Example):
        """One env per line-up for the questions asked before an episode is played (prompt, group)."""
        key = example.meta.get("opponent") if self.opponents else None
        if key not in self._envs:
            self._envs[key] = self.env_for(example)
        return self._envs[key]

    def build_messages(self, example: Example) -> list[dict[str, str]]:
        """The prompt x: the rules and the first observation of the example's episode (for an sft
        demonstration: the conversation up to the demonstrated decision)."""
        if "messages" in example.meta:
            return [dict(m) for m in example.meta["messages"]]
        env = self._shared_env(example)
        obs, _ = env.begin_episode(example.meta["episode_seed"])
        return [{"role": "system", "content": env.system_prompt}, {"role": "user", "content": obs}]

    def group_key(self, example: Example) -> str:
        """Ω.group of the example's episode (what ``to_rollout`` writes), known before playing it."""
        env = self._shared_env(example)
        env.begin_episode(example.meta["episode_seed"])
        return self.group_of(env, example)

    # ----- tokenizer corpus --------------------------------------------------------------------
    corpus_episodes: int = 128
    """Demonstrator episodes that :meth:`tokenizer_corpus` plays (0.5 s for poker or moba)."""

    def tokenizer_corpus(self) -> Iterator[str]:
        """The text of ``corpus_episodes`` episodes played by the ``demonstrator``: the system prompt,
        every observation (refusal reasons and closing results included), every legal action offered
        and every reply.

        Episode seeds of its own, not the adapter's: runs that differ only in ``train.seed`` fit the
        same tokenizer, so they share one cached tiny model and compare like with like.
        """
        for index in range(self.corpus_episodes):
            seed = random.Random(f"{self.name}:tokenizer-corpus:{index}").getrandbits(62)
            env = self.make_env(opponent=self.scripted_opponents[0][0]) if self.opponents else self.make_env()
            obs, info = env.begin_episode(seed)
            yield env.system_prompt
            player = self.make_bot(pick_spec(self.demonstrators, f"{self.name}:tokenizer-corpus-player:{index}"), env)
            if hasattr(player, "begin"):  # seeded players restart per episode
                player.begin(seed)
            feedback, done = None, False
            while True:
                yield obs
                yield from info["legal_actions"]
                if done:
                    break
                reply = self.bot_reply(player, env, feedback)
                yield str(reply)
                obs, _, terminated, truncated, info = env.step(reply)
                feedback, done = info["invalid_reason"], terminated or truncated

    # ----- token level (the worker loop) ------------------------------------------------------
    def open_episode(self, example: Example, tokenizer) -> ChatEpisode:
        """Start the example's episode as a token-level chat (its own env: safe to run many at once)."""
        env = self.env_for(example)
        return ChatEpisode(env, tokenizer, example.meta["episode_seed"], system_prompt=env.system_prompt,
                           final_observation=self.options.final_observation)

    def to_rollout(self, episode: ChatEpisode, *, example: Example, version: int,
                   meta: dict[str, Any] | None = None) -> Rollout:
        """τ = (x, y, r, v, Ω) of a finished token-level episode."""
        return Rollout(
            prompt_ids=tuple(episode.prompt_ids), completion_ids=tuple(episode.completion_ids),
            reward=self.episode_return(episode.rewards, episode.infos), version=version,
            omega=Omega(loss_mask=tuple(episode.loss_mask), group=self.group_of(episode.env, example)),
            sampler_logprobs=tuple(episode.logprobs), prompt_key=example.id,
            meta={**self.summary(episode.infos[-1]), "stop": episode.stop_reason, **self._opponent_meta(example),
                  **(meta or {})},
        )

    # ----- text level -------------------------------------------------------------------------
    def play_episode(self, example: Example, policy: Policy | str) -> TextEpisode:
        """Play the example's episode with ``policy(messages) -> str`` or a rule-based spec such as
        ``"rule:NAME"`` (demonstrations). The policy sees the whole conversation every turn."""
        env = self.env_for(example)
        obs, info = env.begin_episode(example.meta["episode_seed"])
        messages = [{"role": "system", "content": env.system_prompt}, {"role": "user", "content": obs}]
        player = self.make_bot(policy, env) if isinstance(policy, str) else None
        if player is not None and hasattr(player, "begin"):  # seeded players restart per episode
            player.begin(example.meta["episode_seed"])
        feedback, done, rewards, infos = None, False, [], []
        while not done:
            if player is not None:
                reply = self.bot_reply(player, env, feedback)
            else:
                reply = policy([dict(m) for m in messages])  # type: ignore[operator]
            obs, reward, terminated, truncated, info = env.step(reply)
            messages.append({"role": "assistant", "content": env.log.turns[-1].action if env.log else str(reply)})
            rewards.append(reward)
            infos.append(info)
            feedback, done = info["invalid_reason"], terminated or truncated
            if not done or self.options.final_observation:
                messages.append({"role": "user", "content": obs})
        return TextEpisode(example.id, tuple(messages), tuple(rewards), self.episode_return(rewards, infos),
                           self.group_of(env, example), {**info, **self.summary(info), **self._opponent_meta(example)},
                           env.log)

    def episode_to_tokens(self, episode: TextEpisode, tokenizer) -> EpisodeTokens:
        """Tokenize a text-level episode with the chat template; mask = assistant tokens only."""
        messages = list(episode.messages)
        prompt_ids = chat_token_ids(tokenizer, messages[:2], add_generation_prompt=True)
        full_ids = chat_token_ids(tokenizer, messages, add_generation_prompt=False)
        if full_ids[: len(prompt_ids)] != prompt_ids:
            raise ValueError("the chat template renders the first turns differently inside the full conversation")
        markers = chat_markers(tokenizer)
        mask = assistant_mask(full_ids, im_start_id=markers.turn_start_id, im_end_id=markers.turn_end_id,
                              newline_id=markers.header_end_id, first_assistant_turn=3)
        return EpisodeTokens(prompt_ids, full_ids[len(prompt_ids):], mask[len(prompt_ids):])

    def episode_to_rollout(self, episode: TextEpisode, tokenizer, *, version: int = 0) -> Rollout:
        """τ of a text-level episode (sampler logprobs unknown: 0.0; fine for SFT, not for IS ratios)."""
        tokens = self.episode_to_tokens(episode, tokenizer)
        return Rollout(
            prompt_ids=tuple(tokens.prompt_ids), completion_ids=tuple(tokens.completion_ids),
            reward=episode.reward, version=version,
            omega=Omega(loss_mask=tuple(tokens.loss_mask), group=episode.group),
            sampler_logprobs=(0.0,) * len(tokens.completion_ids), prompt_key=episode.example_id,
            meta=self.summary(episode.info),
        )

    def episode_return(self, rewards: Sequence[float], infos: Sequence[dict[str, Any]]) -> float:
        """R of an episode: Σ r_t / ``reward_scale`` less ``invalid_action_penalty`` per refused reply (a step
        whose info has an ``invalid_reason``). Without the penalty a refusal costs only what the env's
        fallback move costs, so RL can learn gibberish as a cheap fold; a task without the option pays none.
        (Poker's case is in tests/test_poker_adapter.py: the SDK's own examples do not import a built-in task.)
        """
        refused = sum(1 for info in infos if info.get("invalid_reason") is not None)
        return sum(rewards) / self.reward_scale - self.invalid_action_penalty * refused

    def summary(self, info: dict[str, Any]) -> dict[str, Any]:
        return {key: info[key] for key in self.SUMMARY_KEYS + ("opponent",) if key in info}

    @staticmethod
    def _opponent_meta(example: Example) -> dict[str, str]:
        return {"opponent": example.meta["opponent"]} if "opponent" in example.meta else {}
