"""TensorBoard summaries under ``<model_dir>/train`` (chief only; other tasks write none)."""

from __future__ import annotations

from pathlib import Path

import tensorflow as tf


class TrainSummaries:
    def __init__(self, model_dir: Path | None) -> None:
        """``model_dir`` None: write nothing (a non-chief task)."""
        self.writer = tf.summary.create_file_writer(str(model_dir / "train")) if model_dir else None

    def scalars(self, step: int, values: dict[str, float]) -> None:
        if self.writer is None:
            return
        with self.writer.as_default(step=step):
            for name, value in values.items():
                tf.summary.scalar(name, value)

    def histograms(self, step: int, variables: list, prefix: str) -> None:
        """A histogram of each variable, named by its path less ``prefix`` (the model's name)."""
        if self.writer is None:
            return
        with self.writer.as_default(step=step):
            for variable in variables:
                tf.summary.histogram(variable.path.removeprefix(prefix), variable.value)

    def close(self) -> None:
        if self.writer is not None:
            self.writer.close()
