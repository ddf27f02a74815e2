"""Every recorded evaluation to MLflow, exactly once, never in the way (``--tracking-uri``).

The history is the outbox.  A thread of its own (``tracking``) sends each record after the last
one MLflow acknowledged, in arrival order, and only then writes how far it got (``tracking.json``
in the work dir: ``sent_through``, a history rowid).  So a tracker that is down or slow delays
nothing but itself: evaluations, records and Watch go on, the backlog waits in the history (a
gauge and ``metrics status`` show it), and it flushes when the tracker answers again.  A crash
between an acknowledged send and its mark, or a send whose answer never came, leaves records
MLflow may already hold: those are checked against what the server has, point by point, before
anything is sent again — until one is found missing (what follows it was never sent).  Points
carry the evaluation's own time as their timestamp, so even a resend is the same point.

A record's points, at its checkpoint's global step: ``<set>/<metric>`` for each metric,
``<set>/<metric>.lo`` and ``.hi`` for its interval's bounds, ``<set>/eval_seconds`` and
``<set>/images`` (validation images it covered).  Failed and skipped records have none.  Each
best export (``--export-best``) becomes a version of a registered model (``--registered-model``;
``<name>-<set>`` for another set's), its SavedModel uploaded as the run's artifact, once.
"""

from __future__ import annotations

import json
import logging
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from showtell.api.contract import DEFAULT_SET
from showtell.captioning.model import export
from showtell.common.files import write_atomic
from showtell.common.model_dir import ModelDir
from showtell.common.tracking import Tracker, TrackerDown, TrackerRefused, run_params
from showtell.evaluator.records.record import Record
from showtell.evaluator.records.store import Store

log = logging.getLogger(__name__)
RETRY_SECS = (1.0, 30.0)  # the first retry after a failure, and the longest wait between two


def points(record: Record) -> list[tuple[str, float]]:
    """``record``'s (key, value) pairs as MLflow gets them (see the module)."""
    if record.status != "ok":
        return []
    found = []
    for name, value in sorted(record.metrics.items()):
        found.append((f"{record.eval_set}/{name}", float(value)))
        if name in record.intervals:
            lower, upper = record.intervals[name]
            key = f"{record.eval_set}/{name}"
            found += [(f"{key}.lo", float(lower)), (f"{key}.hi", float(upper))]
    found += [(f"{record.eval_set}/eval_seconds", float(record.eval_seconds)),
              (f"{record.eval_set}/images", float(record.num_examples))]
    return found


@dataclass
class Marks:
    """How far the outbox got with one tracker (``tracking.json``): written after each
    acknowledgement, read at start.  Another tracker's marks start it over: the whole history goes
    to a new tracker."""

    path: Path
    tracker: str
    sent_through: int = 0  # the history's rowid of the last record MLflow acknowledged
    runs: dict[str, str] = field(default_factory=dict)  # showtell run → MLflow run
    registered: list[str] = field(default_factory=list)  # "<set>/<run>/<step>" of each export registered

    @classmethod
    def read(cls, path: Path, tracker: str) -> Marks:
        try:
            saved = json.loads(path.read_text())
        except FileNotFoundError:
            return cls(path, tracker)
        except (OSError, ValueError) as exc:
            log.warning("%s: unreadable (%s); what MLflow already holds is checked before sending", path, exc)
            return cls(path, tracker)
        if saved.get("tracker") != tracker:
            log.info("%s: the history goes to a new tracker (%s; was %s)", path.name, tracker,
                     saved.get("tracker"))
            return cls(path, tracker)
        return cls(path, tracker, int(saved.get("sent_through", 0)), dict(saved.get("runs", {})),
                   list(saved.get("registered", [])))

    def save(self) -> None:
        write_atomic(self.path, json.dumps({"tracker": self.tracker, "sent_through": self.sent_through,
                                            "runs": self.runs, "registered": self.registered}) + "\n")


