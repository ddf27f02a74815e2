"""TensorBoard summaries of evaluations under ``<work-dir>/eval``.

Never inside the model dir (which may be read-only, and belongs to the trainer); point
TensorBoard at the common parent, e.g. ``--logdir runs/demo``, to see train and eval
curves side by side.
"""

from __future__ import annotations

import tensorflow as tf

from showtell.evaluator.store import Record


class EvalSummaries:
    def __init__(self, logdir: str) -> None:
        self.logdir = logdir
        self.writer = tf.summary.create_file_writer(logdir)

    def write(self, record: Record) -> None:
        with self.writer.as_default(step=record.step):
            for name, value in record.metrics.items():
                tf.summary.scalar(name, value)
            if record.samples:
                lines = [f"| {s['caption']} | {' / '.join(s['references'])} |" for s in record.samples]
                tf.summary.text("samples", "\n".join(["| caption | references |", "|---|---|", *lines]))
        self.writer.flush()

    def close(self) -> None:
        self.writer.close()
