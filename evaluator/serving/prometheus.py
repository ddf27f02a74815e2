"""The evaluator's figures for Prometheus (``--prometheus-port``): what an operator alerts on —
how far behind the trainer it is, how long since a checkpoint came, whether evaluations fail.

Two kinds of figure.  What happens once per evaluation (its duration, the images it covered, the
count by status) is observed by ``record``, one more of the controller's actions: counters and a
histogram, so ``rate()`` gives throughput over any window.  What is true at any moment (pending
checkpoints, steps behind, the newest checkpoint's time, the current run and its last evaluated
step, open Watch streams) is read at scrape time from the controller's status snapshot and the
store, so it is never stale and nothing else has to write it.  Labels stay bounded: the run is
an info metric's one changing label, not a series per run."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence

from prometheus_client import CollectorRegistry, Counter, Histogram
from prometheus_client.core import GaugeMetricFamily, InfoMetricFamily
from prometheus_client.registry import Collector

from showtell.api.contract import COST_PARTS, DEFAULT_SET
from showtell.evaluator.loop.status import Status
from showtell.evaluator.records.record import Record
from showtell.evaluator.records.store import Store

STATUSES = ("ok", "failed", "skipped")
# An evaluation takes seconds (a few images) to an hour (COCO's 40k on a CPU).
DURATION_BUCKETS = (1, 2.5, 5, 10, 30, 60, 120, 300, 600, 1200, 1800, 3600, 7200)


class EvaluatorFigures:
    """The registry ``--prometheus-port`` serves; ``record`` is an action of the controller."""

    def __init__(self, *, registry: CollectorRegistry, status: Callable[[], Status], store: Store,
                 streams: Callable[[], int], sets: Sequence[str] = (DEFAULT_SET,),
                 tracking_backlog: Callable[[], int] | None = None) -> None:
        """``tracking_backlog``: the records the tracker has not acknowledged (None: no tracker)."""
        self.status, self.registry = status, registry
        self.evaluations = Counter("showtell_evaluator_evaluations", "Checkpoints recorded, by outcome "
                                   "(ok, failed: could not be evaluated, skipped: gone first).",
                                   ["status"], registry=self.registry)
        for status_name in STATUSES:  # every series from the start: rate() sees the first one
            self.evaluations.labels(status_name)
        self.duration = Histogram("showtell_evaluator_evaluation_duration_seconds",
                                  "Wall-clock time of each successful evaluation (restore, captions, "
                                  "scores).",
                                  buckets=DURATION_BUCKETS, registry=self.registry)
        self.images = Counter("showtell_evaluator_images", "Validation images evaluated (captioned and "
                              "scored) by successful evaluations; rate() is the throughput.",
                              registry=self.registry)
        self.features = Counter("showtell_evaluator_features",
                                "Images of every evaluation set by where their encoder features came from: "
                                "reused (read back: the checkpoint's encoder was seen before), computed (the "
                                "encoder run on the image), rebuilt "
                                "(computed again after a damaged cache was dropped).",
                                ["result"], registry=self.registry)
        self.part_seconds = Counter("showtell_evaluator_part_seconds", "Wall seconds of successful "
                                    "evaluations by part (restore, digest, features, decoder, scoring, "
                                    "intervals): each part's share of the evaluator's time.",
                                    ["part"], registry=self.registry)
        for result in ("reused", "computed", "rebuilt"):
            self.features.labels(result)
        for part in COST_PARTS:
            self.part_seconds.labels(part)
        self.registry.register(_Now(status, store, streams, sets, tracking_backlog))

    def record(self, record: Record) -> None:
        """Count a recorded checkpoint; time it if it was evaluated.  Runs while the controller's
        status still holds the evaluation's progress (how many images it covered).  A checkpoint
        counts once: by its default set's record (the others come with it); its features and
        parts' seconds by every set's."""
        if record.status == "ok" and record.costs:
            costs = record.costs
            self.features.labels("reused").inc(costs.get("images_reused", 0))
            computed = "rebuilt" if costs.get("features") == "rebuilt" else "computed"
            self.features.labels(computed).inc(costs.get("images_computed", 0))
            for part, seconds in costs.get("seconds", {}).items():
                if part in COST_PARTS:
                    self.part_seconds.labels(part).inc(max(0.0, float(seconds)))
        if record.eval_set != DEFAULT_SET:
            return
        self.evaluations.labels(record.status).inc()
        if record.status != "ok":
            return
        self.duration.observe(record.eval_seconds)
        progress = self.status().progress
        if progress is not None:
            self.images.inc(progress.done)


class _Now(Collector):
    """The figures true at scrape time."""

    def __init__(self, status: Callable[[], Status], store: Store, streams: Callable[[], int],
                 sets: Sequence[str], tracking_backlog: Callable[[], int] | None = None) -> None:
        self.status, self.store, self.streams, self.sets = status, store, streams, sets
        self.tracking_backlog = tracking_backlog

    def collect(self) -> Iterator[GaugeMetricFamily]:
        status = self.status()
        # The current run as an info metric whose label changes, not a series per run kept for the
        # process' life (the history, ListRuns and `showtell runs` have every run).
        yield InfoMetricFamily("showtell_evaluator_run", "The training run the model dir holds now.",
                               value={"run_id": status.run_id or ""})
        evaluated = {run: newest for run, _evaluations, newest in self.store.run_summaries()}
        current = evaluated.get(status.run_id)
        yield GaugeMetricFamily("showtell_evaluator_last_evaluated_step",
                                "The newest global step evaluated of the current run (-1 before its first).",
                                value=current if current is not None else -1)
        yield GaugeMetricFamily("showtell_evaluator_checkpoints_pending",
                                "Checkpoints named by the trainer and due for evaluation.",
                                value=len(status.pending_steps))
        yield GaugeMetricFamily("showtell_evaluator_checkpoints_waiting_for_parts",
                                "A split evaluation's checkpoints some part has not published yet (never "
                                "recorded from fewer images; 0 when not split).",
                                value=len(status.waiting_for_parts))
        newest = status.last_seen_step
        behind = 0 if newest < 0 else newest - (current if current is not None else 0)
        yield GaugeMetricFamily("showtell_evaluator_steps_behind",
                                "Global steps between the newest checkpoint and the newest one evaluated "
                                "(of the current run).", value=max(0, behind))
        yield GaugeMetricFamily("showtell_evaluator_newest_checkpoint_step",
                                "The newest checkpoint's global step (-1 before the first).", value=newest)
        if status.newest_saved_at > 0:  # Prometheus' way: a timestamp; the age is time() - it
            yield GaugeMetricFamily("showtell_evaluator_newest_checkpoint_timestamp_seconds",
                                    "When the newest checkpoint was written (Unix time).",
                                    value=status.newest_saved_at)
        yield GaugeMetricFamily("showtell_evaluator_evaluating", "1 while a checkpoint is being evaluated.",
                                value=1 if status.evaluating_step >= 0 else 0)
        yield GaugeMetricFamily("showtell_evaluator_watch_streams", "Watch streams open.",
                                value=self.streams())
        # A trainer that finished exits, and its target goes down: the alert on `up` asks this.
        yield GaugeMetricFamily("showtell_evaluator_trainer_finished",
                                "1 once the trainer has marked its final checkpoint in the model dir "
                                "(it then exits by design), else 0.",
                                value=1 if status.trained_step >= 0 else 0)
        if self.tracking_backlog is not None:
            yield GaugeMetricFamily("showtell_evaluator_tracking_backlog",
                                    "Recorded evaluations the experiment tracker (--tracking-uri) has not "
                                    "acknowledged yet: they wait in the history, sent when it answers.",
                                    value=self.tracking_backlog())
        yield from self._latest_metrics(status.run_id)

    def _latest_metrics(self, run: str) -> Iterator[GaugeMetricFamily]:
        """The current run's newest evaluation of each set: every metric, and its interval's
        bounds — the evaluation set a label, as the metric is (bounded: sets × metrics)."""
        families = {bound: GaugeMetricFamily(
            f"showtell_evaluator_metric{suffix}", f"The current run's newest evaluation: each metric{what}, "
            "by evaluation set.", labels=["eval_set", "metric"])
            for bound, suffix, what in (("value", "", ""), ("lower", "_lower", "'s interval's lower bound"),
                                        ("upper", "_upper", "'s interval's upper bound"))}
        for name in self.sets:
            latest = self.store.latest(run, eval_set=name) if run else None
            if latest is None or latest.status != "ok":
                continue
            for metric, value in sorted(latest.metrics.items()):
                families["value"].add_metric([name, metric], value)
                if metric in latest.intervals:
                    lower, upper = latest.intervals[metric]
                    families["lower"].add_metric([name, metric], lower)
                    families["upper"].add_metric([name, metric], upper)
        yield from families.values()
