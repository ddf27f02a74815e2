"""Validation of a model: loss/perplexity over every caption, and generated captions.

Used by the evaluator (service and ``--once``).  One pass over the validation images: each
image is decoded and run through Inception once, and that encoding feeds both the teacher-forced
loss of every one of its captions and the beam search — Inception is nearly all of an
evaluation's cost at 299 px, so it must not run once per caption.  Loss is averaged over
words (not batches) so batch padding and the last short batch do not bias it.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

import tensorflow as tf

from showtell.captioning.data import inputs
from showtell.captioning.data.vocab import Vocabulary
from showtell.captioning.model.inference import beam_search
from showtell.captioning.model.network import ShowAndTell, word_losses


@dataclass(frozen=True)
class LossResult:
    loss: float
    perplexity: float
    examples: int  # captions scored
    words: int
    unknown_words: int = 0  # reference words the model's vocabulary lacks (scored as <UNK>)


@dataclass(frozen=True)
class Validation:
    loss: LossResult
    captions: dict[int, str]  # the best beam-search caption per image id
    images: int
    # per image id: (its captions' summed cross-entropy, their words) — what a bootstrap over images
    # resamples to put an interval on the loss (``evaluator/scoring/bootstrap.py``)
    image_losses: dict[int, tuple[float, float]] = field(default_factory=dict)


class Validator:
    """Loss and captions of one model over a validation split.

    The ``tf.function`` is traced once per model and reused for every checkpoint restored into
    it — re-tracing Inception costs ≈10 s per evaluation.  Its signature is the input pipeline's
    own, batch dimension unknown: a short last batch would otherwise trace it all a second time.
    """

    def __init__(self, model: ShowAndTell, files: Sequence[str], vocab: Vocabulary, batch_size: int = 64,
                 beam_size: int = 3, max_length: int = 20, max_examples: int | None = None,
                 id_map: Sequence[int] | None = None, jit_compile: bool = False) -> None:
        """``vocab`` is the model's own; ``id_map`` re-encodes the records' captions into it when
        the dataset was built with another vocabulary (``Vocabulary.id_map``).  ``max_examples``
        caps the images (each with all its captions).  ``jit_compile``: the encoder, and the
        decoder's loss and beam search, each compiled by XLA (the encoder once per batch shape;
        the decoder once per caption length: XLA needs static shapes, so its loss takes the
        logits at every position, padding masked out)."""
        self.model, self.files, self.vocab = model, list(files), vocab
        self.batch_size, self.max_examples, self.id_map = batch_size, max_examples, id_map

        @tf.function(jit_compile=jit_compile, autograph=False)
        def encode(images):
            return model.encode(images, training=False)

        @tf.function(jit_compile=jit_compile, autograph=False)
        def decode(embedding, owner, input_ids, target_ids, mask):
            """Per image of the batch: its captions' summed loss and words; and its caption."""
            outputs = model.decoder_outputs(tf.gather(embedding, owner), input_ids)
            images = tf.shape(embedding)[0]
            if jit_compile:
                losses = word_losses(model.logits(outputs), target_ids) * mask
                loss_sums = tf.math.unsorted_segment_sum(tf.reduce_sum(losses, 1), owner, images)
                counts = tf.math.unsorted_segment_sum(tf.reduce_sum(mask, 1), owner, images)
            else:
                # Logits only where there is a word: the vocabulary-wide matmul and softmax are
                # most of the loss's cost, and padding to the batch's longest caption would waste
                # a third.
                real = mask > 0
                words = tf.boolean_mask(outputs, real)
                word_owner = tf.boolean_mask(tf.broadcast_to(owner[:, None], tf.shape(mask)), real)
                losses = word_losses(model.logits(words), tf.boolean_mask(target_ids, real))
                loss_sums = tf.math.unsorted_segment_sum(losses, word_owner, images)
                counts = tf.math.unsorted_segment_sum(tf.ones_like(losses), word_owner, images)
            ids, _ = beam_search(model.start_state(embedding), model.step_logits, vocab.start_id,
                                 vocab.end_id, beam_size, max_length)
            return loss_sums, counts, ids[:, 0]

        def evaluate_batch(images, captions):
            embedding = encode(images)
            pairs = inputs.teacher_forcing(captions)
            loss_sum, count, best = decode(embedding, pairs["owner"], pairs["input_ids"], pairs["target_ids"],
                                           pairs["mask"])
            return loss_sum, count, tf.shape(pairs["owner"])[0], best

        self._batch_fn = evaluate_batch
        self._evaluate_batch: tf.types.experimental.PolymorphicFunction | None = None

    def run(self, progress: Callable[[int, int], None] | None = None, split_images: int = 0,
            max_images: int | None = None, limit: Callable[[float | None], int] | None = None) -> Validation:
        """One pass: every image encoded once, every caption scored, every image captioned.

        ``progress(done, total)`` after each batch, ``total`` from ``split_images`` (the
        manifest's count) and the cap — the records themselves are not counted ahead.
        ``max_images`` overrides ``max_examples``.  ``limit(rate)`` decides the cap from this
        pass's own rate (images/s of the batches after the first, which also traced or
        restored; None if there was only one batch): the pass stops at the images it returns.
        """
        cap = max_images if max_images is not None else self.max_examples
        expected = min(split_images, cap) if cap else split_images
        ds = inputs.eval_images(self.files, self.model.config.image_size, self.batch_size,
                                max_images=cap, id_map=self.id_map)
        if self._evaluate_batch is None:
            spec = ds.element_spec
            self._evaluate_batch = tf.function(self._batch_fn, autograph=False,
                                               input_signature=[spec["image"], spec["captions"]])
        total, words, examples, unknown, images = 0.0, 0.0, 0, 0, 0
        captions: dict[int, str] = {}
        image_losses: dict[int, tuple[float, float]] = {}
        first: tuple[float, int] | None = None  # (when the first batch was done, its images)
        for batch in inputs.checked(ds, self.files):
            loss_sums, counts, scored, best = self._evaluate_batch(batch["image"], batch["captions"])
            loss_sums, counts = loss_sums.numpy().astype(float), counts.numpy().astype(float)
            total += float(loss_sums.sum())
            words += float(counts.sum())
            examples += int(scored)
            images += int(batch["image"].shape[0])
            if "unknown" in batch:
                unknown += int(tf.reduce_sum(batch["unknown"]))
            for image_id, ids, loss_sum, count in zip(batch["image_id"].numpy(), best.numpy(), loss_sums,
                                                      counts, strict=True):
                captions[int(image_id)] = self.vocab.decode(ids)
                image_losses[int(image_id)] = (float(loss_sum), float(count))
            if limit is not None:
                now = time.monotonic()
                if first is None:
                    first = (now, images)
                elif now > first[0]:
                    cap, limit = limit((images - first[1]) / (now - first[0])), None
                    expected = min(expected, cap) if expected else cap
            if progress is not None:
                progress(images, max(expected, images))
            if cap and images >= cap:
                break
        if limit is not None:  # one batch: nothing to time
            limit(None)
        loss = total / max(words, 1.0)
        result = LossResult(loss=loss, perplexity=math.exp(min(loss, 50.0)), examples=examples,
                            words=int(words), unknown_words=unknown)
        return Validation(loss=result, captions=captions, images=images, image_losses=image_losses)


def exact_match(predictions: Mapping[int, str], references: Mapping[int, Sequence[str]]) -> float:
    """Share of images whose caption equals one of its references word for word."""
    if not predictions:
        return 0.0
    hits = sum(1 for image_id, caption in predictions.items() if caption in references.get(image_id, ()))
    return hits / len(predictions)
