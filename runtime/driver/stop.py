"""Graceful stop: SIGINT/SIGTERM end a run at a step boundary with everything saved; a second one aborts.

The first signal only raises a flag that the training loop reads between steps: the step in progress
finishes (or, while it still waits for rollouts, is abandoned), then the run writes a checkpoint, its
summary and plots, shuts Ray down and exits 130 (SIGINT) or 143 (SIGTERM) naming the ``--resume``
command. A second signal raises :class:`Aborted` at once (the newest complete checkpoint stays; a
checkpoint being written is discarded whole). Before training starts there is nothing to save, so a
signal then aborts at once too.

The handlers are installed again after ``ray.init``: Ray sets its own SIGTERM handler there (exit
without saving, and a C-level stack dump from its core worker), which ours must replace.
"""

from __future__ import annotations

import signal
import threading
from typing import Callable

SIGNALS = (signal.SIGINT, signal.SIGTERM)


class Aborted(KeyboardInterrupt):
    """The run was interrupted without the graceful stop (a second signal, or one during setup)."""

    def __init__(self, signum: int) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


def exit_code(signum: int) -> int:
    """The shell's code for a process ended by ``signum``: 130 for SIGINT, 143 for SIGTERM."""
    return 128 + int(signum)


class StopRequest:
    """Signal handlers for one run; ``requested`` is the signal number of a pending stop (or None)."""

    def __init__(self, log: Callable[[str], None] = print, forward: Callable[[int], object] | None = None) -> None:
        """``forward``: also called with the first signal (a placed learner's driver runs in a Ray actor,
        which no terminal signal reaches: ``echo2 train`` forwards the request to it)."""
        self.log = log
        self.forward = forward
        self.requested: int | None = None
        self.graceful = False
        """False until training starts: a signal during setup aborts (nothing is lost)."""
        self._previous: dict[int, object] = {}

    @property
    def name(self) -> str:
        return signal.Signals(self.requested).name if self.requested else ""

    def install(self) -> None:
        """(Re)install the handlers; only the main thread can (in a Ray actor this is a no-op)."""
        if threading.current_thread() is not threading.main_thread():
            return
        for sig in SIGNALS:
            previous = signal.signal(sig, self._handle)
            self._previous.setdefault(sig, previous)

    def restore(self) -> None:
        """Put back the handlers found by the first :meth:`install`."""
        previous, self._previous = self._previous, {}
        for sig, handler in previous.items():
            signal.signal(sig, handler if handler is not None else signal.SIG_DFL)

    def _handle(self, signum: int, frame) -> None:
        if not self.graceful or self.requested is not None:
            self.requested = self.requested or signum
            # A third signal during the teardown that follows ends the process the default way.
            for sig in self._previous:
                signal.signal(sig, signal.SIG_DFL)
            raise Aborted(signum)
        self.requested = signum
        if self.forward is not None:
            self.forward(signum)
        again = "press Ctrl-C" if signum == signal.SIGINT else f"send {signal.Signals(signum).name}"
        self.log(f"{signal.Signals(signum).name}: stopping after the current step and saving a checkpoint "
                 f"({again} again to abort without saving)")
