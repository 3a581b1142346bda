"""Self-play league: ``llm:league`` seats one of the run's earlier snapshots.

A rollout worker whose task seats ``llm:league`` keeps up to ``rollout.league_size`` of the snapshots it
installed, one every ``rollout.league_every_versions`` policy versions, starting with the warm start
(version 0); when one more arrives the oldest leaves. Each worker request draws one member, uniformly and
seeded by the request's sampling seed, so the n episodes of a deal meet the same opponent (advantages
compare like with like), and every record played against it carries ``meta["league_version"]``. The
member answers greedily, as ``llm:self`` does, from a second copy of the model built from the base model's
folder on first use; its weights are swapped when the drawn member changes.

Why earlier snapshots and not only the current one (``llm:self``): a policy that only ever meets its latest
self can cycle between lines that beat each other; members from earlier in the run keep the lines they
played punished (AlphaStar's league, OpenAI Five's past selves).

Cost: a copy of the weights per member in the worker's host memory, one more model on the worker's
device, and one batch-1 generation per opponent decision. Outside a worker (held-out evaluation in the
driver) :class:`WarmStartSeat` plays the seat: the warm start, the league's first member, so before and
after face one fixed opponent.
"""

from __future__ import annotations

import dataclasses
import random
from typing import Any, Callable, Mapping

import torch

from echo2_sdk.episodic import lineup_seats
from echo2_sdk.records import Rollout, RolloutGroup
from echo2_sdk.runtime.rollout.mirror import LEAGUE_SEAT, MirrorPolicy, SeatPolicies

LEAGUE_SPEC = f"llm:{LEAGUE_SEAT}"
"""The seat spec of a line-up that plays the league."""


def seats_league(adapter: Any) -> bool:
    """Whether ``adapter``'s opponent pool (``task.options.opponent``) seats ``llm:league`` anywhere."""
    return any(seat == LEAGUE_SPEC
               for lineup, _ in getattr(adapter, "opponents", ()) for seat in lineup_seats(lineup))


def _host_copy(state_dict: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    # A received snapshot's tensors may be views into a buffer the receiver reuses: keep our own copy.
    return {key: tensor.detach().to("cpu", copy=True) for key, tensor in state_dict.items()}


class SnapshotLeague:
    """The worker's league; ``league(messages) -> reply`` plays the member :meth:`draw` picked.

    ``make_engine() -> (HFBackend, tokenizer)`` builds the second model (base weights = member 0); it is
    called on the first decision, so a worker whose requests never meet the league builds nothing.

    >>> league = SnapshotLeague(lambda: None, size=2, every_versions=10, max_new_tokens=4)
    >>> [league.offer(v, {}) for v in (4, 10, 12, 20)]
    [False, True, False, True]
    >>> league.versions
    [10, 20]
    """

    def __init__(self, make_engine: Callable[[], Any], *, size: int, every_versions: int,
                 max_new_tokens: int) -> None:
        if size < 1 or every_versions < 1:
            raise ValueError(f"a league needs size >= 1 and every_versions >= 1, got {size} and {every_versions}; "
                             "set rollout.league_size and rollout.league_every_versions")
        self.make_engine = make_engine
        self.size, self.every_versions, self.max_new_tokens = size, every_versions, max_new_tokens
        self._members: dict[int, dict[str, torch.Tensor] | None] = {0: None}  # None: the base model's own weights
        self._newest = 0
        self.drawn = 0
        """The member the current request plays against."""
        self._engine: Any = None
        self._player: Callable[[list[dict[str, str]]], str] | None = None
        self._loaded = 0
        self.calls = 0

    @property
    def versions(self) -> list[int]:
        """The members' policy versions, oldest first."""
        return sorted(self._members)

    def offer(self, version: int, state_dict: Mapping[str, torch.Tensor]) -> bool:
        """Keep snapshot ``version`` (a full state dict) if it is ``every_versions`` past the newest member."""
        if version < self._newest + self.every_versions:
            return False
        self._members[version] = _host_copy(state_dict)
        self._newest = version
        while len(self._members) > self.size:
            del self._members[min(self._members)]
        return True

    def draw(self, seed: int | None) -> int:
        """Pick the member the next request's episodes meet (seeded: a replayed request meets the same one)."""
        rng = random.Random(seed) if seed is not None else random.Random()
        self.drawn = rng.choice(self.versions)
        return self.drawn

    def __call__(self, messages: list[dict[str, str]]) -> str:
        self.calls += 1
        return self._member_player()(messages)

    def _member_player(self) -> Callable[[list[dict[str, str]]], str]:
        if self._player is None:
            backend, tokenizer = self.make_engine()
            if 0 in self._members and self._members[0] is None:  # keep the base weights: draws may come back to them
                self._members[0] = _host_copy(backend.model.state_dict())
            self._engine, self._player = backend, MirrorPolicy(backend, tokenizer, self.max_new_tokens)
        if self._loaded != self.drawn:
            self._engine.load_weights(self._members[self.drawn], self.drawn)
            self._loaded = self.drawn
        return self._player

    def tag(self, group: RolloutGroup) -> RolloutGroup:
        """``group`` with ``meta["league_version"]`` on the records whose line-up seats the league."""
        def tagged(record: Rollout) -> Rollout:
            if LEAGUE_SPEC not in lineup_seats(str(record.meta.get("opponent", ""))):
                return record
            return dataclasses.replace(record, meta={**record.meta, "league_version": self.drawn})

        return dataclasses.replace(group, rollouts=tuple(tagged(r) for r in group.rollouts))


class WarmStartSeat:
    """``llm:league`` where there is no league (held-out evaluation in the driver): the warm start at
    ``path``, answering greedily in replies of ``max_new_tokens`` tokens; loaded on its first decision."""

    def __init__(self, path: str, max_new_tokens: int) -> None:
        self.path, self.max_new_tokens = path, max_new_tokens

    def __call__(self, messages: list[dict[str, str]]) -> str:
        from echo2_sdk.runtime.rollout.chat_policy import cached_chat_policy

        return cached_chat_policy(self.path, 0.0, self.max_new_tokens)(messages)


def seat_warm_start(adapter: Any, path: str, max_new_tokens: int) -> None:
    """Give the driver's ``adapter`` (held-out evaluation) the warm start at ``path`` in its ``llm:league``
    seats, if it has any."""
    if seats_league(adapter):
        adapter.llm_policy_factory = SeatPolicies(league=WarmStartSeat(path, max_new_tokens))
