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
  (:data:`echo2_sdk.envs.poker.strength.BUCKETS`), so ``grouping: key`` normalizes advantages among
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
:meth:`PokerAdapter.play_episode` and :meth:`PokerAdapter.episode_to_tokens`; the shared body of
multi-turn tasks lives in :class:`echo2_sdk.episodic.EpisodicTaskAdapter`.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from echo2_sdk.adapter import Example
from echo2_sdk.envs.poker import PokerConfig, PokerEnv, make_player
from echo2_sdk.evaluation import HeadToHead
from echo2_sdk.episodic import EpisodeTokens, EpisodicTaskAdapter, TextEpisode, lineup_seats, opponent_columns
from echo2_sdk.registry import register_task

__all__ = ["PokerAdapter", "PokerEpisode", "EpisodeTokens"]

REWARD_UNITS = ("big_blind", "chip")
PokerEpisode = TextEpisode
"""A finished text-level poker episode (rewards r_t in chips, R in the adapter's ``reward_unit``)."""


@register_task("poker")
class PokerAdapter(EpisodicTaskAdapter):
    """See the module docstring."""

    name = "poker"
    # Whole-chunk BPE made every card one id per place (" [Ah," first, " Ah]," last): 104+ unrelated ids,
    # and no tiny model learned which of them are aces or pairs (benchmarks/poker_card_reading.py).
    tokenizer_atoms = r"[2-9TJQKA](?=[cdhs][,\]])|(?<=[2-9TJQKA])[cdhs](?=[,\]])"
    SUMMARY_KEYS = ("chips", "hands_played", "walks", "invalid_actions", "forced_actions", "opponent_invalid_actions",
                    "all_in_hands")

    @dataclass(frozen=True)
    class Options:
        opponent: str = "rule:calling, rule:tag, rule:lag"
        """Who sits in the other seats: a spec (``rule:calling|tag|lag|random``, ``llm:PATH``, ``llm:self``: the
        policy being trained, greedy — self-play, ``llm:league``: one of the run's earlier snapshots,
        drawn per worker request — a self-play league, ``rollout.league_size`` / ``league_every_versions``) for every seat, ``A+B`` for one per seat, or a weighted pool of such line-ups, ``"2 rule:tag, rule:lag,
        llm:PATH"``: each deal draws one (recorded in the records' meta, and in Ω.group when pooled).
        Default: the three rule styles in equal shares — trained against the calling station alone, the
        tiny model learnt to call everything and lost 7-13 big blinds a hand to the aggressive styles."""
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
        invalid_action_penalty: float = 1.0
        """R loses this much (in ``reward_unit``) per refused reply; 1 big blind, more than folding the small
        blind: a legal fold is always the cheapest way out, so RL cannot learn gibberish as a free fold."""
        all_in_equity: bool = False
        """Reward a hand all-in before the river with its expected chips over the unseen board cards (all-in
        equity), not the dealt runout's: the same expectation, less luck (``PokerConfig.all_in_equity``)."""
        final_observation: bool = False
        """Append the closing observation (hand results) as a last user turn (bookkeeping, mask 0)."""
        num_train: int = 4096
        num_eval: int = 256
        num_sft: int = 256
        """Demonstrations in the ``sft`` split (the warm start): one decision of a ``demonstrator`` episode each."""
        demonstrator: str = "2 rule:tag, rule:lag, rule:calling"
        """Who plays the demonstrations: a weighted mixture draws one player per demonstration. The
        default mixes three rule styles so the warm start sees every action (fold, check, call, bets and
        raises of many sizes) in legal spots; ``rule:random`` (uniform over legal actions) taught
        ``all-in`` and illegal sizes to the tiny model, ``rule:tag`` alone imitates one tight player."""

    def __init__(self, options: Any = None, *, seed: int = 0) -> None:
        super().__init__(options, seed=seed)
        opts = self.options
        if opts.reward_unit not in REWARD_UNITS:
            raise ValueError(f"task.options.reward_unit={opts.reward_unit!r}; use one of {REWARD_UNITS}")
        self.config = PokerConfig(
            seats=opts.seats, small_blind=opts.small_blind, big_blind=opts.big_blind,
            starting_stack=opts.starting_stack, hands_per_episode=opts.hands_per_episode,
            opponents=lineup_seats(self.opponents[0][0]),
            max_invalid_actions=opts.max_invalid_actions, show_history=opts.show_history,
            all_in_equity=opts.all_in_equity,
        )
        self.unit = self.reward_scale = opts.big_blind if opts.reward_unit == "big_blind" else 1
        self.max_reward = opts.starting_stack * (opts.seats - 1) * opts.hands_per_episode / self.unit
        self.check_players()

    @classmethod
    def head_to_head(cls) -> HeadToHead:
        """``echo2 eval --task poker``: duplicate deals, chips won per 100 big blinds; with ``--config`` at
        the config's table (:func:`eval_table`)."""
        from echo2_sdk.envs.poker.evaluation import HEAD_TO_HEAD  # on demand: playing poker does not need it

        return dataclasses.replace(HEAD_TO_HEAD, task_defaults=eval_table)

    def _example(self, split: str, index: int) -> Example:
        episode_seed = self.episode_seed(split, index)
        table = "heads-up" if self.config.seats == 2 else f"{self.config.seats}-max"
        return Example(
            id=f"{self.name}:{split}:{index}",
            prompt=f"{table} no-limit hold'em vs {self.options.opponent}, "
                   f"{self.config.hands_per_episode} hand(s), episode {episode_seed}",
            meta={"episode_seed": episode_seed},
        )

    def make_env(self, opponent: str | None = None) -> PokerEnv:
        """A fresh environment for this adapter's options (one per concurrent episode), against the
        line-up ``opponent`` (``None``: the pool's first)."""
        return PokerEnv(self.config_against(opponent), llm_policy_factory=self.llm_policy_factory)


    def episode_group(self, env: PokerEnv) -> str:
        return env.hand_bucket or "none"

    def make_bot(self, spec: str, env: PokerEnv):
        return make_player(spec, table=env.table)

    def bot_reply(self, player, env: PokerEnv, feedback: str | None) -> str:
        assert env.hand is not None
        return player.act(env.hand.view(self.config.agent_seat), feedback)


def eval_table(options: PokerAdapter.Options) -> dict[str, Any]:
    """``echo2 eval`` arguments that play the table of a poker task's ``options`` (seats, blinds, stack,
    and one opponent column per line-up of the pool, ``A+B`` for one player per seat).

    >>> eval_table(PokerAdapter.Options(seats=3, small_blind=25, big_blind=50, opponent="rule:tag + rule:lag"))
    {'seats': 3, 'blinds': '25/50', 'stack': 1000, 'opponents': 'rule:tag+rule:lag'}
    >>> eval_table(PokerAdapter.Options(opponent="3 rule:tag, rule:lag"))["opponents"]
    'rule:tag,rule:lag'
    """
    return {"seats": options.seats, "blinds": f"{options.small_blind}/{options.big_blind}",
            "stack": options.starting_stack,
            "opponents": opponent_columns(options.opponent)}
