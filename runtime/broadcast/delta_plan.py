"""The learner's side of delta snapshots: per publish, a delta against a base every worker holds, or full.

Rule (``choose_base``, then ``DeltaPublisher.prepare``), in order:

1. deltas off, or a keyframe is due (every ``keyframe_every`` publishes) → full;
2. a target worker has installed nothing yet (first publish, late joiner) → full;
3. base = the newest version that every target worker still holds — a worker keeps the bytes of its
   ``BASES_KEPT`` newest installs, and the learner knows which versions each installed from the
   control plane's reports — and that the learner still holds too; none → full (a worker that
   missed versions);
4. the snapshot's layout changed (other tensors or shapes) → full;
5. the compressed delta is larger than ``max_fraction`` of the full snapshot → full.

Keeping two bases on a worker (not one) is what makes the rule safe while publishes overlap: when
version v is still in flight as v+1 is decided, a worker that has not reported v yet may install it
in the meantime; it then holds {v, v-1}, so a delta against v-1 still applies.

A worker several versions behind gets a full snapshot, not a chain of deltas: a chain of k deltas
carries at least the changes of the single delta across the same k steps (their union), and the
measured density of that single delta grows with k (``benchmarks/delta_broadcast.py``, ``by_gap``),
so past a couple of versions a full snapshot is the cheaper, simpler answer.
"""

from __future__ import annotations

import time
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass

from echo2_sdk.runtime.broadcast.delta import DeltaSpec, encode_delta

BASES_KEPT = 2
"""Installed versions whose bytes a worker keeps as delta bases (its newest ones)."""
LEARNER_HISTORY = BASES_KEPT + 1
"""Published full snapshots the learner keeps to encode deltas against."""


@dataclass(frozen=True)
class DeltaPolicy:
    """``broadcast.delta`` and its thresholds (see ``BroadcastConfig``)."""

    enabled: bool = True
    max_fraction: float = 0.5
    keyframe_every: int = 0
    level: int = 3


@dataclass(frozen=True)
class Publication:
    """What one publish put on the chain: its kind, and the bytes each worker received vs a full snapshot."""

    version: int
    kind: str
    """``full`` or ``delta``."""
    reason: str
    """Why this kind (``delta`` when it is one)."""
    bytes_full: int
    bytes_sent: int
    """Bytes of the snapshot or delta that travelled down the chain (each worker receives them once)."""
    base_version: int | None = None
    density: float | None = None
    """Fraction of elements whose bits changed against the base (deltas only)."""
    encode_s: float = 0.0

    def report(self, fallbacks: int, apply_s_max: float) -> dict:
        """The delivery record's bytes fields (``delivery.BYTES_KEYS``), given how many workers fell
        back to fetching the full snapshot and the slowest worker's apply time."""
        return {"snapshot": self.kind, "snapshot_reason": self.reason, "delta_base": self.base_version,
                "delta_density": self.density, "encode_s": self.encode_s, "bytes_full": self.bytes_full,
                "bytes_sent": self.bytes_sent, "delta_fallbacks": fallbacks,
                "bytes_fallback": fallbacks * self.bytes_full, "apply_s_max": round(apply_s_max, 4)}


@dataclass(frozen=True)
class Prepared:
    """A publish ready to sign: the bytes for the chain, the manifest metadata, and the full snapshot."""

    payload: bytes
    spec: DeltaSpec | None
    publication: Publication


def holds(installed: Sequence[int], keep: int = BASES_KEPT) -> set[int]:
    """The versions a worker still has the bytes of: its ``keep`` newest installs.

    >>> sorted(holds([1, 2, 4]))
    [2, 4]
    """
    return set(sorted(installed)[-keep:]) if keep > 0 else set()


MAX_LAGGARD_FRACTION = 0.25
"""A delta goes out while at most this fraction of the workers (at least one) lacks its base: each of those
fetches the full snapshot from the learner on its own, which costs the learner's uplink one snapshot
apiece — about what a full chain broadcast costs per stripe — while everyone else gets the delta."""


