"""``poker``: No-Limit Texas Hold'em against rule-based or LLM opponents, one episode per example.

An example names an episode (``meta["episode_seed"]``): the deals, the button and the opponents'
randomness. The model plays the agent seat turn by turn; the conversation is
``system (rules), user (observation), assistant (action), user (next observation), ...``.

Training signal:

- reward R = Σ_t r_t, the agent's chip result over the episode, in big blinds by default
  (``reward_unit``); refused actions earn nothing by themselves but cost attempts, then a fold;
- Ω.loss_mask covers assistant tokens only (turn-aware ``<|im_start|>`` counting, see
  :func:`echo2_sdk.signals.assistant_mask`), aligned to the completion tokens;
- Ω.group is the bucket of the agent's private cards in the first hand it acts in
  (:data:`echo2_sdk.envs.poker_strength.BUCKETS`), so ``grouping: key`` normalizes advantages among
  similar hands and ``grouping: batch`` over the batch. ``grouping: prompt`` (GRPO) compares the n
  samples of one episode seed: same cards, same opponent randomness.

Protocol for the runtime's multi-turn loop (token-exact; see :class:`echo2_sdk.env.ChatEpisode`)::

    episodes = [adapter.open_episode(ex, tokenizer) for ex in examples for _ in range(n)]
    while live := [e for e in episodes if not e.done]:
        for e in live:                                   # context budget
            if len(e.context_ids) + params.max_new_tokens > max_total_tokens: e.stop("length")
        live = [e for e in live if not e.done]
        outs = backend.generate([e.context_ids for e in live], 1, params)
        for e, [c] in zip(live, outs): e.submit(c.token_ids, c.logprobs)
    rollouts = [adapter.to_rollout(e, version=v) for e in episodes]

Text-level play (rule-based demonstrations, API policies, evaluation) goes through
:meth:`PokerAdapter.play_episode` and :meth:`PokerAdapter.episode_to_tokens`.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

from echo2_sdk.adapter import Example, TaskAdapter
from echo2_sdk.env import ChatEpisode, EpisodeLog, Policy
from echo2_sdk.envs.poker import PokerConfig, PokerEnv
from echo2_sdk.envs.poker_players import make_player
from echo2_sdk.records import Omega, Rollout
from echo2_sdk.registry import register_task
from echo2_sdk.signals import assistant_mask

REWARD_UNITS = ("big_blind", "chip")


@dataclass(frozen=True)
class PokerEpisode:
    """A finished text-level episode."""

    example_id: str
    messages: tuple[dict[str, str], ...]
    rewards: tuple[float, ...]
    """r_t in chips, one per env step (assistant turn)."""
    reward: float
    """R = Σ r_t in the adapter's ``reward_unit``."""
    group: str
    info: dict[str, Any]
    log: EpisodeLog | None = field(default=None, compare=False)


@dataclass(frozen=True)
class EpisodeTokens:
    prompt_ids: list[int]
    completion_ids: list[int]
    loss_mask: list[int]
    """Aligned to ``completion_ids``: 1 on assistant-written tokens (closing ``<|im_end|>`` included)."""


