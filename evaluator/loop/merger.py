"""Part 0 of a split evaluation: merge each checkpoint once every part has published it.

Called on the evaluation thread — after part 0's own evaluations and whenever another part
publishes (the parts dir's watcher wakes the loop) — so the one caption scorer (METEOR's JVM) is
never shared.  A checkpoint's merged record is what one evaluator would have written: every part
ok → its parts scored as one evaluation (``CheckpointEvaluator.merge``); a part that failed or
skipped it → the checkpoint recorded failed or skipped, with that part's reason.  It goes through
the same ``Recorder`` and actions as one evaluator's records (Watch, TensorBoard, Prometheus), and
only then are the parts' files replaced by a marker.  A checkpoint some part has not published
stays waiting, listed in ``waiting`` (the status, Prometheus, ``metrics status``) — never merged
from fewer images.
"""

from __future__ import annotations

import logging
import sqlite3
import time
from collections.abc import Sequence

from showtell.evaluator.loop.attempts import record_of
from showtell.evaluator.loop.protocol import Evaluator
from showtell.evaluator.loop.status import WaitingForParts
from showtell.evaluator.records.parts_dir import Group, PartsDir, Published
from showtell.evaluator.records.record import Record
from showtell.evaluator.records.recorder import Action, Recorder

log = logging.getLogger(__name__)


class Merger:
    def __init__(self, *, parts: PartsDir, evaluator: Evaluator, recorder: Recorder,
                 actions: Sequence[Action] = ()) -> None:
        """
        Args:
          parts: the parts dir, seen as part 0.
          evaluator: part 0's, whose sets and scorer score the merged parts.
          recorder: the merged history's (the one the service serves).
          actions: told about each merged record, as one evaluator's actions are.
        """
        self.parts, self.evaluator, self.recorder, self.actions = parts, evaluator, recorder, list(actions)
        self.parts_count = parts.count
        self.waiting: tuple[WaitingForParts, ...] = ()  # as of the last call
        self._said: set[tuple[str, int, str]] = set()

    def __call__(self) -> list[Record]:
        """Merge every checkpoint all parts have published, in step order; the records stored."""
        stored, waiting = [], []
        try:
            groups = self.parts.groups()
        except OSError as exc:
            log.error("--parts-dir %s: cannot list it (%s); merging again at the next change",
                      self.parts.root, exc)
            return []
        for group in groups:
            key = (group.run, group.step, group.name)
            missing = self.parts.missing(group)
            if missing and all(self.parts.passed(i, group) for i in missing):
                record = self._passed_by(group, missing)
                if record is not None:
                    stored.append(record)
                continue
            if missing:
                waiting.append(WaitingForParts(group.run, group.step, group.name, tuple(missing)))
                continue
            try:
                record = self._merge(group)
            except (ValueError, OSError) as exc:  # a part unreadable, or of another evaluation
                # (PartsMismatch): left as it is, for a look after that part is redone
                if key not in self._said:
                    log.error("step %d: not merged: %s", group.step, exc)
                    self._said.add(key)
                waiting.append(WaitingForParts(group.run, group.step, group.name, ()))
                continue
            except sqlite3.Error as exc:
                log.error("step %d: not merged: %s", group.step, self.recorder.trouble(group.step, exc))
                waiting.append(WaitingForParts(group.run, group.step, group.name, ()))
                continue
            if record is not None:
                stored.append(record)
        self.waiting = tuple(waiting)
        return stored

    def _merge(self, group: Group) -> Record | None:
        reading = time.monotonic()
        published = self.parts.read(group)
        read = time.monotonic() - reading
        first = published[0].header
        run, step, checkpoint = first["run"], first["step"], first["checkpoint"]
        if self.recorder.store.has(run, step, checkpoint):  # merged before a crash removed its files
            self.parts.merged(group)
            return None
        record = self._record(published, read)
        kept = self.recorder.record(record, self.actions)
        if kept is not None or self.recorder.store.has(run, step, checkpoint):
            self.parts.merged(group)
        return kept

    def _passed_by(self, group: Group, missing: list[int]) -> Record | None:
        """A checkpoint the ``missing`` parts went past without publishing — it was deleted
        (``--keep``) while they were down, as a lone evaluator records one deleted before it was
        pinned: recorded skipped, with which parts and why."""
        first = self.parts.read_any(group)
        run, step, checkpoint = first["run"], first["step"], first["checkpoint"]
        if self.recorder.store.has(run, step, checkpoint):
            self.parts.merged(group)
            return None
        parts = ", ".join(f"{i}/{self.parts.count}" for i in missing)
        reason = (f"part {parts} went on to later checkpoints without it: deleted (--keep) before that "
                  "part could evaluate it")
        record = Record.skipped(step, checkpoint, reason, run=run, mtime=first["checkpoint_mtime"])
        kept = self.recorder.record(record, self.actions)
        if kept is not None or self.recorder.store.has(run, step, checkpoint):
            self.parts.merged(group)
        log.info("step %d: recorded skipped: %s", step, record.reason)
        return kept

    def _record(self, published: list[Published], read: float) -> Record:
        """The merged record of a checkpoint's parts; ``read``: the seconds reading them took,
        added to each set's merge seconds (the merge's own cost, beside its scoring)."""
        first = published[0].header
        run, step, checkpoint = first["run"], first["step"], first["checkpoint"]
        mtime = first["checkpoint_mtime"]
        for part in published:
            header = part.header
            if header["status"] != "ok":
                index, count = header["shard"]
                reason = f"part {index}/{count}: {header['reason']}"
                if header["status"] == "skipped":
                    return Record.skipped(step, checkpoint, reason, run=run, mtime=mtime)
                return Record.failed(step, checkpoint, reason, run=run, mtime=mtime,
                                     seconds=header["eval_seconds"])
        sets = [s for part in published for s in part.sets]
        # Parts that are not one evaluation's (another split, data or set) raise ``PartsMismatch``:
        # nothing is recorded from them, the files stay, the checkpoint waits (said once).
        result = self.evaluator.merge(sets, checkpoint, step, first["train_seconds"])
        for one in (result, *result.others):
            one.costs["seconds"]["merge"] = one.costs["seconds"].get("merge", 0.0) + read
        log.info("step %d: merged from %d parts", step, len(published))
        return record_of(result, checkpoint, mtime, run)
