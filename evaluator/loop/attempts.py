"""One checkpoint at a time: pin it, evaluate it, unpin it — the record it makes is the
controller's to keep.

Every evaluation ends in a record, ok or failed (a corrupt file, another model, bad data), except
when the files are not all there yet (a synced copy delivers the state file first, or they change
while read): that comes back as ``NotArrived``, and the controller decides (``schedule``) whether
to look again or record it skipped.  The work dir's own trouble (a full disk) raises.
"""

from __future__ import annotations

import dataclasses
import logging
import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from showtell.common.errors import ModelDirIncomplete, ShowtellError
from showtell.common.model_dir import ModelDir
from showtell.evaluator.loop.pinning import Missing, files_state, pin, unpin
from showtell.evaluator.loop.protocol import EvalResult, Evaluator, Images
from showtell.evaluator.loop.schedule import Checkpoint
from showtell.evaluator.records.record import Record

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class NotArrived:
    """The checkpoint's files could not all be read as one whole."""

    checkpoint: Checkpoint
    reason: str
    mtime: float


class Attempts:
    def __init__(self, *, evaluator: Evaluator, pins: Path) -> None:
        """
        Args:
          evaluator: restores and validates one checkpoint.
          pins: where checkpoints are pinned while evaluated (``WorkDir.pins``).
        """
        self.evaluator, self.pins = evaluator, pins

    def leftovers(self) -> list[str]:
        """The pins a stopped evaluator left behind (each an evaluation cut short)."""
        try:
            return sorted(p.name for p in self.pins.iterdir())
        except OSError:
            return []

    def clear(self, names: list[str]) -> None:
        for name in names:
            shutil.rmtree(self.pins / name, ignore_errors=True)

    def evaluate(self, checkpoint: Checkpoint, run: str, *, progress: Callable[[int, int], None],
                 images: Images = None) -> Record | NotArrived:
        """The checkpoint's record (not yet stored), or why its files are not all there."""
        step, prefix = checkpoint.step, checkpoint.prefix
        started, mtime, before = time.time(), ModelDir.saved_at(prefix), files_state(prefix)
        try:
            pinned = pin(prefix, self.pins)
        except Missing as exc:
            return NotArrived(checkpoint, str(exc), mtime)
        try:
            log.info("evaluating %s (step %d)", prefix, step)
            result = self.evaluator.evaluate(pinned, step=step, progress=progress, images=images)
            return record_of(result, prefix, mtime, run)
        except ModelDirIncomplete as exc:  # e.g. showtell-model.json not synced yet
            return NotArrived(checkpoint, str(exc), mtime)
        except ShowtellError as exc:
            if files_state(prefix) != before:  # still being written (a sync, a slow copy): not a failure
                return NotArrived(checkpoint, f"{prefix}: its files changed while being read", mtime)
            log.error("%s", exc)
            return Record.failed(step, prefix, str(exc).replace(pinned, prefix), run=run, mtime=mtime,
                                 seconds=time.time() - started)
        finally:
            unpin(pinned)


def record_of(result: EvalResult, checkpoint: str, mtime: float, run: str) -> Record:
    """The record of ``result``, an evaluation of ``checkpoint`` (saved at ``mtime``) in ``run``:
    its other sets' records in ``also``, stored in one transaction with the default set's."""
    now = time.time()

    def record(one: EvalResult) -> Record:
        return Record(one.step, checkpoint, mtime, now, one.seconds, one.examples, metrics=one.metrics,
                      samples=one.samples, run=run, scoring=one.scoring,
                      train_seconds=one.train_seconds, bootstrap=one.bootstrap,
                      intervals={k: list(v) for k, v in one.intervals.items()},
                      image_stats=one.stats.to_bytes() if one.stats is not None else b"",
                      eval_set=one.eval_set, costs=one.costs)

    return dataclasses.replace(record(result), also=tuple(map(record, result.others)))
