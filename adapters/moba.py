"""``moba``: a one-lane MOBA hero against rule-based or LLM heroes, one episode per example.

An example names an episode (``meta["episode_seed"]``): the game's randomness and the bots'. The
autopilot (``rule:farmer``) plays the model's hero for ``warmup_ticks`` ticks so that the model takes
over a live lane (creeps fighting, gold and levels on both sides); the model then plays until
``max_ticks`` (truncated) or until a base falls (terminated). The conversation is
``system (rules), user (observation), assistant (action), ...``, as in poker.

Training signal:

- reward R = Σ_t r_t, the env's shaped return (gold, structure damage, deaths, ±10 for a base;
  see :mod:`echo2_sdk.envs.moba`); refused actions earn nothing but cost attempts, then a hold;
- Ω.loss_mask covers assistant tokens only, aligned to the completion tokens;
- Ω.group is the lane state when the model takes over (``ahead``/``even``/``behind`` in gold), so
  ``grouping: key`` compares similar lanes; ``grouping: prompt`` (GRPO) compares the n samples of
  one episode seed.

Every MOBA-specific setting is an option with a default, so ``examples/moba.yaml`` differs from
``examples/poker.yaml`` in the task name only. The runtime drives it exactly like poker
(``open_episode`` / ``to_rollout``, see :mod:`echo2_sdk.adapters.poker`).
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

from echo2_sdk.adapter import Example, TaskAdapter
from echo2_sdk.adapters.poker import EpisodeTokens, _ids
from echo2_sdk.env import ChatEpisode, EpisodeLog, Policy
from echo2_sdk.envs.moba import MobaConfig, MobaEnv
from echo2_sdk.envs.moba_players import make_player
from echo2_sdk.records import Omega, Rollout
from echo2_sdk.registry import register_task
from echo2_sdk.signals import assistant_mask

SUMMARY_KEYS = ("outcome", "tick", "gold_earned", "last_hits", "kills", "deaths", "structure_damage",
                "invalid_actions", "forced_actions", "opponent_invalid_actions")


@dataclass(frozen=True)
class MobaEpisode:
    """A finished text-level episode."""

    example_id: str
    messages: tuple[dict[str, str], ...]
    rewards: tuple[float, ...]
    reward: float
    group: str
    info: dict[str, Any]
    log: EpisodeLog | None = field(default=None, compare=False)


@register_task("moba")
class MobaAdapter(TaskAdapter):
    """See the module docstring."""

    name = "moba"
    multi_turn = True

    @dataclass(frozen=True)
    class Options:
        opponent: str = "rule:pusher"
        """Spec of every foe hero (``rule:farmer|pusher|random``, ``llm:PATH``); comma-separated: one per foe."""
        team_size: int = 1
        """1 (1v1) or 2 (2v2, with an ``ally`` bot)."""
        ally: str = "rule:farmer"
        warmup_ticks: int = 24
        """Ticks the autopilot plays before the model takes over (4 creep waves in)."""
        max_ticks: int = 28
        """Truncate at this tick: with the warm-up, 4 decisions per episode (a char-level context of ~2k
        tokens; the learner's cost grows with its square on CPU)."""
        autopilot: str = "rule:farmer"
        max_invalid_actions: int = 1
        """Refused actions tolerated per tick before the model's hero holds (each retry repeats the view)."""
        win_reward: float = 10.0
        final_observation: bool = False
        """Append the closing observation as a last user turn (bookkeeping, mask 0)."""
        num_train: int = 4096
        num_eval: int = 256
        num_sft: int = 256
        """Demonstrations in the ``sft`` split (the warm start): one decision of a ``demonstrator`` episode each."""
        demonstrator: str = "rule:farmer"
        """Who plays the demonstrations (teaches the action format and a sane default strategy)."""

    def __init__(self, options: Any = None, *, seed: int = 0) -> None:
        super().__init__(options, seed=seed)
        opts = self.options
        if opts.num_train < 1 or opts.num_eval < 1 or opts.num_sft < 0:
            raise ValueError(f"task.options.num_train={opts.num_train} and num_eval={opts.num_eval} must be >= 1, "
                             f"num_sft={opts.num_sft} >= 0")
        self.config = MobaConfig(
            team_size=opts.team_size, max_ticks=opts.max_ticks, warmup_ticks=opts.warmup_ticks,
            autopilot=opts.autopilot, opponents=tuple(s.strip() for s in opts.opponent.split(",")),
            allies=(opts.ally,), max_invalid_actions=opts.max_invalid_actions, win_reward=opts.win_reward,
        )
        self.max_reward = opts.win_reward + 10.0
        self.llm_policy_factory: Callable[[str], Policy] | None = None
        """Set by the runtime when opponents are ``llm:PATH`` (path → policy)."""
        self._splits: dict[str, list[Example]] = {}
        self._env: MobaEnv | None = None

    # ----- data -------------------------------------------------------------------------------
    def examples(self, split: str) -> Sequence[Example]:
        if split not in ("sft", "train", "eval"):
            raise ValueError(f"unknown split {split!r}; moba has 'sft', 'train' and 'eval'")
        if split not in self._splits:
            if split == "sft":
                self._splits[split] = [self._demonstration(i) for i in range(self.options.num_sft)]
            else:
                count = {"train": self.options.num_train, "eval": self.options.num_eval}[split]
                self._splits[split] = [self._example(split, i) for i in range(count)]
        return self._splits[split]

    def _example(self, split: str, index: int) -> Example:
        episode_seed = random.Random(f"moba:{self.seed}:{split}:{index}").getrandbits(62)
        size = self.config.team_size
        return Example(id=f"moba:{split}:{index}",
                       prompt=f"{size}v{size} lane vs {self.options.opponent}, episode {episode_seed}",
                       meta={"episode_seed": episode_seed})

    def _demonstration(self, index: int) -> Example:
        """An sft example: a ``demonstrator`` episode's conversation up to one of its decisions, its reply there."""
        base = self._example("sft", index)
        episode = self.play_episode(base, self.options.demonstrator)
        replies = [i for i, m in enumerate(episode.messages) if m["role"] == "assistant"]
        at = replies[random.Random(f"moba:{self.seed}:sft-turn:{index}").randrange(len(replies))]
        return Example(id=base.id, prompt=base.prompt, answer=episode.messages[at]["content"],
                       meta={**base.meta, "messages": tuple(dict(m) for m in episode.messages[:at])})

    def make_env(self) -> MobaEnv:
        """A fresh environment for this adapter's options (one per concurrent episode)."""
        return MobaEnv(self.config, llm_policy_factory=self.llm_policy_factory)

    def _shared_env(self) -> MobaEnv:
        if self._env is None:
            self._env = self.make_env()
        return self._env

    def build_messages(self, example: Example) -> list[dict[str, str]]:
        if "messages" in example.meta:
            return [dict(m) for m in example.meta["messages"]]
        env = self._shared_env()
        obs, _ = env.begin_episode(example.meta["episode_seed"])
        return [{"role": "system", "content": env.system_prompt}, {"role": "user", "content": obs}]

    def group_key(self, example: Example) -> str:
        env = self._shared_env()
        env.begin_episode(example.meta["episode_seed"])
        return env.lane_bucket or "none"

    def reward(self, example: Example, completion_text: str) -> float:
        raise NotImplementedError("moba rewards come from playing the episode: use open_episode/to_rollout "
                                  "(token level) or play_episode (text level), not reward(example, text)")

    def materialize(self, example: Example, prompt_ids, completion_ids) -> Omega:
        raise NotImplementedError("moba's Ω comes from the episode: use to_rollout(episode)")

    # ----- token level (the worker loop) ------------------------------------------------------
    def open_episode(self, example: Example, tokenizer) -> ChatEpisode:
        env = self.make_env()
        return ChatEpisode(env, tokenizer, example.meta["episode_seed"], system_prompt=env.system_prompt,
                           final_observation=self.options.final_observation)

    def to_rollout(self, episode: ChatEpisode, *, example: Example, version: int,
                   meta: dict[str, Any] | None = None) -> Rollout:
        env = episode.env
        assert isinstance(env, MobaEnv)
        return Rollout(
            prompt_ids=tuple(episode.prompt_ids), completion_ids=tuple(episode.completion_ids),
            reward=episode.total_reward, version=version,
            omega=Omega(loss_mask=tuple(episode.loss_mask), group=env.lane_bucket or "none"),
            sampler_logprobs=tuple(episode.logprobs), prompt_key=example.id,
            meta={**_summary(episode.infos[-1]), "stop": episode.stop_reason, **(meta or {})},
        )

    # ----- text level -------------------------------------------------------------------------
    def play_episode(self, example: Example, policy: Policy | str) -> MobaEpisode:
        """Play the example's episode with ``policy(messages) -> str`` or a bot spec (``rule:farmer``)."""
        env = self.make_env()
        obs, info = env.begin_episode(example.meta["episode_seed"])
        messages = [{"role": "system", "content": env.system_prompt}, {"role": "user", "content": obs}]
        player = make_player(policy) if isinstance(policy, str) else None
        if player is not None:
            player.begin(example.meta["episode_seed"])
        feedback, done, rewards = None, False, []
        while not done:
            if player is not None:
                assert env.game is not None
                reply = player.act(env.game, env.game.heroes[0], feedback)
            else:
                reply = policy([dict(m) for m in messages])  # type: ignore[operator]
            obs, reward, terminated, truncated, info = env.step(reply)
            messages.append({"role": "assistant", "content": env.log.turns[-1].action if env.log else str(reply)})
            rewards.append(reward)
            feedback, done = info["invalid_reason"], terminated or truncated
            if not done or self.options.final_observation:
                messages.append({"role": "user", "content": obs})
        return MobaEpisode(example.id, tuple(messages), tuple(rewards), float(sum(rewards)),
                           env.lane_bucket or "none", {**info, **_summary(info)}, env.log)

    def episode_to_tokens(self, episode: MobaEpisode, tokenizer) -> EpisodeTokens:
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


def _summary(info: dict[str, Any]) -> dict[str, Any]:
    return {key: info[key] for key in SUMMARY_KEYS if key in info}
