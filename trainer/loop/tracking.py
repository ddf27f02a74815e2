"""The trainer's MLflow run (``--tracking-uri``): created — or found again on resume, by the
showtell run id's tag — with the run's settings as params, a later revision's changes as tags, the
training scalars at their steps, and at the end its status: FINISHED when training ended on its
own terms, KILLED when a signal stopped it (preempted), FAILED when it crashed.

Nothing here waits on the tracker: a thread of its own (``tracking``) sends what the trainer hands
it, in order, and retries while the tracker is down (said once).  The scalars wait in memory (the
newest ``MAX_POINTS``; they are in TensorBoard too).  At the end the trainer gives the thread
``FLUSH_SECS`` to send what is left and says what was not sent.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Mapping

from showtell.common.tracking import Tracker, TrackerDown, TrackerRefused, TrackingConfig
from showtell.common.versions import installed_version

log = logging.getLogger(__name__)
MAX_POINTS = 100_000  # training scalars kept while the tracker is down (the oldest go first)
FLUSH_SECS = 10.0  # a preempted trainer's grace is for its checkpoint, not for this
RETRY_SECS = (1.0, 30.0)


class TrainTracking:
    """The chief's MLflow run; ``scalars`` is ``StepReport``'s publisher."""

    def __init__(self, config: TrackingConfig) -> None:
        self.tracker = Tracker(config)
        self.run_id: str | None = None  # the MLflow run, once found or created
        self._lock, self._wake = threading.Lock(), threading.Event()
        self._opening: tuple[str, dict[str, str], dict[str, str]] | None = None
        self._points: list[tuple[str, float, int, int]] = []  # key, value, timestamp (ms), step
        self._status: str | None = None
        self._done = threading.Event()
        self.dropped, self.last_error = 0, ""
        self._trouble_kind: type | None = None  # said once until the tracker answers again
        self._thread = threading.Thread(target=self._work, name="tracking", daemon=True)

    def begin(self, showtell_run: str, params: Mapping[str, str], tags: Mapping[str, str]) -> None:
        """The run starts (or resumes): its MLflow run found or created, set RUNNING, tagged; on a
        run's first start (``params`` given) its settings logged."""
        log.info("the run goes to %s", self.tracker.config.describe())
        with self._lock:
            self._opening = (showtell_run, dict(params),
                             {"showtell.version": installed_version(), **dict(tags)})
        self._thread.start()
        self._wake.set()

    def scalars(self, step: int, values: Mapping[str, float]) -> None:
        """One report's training scalars (``train/<name>``) at ``step``."""
        stamp = int(time.time() * 1000)
        with self._lock:
            self._points += [(f"train/{name}", float(value), stamp, step) for name, value in values.items()]
            if len(self._points) > MAX_POINTS:
                self.dropped += len(self._points) - MAX_POINTS
                del self._points[:-MAX_POINTS]
        self._wake.set()

    def end(self, status: str, flush_secs: float = FLUSH_SECS) -> None:
        """The run ended (``FINISHED``, ``KILLED``, ``FAILED``): sent with what is left, for at most
        ``flush_secs``."""
        if not self._thread.is_alive():
            return
        with self._lock:
            self._status = status
        self._wake.set()
        if not self._done.wait(flush_secs):
            with self._lock:
                left = len(self._points)
            self._done.set()  # the thread stops at its next turn: nothing is sent after the run ended
            log.warning("%s: the run's end (%s) and %d training scalar(s) not sent within %.0f s (%s); they "
                        "are in TensorBoard", self.tracker.config.describe(), status, left, flush_secs,
                        self.last_error or "still sending")

    def _work(self) -> None:
        wait: float | None = None
        while not self._done.is_set():
            self._wake.wait(wait)
            self._wake.clear()
            if self._done.is_set():
                return
            try:
                self._send()
            except (TrackerDown, TrackerRefused) as exc:
                down = isinstance(exc, TrackerDown)
                wait = min(2 * wait, RETRY_SECS[1]) if wait and down else RETRY_SECS[0 if down else 1]
                if type(exc) is not self._trouble_kind:  # once a trouble, not at every retry
                    (log.warning if down else log.error)("%s — training continues; what it reports waits and "
                                                         "is sent when the tracker answers", exc)
                self.last_error, self._trouble_kind = str(exc), type(exc)
                continue
            if self.last_error:
                log.info("%s answers again", self.tracker.config.describe())
            self.last_error, self._trouble_kind, wait = "", None, None

    def _send(self) -> None:
        from mlflow.entities import Metric

        client, call = self.tracker.client, self.tracker.call
        if self._opening is not None:
            showtell_run, params, tags = self._opening
            run_id = self.run_id or self.tracker.run_of(showtell_run, tags=tags, params=params)
            if self.run_id is None:
                log.info("MLflow run %s%s", run_id, self.tracker.page(run_id))
            self.run_id = run_id
            call("tag the run", client.log_batch, run_id, tags=_tags(tags))
            call("mark the run running", client.update_run, run_id, status="RUNNING")
            self._opening = None
        with self._lock:
            batch, status = self._points[:1000], self._status
        if batch and self.run_id is not None:
            call(f"log training scalars to step {batch[-1][3]}", client.log_batch, self.run_id,
                 metrics=[Metric(*point) for point in batch])
            with self._lock:
                del self._points[:len(batch)]
            if len(batch) == 1000:
                self._wake.set()
                return
        if status is not None and self.run_id is not None:
            call(f"end the run ({status})", client.set_terminated, self.run_id, status)
            if self.dropped:
                log.warning("%d training scalar(s) were dropped while the tracker was down (the newest %d "
                            "were kept)", self.dropped, MAX_POINTS)
            self._done.set()


def _tags(tags: Mapping[str, str]) -> list:
    from mlflow.entities import RunTag

    return [RunTag(k, v) for k, v in tags.items()]
