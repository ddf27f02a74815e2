"""Validation of a model: loss/perplexity over every caption, and generated captions.

Used by the evaluator (service and ``--once``).  Loss is averaged over
words (not batches) so batch padding and the last short batch do not bias it.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import tensorflow as tf

from showtell.captioning.data import inputs
from showtell.captioning.data.vocab import Vocabulary
from showtell.captioning.model.inference import caption_images
from showtell.captioning.model.network import ShowAndTell, masked_loss_sum


@dataclass(frozen=True)
class LossResult:
    loss: float
    perplexity: float
    examples: int
    words: int
    unknown_words: int = 0  # reference words the model's vocabulary lacks (scored as <UNK>)


class Validator:
    """Loss and captions of one model over a validation split.

    The ``tf.function``s are traced once per model and reused for every checkpoint
    restored into it — re-tracing Inception costs ≈10 s per evaluation.
    """

    def __init__(self, model: ShowAndTell, files: Sequence[str], vocab: Vocabulary, batch_size: int = 64,
                 beam_size: int = 3, max_length: int = 20, max_examples: int | None = None,
                 id_map: Sequence[int] | None = None) -> None:
        """``vocab`` is the model's own; ``id_map`` re-encodes the records' captions into it when
        the dataset was built with another vocabulary (``Vocabulary.id_map``)."""
        self.model, self.files, self.vocab = model, list(files), vocab
        self.batch_size, self.max_examples, self.id_map = batch_size, max_examples, id_map

        @tf.function(reduce_retracing=True)
        def batch_loss(batch):
            logits = model((batch["image"], batch["input_ids"]), training=False)
            return masked_loss_sum(logits, batch["target_ids"], batch["mask"])

        @tf.function(reduce_retracing=True)
        def decode(images):
            return caption_images(model, images, vocab.start_id, vocab.end_id, beam_size, max_length)

        self._batch_loss, self._decode = batch_loss, decode

    def loss(self) -> LossResult:
        """Mean per-word cross-entropy (and its exp) over the validation records."""
        ds = inputs.eval_dataset(self.files, self.model.config.image_size, self.batch_size,
                                 max_examples=self.max_examples, id_map=self.id_map)
        total, words, examples, unknown = 0.0, 0.0, 0, 0
        for batch in inputs.checked(ds, self.files):
            loss_sum, count = self._batch_loss(batch)
            total += float(loss_sum)
            words += float(count)
            examples += int(batch["image"].shape[0])
            if "unknown" in batch:
                unknown += int(tf.reduce_sum(batch["unknown"]))
        loss = total / max(words, 1.0)
        return LossResult(loss=loss, perplexity=math.exp(min(loss, 50.0)), examples=examples,
                          words=int(words), unknown_words=unknown)

    def captions(self) -> dict[int, str]:
        """The best beam-search caption for every validation image, by image id."""
        ds = inputs.eval_images(self.files, self.model.config.image_size, self.batch_size,
                                max_images=self.max_examples)
        captions: dict[int, str] = {}
        for batch in inputs.checked(ds, self.files):
            ids, _ = self._decode(batch["image"])
            for image_id, best in zip(batch["image_id"].numpy(), ids[:, 0].numpy(), strict=True):
                captions[int(image_id)] = self.vocab.decode(best)
        return captions


def exact_match(predictions: Mapping[int, str], references: Mapping[int, Sequence[str]]) -> float:
    """Share of images whose caption equals one of its references word for word."""
    if not predictions:
        return 0.0
    hits = sum(1 for image_id, caption in predictions.items() if caption in references.get(image_id, ()))
    return hits / len(predictions)
