"""Task-agnostic pieces of opponent seats, shared by the poker and MOBA envs.

- :func:`rule_style` resolves ``rule:NAME`` (with aliases) to a bot class, with "did you mean".
- :func:`build_config` builds an env config dataclass from keyword overrides, with "did you mean".

- :func:`llm_policy` turns an ``llm:NAME`` spec into a chat policy: ``llm_policies[NAME]`` if given,
  else ``llm_policy_factory(NAME)`` (the runtime installs a checkpoint loader there, see
  ``echo2_sdk.runtime.rollout.mirror.bind_seats``, where ``llm:self`` is the training policy itself; ``echo2 eval`` passes its own).
- :class:`ChatSeat` keeps one conversation (system rules, one user message per observation, one
  assistant message per reply) and asks the policy for the next reply.
"""

from __future__ import annotations

import dataclasses
import difflib
from typing import Any, Callable, Mapping

from echo2_sdk.env import Policy, coerce_action


def rule_style(spec: str, styles: Mapping[str, type], aliases: Mapping[str, str], what: str) -> type:
    """The bot class of ``spec`` = ``rule:NAME`` (NAME a style or an alias); a "did you mean" otherwise."""
    style = aliases.get(spec.partition(":")[2], spec.partition(":")[2])
    if style not in styles:
        close = difflib.get_close_matches(style, [*styles, *aliases], n=1)
        hint = f" Did you mean 'rule:{aliases.get(close[0], close[0])}'?" if close else ""
        raise ValueError(f"unknown {what} {spec!r}; known: {', '.join('rule:' + s for s in styles)}.{hint}")
    return styles[style]


def build_config(cls: type, overrides: dict[str, Any], tuple_fields: tuple[str, ...] = ()) -> Any:
    """``cls(**overrides)`` for an env config dataclass, naming the closest field on a typo; list
    values of ``tuple_fields`` (from YAML) become tuples so the config stays hashable."""
    names = [f.name for f in dataclasses.fields(cls)]
    for key in overrides:
        if key not in names:
            close = difflib.get_close_matches(key, names, n=1)
            hint = f" Did you mean {close[0]!r}?" if close else ""
            raise TypeError(f"unknown {cls.__name__} field {key!r}; fields: {', '.join(names)}.{hint}")
    return cls(**{k: tuple(v) if k in tuple_fields and isinstance(v, list) else v for k, v in overrides.items()})


def llm_policy(spec: str, llm_policies: Mapping[str, Policy] | None = None,
               llm_policy_factory: Callable[[str], Policy] | None = None) -> Policy:
    """The policy of ``spec`` = ``llm:NAME`` (see the module docstring); a clear error without one."""
    kind, _, name = spec.partition(":")
    if kind != "llm" or not name:
        raise ValueError(f"{spec!r} is not an LLM seat spec; use 'llm:NAME' (NAME: a model path or a policy name)")
    if llm_policies and name in llm_policies:
        return llm_policies[name]
    if llm_policy_factory is not None:
        return llm_policy_factory(name)
    raise ValueError(f"{spec!r} needs a policy: pass llm_policies={{{name!r}: policy}} or "
                     "llm_policy_factory=(name -> policy(messages) -> str)")


class ChatSeat:
    """One conversation with a chat policy ``policy(messages) -> str``; exceptions from the policy propagate."""

    def __init__(self, policy: Policy, *, system: str | None = None) -> None:
        if not callable(policy):
            raise TypeError(f"an LLM seat needs a callable policy(messages) -> str, got {type(policy).__name__}")
        self.policy, self.system = policy, system
        self.messages: list[dict[str, str]] = []
        self.begin()

    def begin(self) -> None:
        self.messages = [{"role": "system", "content": self.system}] if self.system else []

    def reply(self, observation: str) -> str:
        self.messages.append({"role": "user", "content": observation})
        text = coerce_action(self.policy([dict(m) for m in self.messages]))
        self.messages.append({"role": "assistant", "content": text})
        return text