def choose_base(workers: Sequence[str], installs: Mapping[str, Sequence[int]], held: Collection[int],
                keep: int = BASES_KEPT) -> tuple[int | None, str]:
    """(base version, why) — None when the publish must be a full snapshot. The base is the version the
    learner holds that most workers hold (the newest of those); one hung or late worker therefore does
    not turn every publish into a full one: it falls back alone.

    >>> choose_base(["a", "b"], {"a": [1, 2], "b": [1]}, held={1, 2})
    (1, 'delta')
    >>> choose_base(["a", "b", "c"], {"a": [1, 2]}, held={1, 2})
    (None, 'only 1 of 3 workers hold a base the learner holds (b has installed no version yet)')
    >>> choose_base(["a", "b", "c", "d"], {"a": [2, 3], "b": [2, 3], "c": [2, 3], "d": [1]}, held={1, 2, 3})
    (3, 'delta (1 worker lacks base 3 and fetches the full snapshot: d)')
    """
    if not workers:
        return None, "no workers to receive it"
    holdings = {w: holds(installs.get(w, ()), keep) for w in workers}
    holders = {v: [w for w in workers if v in holdings[w]] for v in held}
    base = max(holders, key=lambda v: (len(holders[v]), v), default=None)
    count = len(holders[base]) if base is not None else 0
    lacking = [w for w in workers if base is None or base not in holdings[w]]
    if not count or len(lacking) > max(1, int(MAX_LAGGARD_FRACTION * len(workers))) or len(lacking) == len(workers):
        first = lacking[0] if lacking else workers[0]
        why = (f"{first} has installed no version yet" if not holdings[first] else
               f"{first} holds {sorted(holdings[first])}")
        return None, f"only {count} of {len(workers)} workers hold a base the learner holds ({why})"
    if lacking:
        return base, (f"delta ({len(lacking)} worker{'s' if len(lacking) > 1 else ''} lack{'' if len(lacking) > 1 else 's'} "
                      f"base {base} and fetch{'' if len(lacking) > 1 else 'es'} the full snapshot: {', '.join(lacking[:4])})")
    return base, "delta"


class DeltaPublisher:
    """Keeps the last few published full snapshots and turns each new one into what goes on the chain."""

    def __init__(self, policy: DeltaPolicy) -> None:
        self.policy = policy
        self._history: dict[int, tuple[bytes, str]] = {}
        self._since_keyframe = 0

    @property
    def held(self) -> set[int]:
        return set(self._history)

    def prepare(self, data: bytes, sha256: str, version: int, workers: Sequence[str],
                installs: Mapping[str, Sequence[int]], full_source: tuple[str, int] | None) -> Prepared:
        """Decide delta or full for ``data`` (the full snapshot, hashing to ``sha256``) and remember it."""
        t0 = time.perf_counter()
        policy, full = self.policy, len(data)
        base, reason = None, "broadcast.delta is off"
        if policy.enabled:
            due = policy.keyframe_every and self._since_keyframe + 1 >= policy.keyframe_every
            base, reason = (None, f"keyframe (every {policy.keyframe_every} publishes)") if due else \
                choose_base(workers, installs, self.held)
        prepared = None
        if base is not None:
            base_bytes, base_sha = self._history[base]
            encoded = encode_delta(base_bytes, data, policy.level)
            if encoded is None:
                reason = "the snapshot's tensors or shapes changed"
            elif len(encoded.payload) > policy.max_fraction * full:
                reason = f"delta is {len(encoded.payload) / full:.0%} of the full snapshot (> {policy.max_fraction:g})"
            else:
                spec = DeltaSpec(base, base_sha, sha256, full, full_source)
                pub = Publication(version, "delta", "delta", full, len(encoded.payload), base,
                                  round(encoded.density, 6), round(time.perf_counter() - t0, 4))
                prepared = Prepared(encoded.payload, spec, pub)
        if prepared is None:
            self._since_keyframe = 0
            prepared = Prepared(data, None, Publication(version, "full", reason, full, full,
                                                        encode_s=round(time.perf_counter() - t0, 4)))
        else:
            self._since_keyframe += 1
        if policy.enabled:
            self._history[version] = (data, sha256)
            for old in sorted(self._history)[:-LEARNER_HISTORY]:
                del self._history[old]
        return prepared
