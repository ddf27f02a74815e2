"""One evaluation as the history keeps it (``Record``): a checkpoint's step, its metrics and
intervals, how it was drawn and what it cost — and how a history row becomes one."""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field

from showtell.api.contract import DEFAULT_SET


@dataclass(frozen=True)
class Record:
    step: int
    checkpoint: str
    checkpoint_mtime: float
    evaluated_at: float
    eval_seconds: float
    num_examples: int
    metrics: dict[str, float] = field(default_factory=dict)
    samples: list[dict] = field(default_factory=list)
    status: str = "ok"
    reason: str = ""
    rowid: int = 0  # arrival order, assigned by the store
    run: str = ""  # the training run (see the module docstring)
    scoring: str = ""  # the tokenizer and scorers behind the caption metrics
    recorded: int = 1  # times this checkpoint was recorded: more than 1 is a defect (see the module)
    train_seconds: float | None = None  # the run's training seconds at this checkpoint (None: unknown)
    intervals: dict[str, list[float]] = field(default_factory=dict)  # metric → [lower, upper]; {}: none
    bootstrap: dict = field(default_factory=dict)  # how they were drawn: samples, confidence, seed
    image_stats: bytes = field(default=b"", repr=False)  # written with the row; not read back with it
    eval_set: str = DEFAULT_SET  # which evaluation set (--eval-set NAME; the default: --data's val)
    also: tuple[Record, ...] = ()  # the checkpoint's other sets' records, written in the same transaction
    # where the evaluation's time went, and whether its encoder features were reused (EvalResult.costs);
    # {} for records from before they were kept
    costs: dict = field(default_factory=dict)

    @classmethod
    def skipped(cls, step: int, checkpoint: str, reason: str, *, run: str, mtime: float = 0.0) -> Record:
        """Not evaluated, and never will be (deleted first, never complete): ``reason`` says why."""
        return cls(step, checkpoint, mtime, time.time(), 0.0, 0, status="skipped", reason=reason, run=run)

    @classmethod
    def failed(cls, step: int, checkpoint: str, reason: str, *, run: str, mtime: float,
               seconds: float) -> Record:
        """The checkpoint could not be evaluated (corrupt, another model's, bad data)."""
        return cls(step, checkpoint, mtime, time.time(), seconds, 0, status="failed", reason=reason, run=run)


def record_from_row(row: tuple) -> Record:
    (rowid, run, step, checkpoint, checkpoint_mtime, evaluated_at, eval_seconds, num_examples, metrics,
     samples, status, reason, scoring, recorded, train_seconds, intervals, eval_set, costs) = row
    drawn = json.loads(intervals) if intervals else {}
    return Record(step=step, checkpoint=checkpoint, checkpoint_mtime=checkpoint_mtime,
                  evaluated_at=evaluated_at, eval_seconds=eval_seconds, num_examples=num_examples,
                  metrics=json.loads(metrics), samples=json.loads(samples), status=status, reason=reason,
                  rowid=rowid, run=run, scoring=scoring, recorded=recorded, train_seconds=train_seconds,
                  intervals=drawn.get("bounds", {}), bootstrap=drawn.get("bootstrap", {}), eval_set=eval_set,
                  costs=json.loads(costs) if costs else {})
