"""TensorBoard summaries of evaluations under ``<work-dir>/eval/<run id>``.

One run directory per training run: TensorBoard keeps the first HParams session it reads per run
directory, so runs sharing one directory showed one session over all their scalars mixed.  Never
inside the model dir (which may be read-only, and belongs to the trainer); point TensorBoard at
the common parent, e.g. ``--logdir runs/demo``, to see train and eval curves side by side.
Besides the scalars and a text table, each shown sample is an image (``samples/image_<id>``): the
validation picture with the caption the checkpoint gave it and a reference, so a person sees what
the model says about what picture.
"""

from __future__ import annotations

import hashlib
import logging
import os
import re
from collections import OrderedDict
from collections.abc import Sequence
from typing import Any

import numpy as np
import tensorflow as tf

from showtell.api.contract import DEFAULT_SET
from showtell.evaluator.records import sample_images
from showtell.evaluator.records.record import Record

log = logging.getLogger(__name__)

_SAFE = re.compile(r"[A-Za-z0-9._-]{1,128}")  # a run id as a directory name; others hashed


class EvalSummaries:
    OPEN_WRITERS = 4  # runs written to at once (a demo's preview and final run); older ones closed

    def __init__(self, logdir: str, val_files: Sequence[str] = ()) -> None:
        """``val_files``: the validation shards the samples' pictures are read from (none: no images)."""
        self.logdir = logdir
        self._writers: OrderedDict[str, Any] = OrderedDict()
        self.val_files = list(val_files)
        self._images: dict[int, np.ndarray] = {}

    def run_dir(self, run: str) -> str:
        """``<logdir>/<run id>``; a checkpoint of no recorded run goes to ``unrecorded``."""
        name = run if run and _SAFE.fullmatch(run) and run not in (".", "..") else (
            f"run-{hashlib.sha256(run.encode()).hexdigest()[:12]}" if run else "unrecorded")
        return os.path.join(self.logdir, name)

    def writer(self, run: str):
        """The run's summary writer, opened on first use (an event file stays one run's)."""
        if run in self._writers:
            self._writers.move_to_end(run)
            return self._writers[run]
        while len(self._writers) >= self.OPEN_WRITERS:
            self._writers.popitem(last=False)[1].close()
        self._writers[run] = writer = tf.summary.create_file_writer(self.run_dir(run))
        return writer

    def _pictures(self, image_ids: list[int]) -> dict[int, np.ndarray]:
        missing = [i for i in image_ids if i not in self._images]
        if missing and self.val_files:
            try:
                self._images.update(sample_images.read_images(self.val_files, missing))
            except tf.errors.OpError as exc:  # the scores stand; only the pictures are lost
                log.warning("sample images not written: cannot read %s (%s)", self.val_files[0],
                            exc.message.splitlines()[0])
                self.val_files = []
        return self._images

    def write(self, record: Record) -> None:
        writer = self.writer(record.run)
        # the default set's tags are the metrics' names; another set's are under its name
        prefix = "" if record.eval_set == DEFAULT_SET else f"{record.eval_set}/"
        with writer.as_default(step=record.step):
            for name, value in record.metrics.items():
                tf.summary.scalar(prefix + name, value)
            for name, (lower, upper) in record.intervals.items():  # the interval, in the metric's group
                tf.summary.scalar(f"{prefix}{name}/lower", lower)
                tf.summary.scalar(f"{prefix}{name}/upper", upper)
            if prefix:  # pictures and samples: the default set's
                writer.flush()
                return
            if record.scoring:  # which tokenizer and scorers: PTB scores compare with published ones
                tf.summary.text("scoring", record.scoring)
            if record.samples:
                lines = [f"| {s['caption']} | {' / '.join(s['references'])} |" for s in record.samples]
                tf.summary.text("samples", "\n".join(["| caption | references |", "|---|---|", *lines]))
                pictures = self._pictures([s["image_id"] for s in record.samples])
                for s in record.samples:
                    if s["image_id"] in pictures:
                        panel = sample_images.render(pictures[s["image_id"]], s["caption"],
                                                     (s["references"] or [""])[0])
                        tf.summary.image(f"samples/image_{s['image_id']}", panel[None],
                                         description=f"model: {s['caption']}")
        writer.flush()

    def hparams(self, run_id: str, values: dict[str, bool | int | float | str]) -> None:
        """The run's training settings as a TensorBoard HParams session in its run directory: the
        HParams tab then shows one row per run, its metrics the evaluations written beside it."""
        from tensorboard.plugins.hparams import api as hp

        writer = self.writer(run_id)
        with writer.as_default():
            hp.hparams(values, trial_id=run_id)
        writer.flush()

    def close(self) -> None:
        while self._writers:
            self._writers.popitem()[1].close()
