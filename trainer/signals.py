"""Graceful stop on SIGTERM/SIGINT: finish the current step, save, exit 0.

A second signal restores the default behaviour, so an impatient Ctrl-C still kills.
"""

from __future__ import annotations

import logging
import signal
import threading

log = logging.getLogger(__name__)


class StopRequest:
    def __init__(self) -> None:
        self.action = "finishing the current step and saving a checkpoint"  # what the log says
        self._event = threading.Event()
        self.reason: str | None = None
        self.final = False  # True: the run ends on its own terms (time limit, early stop), not a signal
        self._previous: dict[int, object] = {}

    def install(self) -> StopRequest:
        if threading.current_thread() is threading.main_thread():
            for sig in (signal.SIGTERM, signal.SIGINT):
                self._previous[sig] = signal.signal(sig, self._handle)
        return self

    def uninstall(self) -> None:
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)  # type: ignore[arg-type]
        self._previous.clear()

    def _handle(self, signum: int, frame) -> None:
        name = signal.Signals(signum).name
        log.warning("%s received: %s", name, self.action)
        self.request(name)
        signal.signal(signum, signal.SIG_DFL)

    def request(self, reason: str, final: bool = False) -> None:
        if self._event.is_set():
            return  # the first reason stands
        self.reason, self.final = reason, final
        self._event.set()

    def __bool__(self) -> bool:
        return self._event.is_set()
