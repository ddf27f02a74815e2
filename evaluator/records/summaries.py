"""TensorBoard summaries of evaluations under ``<work-dir>/eval``.

Never inside the model dir (which may be read-only, and belongs to the trainer); point
TensorBoard at the common parent, e.g. ``--logdir runs/demo``, to see train and eval
curves side by side.  Besides the scalars and a text table, each shown sample is an image
(``samples/image_<id>``): the validation picture with the caption the checkpoint gave it and a
reference, so a person sees what the model says about what picture.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

import numpy as np
import tensorflow as tf

from showtell.evaluator.records import sample_images
from showtell.evaluator.records.store import Record

log = logging.getLogger(__name__)


class EvalSummaries:
    def __init__(self, logdir: str, val_files: Sequence[str] = ()) -> None:
        """``val_files``: the validation shards the samples' pictures are read from (none: no images)."""
        self.logdir = logdir
        self.writer = tf.summary.create_file_writer(logdir)
        self.val_files = list(val_files)
        self._images: dict[int, np.ndarray] = {}

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
        with self.writer.as_default(step=record.step):
            for name, value in record.metrics.items():
                tf.summary.scalar(name, value)
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
        self.writer.flush()

    def hparams(self, run_id: str, values: dict[str, bool | int | float | str]) -> None:
        """The run's configuration as a TensorBoard HParams session in this logdir: the HParams
        tab then shows it beside the metrics written here (the evaluator's are its metrics)."""
        from tensorboard.plugins.hparams import api as hp

        with self.writer.as_default():
            hp.hparams(values, trial_id=run_id)
        self.writer.flush()

    def close(self) -> None:
        self.writer.close()
