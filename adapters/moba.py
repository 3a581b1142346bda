"""``moba``: a one-lane MOBA hero against rule-based or LLM heroes, one episode per example.

An example names an episode (``meta["episode_seed"]``): the game's randomness and the bots'. The
autopilot (``rule:farmer``) plays the model's hero for ``warmup_ticks`` ticks so that the model takes
over a live lane (creeps fighting, gold and levels on both sides); the model then plays until
``max_ticks`` (truncated) or until a base falls (terminated). The conversation is
``system (rules), user (observation), assistant (action), ...``, as in poker.

Training signal:

- reward R = Σ_t r_t, the env's shaped return (gold, structure damage, deaths, ±10 for a base;
  see :mod:`echo2_sdk.envs.moba.env`); refused actions earn nothing but cost attempts, then a hold;
- Ω.loss_mask covers assistant tokens only, aligned to the completion tokens;
- Ω.group is the lane state when the model takes over (``ahead``/``even``/``behind`` in gold), so
  ``grouping: key`` compares similar lanes; ``grouping: prompt`` (GRPO) compares the n samples of
  one episode seed.

Every MOBA-specific setting is an option with a default, so ``examples/moba.yaml`` differs from
``examples/poker.yaml`` in the task name only. The runtime drives it exactly like poker
(``open_episode`` / ``to_rollout``, see :mod:`echo2_sdk.adapters.poker`).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from echo2_sdk.adapter import Example
from echo2_sdk.envs.moba import MobaConfig, MobaEnv, make_player
from echo2_sdk.evaluation import HeadToHead
from echo2_sdk.episodic import EpisodicTaskAdapter, TextEpisode, lineup_seats, opponent_columns
from echo2_sdk.registry import register_task

SUMMARY_KEYS = ("outcome", "tick", "gold_earned", "last_hits", "kills", "deaths", "structure_damage",
                "invalid_actions", "forced_actions", "opponent_invalid_actions")
MobaEpisode = TextEpisode
"""A finished text-level MOBA episode."""


@register_task("moba")
class MobaAdapter(EpisodicTaskAdapter):
    """See the module docstring."""

    name = "moba"
    SUMMARY_KEYS = SUMMARY_KEYS

    @dataclass(frozen=True)
    class Options:
        opponent: str = "rule:pusher, rule:farmer"
        """The foe heroes: a spec (``rule:farmer|pusher|grinder|setter|random``, ``llm:PATH``, ``llm:self``: the policy
        being trained, greedy — self-play, ``llm:league``: one of the run's earlier snapshots,
        drawn per worker request — a self-play league, ``rollout.league_size`` / ``league_every_versions``) for every foe, ``A+B`` for
        one per foe, or a weighted pool of such line-ups, ``"2 rule:pusher, rule:farmer"``: each game draws
        one (recorded in the records' meta, and in Ω.group when pooled). Default: both rule styles."""
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
        invalid_action_penalty: float = 0.2
        """R loses this much per refused reply (0.2 = a last hit's gold): a hold is always cheaper than a
        refused reply, so RL cannot learn gibberish as a free hold."""
        num_train: int = 4096
        num_eval: int = 256
        num_sft: int = 256
        """Demonstrations in the ``sft`` split (the warm start): one decision of a ``demonstrator`` episode each."""
        demonstrator: str = "rule:farmer, rule:pusher, rule:grinder"
        """Who plays the demonstrations (teaches the action format and a sane default strategy); a weighted
        mixture draws one player per demonstration. The default mixes three styles: imitating the farmer
        alone, the eight episodes of a lane all opened with the same action (nothing for GRPO to compare);
        without the grinder no demonstration wounds a creep for a later kill, so against a farmer no
        sampled episode earned anything and RL had nothing to reinforce."""

    def __init__(self, options: Any = None, *, seed: int = 0) -> None:
        super().__init__(options, seed=seed)
        opts = self.options
        self.config = MobaConfig(
            team_size=opts.team_size, max_ticks=opts.max_ticks, warmup_ticks=opts.warmup_ticks,
            autopilot=opts.autopilot, opponents=lineup_seats(self.opponents[0][0]),
            allies=(opts.ally,), max_invalid_actions=opts.max_invalid_actions, win_reward=opts.win_reward,
        )
        self.max_reward = opts.win_reward + 10.0
        self.check_players()

    @classmethod
    def head_to_head(cls) -> HeadToHead:
        """``echo2 eval --task moba``: duplicate games, win rate and mean reward; with ``--config`` against
        the config's foes (:func:`eval_game`)."""
        from echo2_sdk.envs.moba.evaluation import HEAD_TO_HEAD  # on demand: playing moba does not need it

        return dataclasses.replace(HEAD_TO_HEAD, task_defaults=eval_game)

    def _example(self, split: str, index: int) -> Example:
        episode_seed = self.episode_seed(split, index)
        size = self.config.team_size
        return Example(id=f"{self.name}:{split}:{index}",
                       prompt=f"{size}v{size} lane vs {self.options.opponent}, episode {episode_seed}",
                       meta={"episode_seed": episode_seed})

    def make_env(self, opponent: str | None = None) -> MobaEnv:
        """A fresh environment for this adapter's options (one per concurrent episode), against the
        line-up ``opponent`` (``None``: the pool's first)."""
        return MobaEnv(self.config_against(opponent), llm_policy_factory=self.llm_policy_factory)


    def episode_group(self, env: MobaEnv) -> str:
        return env.lane_bucket or "none"

    def make_bot(self, spec: str, env: MobaEnv):
        return make_player(spec)

    def bot_reply(self, player, env: MobaEnv, feedback: str | None) -> str:
        assert env.game is not None
        return player.act(env.game, env.game.heroes[0], feedback)


def eval_game(options: MobaAdapter.Options) -> dict[str, Any]:
    """``echo2 eval`` arguments that play a moba task's game: its team size and one column per line-up of
    its opponent pool (the evaluation copies a column's spec into every foe hero).

    >>> eval_game(MobaAdapter.Options(opponent="2 rule:farmer, rule:pusher"))
    {'team_size': 1, 'opponents': 'rule:farmer,rule:pusher'}
    """
    return {"team_size": options.team_size,
            "opponents": opponent_columns(options.opponent)}
