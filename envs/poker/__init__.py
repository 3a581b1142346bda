"""Poker: No-Limit Texas Hold'em as a text environment (pokerkit underneath), its players and evaluation.

Modules, from the environment down:

- :mod:`.env`: :class:`PokerEnv` and :class:`PokerConfig`, the seat the model plays through ``step(text)``;
- :mod:`.play`: playing hands with players (:class:`Player`, :func:`play_hand` and its :class:`HandRecord`);
- :mod:`.hand`: one hand on pokerkit's state machine (:class:`Hand`, :class:`TableConfig`);
- :mod:`.equity`: an all-in runout's expected pot share;
- :mod:`.actions`: parsing action text and describing the legal actions;
- :mod:`.players`: who sits in the other seats (``rule:calling|tag|lag|random``, ``llm:NAME``);
- :mod:`.strength`: hand strength for the rule players and the hand buckets used as advantage groups;
- :mod:`.text`: the rules prompt and the observation a model reads;
- :mod:`.evaluation`: duplicate-deal head-to-head tables (``echo2 eval --task poker``), imported on
  demand so that playing poker does not load it.
"""

from echo2_sdk.envs.poker.actions import ParsedAction, parse_action
from echo2_sdk.envs.poker.env import PokerConfig, PokerEnv
from echo2_sdk.envs.poker.hand import Hand, TableConfig
from echo2_sdk.envs.poker.play import HandRecord, Player, play_hand
from echo2_sdk.envs.poker.players import RULE_STYLES, make_player
from echo2_sdk.envs.poker.strength import BUCKETS, hand_bucket

__all__ = ["BUCKETS", "RULE_STYLES", "Hand", "HandRecord", "ParsedAction", "Player", "PokerConfig", "PokerEnv",
           "TableConfig", "hand_bucket", "make_player", "parse_action", "play_hand"]
