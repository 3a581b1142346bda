"""Reward failures made visible: the first text of each failure status, on the console and in the summary.

Workers and the held-out evaluation score a failing reward 0 and count it by status (``error``,
``timeout``, ``non_finite``, ``oversize``: summary.json ``reward_status``). Counts alone hide *why*: a
reward that raises on every sample looks like a policy that never learns (``reward 0.000``). So the
first occurrence of each status is printed once, with its text, and kept in ``summary.json``
(``reward_failures``); later ones are only counted.
"""

from __future__ import annotations

from typing import Callable


class RewardFailures:
    def __init__(self, log: Callable[[str], None]) -> None:
        self.log = log
        self.first: dict[str, dict] = {}

    def note(self, where: str, statuses: dict[str, int], details: dict[str, str], step: int) -> None:
        """``statuses``: samples by reward status in one reply (or evaluation); ``details``: first text of each."""
        for status, count in statuses.items():
            if status == "ok" or not count or status in self.first:
                continue
            text = details.get(status) or "(no detail reported)"
            self.first[status] = {"detail": text, "where": where, "step": step}
            self.log(f"reward warning: {count} sample(s) from {where} scored 0 with status {status!r}: {text} "
                     "(later ones are only counted: summary.json reward_status)")

    def summary(self) -> dict[str, dict]:
        return {status: dict(info) for status, info in self.first.items()}
