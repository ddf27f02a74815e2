"""TensorBoard summaries under ``<model_dir>/train``."""

from __future__ import annotations

from pathlib import Path

import tensorflow as tf
from showtell.captioning.model.network import ShowAndTell


class TrainSummaries:
    def __init__(self, model_dir: Path) -> None:
        self.writer = tf.summary.create_file_writer(str(model_dir / "train"))

    def scalars(self, step: int, values: dict[str, float]) -> None:
        with self.writer.as_default(step=step):
            for name, value in values.items():
                tf.summary.scalar(name, value)

    def histograms(self, step: int, model: ShowAndTell) -> None:
        """Weights of the decoder and image embedding (Inception's 376 would drown them)."""
        with self.writer.as_default(step=step):
            for variable in model.decoder_weights:
                tf.summary.histogram(variable.path.removeprefix(model.name + "/"), variable.value)

    def flush(self) -> None:
        self.writer.flush()

    def close(self) -> None:
        self.writer.close()


class NoSummaries(TrainSummaries):
    """What a non-chief task writes: nothing (only the chief writes summaries)."""

    def __init__(self) -> None:
        pass

    def scalars(self, step: int, values: dict[str, float]) -> None:
        pass

    def histograms(self, step: int, model: ShowAndTell) -> None:
        pass

    def flush(self) -> None:
        pass

    def close(self) -> None:
        pass
