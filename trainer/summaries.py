"""TensorBoard summaries under ``<model_dir>/train`` (chief only; other tasks write none)."""

from __future__ import annotations

from pathlib import Path

import tensorflow as tf

from showtell.captioning.model.network import ShowAndTell


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

    def histograms(self, step: int, model: ShowAndTell) -> None:
        """Weights of the decoder and image embedding (Inception's 376 would drown them)."""
        if self.writer is None:
            return
        with self.writer.as_default(step=step):
            for variable in model.decoder_weights:
                tf.summary.histogram(variable.path.removeprefix(model.name + "/"), variable.value)

    def close(self) -> None:
        if self.writer is not None:
            self.writer.close()
