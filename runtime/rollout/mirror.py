"""Self-play seats: ``llm:self`` in an opponent pool is the policy the worker is generating with.

The rollout plane resolves ``llm:NAME`` seats through the adapter's ``llm_policy_factory``.
:class:`SeatPolicies` is the runtime's factory: ``llm:self`` answers with the very backend (and so the
very snapshot version) that samples the agent's own turns, greedily, so the agent meets its current
greedy play — the policy ``echo2 eval`` scores; ``llm:league`` plays the league of the run's earlier
snapshots (:mod:`~echo2_sdk.runtime.rollout.league`); any other ``NAME`` loads a checkpoint
(:func:`~echo2_sdk.runtime.rollout.chat_policy.cached_chat_policy`). A mirror costs no memory (the weights
are the worker's own, wherever it runs) and one batch-1 generation per opponent decision. Its replies are
the opponent's, never trained on.
"""

from __future__ import annotations

from typing import Callable

from echo2_sdk.chat import chat_token_ids
from echo2_sdk.env import Policy
from echo2_sdk.runtime.rollout.backends.base import GenerationBackend, SamplingParams

SELF_SEAT = "self"
"""The ``NAME`` of ``llm:NAME`` that seats the worker's own current policy."""
LEAGUE_SEAT = "league"
"""The ``NAME`` of ``llm:NAME`` that seats a member of the run's league of earlier snapshots."""


class MirrorPolicy:
    """``policy(messages) -> str`` from ``backend``'s current weights (greedy, ``max_new_tokens`` tokens)."""

    def __init__(self, backend: GenerationBackend, tokenizer, max_new_tokens: int) -> None:
        self.backend, self.tokenizer = backend, tokenizer
        self.params = SamplingParams(temperature=0.0, max_new_tokens=max_new_tokens)
        self.calls = 0

    def __call__(self, messages: list[dict[str, str]]) -> str:
        self.calls += 1
        [[completion]] = self.backend.generate([chat_token_ids(self.tokenizer, messages)], 1, self.params)
        return self.tokenizer.decode(list(completion.token_ids), skip_special_tokens=True)


class SeatPolicies:
    """The runtime's ``llm_policy_factory``: ``self`` → the mirror (when bound), ``league`` → the league's
    player (a worker's :class:`~echo2_sdk.runtime.rollout.league.SnapshotLeague`, the driver's warm start),
    else a loaded checkpoint."""

    def __init__(self, mirror: MirrorPolicy | None = None,
                 load: Callable[[str], Policy] | None = None, league: Policy | None = None) -> None:
        self.mirror = mirror
        self.load = load
        self.league = league

    def __call__(self, name: str) -> Policy:
        if name == SELF_SEAT:
            if self.mirror is None:
                raise ValueError(f"'llm:{SELF_SEAT}' is the training policy itself and plays only inside a "
                                 "training run; here name a checkpoint instead, e.g. llm:runs/NAME")
            return self.mirror
        if name == LEAGUE_SEAT:
            if self.league is None:
                raise ValueError(f"'llm:{LEAGUE_SEAT}' is a training run's earlier snapshots and plays only inside "
                                 "the run; here name a checkpoint instead, e.g. llm:runs/NAME/checkpoints/step_50")
            return self.league
        if self.load is None:
            from echo2_sdk.runtime.rollout.chat_policy import cached_chat_policy

            self.load = cached_chat_policy
        return self.load(name)


def bind_seats(adapter, backend: GenerationBackend, tokenizer, max_new_tokens: int) -> None:
    """Give ``adapter`` (one with ``llm:`` seats) the runtime's factory, its mirror bound to ``backend``.

    A factory the caller installed itself (a test's, ``echo2 eval``'s) is kept; so is the league of one
    the runtime installed."""
    if not hasattr(adapter, "llm_policy_factory"):
        return
    current = adapter.llm_policy_factory
    if current is None or isinstance(current, SeatPolicies):
        league = current.league if isinstance(current, SeatPolicies) else None
        adapter.llm_policy_factory = SeatPolicies(MirrorPolicy(backend, tokenizer, max_new_tokens), league=league)