class Outbox:
    """The history's records (and exports) to ``tracker``; ``wake`` is a controller action."""

    def __init__(self, *, tracker: Tracker, store: Store, marks_path: Path, model_dir: ModelDir,
                 exports: dict[str, Path], registered_model: str) -> None:
        """
        Args:
          exports: each evaluation set's ``--export-best`` directory (none without it).
          registered_model: the default set's registered model; another set's adds ``-<set>``.
        """
        self.tracker, self.store, self.model_dir = tracker, store, model_dir
        self.exports, self.registered_model = exports, registered_model
        config = tracker.config
        self.marks = Marks.read(marks_path, f"{config.tracking_uri}#{config.tracking_experiment}")
        self.uncertain = True  # what MLflow holds past the mark is unknown until checked (see the module)
        self.last_error = ""  # the tracker's trouble now ("" when it answers)
        self._trouble_kind: type | None = None  # said once until it answers again
        self.sent = 0  # records sent by this process
        self._wake, self._stop, self._idle = threading.Event(), threading.Event(), threading.Event()
        self._thread = threading.Thread(target=self._work, name="tracking", daemon=True)

    @property
    def backlog(self) -> int:
        """Records recorded but not yet acknowledged by the tracker."""
        return self.store.count_after(self.marks.sent_through)

    def describe(self) -> str:
        return self.tracker.config.describe()

    def __call__(self, record: Record | None = None) -> None:
        """A record is durable: send it (and whatever waits) — on the outbox's thread."""
        self._idle.clear()
        self._wake.set()

    def start(self) -> None:
        log.info("evaluations go to %s; %d recorded before are still to send", self.tracker.config.describe(),
                 self.backlog)
        self._thread.start()

    def stop(self, flush_secs: float = 0.0) -> None:
        """Stop sending; with ``flush_secs``, first wait that long for the backlog to be sent (a
        finished evaluator's last records; not while the tracker is down or refusing), saying what
        is left."""
        if flush_secs and self._thread.is_alive() and not self.last_error:  # in trouble: no use waiting
            self()
            self._idle.wait(flush_secs)
            if self.backlog:
                log.warning("%d evaluation(s) not sent to %s (%s); sent when an evaluator runs on this "
                            "work dir again", self.backlog, self.tracker.config.describe(),
                            self.last_error or "still sending")
        self._stop.set()
        self._wake.set()
        if self._thread.ident is not None:
            self._thread.join(15)

    def _work(self) -> None:
        wait: float | None = None
        while not self._stop.is_set():
            self._wake.wait(wait)
            self._wake.clear()
            if self._stop.is_set():
                return
            try:
                self.send()
            except TrackerDown as exc:
                wait = RETRY_SECS[0] if wait is None else min(2 * wait, RETRY_SECS[1])
                self._trouble(exc, log.warning, f"evaluations continue; {self.backlog} waiting, sent when it "
                                                "answers (retrying every ≤ 30 s)")
                continue
            except TrackerRefused as exc:
                wait = RETRY_SECS[1]
                self._trouble(exc, log.error, f"evaluations continue; {self.backlog} waiting, sent once this "
                                              "is put right (retrying every 30 s)")
                continue
            except OSError as exc:  # the marks could not be written (a full disk): sent again, checked first
                wait = RETRY_SECS[1]
                self._trouble(exc, log.error, f"{self.marks.path}: cannot note what was sent; checked "
                                              "against the tracker before anything is sent again")
                continue
            except Exception as exc:  # a defect: said with its traceback, tried again, never a dead thread
                wait = RETRY_SECS[1]
                if type(exc) is not self._trouble_kind:
                    log.exception("sending to %s failed (a bug: please report it); retrying every %g s",
                                  self.describe(), wait)
                self._trouble_kind, self.uncertain = type(exc), True
                self.last_error = f"{type(exc).__name__}: {exc}"
                continue
            if self.last_error:
                log.info("%s answers again: the backlog is sent", self.tracker.config.describe())
            self.last_error, self._trouble_kind, wait = "", None, None
            self._idle.set()

    def _trouble(self, exc: Exception, say, then: str) -> None:
        """Said once per kind of trouble (not at every retry, nor for each call that meets it);
        ``uncertain``: a send may have landed."""
        self.uncertain = True
        if type(exc) is not self._trouble_kind:
            say("%s — %s", exc, then)
        self.last_error, self._trouble_kind = str(exc), type(exc)

    def send(self) -> None:
        """Everything recorded after the mark, then the exports not yet registered."""
        while True:
            records = self.store.arrived_after(self.marks.sent_through, limit=100)
            for record in records:
                self._send(record)
                self.marks.sent_through = record.rowid
                self.marks.save()
            if len(records) < 100:
                break
        for name, base in self.exports.items():
            for step in export.versions(base):
                self._register(name, base / str(step))

    def _send(self, record: Record) -> None:
        pairs = points(record)
        if not pairs:
            return
        from mlflow.entities import Metric

        run_id = self._run(record.run)
        stamp, client = int(record.evaluated_at * 1000), self.tracker.client
        if self.uncertain:
            held = self._held(run_id, [key for key, _ in pairs], record.step)
            missing = [(k, v) for k, v in pairs if (k, stamp) not in held]
            if len(missing) < len(pairs):
                log.info("step %d (%s): MLflow already holds %d of its %d points; %s", record.step,
                         record.eval_set, len(pairs) - len(missing), len(pairs),
                         f"sending the other {len(missing)}" if missing else "nothing sent again")
            else:
                self.uncertain = False  # a record it never had: what follows was never sent either
            pairs = missing
        if pairs:
            self.tracker.call(f"log step {record.step}", client.log_batch, run_id,
                              metrics=[Metric(k, v, stamp, record.step) for k, v in pairs])
        self.sent += 1

    def _held(self, run_id: str, keys: list[str], step: int) -> set[tuple[str, int]]:
        """(key, timestamp) of the points MLflow holds at ``step`` for ``keys``."""
        held = set()
        for key in keys:
            history = self.tracker.call(f"read {key}", self.tracker.client.get_metric_history, run_id, key)
            held.update((key, m.timestamp) for m in history if m.step == step)
        return held

    def _run(self, showtell_run: str) -> str:
        """The MLflow run of ``showtell_run``: the trainer's (found by its tag), or created here —
        with the run's settings as params, when the model dir has them."""
        if showtell_run not in self.marks.runs:
            self.marks.runs[showtell_run] = self.tracker.run_of(
                showtell_run, tags={"showtell.model_dir": str(self.model_dir)},
                params=run_params(self.model_dir.run_settings(showtell_run)))
            self.marks.save()
        return self.marks.runs[showtell_run]

    def _register(self, eval_set: str, version: Path) -> None:
        """One export as a version of the set's registered model, unless it is one already."""
        try:
            info = json.loads((version / export.INFO).read_text())
        except (OSError, ValueError):
            return  # removed since (--export-keep), or being written
        key = f"{eval_set}/{info.get('run', '')}/{info['step']}"
        if key in self.marks.registered:
            return
        run_id = self._run(info.get("run", ""))
        name = self.registered_model if eval_set == DEFAULT_SET else f"{self.registered_model}-{eval_set}"
        client, call = self.tracker.client, self.tracker.call
        if not self._registered_already(name, run_id, eval_set, info["step"]):
            path = f"export/{eval_set}/{info['step']}"
            call(f"upload the export of step {info['step']}", client.log_artifacts, run_id, str(version),
                 path)
            try:
                call("create the registered model", client.create_registered_model, name)
            except TrackerRefused as exc:
                if getattr(exc.__cause__, "error_code", "") != "RESOURCE_ALREADY_EXISTS":
                    raise
            made = call(f"register the export of step {info['step']}", client.create_model_version, name,
                        f"runs:/{run_id}/{path}", run_id=run_id, tags=self._version_tags(eval_set, info))
            log.info("registered %s version %s: step %d (%s %.6g)", name, made.version, info["step"],
                     info["metric"], info["value"])
        self.marks.registered.append(key)
        self.marks.save()

    def _registered_already(self, name: str, run_id: str, eval_set: str, step: int) -> bool:
        """Whether a version of ``name`` from ``run_id`` holds this step (a crash after registering)."""
        try:
            versions = self.tracker.call("read the model's versions",
                                         self.tracker.client.search_model_versions,
                                         f"name = '{name}' and run_id = '{run_id}'")
        except TrackerRefused:
            return False  # no such model yet
        return any(v.tags.get("showtell.step") == str(step) and v.tags.get("showtell.eval_set") == eval_set
                   for v in versions)

    def _version_tags(self, eval_set: str, info: dict[str, Any]) -> dict[str, str]:
        """The checkpoint, the step, the metric with its interval, the showtell run."""
        metric = info["metric"]
        tags = {"showtell.checkpoint": str(info.get("checkpoint", "")), "showtell.step": str(info["step"]),
                "showtell.eval_set": eval_set, "showtell.metric": f"{metric}:{info.get('mode', '')}",
                "showtell.value": repr(float(info["value"])), "showtell.run_id": str(info.get("run", ""))}
        recorded = self.store.at_step(info.get("run", ""), info["step"], eval_set=eval_set)
        if recorded and metric in recorded[0].intervals:
            lower, upper = recorded[0].intervals[metric]
            tags.update({"showtell.lo": repr(float(lower)), "showtell.hi": repr(float(upper))})
        return tags
