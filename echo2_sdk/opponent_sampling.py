"""Prioritized opponent sampling: the shares in which the next deals meet an opponent pool's line-ups.

With a fixed pool the tiny poker agent can settle on a line that wins against the line-ups it meets most
cheaply and loses heavily to one (raise preflop, then call down: +0.04 BB a hand against the calling
station, −4.3 against the LAG). Prioritized fictitious self-play (AlphaStar's PFSP) draws the opponents
the policy does worst against more often; here "worst" is the running mean training return against each
line-up, in units of the episode returns' spread so one strength fits poker's big blinds and MOBA's
tower damage alike. Every line-up keeps at least ``floor`` of its base share, so no opponent is
forgotten. Pure functions; the runtime keeps the running statistics (``runtime/driver/opponents.py``).
"""

from __future__ import annotations

import math
from typing import Sequence

__all__ = ["OPPONENT_SAMPLING", "prioritized_shares"]

OPPONENT_SAMPLING = ("fixed", "prioritized")
"""``train.opponent_sampling`` values: the pool's own shares, or :func:`prioritized_shares`."""


def prioritized_shares(base: Sequence[float], mean_returns: Sequence[float | None], *, spread: float,
                       strength: float, floor: float) -> tuple[float, ...]:
    """Shares of a pool's line-ups, tilted toward those the policy scores worst against.

    ``base``: [L] the pool's shares (sum 1); ``mean_returns``: [L] the running mean return against each
    line-up (None: not yet seen, treated as the mean of those seen); ``spread``: the episode returns'
    standard deviation (> 0, else the base shares come back). With gap_l = (max_k m_k − m_l) / spread::

        tilted_l ∝ base_l · exp(strength · gap_l)
        share_l = floor · base_l + (1 − floor) · tilted_l

    >>> [round(s, 4) for s in prioritized_shares([0.5, 0.5], [0.0, -1.0], spread=1.0, strength=1.0, floor=0.0)]
    [0.2689, 0.7311]
    >>> [round(s, 4) for s in prioritized_shares([0.5, 0.5], [0.0, -1.0], spread=1.0, strength=1.0, floor=0.5)]
    [0.3845, 0.6155]
    >>> prioritized_shares([0.5, 0.5], [None, None], spread=1.0, strength=1.0, floor=0.0)
    (0.5, 0.5)
    >>> prioritized_shares([0.25, 0.75], [3.0, -2.0], spread=1.0, strength=0.0, floor=0.0)
    (0.25, 0.75)
    """
    if len(base) != len(mean_returns):
        raise ValueError(f"{len(base)} base shares for {len(mean_returns)} mean returns")
    seen = [m for m in mean_returns if m is not None]
    if not seen or not spread > 0 or not math.isfinite(spread):
        return tuple(float(b) for b in base)
    fill = sum(seen) / len(seen)
    means = [fill if m is None else m for m in mean_returns]
    best = max(means)
    tilted = [b * math.exp(min(60.0, strength * (best - m) / spread)) for b, m in zip(base, means)]  # no overflow
    total = sum(tilted)
    return tuple(floor * b + (1.0 - floor) * t / total for b, t in zip(base, tilted))
