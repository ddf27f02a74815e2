"""``--follow-encoder``: a trainer that keeps up with an encoder still being pretrained.

A service stack starts the trainer beside the pretraining (``docker compose up``): the trainer
waits for the pretraining's first encoder, trains on it — checkpoints, evaluations, in the first
minutes — and when the pretraining writes a newer encoder into the same file, ends that run (its
final checkpoint), keeps it aside in ``<model-dir>-preview`` and starts again, as a new run, on the
new file: what ``make demo`` does with its preview, for a trainer no script drives.

A run belongs to the encoder file's bytes it started from (``encoder_init.sha256`` in the model
dir's record): at every start, a model dir whose run started from other bytes is set aside, so a
stack stopped mid-preview and started again after the pretraining ended also trains on the final
encoder.  The restart is an ``exec`` of the same command: the same process to its supervisor
(compose, Kubernetes, a shell), nothing of the old run's TensorFlow state carried over.
"""

from __future__ import annotations

import logging
import os
import shutil
import sys
import time
from collections.abc import Callable
from pathlib import Path

from showtell.captioning.config import pretrained_encoder
from showtell.common.errors import ShowtellError
from showtell.common.files import sha256_of
from showtell.common.locks import LOCK_FILE
from showtell.common.model_dir import ModelDir

log = logging.getLogger(__name__)

ENCODER_REPLACED = "a newer encoder in --inception-weights"
PREVIEW_DONE = "its --preview-secs on a first encoder"
RESTART = 75  # EX_TEMPFAIL: what ``run`` turns into an exec (or returns, if the exec fails)
PREVIEW_SUFFIX = "-preview"


def _sha256(path: Path) -> str:
    return sha256_of([path])


def _signature(path: Path) -> tuple[int, int, int] | None:
    """What changes when the file is replaced (a rename changes the inode; a rewrite the rest)."""
    try:
        st = path.stat()
    except OSError:
        return None
    return st.st_ino, st.st_size, st.st_mtime_ns


def wait_for_encoder(path: Path, stop, report_every: float = 30.0, poll: float = 2.0) -> bool:
    """Sleep until ``path`` exists (the pretraining writes it whole, by rename); False if stopped."""
    waited, reported = time.monotonic(), 0.0
    while not path.is_file():
        now = time.monotonic()
        if now - reported >= report_every:
            log.info("waiting for the encoder %s (%.0f s so far): the pretraining writes a first one, then "
                     "the trainer starts on it", path, now - waited)
            reported = now
        if stop.wait(poll):
            return False
    return True


def set_aside_other_encoders_run(opened: ModelDir, encoder: Path) -> Path | None:
    """Move a run that started from other bytes than ``encoder``'s now out of the model dir into
    ``<model-dir>-preview`` (replacing an older one); where it went, or None when there is none."""
    recorded = opened.encoder_init()
    if recorded is None or recorded.get("sha256") == _sha256(encoder):
        return None
    model_dir = opened.path
    aside = model_dir.with_name(model_dir.name + PREVIEW_SUFFIX)
    moving = model_dir.with_name(f".{aside.name}.tmp-{os.getpid()}")
    lock = LOCK_FILE.format(role="trainer")
    try:
        shutil.rmtree(moving, ignore_errors=True)
        moving.mkdir()
        # The state file first: from then on an evaluator sees no checkpoint here, never half a run.
        for entry in sorted(model_dir.iterdir(), key=lambda p: p.name != ModelDir.STATE_FILE):
            if entry.name != lock:
                os.replace(entry, moving / entry.name)
        shutil.rmtree(aside, ignore_errors=True)
        os.replace(moving, aside)
    except OSError as exc:
        raise ShowtellError(f"--model-dir {model_dir}: cannot set aside its run on an earlier encoder into "
                            f"{aside} ({exc.strerror or exc}); free some space or move it yourself") from exc
    log.info("the run in %s started from another encoder (sha256 %s…) than %s holds now: kept aside in "
             "%s; a new run starts on the new encoder", model_dir, str(recorded.get("sha256"))[:12], encoder,
             aside)
    return aside


