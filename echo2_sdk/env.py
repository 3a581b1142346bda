"""Text environments, one import away: the contract, its checker and token-level chat episodes.

- :mod:`echo2_sdk.text_env`: :class:`TextEnv` (a small gymnasium contract for tasks that talk to the
  model in turns: seeding by episode seed, malformed actions answered never raised, the episode log),
  ``sanitize_text``, ``coerce_action``, ``Turn``, ``EpisodeLog``, ``Policy``;
- :mod:`echo2_sdk.env_check`: :func:`check_env`, gymnasium's checker plus echo2's contract checks;
- :mod:`echo2_sdk.chat_episode`: :class:`ChatEpisode`, an episode played as a token-level chat.
"""

from echo2_sdk.chat_episode import ChatEpisode
from echo2_sdk.env_check import MALFORMED_ACTIONS, EnvCheckError, check_env
from echo2_sdk.text_env import TEXT_CHARSET, EpisodeLog, Policy, TextEnv, Turn, coerce_action, sanitize_text

__all__ = ["TEXT_CHARSET", "ChatEpisode", "EnvCheckError", "EpisodeLog", "MALFORMED_ACTIONS", "Policy",
           "TextEnv", "Turn", "check_env", "coerce_action", "sanitize_text"]
