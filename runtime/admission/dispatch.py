"""Admission control at dispatch: a request is sent to a worker only if its groups can still be
admissible when the learner reaches them (AReaL keeps rollouts from starting too stale in the same way;
dropping them after the fact pays a worker for samples nobody trains on).

The learner takes P groups per step, oldest version first, and a group of version v is trainable while
the learner's version v_t ≤ v + S. A new request of k groups, generated under version v, is trained
after every group that reaches the learner before it: those buffered, the worker's own requests queued
ahead of it, and what every other busy worker finishes by then on average (at its measured seconds per
request, in flight or sent later). With p such groups it is trained at version v_t + ⌊(p + k − 1)/P⌋ (each P groups
ahead cost the learner one step, whether it trains or waits for them), so it is sent only if that is
≤ v + S. Before a worker's first reply is measured, p counts every group buffered or in flight. Later
steps advance v_t and consume P groups each, so a request that passed keeps passing unless the
estimates were wrong. They go wrong when request times swing (a second job on the learner's cores), so
the estimates lean toward holding back by a margin of mean deviations of each worker's request time. The
margin adapts to what the estimates cost (:func:`adapt_margin`): a reply after which the run had dropped
more samples as stale raises it, each reply without lowers it a little, so a run whose estimates hold
keeps the means alone and a run on a busy machine learns to hold back.

Both parts are pure functions below; :class:`DispatchControl` feeds them the measured rates and counts
what it held back. A held request is not lost: the worker idles until the learner catches up (a step
frees P places, a newer snapshot raises v), and the driver asks again.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Mapping, Sequence


def trained_at(learner_version: int, groups_ahead: float, request_groups: int, groups_per_step: int) -> int:
    """The learner version at which a request's last group is trained, behind ``groups_ahead`` groups.

    >>> trained_at(10, 0, 4, 8), trained_at(10, 4, 4, 8), trained_at(10, 5, 4, 8)
    (10, 10, 11)
    >>> trained_at(10, 28, 4, 8), trained_at(10, 29, 4, 8)
    (13, 14)
    """
    return learner_version + int((groups_ahead + request_groups - 1) // groups_per_step)


def groups_ahead(buffered: int, own_in_flight: int, others: Sequence[tuple[int, float | None]],
                 arrival_s: float | None, request_groups: int) -> float:
    """Groups that reach the learner before a request expected back in ``arrival_s`` seconds: the
    ``buffered`` ones, the worker's own ``own_in_flight`` requests, and from each other worker
    (requests in flight, seconds per request) the arrival_s / s requests it finishes by then on average,
    in flight or sent later. Unmeasured (None), a worker counts all its requests in flight and no later one;
    with ``arrival_s`` None (this worker unmeasured), every request in flight is ahead.

    >>> groups_ahead(8, 1, [(2, 0.5), (1, None)], arrival_s=2.0, request_groups=4)  # 8 + 4 + 4·4 + 4
    32.0
    >>> groups_ahead(8, 1, [(2, 6.0)], arrival_s=3.0, request_groups=4)  # the slow one: half a request
    14.0
    >>> groups_ahead(8, 1, [(2, 0.5), (1, None)], arrival_s=None, request_groups=4)
    24
    """
    ahead: float = buffered + own_in_flight * request_groups
    for in_flight, per_request_s in others:
        if arrival_s is None or per_request_s is None or per_request_s <= 0:
            ahead += in_flight * request_groups
        else:
            ahead += arrival_s / per_request_s * request_groups
    return ahead


def adapt_margin(margin: float, *, wasted: bool, floor: float, ceiling: float,
                 raise_by: float = 1.0, ease_by: float = 0.01) -> float:
    """The admission margin after one reply: ``raise_by`` more if the run dropped samples as stale since the
    previous reply (``wasted``: the estimates let a request go that arrived too late), else ``ease_by`` less;
    kept within [floor, ceiling]. Raised fast, eased slowly (as TCP backs off): one drop is evidence the
    machine got slower, a clean reply is weak evidence it got faster. ``ceiling`` ≤ ``floor``: fixed.

    >>> adapt_margin(0.0, wasted=True, floor=0.0, ceiling=3.0), adapt_margin(2.5, wasted=True, floor=0.0, ceiling=3.0)
    (1.0, 3.0)
    >>> adapt_margin(1.0, wasted=False, floor=0.0, ceiling=3.0), adapt_margin(0.0, wasted=False, floor=0.0, ceiling=3.0)
    (0.99, 0.0)
    >>> adapt_margin(2.0, wasted=True, floor=2.0, ceiling=0.0)  # no room to adapt: the floor, fixed
    2.0
    """
    if ceiling <= floor:
        return floor
    moved = margin + raise_by if wasted else margin - ease_by
    return min(ceiling, max(floor, moved))


def _ema(old: float | None, new: float, alpha: float) -> float:
    return new if old is None else (1 - alpha) * old + alpha * new


@dataclass
class DispatchControl:
    """Decides whether one more request may be sent to a worker now, from measured rates; measures the
    time workers sit idle because of it."""

    staleness: int
    groups_per_step: int
    enabled: bool = True
    ema_alpha: float = 0.2
    margin_devs: float = 0.0
    """The least the estimates lean toward holding back, in mean deviations of each worker's request time
    (as TCP's retransmission timer adds 4 deviations to the mean round trip): the worker asking is
    expected back that much later, every other worker that much faster (at most twice its mean rate),
    so that a busy machine's slow and uneven requests do not arrive too stale. 0: the means alone
    (``runtime.admission_margin_devs``)."""
    margin_max_devs: float = 0.0
    """The most the margin rises to after stale drops (:func:`adapt_margin`); ≤ ``margin_devs``: the margin
    stays at ``margin_devs`` (``runtime.admission_margin_max_devs``)."""
    margin_now_devs: float = field(init=False)
    """The margin in use: ``margin_devs`` at the start, adapted after every reply."""
    margin_raises: int = 0
    """Replies after which the margin rose (the run had dropped samples as stale since the previous one)."""
    wasted_seen: int = 0
    """The run's samples dropped as stale (on arrival and evicted) at the previous reply; a resumed run sets
    it to the restored count, so what an earlier run dropped does not raise this one's margin."""
    request_s: dict[str, float] = field(default_factory=dict)
    """EMA per worker of the seconds a request occupies it (generate + throttle: scoring a reply overlaps
    generating the next), from its replies."""
    request_dev_s: dict[str, float] = field(default_factory=dict)
    """EMA per worker of |request seconds − their EMA| (the mean deviation)."""
    pauses: int = 0
    """Times a worker went idle because a request was held back."""
    paused_s: dict[str, float] = field(default_factory=dict)
    """Seconds each worker sat with nothing to do because requests were held back (closed pauses)."""
    forced: int = 0
    """Requests sent although held, because nothing was in flight and too little buffered for a step
    (the driver's liveness rule: estimates must never stall the run)."""
    _paused_since: dict[str, float] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.margin_now_devs = self.margin_devs

    def on_admitted(self, wasted_total: int) -> None:
        """A reply went through admission, after which the run has dropped ``wasted_total`` samples as stale
        in all (on arrival and evicted): adapt the margin."""
        if not self.enabled:
            return
        wasted = wasted_total > self.wasted_seen
        self.wasted_seen = wasted_total
        margin = adapt_margin(self.margin_now_devs, wasted=wasted, floor=self.margin_devs, ceiling=self.margin_max_devs)
        self.margin_raises += margin > self.margin_now_devs
        self.margin_now_devs = margin

    def on_reply(self, worker: str, seconds: float) -> None:
        """A reply of ``worker`` whose request occupied it ``seconds``."""
        mean = self.request_s.get(worker)
        if mean is not None:
            self.request_dev_s[worker] = _ema(self.request_dev_s.get(worker), abs(seconds - mean), self.ema_alpha)
        self.request_s[worker] = _ema(mean, seconds, self.ema_alpha)

    def _request_s(self, worker: str, *, slow: bool) -> float | None:
        """``worker``'s seconds per request leaning toward holding back: slower for the worker asking, faster
        (never under half the mean) for the others; None while unmeasured."""
        mean = self.request_s.get(worker)
        if mean is None:
            return None
        margin = self.margin_now_devs * self.request_dev_s.get(worker, 0.0)
        return mean + margin if slow else max(mean - margin, mean / 2)

    def allows(self, worker: str, *, request_groups: int, version: int, learner_version: int,
               buffered_groups: int, in_flight: Mapping[str, int], now: float) -> bool:
        """May a request of ``request_groups`` be sent to ``worker``, which generates under ``version``,
        while ``buffered_groups`` admissible groups wait in the buffer? ``in_flight``: requests out (of
        ``request_groups`` each) by worker, for every worker that takes work (0 for an idle one)."""
        if not self.enabled:
            return True
        mine = in_flight.get(worker, 0)
        per_request = self._request_s(worker, slow=True)
        # An idle worker held back by these rules stays held while the queue is this long: it adds nothing.
        others = [(n, self._request_s(w, slow=False)) for w, n in in_flight.items()
                  if w != worker and (n or w not in self._paused_since)]
        ahead = groups_ahead(buffered_groups, mine, others, None if per_request is None else (mine + 1) * per_request,
                             request_groups)
        if trained_at(learner_version, ahead, request_groups, self.groups_per_step) <= version + self.staleness:
            self._resume(worker, now)
            return True
        if mine == 0 and worker not in self._paused_since:  # held with nothing to do: idle from now
            self._paused_since[worker] = now
            self.pauses += 1
        return False

    def _resume(self, worker: str, now: float) -> None:
        since = self._paused_since.pop(worker, None)
        if since is not None:
            self.paused_s[worker] = self.paused_s.get(worker, 0.0) + max(0.0, now - since)

    def forget(self, worker: str, now: float) -> None:
        """``worker`` left or restarts: a pause of it ends here."""
        self._resume(worker, now)

    def summary(self, now: float) -> dict:
        """The summary's ``dispatch`` block (open pauses counted up to ``now``)."""
        for worker in list(self._paused_since):
            self._resume(worker, now)
        return {"enabled": self.enabled, "pauses": self.pauses, "forced": self.forced,
                "margin_devs": round(self.margin_now_devs, 3), "margin_raises": self.margin_raises,
                "paused_s": {w: round(s, 3) for w, s in sorted(self.paused_s.items())},
                "request_s": {w: round(s, 4) for w, s in sorted(self.request_s.items())},
                "request_dev_s": {w: round(s, 4) for w, s in sorted(self.request_dev_s.items())}}