class EncoderWatch:
    """A controller action: every ``every_secs``, whether the encoder file still holds the bytes
    this run started from — when not, the run stops (final checkpoint) with ``ENCODER_REPLACED``;
    on a first encoder, the run also stops ``preview_secs`` into its training (``PREVIEW_DONE``)."""

    def __init__(self, path: Path, stop, preview_secs: float | None = None, every_secs: float = 10.0,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.path, self.stop, self.every_secs, self.clock = path, stop, every_secs, clock
        self.signature = _signature(path)
        self.sha256 = _sha256(path)
        record = pretrained_encoder(path, self.sha256)  # the file read once, not twice
        self.preview_secs = preview_secs if record is not None and record.get("final") is False else None
        if self.preview_secs:
            log.info("%s is a first encoder (pretraining step %d, not done): a preview of %.0f s, then a "
                     "wait for the final one", path, record["step"], self.preview_secs)
        self._checked = clock()
        self._started: float | None = None  # the first chunk's end: training time counts from there

    def __call__(self, step: int, logs=None) -> None:
        now = self.clock()
        if self._started is None:
            self._started = now
        if self.preview_secs and now - self._started >= self.preview_secs:
            if _said_final(self.path, self.sha256):
                log.info("step %d: the pretraining ended on the encoder this run started from (its final "
                         "one is these bytes): no longer a preview, the run goes on", step)
                self.preview_secs = None
            else:
                self.stop.request(PREVIEW_DONE)
        if now - self._checked < self.every_secs:
            return
        self._checked = now
        signature = _signature(self.path)
        if signature is None or signature == self.signature:
            return  # missing for a moment (replaced by rename), or untouched
        self.signature = signature
        if _sha256(self.path) != self.sha256:
            log.info("step %d: %s holds a newer encoder: ending this run to start a new one on it",
                     step, self.path)
            self.stop.request(ENCODER_REPLACED)


def _said_final(path: Path, sha256: str) -> bool:
    """Whether the pretraining's record names ``sha256`` its final encoder: a pretraining whose
    ``--steps`` ended at its first encoder's step wrote the same bytes again, and only the record
    changed."""
    return bool((pretrained_encoder(path, sha256) or {}).get("final"))


def wait_for_newer(path: Path, sha256: str, stop, report_every: float = 60.0, poll: float = 2.0) -> bool:
    """Sleep until ``path`` holds the final encoder: other bytes than ``sha256``, or the same bytes
    the pretraining's record now calls final; False if stopped first.

    The bytes are compared once before the first sleep: the final encoder may have landed while the
    preview saved its final checkpoint, and a wait that only looked for changes from then on would
    sleep forever (a compose stack on a loaded machine did).  The "asleep" line is logged after that
    comparison (hashing the encoder is its one cost), so from it on the process only sleeps."""
    signature, waited, reported = _signature(path), time.monotonic(), time.monotonic()
    if signature is not None and _sha256(path) != sha256:
        return True
    log.info("waiting, asleep, for the pretraining's final encoder in %s; phase 1 starts again on it", path)
    while True:
        if _said_final(path, sha256):
            log.info("the pretraining ended on the encoder in %s this run started from: it is the final one",
                     path)
            return True
        if stop.wait(poll):
            return False
        now = _signature(path)
        if now is not None and now != signature:
            signature = now
            if _sha256(path) != sha256:
                return True
        if time.monotonic() - reported >= report_every:
            log.info("waiting for the pretraining's final encoder in %s (%.0f s so far)", path,
                     time.monotonic() - waited)
            reported = time.monotonic()


def next_encoder(encoder: Path, model_dir: ModelDir, stop, result) -> int:
    """A run that ended for ``--follow-encoder``: ``RESTART`` once a newer encoder is there
    (after a preview, the wait for it is asleep); a signal while waiting exits as a signal does."""
    log.info("stopped at step %d (from %d) after %s", result.final_step, result.start_step, result.stopped_by)
    if result.stopped_by == PREVIEW_DONE:
        started_from = (model_dir.encoder_init() or {}).get("sha256", "")
        if not (stop.resume() and wait_for_newer(encoder, started_from, stop)):
            code = stop.exit_code(finished=False)
            log.info("stopped (%s) while waiting for the final encoder: exit %d", stop.reason, code)
            return code
    log.info("starting again on the final encoder")
    return RESTART


def restart() -> int:
    """Run this same command again in this process (``exec``): the new run starts on the new
    encoder.  Returns ``RESTART`` only if the exec fails — a supervisor restarts on that code."""
    logging.shutdown()  # every record written before the image is replaced
    for stream in (sys.stdout, sys.stderr):
        stream.flush()
    argv = sys.orig_argv
    try:
        os.execv(sys.executable, [sys.executable, *argv[1:]])
    except OSError as exc:
        log.error("cannot start again (%s): exit %d; start the trainer again, it takes up the new encoder",
                  exc, RESTART)
    return RESTART
