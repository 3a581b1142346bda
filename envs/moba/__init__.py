"""MOBA: a compact one-lane MOBA as a text environment, its rules engine, players and evaluation.

Modules, from the environment down:

- :mod:`.env`: :class:`MobaEnv` and :class:`MobaConfig`, the hero the model plays through ``step(text)``,
  and the shaped reward;
- :mod:`.game`: the rules engine (:class:`Game`, :class:`Rules`): lane, creeps, towers, bases, heroes;
- :mod:`.text`: observations, the rules prompt, action texts and their parsing;
- :mod:`.players`: who plays the other heroes (``rule:farmer|pusher|grinder|setter|random``, ``llm:NAME``);
- :mod:`.evaluation`: duplicate-game head-to-head tables (``echo2 eval --task moba``), imported on
  demand so that playing the game does not load it.
"""

from echo2_sdk.envs.moba.env import MobaConfig, MobaEnv
from echo2_sdk.envs.moba.game import Game, Hero, Rules
from echo2_sdk.envs.moba.players import RULE_STYLES, make_player

__all__ = ["RULE_STYLES", "Game", "Hero", "MobaConfig", "MobaEnv", "Rules", "make_player"]
