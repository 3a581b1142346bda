"""echo2's built-in text environments, one package per game: :mod:`.poker` and :mod:`.moba`; the opponent
seat pieces both use live in :mod:`.seats`.

Importing this package registers every built-in env with gymnasium under the ``echo2/`` namespace, so
``gymnasium.make("echo2/Poker-v0", seats=6)`` works after ``import echo2_sdk.envs`` (keyword arguments go
to the env's config). gymnasium 1.x no longer loads plugins through package entry points; to make an env
without importing echo2 first, name the module in the id: ``gymnasium.make("echo2_sdk.envs:echo2/Poker-v0")``.
"""

from __future__ import annotations

import gymnasium

GYM_NAMESPACE = "echo2"

GYM_ENVS: dict[str, str] = {
    f"{GYM_NAMESPACE}/Poker-v0": "echo2_sdk.envs.poker.env:PokerEnv",
    f"{GYM_NAMESPACE}/Moba-v0": "echo2_sdk.envs.moba.env:MobaEnv",
}
"""gymnasium id → entry point of every built-in env (imported only when the env is made)."""


def register_gym_envs() -> list[str]:
    """Register :data:`GYM_ENVS` with gymnasium, skipping ids already there; returns their ids.

    The envs end episodes themselves (a step limit truncates), so no ``TimeLimit`` is added.
    """
    for env_id, entry_point in GYM_ENVS.items():
        if env_id not in gymnasium.registry:
            gymnasium.register(id=env_id, entry_point=entry_point)
    return list(GYM_ENVS)


register_gym_envs()

__all__ = ["GYM_ENVS", "GYM_NAMESPACE", "register_gym_envs"]