@register_task("poker")
class PokerAdapter(TaskAdapter):
    """See the module docstring."""

    name = "poker"
    multi_turn = True

    @dataclass(frozen=True)
    class Options:
        opponent: str = "rule:calling"
        """Spec of every other seat (``rule:calling|tag|lag|random``, ``llm:PATH``); a comma-separated
        list gives one spec per other seat. Default: the calling station."""
        seats: int = 2
        small_blind: int = 5
        big_blind: int = 10
        starting_stack: int = 1000
        hands_per_episode: int = 1
        max_invalid_actions: int = 2
        """Refused actions tolerated per decision before the table checks/folds for the model."""
        show_history: bool = True
        reward_unit: str = "big_blind"
        """``big_blind`` (R in big blinds) or ``chip``."""
        final_observation: bool = False
        """Append the closing observation (hand results) as a last user turn (bookkeeping, mask 0)."""
        num_train: int = 4096
        num_eval: int = 256
        num_sft: int = 256
        """Demonstrations in the ``sft`` split (the warm start): one decision of a ``demonstrator`` episode each."""
        demonstrator: str = "rule:random"
        """Who plays the demonstrations. The default (uniform over legal actions) teaches the action
        format without a strategy, leaving the strategy to RL; ``rule:tag`` imitates a tight player."""

    def __init__(self, options: Any = None, *, seed: int = 0) -> None:
        super().__init__(options, seed=seed)
        opts = self.options
        if opts.reward_unit not in REWARD_UNITS:
            raise ValueError(f"task.options.reward_unit={opts.reward_unit!r}; use one of {REWARD_UNITS}")
        if opts.num_train < 1 or opts.num_eval < 1 or opts.num_sft < 0:
            raise ValueError(f"task.options.num_train={opts.num_train} and num_eval={opts.num_eval} must be >= 1, "
                             f"num_sft={opts.num_sft} >= 0")
        self.config = PokerConfig(
            seats=opts.seats, small_blind=opts.small_blind, big_blind=opts.big_blind,
            starting_stack=opts.starting_stack, hands_per_episode=opts.hands_per_episode,
            opponents=tuple(s.strip() for s in opts.opponent.split(",")),
            max_invalid_actions=opts.max_invalid_actions, show_history=opts.show_history,
        )
        self.unit = opts.big_blind if opts.reward_unit == "big_blind" else 1
        self.max_reward = opts.starting_stack * (opts.seats - 1) * opts.hands_per_episode / self.unit
        self.llm_policy_factory: Callable[[str], Policy] | None = None
        """Set by the runtime when opponents are ``llm:PATH`` (path → policy)."""
        self._splits: dict[str, list[Example]] = {}
        self._env: PokerEnv | None = None

    # ----- data -------------------------------------------------------------------------------
    def examples(self, split: str) -> Sequence[Example]:
        if split not in ("sft", "train", "eval"):
            raise ValueError(f"unknown split {split!r}; poker has 'sft' (empty), 'train' and 'eval'")
        if split not in self._splits:
            if split == "sft":
                self._splits[split] = [self._demonstration(i) for i in range(self.options.num_sft)]
            else:
                count = {"train": self.options.num_train, "eval": self.options.num_eval}[split]
                self._splits[split] = [self._example(split, i) for i in range(count)]
        return self._splits[split]

    def _demonstration(self, index: int) -> Example:
        """An sft example: the conversation of a ``demonstrator`` episode up to one of its decisions
        (picked by the seed), the demonstrator's reply there as the answer."""
        base = self._example("sft", index)
        episode = self.play_episode(base, self.options.demonstrator)
        replies = [i for i, m in enumerate(episode.messages) if m["role"] == "assistant"]
        at = replies[random.Random(f"poker:{self.seed}:sft-turn:{index}").randrange(len(replies))]
        messages = tuple(dict(m) for m in episode.messages[:at])
        return Example(id=base.id, prompt=base.prompt, answer=episode.messages[at]["content"],
                       meta={**base.meta, "messages": messages})

    def _example(self, split: str, index: int) -> Example:
        episode_seed = random.Random(f"poker:{self.seed}:{split}:{index}").getrandbits(62)
        table = "heads-up" if self.config.seats == 2 else f"{self.config.seats}-max"
        return Example(
            id=f"poker:{split}:{index}",
            prompt=f"{table} no-limit hold'em vs {self.options.opponent}, "
                   f"{self.config.hands_per_episode} hand(s), episode {episode_seed}",
            meta={"episode_seed": episode_seed},
        )

    def make_env(self) -> PokerEnv:
        """A fresh environment for this adapter's options (one per concurrent episode)."""
        return PokerEnv(self.config, llm_policy_factory=self.llm_policy_factory)

    def _shared_env(self) -> PokerEnv:
        if self._env is None:
            self._env = self.make_env()
        return self._env

    def build_messages(self, example: Example) -> list[dict[str, str]]:
        """The prompt x: the rules and the first observation of the example's episode (for an sft
        demonstration: the conversation up to the demonstrated decision)."""
        if "messages" in example.meta:
            return [dict(m) for m in example.meta["messages"]]
        env = self._shared_env()
        obs, _ = env.begin_episode(example.meta["episode_seed"])
        return [{"role": "system", "content": env.system_prompt}, {"role": "user", "content": obs}]

    def group_key(self, example: Example) -> str:
        env = self._shared_env()
        env.begin_episode(example.meta["episode_seed"])
        return env.hand_bucket or "none"

    # ----- reward and Ω come from the environment ---------------------------------------------
    def reward(self, example: Example, completion_text: str) -> float:
        raise NotImplementedError("poker rewards come from playing the episode: use open_episode/to_rollout "
                                  "(token level) or play_episode (text level), not reward(example, text)")

    def materialize(self, example: Example, prompt_ids, completion_ids) -> Omega:
        raise NotImplementedError("poker's Ω comes from the episode: use to_rollout(episode) or "
                                  "episode_to_tokens(episode, tokenizer)")

    # ----- token level (the worker loop) ------------------------------------------------------
    def open_episode(self, example: Example, tokenizer) -> ChatEpisode:
        """Start the example's episode as a token-level chat (its own env: safe to run many at once)."""
        env = self.make_env()
        return ChatEpisode(env, tokenizer, example.meta["episode_seed"], system_prompt=env.system_prompt,
                           final_observation=self.options.final_observation)

    def to_rollout(self, episode: ChatEpisode, *, example: Example, version: int,
                   meta: dict[str, Any] | None = None) -> Rollout:
        """τ = (x, y, r, v, Ω) of a finished token-level episode."""
        env = episode.env
        assert isinstance(env, PokerEnv)
        info = episode.infos[-1]
        return Rollout(
            prompt_ids=tuple(episode.prompt_ids), completion_ids=tuple(episode.completion_ids),
            reward=episode.total_reward / self.unit, version=version,
            omega=Omega(loss_mask=tuple(episode.loss_mask), group=env.hand_bucket or "none"),
            sampler_logprobs=tuple(episode.logprobs), prompt_key=example.id,
            meta={**self._summary(info), "stop": episode.stop_reason, **(meta or {})},
        )

    # ----- text level -------------------------------------------------------------------------
    def play_episode(self, example: Example, policy: Policy | str) -> PokerEpisode:
        """Play the example's episode with ``policy(messages) -> str``, or a rule-based spec such as
        ``"rule:tag"`` (demonstrations). The policy sees the whole conversation every turn."""
        env = self.make_env()
        obs, info = env.begin_episode(example.meta["episode_seed"])
        messages = [{"role": "system", "content": env.system_prompt}, {"role": "user", "content": obs}]
        player = make_player(policy, table=env.table) if isinstance(policy, str) else None
        if player is not None:
            player.begin(example.meta["episode_seed"])
        feedback, done, rewards = None, False, []
        while not done:
            if player is not None:
                assert env.hand is not None
                reply = player.act(env.hand.view(self.config.agent_seat), feedback)
            else:
                reply = policy([dict(m) for m in messages])  # type: ignore[operator]
            obs, reward, terminated, truncated, info = env.step(reply)
            messages.append({"role": "assistant", "content": env.log.turns[-1].action if env.log else str(reply)})
            rewards.append(reward)
            feedback, done = info["invalid_reason"], terminated or truncated
            if not done or self.options.final_observation:
                messages.append({"role": "user", "content": obs})
        return PokerEpisode(example.id, tuple(messages), tuple(rewards), sum(rewards) / self.unit,
                            env.hand_bucket or "none", {**info, **self._summary(info)}, env.log)

    def episode_to_tokens(self, episode: PokerEpisode, tokenizer) -> EpisodeTokens:
        """Tokenize a text-level episode with the chat template; mask = assistant tokens only."""
        messages = list(episode.messages)
        prompt_ids = _ids(tokenizer.apply_chat_template(messages[:2], tokenize=True, add_generation_prompt=True))
        full_ids = _ids(tokenizer.apply_chat_template(messages, tokenize=True, add_generation_prompt=False))
        if full_ids[: len(prompt_ids)] != prompt_ids:
            raise ValueError("the chat template renders the first turns differently inside the full conversation")
        ids = {name: tokenizer.convert_tokens_to_ids(token) for name, token in
               (("im_start_id", "<|im_start|>"), ("im_end_id", "<|im_end|>"), ("newline_id", "\n"))}
        mask = assistant_mask(full_ids, **ids, first_assistant_turn=3)
        return EpisodeTokens(prompt_ids, full_ids[len(prompt_ids):], mask[len(prompt_ids):])

    def episode_to_rollout(self, episode: PokerEpisode, tokenizer, *, version: int = 0) -> Rollout:
        """τ of a text-level episode (sampler logprobs unknown: 0.0; fine for SFT, not for IS ratios)."""
        tokens = self.episode_to_tokens(episode, tokenizer)
        return Rollout(
            prompt_ids=tuple(tokens.prompt_ids), completion_ids=tuple(tokens.completion_ids),
            reward=episode.reward, version=version,
            omega=Omega(loss_mask=tuple(tokens.loss_mask), group=episode.group),
            sampler_logprobs=(0.0,) * len(tokens.completion_ids), prompt_key=episode.example_id,
            meta=self._summary(episode.info),
        )

    @staticmethod
    def _summary(info: dict[str, Any]) -> dict[str, Any]:
        keys = ("chips", "hands_played", "walks", "invalid_actions", "forced_actions", "opponent_invalid_actions")
        return {key: info[key] for key in keys if key in info}


def _ids(rendered) -> list[int]:
    # transformers >= 5 returns a BatchEncoding from apply_chat_template(tokenize=True).
    return list(rendered["input_ids"] if hasattr(rendered, "keys") else rendered)
