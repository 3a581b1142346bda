"""echo2: cost-efficient RL post-training of LLMs (ECHO-2 design).

The SDK's main names, importable from the package itself::

    from echo2_sdk import TaskAdapter, Example, register_task

- tasks: :class:`TaskAdapter` (single-turn), :class:`MultiTurnTaskAdapter` and
  :class:`EpisodicTaskAdapter` (multi-turn, played in a :class:`TextEnv`), :class:`Example`;
- the registry: :func:`register_task`, :func:`make_task`, :func:`get_task_class`;
- records: :class:`Rollout`, :class:`RolloutGroup`, :class:`Omega`;
- environments: :class:`TextEnv`, :class:`ChatEpisode`;
- checks: :func:`check_adapter`, :func:`check_env`, :func:`check_task`;
- configuration: :func:`load_config`, :class:`Echo2Config`, :class:`ConfigError`;
- algorithms: :func:`register_advantage`, :func:`register_policy_loss` (and their ``get_``).

Each name is imported on first use, so ``import echo2_sdk`` (and ``echo2 --help``) loads neither
torch nor Ray; the modules named below hold the full API.
"""

from __future__ import annotations

import importlib
from typing import Any

# name -> the module that defines it
_LAZY: dict[str, str] = {
    "BaseTaskAdapter": "echo2_sdk.adapter",
    "TaskAdapter": "echo2_sdk.adapter",
    "MultiTurnTaskAdapter": "echo2_sdk.adapter",
    "Example": "echo2_sdk.adapter",
    "EpisodicTaskAdapter": "echo2_sdk.episodic",
    "Rollout": "echo2_sdk.records",
    "RolloutGroup": "echo2_sdk.records",
    "Omega": "echo2_sdk.records",
    "register_task": "echo2_sdk.registry",
    "make_task": "echo2_sdk.registry",
    "get_task_class": "echo2_sdk.registry",
    "known_tasks": "echo2_sdk.registry",
    "TextEnv": "echo2_sdk.text_env",
    "ChatEpisode": "echo2_sdk.chat_episode",
    "check_adapter": "echo2_sdk.checks",
    "check_env": "echo2_sdk.env_check",
    "check_task": "echo2_sdk.task_check",
    "load_config": "echo2_sdk.config",
    "Echo2Config": "echo2_sdk.config",
    "ConfigError": "echo2_sdk.config_loader",
    "register_advantage": "echo2_sdk.algos",
    "get_advantage": "echo2_sdk.algos",
    "register_policy_loss": "echo2_sdk.algos",
    "get_policy_loss": "echo2_sdk.algos",
}

__all__ = list(_LAZY)


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'echo2_sdk' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value  # later lookups skip this function
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
