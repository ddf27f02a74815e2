"""Why a run stops before its last step: SIGTERM/SIGINT, its time limit, an early stop.

Every source raises the same ``StopRequest``; the controller checks it between chunks of
steps, finishes the chunk, saves and returns.  A second signal restores the default
behaviour, so an impatient Ctrl-C still kills.  ``exit_code`` turns how it ended into what a
scheduler reads: 0 finished, 128 + the signal when stopped first.
"""

from __future__ import annotations

import logging
import signal
import threading
import time

from showtell.common.processes import signal_exit_code

log = logging.getLogger(__name__)


class StopRequest:
    def __init__(self) -> None:
        self.action = "finishing the current step and saving a checkpoint"  # what the log says
        self._event = threading.Event()
        self.reason: str | None = None
        self.final = False  # True: the run ends on its own terms (time limit, early stop), not a signal
        self.signum: int | None = None  # the signal that stopped it, if one did
        self._deadline: tuple[float, str] | None = None
        self._previous: dict[int, object] = {}

    def install(self) -> StopRequest:
        """Take over SIGTERM and SIGINT (main thread only: elsewhere Python refuses)."""
        if threading.current_thread() is threading.main_thread():
            for sig in (signal.SIGTERM, signal.SIGINT):
                self._previous[sig] = signal.signal(sig, self._handle)
        return self

    def restore(self) -> None:
        """Give the signals back (``showtell train`` run in-process, e.g. by a test, leaves no trace)."""
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)
        self._previous.clear()

    def time_limit(self, seconds: float | None, start: float | None = None) -> StopRequest:
        """Stop on the run's own terms ``seconds`` from now, or from ``start`` (a ``time.monotonic()``
        reading: ``--max-seconds``, a pretraining's ``--seconds``)."""
        if seconds is not None:
            begun = time.monotonic() if start is None else start
            self._deadline = (begun + seconds, f"the {seconds:g} s time limit")
        return self

    def _handle(self, signum: int, frame) -> None:
        name = signal.Signals(signum).name
        log.warning("%s received: %s", name, self.action)
        if not self._event.is_set():
            self.signum = signum
        self.request(name)
        signal.signal(signum, signal.SIG_DFL)

    def request(self, reason: str, final: bool = False) -> None:
        if self._event.is_set():
            return  # the first reason stands
        self.reason, self.final = reason, final
        self._event.set()

    def resume(self) -> bool:
        """Clear a stop the run asked for itself (not a signal, not its time limit), to wait on
        signals again; False when a signal or the time limit stands."""
        if self.signum is not None or self.final:
            return False
        self._event.clear()
        self.reason = None
        return True

    def __bool__(self) -> bool:
        if not self._event.is_set() and self._deadline and time.monotonic() >= self._deadline[0]:
            self.request(self._deadline[1], final=True)
        return self._event.is_set()

    def exit_code(self, finished: bool) -> int:
        """0 for a run that ``finished`` (its steps, time limit or early stop); otherwise 128 + the
        signal that stopped it — or SIGTERM's 143 for a worker that stopped because another task
        was stopped (the cluster is going down: not done, worth a restart)."""
        if finished:
            return 0
        return signal_exit_code(self.signum or signal.SIGTERM)

    def wait(self, seconds: float) -> bool:
        """Sleep until a stop is requested or ``seconds`` pass; True when stopped."""
        return self._event.wait(seconds) or bool(self)
