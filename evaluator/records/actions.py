"""What the controller does with each record once it is durable (Orbit's ``actions``): small
callables ``(record) -> None``, given to the controller and run in order under the recorder's
lock.  Each decides for itself whether the record concerns it; none steers the loop."""

from __future__ import annotations

import logging
from typing import Any, Protocol

import tensorflow as tf

from showtell.api.contract import DEFAULT_SET, describe_costs
from showtell.common.errors import ShowtellError
from showtell.common.intervals import with_interval
from showtell.common.model_dir import ModelDir
from showtell.evaluator.records.record import Record
from showtell.evaluator.records.summaries import EvalSummaries

log = logging.getLogger(__name__)


def log_record(record: Record) -> None:
    """One line per record: its status and metrics, or why it failed or was skipped."""
    where = "" if record.eval_set == DEFAULT_SET else f" ({record.eval_set})"
    costs = record.costs
    spent = "" if not costs else "; " + describe_costs(costs["features"], costs["images_reused"],
                                                       costs["images_computed"], costs["seconds"])
    log.info("step %d%s: %s %s%s", record.step, where, record.status,
             " ".join(f"{k} {with_interval(v, record.intervals.get(k))}"
                      for k, v in sorted(record.metrics.items())) or record.reason, spent,
             extra={"run": record.run, "step": record.step})


class WriteSummaries:
    """A successful evaluation's metrics and sample captions to TensorBoard."""

    def __init__(self, summaries: EvalSummaries) -> None:
        self.summaries = summaries

    def __call__(self, record: Record) -> None:
        if record.status == "ok":
            self.summaries.write(record)


class HParamsSession:
    """Each run's configuration (``<model-dir>/runs/<run id>.json``, the trainer's) as an HParams
    session in the evaluator's TensorBoard logdir, written at the run's first successful
    evaluation: ``tensorboard --logdir`` over the work dirs compares runs' settings against their
    metrics in the HParams tab.  A run without a record (an import, an older trainer) gets none."""

    def __init__(self, model_dir: ModelDir, summaries: EvalSummaries) -> None:
        self.model_dir, self.summaries = model_dir, summaries
        self._written: set[str] = set()

    def __call__(self, record: Record) -> None:
        if record.status != "ok" or record.run in self._written:
            return
        self._written.add(record.run)
        run = self.model_dir.run_record(record.run)
        if run is not None:
            self.summaries.hparams(record.run, session_hparams(run["revisions"][-1]))


# what a run's record resolved that says how it trained; where its files went, how often it saved or
# logged and what it printed are not hyperparameters
TRAINING = ("model", "input", "optimizer", "encoder_optimizer", "train", "compute")
NOT_HYPERPARAMETERS = {"train": ("max_seconds", "save_every_secs", "save_every_steps", "first_save_secs",
                                 "keep", "log_every_steps", "histogram_every_steps")}


def session_hparams(revision: dict) -> dict[str, bool | int | float | str]:
    """A revision's training settings as it resolved them (``model.lstm_units``, ``optimizer.
    learning_rate``, the phase, strategy and global batch …), scalars only: the run's
    hyperparameters, not its placement (hosts, ports, log format) nor its bookkeeping."""
    resolved = revision.get("resolved", {})
    values: dict = {k: resolved.get(k) for k in ("phase", "strategy", "replicas", "global_batch")}
    for section in TRAINING:
        for key, value in (resolved.get(section) or {}).items():
            if key not in NOT_HYPERPARAMETERS.get(section, ()):
                values[f"{section}.{key}"] = ",".join(map(str, value)) if isinstance(value, list) else value
    return {k: v for k, v in sorted(values.items()) if isinstance(v, (bool, int, float, str))}


class Exporter(Protocol):
    """What the action asks of a set's best export (``best_export.BestExport``)."""

    def consider(self, record: Record, model: Any, vocab: Any) -> bool: ...


class ExportBest:
    """``--export-best``: consider the model just evaluated (still in the evaluator's memory)
    for each evaluation set's own export (``exporters``: set name → its ``BestExport``); a failed
    export is logged and the previous one stays.  ``merged``: the records are a split evaluation's,
    merged by part 0 after it may have moved on to another checkpoint — the record's own checkpoint
    is restored into a model of its own first (``CheckpointEvaluator.model_at``)."""

    def __init__(self, exporters: dict[str, Exporter], evaluator: Any, merged: bool = False) -> None:
        self.exporters, self.evaluator, self.merged = exporters, evaluator, merged

    def __call__(self, record: Record) -> None:
        exporter = self.exporters.get(record.eval_set)
        if record.status != "ok" or exporter is None:
            return
        try:
            model = self.evaluator.model_at(record.checkpoint) if self.merged else self.evaluator.model
            exporter.consider(record, model, self.evaluator.vocab)
        except (OSError, ValueError, tf.errors.OpError, ShowtellError) as exc:  # ShowtellError: gone (--keep)
            log.error("--export-best: exporting step %d failed (%s); the previous export stays",
                      record.step, exc)
