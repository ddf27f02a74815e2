"""What the controller does with each record once it is durable (Orbit's ``actions``): small
callables ``(record) -> None``, given to the controller and run in order under the recorder's
lock.  Each decides for itself whether the record concerns it; none steers the loop."""

from __future__ import annotations

import logging
from typing import Any

import tensorflow as tf

from showtell.evaluator.records.best_export import BestExport
from showtell.evaluator.records.store import Record
from showtell.evaluator.records.summaries import EvalSummaries

log = logging.getLogger(__name__)


def log_record(record: Record) -> None:
    """One line per record: its status and metrics, or why it failed or was skipped."""
    log.info("step %d: %s %s", record.step, record.status,
             " ".join(f"{k} {v:.4f}" for k, v in sorted(record.metrics.items())) or record.reason)


class WriteSummaries:
    """A successful evaluation's metrics and sample captions to TensorBoard."""

    def __init__(self, summaries: EvalSummaries) -> None:
        self.summaries = summaries

    def __call__(self, record: Record) -> None:
        if record.status == "ok":
            self.summaries.write(record)


class ExportBest:
    """``--export-best``: consider the model just evaluated (still in the evaluator's memory);
    a failed export is logged and the previous one stays."""

    def __init__(self, exporter: BestExport, evaluator: Any) -> None:
        self.exporter, self.evaluator = exporter, evaluator

    def __call__(self, record: Record) -> None:
        if record.status != "ok":
            return
        try:
            self.exporter.consider(record, self.evaluator.model, self.evaluator.vocab)
        except (OSError, ValueError, tf.errors.OpError) as exc:
            log.error("--export-best: exporting step %d failed (%s); the previous export stays",
                      record.step, exc)
