"""What one look at the model dir finds: the checkpoints its state file names, the run they
belong to, which of them are due (``schedule.to_evaluate``), and whether the trainer's final
checkpoint is recorded — read afresh each time the watcher wakes the loop, and shown in the
status GetStatus answers with.  No decision is made here: ``schedule`` makes them.
"""

from __future__ import annotations

import logging
import os

from showtell.captioning.model.modeldir import checkpoint_step, read_finished, read_run_id, read_state
from showtell.common.errors import ShowtellError
from showtell.evaluator import schedule
from showtell.evaluator.attempts import Attempts
from showtell.evaluator.schedule import Checkpoint
from showtell.evaluator.seen import SeenCheckpoints, recorded
from showtell.evaluator.status import Status
from showtell.evaluator.store import Store

log = logging.getLogger(__name__)


class ModelDirReader:
    def __init__(self, *, model_dir: str, store: Store, status: Status, seen: SeenCheckpoints,
                 attempts: Attempts, policy: str) -> None:
        """
        Args:
          model_dir: the trainer's model directory (local path or ``tf.io.gfile`` URL).
          store: the history, read to tell what is recorded.
          status: where what was read is shown (the run, the newest step, what is pending, a
            state file that cannot be read).
          seen: policy all's checkpoints named earlier, told what is named now.
          attempts: told when a new run begins (its checkpoints arrive afresh).
          policy: ``latest`` or ``all`` (``schedule.to_evaluate``).
        """
        self.model_dir, self.store, self.status = model_dir, store, status
        self.seen, self.attempts, self.policy = seen, attempts, policy
        self._run_known = False

    def named(self) -> list[str] | None:
        """The checkpoints the state file names (oldest first); None, logged once, if it cannot
        be read."""
        try:
            named = read_state(self.model_dir)
        except ShowtellError as exc:
            if str(exc) != self.status.state_error:
                log.error("%s", exc)
            self.status.state_error = str(exc)
            return None
        self.status.state_error = ""
        return named

    def pending(self) -> list[Checkpoint]:
        """The checkpoints to evaluate now, in order."""
        named = self.named()
        if named is None:
            return []
        run = self.run()
        self.seen.record_vanished(set(named))
        if named:
            self.status.last_seen_step = max(checkpoint_step(p) for p in named)
        newest = self.store.latest(run)
        todo = schedule.to_evaluate(named, recorded=recorded(self.store, run, named), policy=self.policy,
                                    newest_recorded=newest.step if newest else None)
        self.status.pending_steps = [c.step for c in todo]
        return todo

    def run(self) -> str:
        """The model dir's run (its ``showtell-model.json``); logs when a new one begins."""
        run = read_run_id(self.model_dir)
        if run is None or (self._run_known and run == self.status.run_id):
            return self.status.run_id
        newest = self.store.latest()
        previous = self.status.run_id if self._run_known else (newest.run if newest else run)
        if previous != run:
            log.info("a new run began in %s: run %s (was %s); its checkpoints are evaluated afresh",
                     self.model_dir, run or "''", previous or "''")
        self.status.run_id, self._run_known = run, True
        self.attempts.forget()
        return run

    def trained(self) -> str | None:
        """Why the job is done if the trainer marked its final checkpoint and it is recorded."""
        final = read_finished(self.model_dir)
        if final is None:
            return None
        # Its evaluation may still be to come: the state file's rename (or, if it was evaluated
        # before the marker landed, the marker's own arrival) wakes the loop again.
        if not any(r.step == final["step"] and os.path.basename(r.checkpoint) == final["checkpoint"]
                   for r in self.store.after(final["step"] - 1, run=self.status.run_id)):
            return None
        return f"the trainer finished ({final.get('reason', '?')}) and its final checkpoint, step " \
               f"{final['step']}, is evaluated"
