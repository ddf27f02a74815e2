"""Validation of a model: loss/perplexity over every caption, and generated captions.

Used by the evaluator (service and ``--once``).  One pass over the validation images: each
image is decoded and run through Inception once — or its features are read from the evaluator's
cache, when an earlier checkpoint had the same encoder — and those features feed both the
teacher-forced loss of every one of its captions and the beam search — Inception is nearly all of
an evaluation's cost at 299 px, so it must not run once per caption.  Loss is averaged over
words (not batches) so batch padding and the last short batch do not bias it.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Protocol

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
    timings: Timings | None = None


class Features(Protocol):
    """Where an evaluation's encoder features may come from besides the images: a cache of the
    first ``cached`` images' features for this checkpoint's encoder (``evaluator/scoring/features.py``),
    told of each batch the encoder computes so it can keep them for the next checkpoint."""

    cached: int

    def dataset(self, images: int, batch_size: int) -> tf.data.Dataset: ...

    def add(self, image_ids, features, captions) -> None: ...


def part_images(images: int, shard: tuple[int, int] | None) -> int:
    """How many of a set's first ``images`` part ``shard`` (I, N) holds (all without one)."""
    return len(range(shard[0], images, shard[1])) if shard else images


@dataclass
class Timings:
    """Where a pass's wall time went: waiting for features (reading the cache, or decoding images
    and running the encoder) and the decoder (its loss and beam search)."""

    features: float = 0.0
    decoder: float = 0.0
    images_reused: int = 0
    images_computed: int = 0


class Validator:
    """Loss and captions of one model over a validation split.

    Two ``tf.function``s, each traced once per model and reused for every checkpoint restored into
    it (re-tracing Inception costs ≈10 s per evaluation): the encoder (images → pooled features)
    and the decoder (features → the captions' loss and the beam search).  Split there because the
    features may come from a cache instead (``Features``): while checkpoints share an encoder, its
    output for an image does not change.  Their signatures are the input pipeline's own, batch
    dimension unknown: a short last batch would otherwise trace it all a second time.
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
        self._table = None if id_map is None else tf.constant(list(id_map), tf.int64)

        def encode(images):
            return model.features(images, training=False)

        @tf.function(jit_compile=jit_compile, autograph=False)
        def decode(features, owner, input_ids, target_ids, mask):
            """Per image of the batch: its captions' summed loss and words; and its caption."""
            embedding = model.embed(features, training=False)
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

        def decode_batch(features, captions):
            pairs = inputs.teacher_forcing(captions)
            loss_sum, count, best = decode(features, pairs["owner"], pairs["input_ids"], pairs["target_ids"],
                                           pairs["mask"])
            return loss_sum, count, tf.shape(pairs["owner"])[0], best

        size = model.config.image_size
        self._encode = tf.function(encode, jit_compile=jit_compile, autograph=False,
                                   input_signature=[tf.TensorSpec([None, size, size, 3], tf.float32)])
        self._decode_fn = decode_batch
        self._decode: tf.types.experimental.PolymorphicFunction | None = None

    def _batches(self, cap: int | None, features: Features | None, timings: Timings,
                 set_images: int | None = None, shard: tuple[int, int] | None = None) -> Iterator[dict]:
        """The pass's batches, each with its ``features``: first the cached images', then the rest
        from the images (the encoder run on them, and ``features`` told of each batch).  ``cap``
        counts this part's images; ``set_images`` the set's, which a shard's part is taken from."""
        cached = features.cached if features is not None else 0
        cached = min(cached, cap) if cap else cached
        if cached:
            for batch in inputs.checked(features.dataset(cached, self.batch_size), self.files):
                timings.images_reused += int(batch["image_id"].shape[0])
                yield batch
        if cap and cached >= cap:
            return
        ds = inputs.eval_images(self.files, self.model.config.image_size, self.batch_size,
                                max_images=cap - cached if cap else None, skip=cached, shard=shard,
                                set_images=set_images)
        for batch in inputs.checked(ds, self.files):
            batch["features"] = self._encode(batch.pop("image"))  # (timed by the caller's wait)
            timings.images_computed += int(batch["image_id"].shape[0])
            if features is not None:
                features.add(batch["image_id"].numpy(), batch["features"].numpy(),
                             batch["captions"].to_list())
            yield batch

    def run(self, progress: Callable[[int, int], None] | None = None, split_images: int = 0,
            max_images: int | None = None, limit: Callable[[float | None], int] | None = None,
            features: Features | None = None, shard: tuple[int, int] | None = None) -> Validation:
        """One pass: every image encoded once (or its features read from ``features``), every caption
        scored, every image captioned.

        ``progress(done, total)`` after each batch, ``total`` from ``split_images`` (the
        manifest's count) and the cap — the records themselves are not counted ahead.
        ``max_images`` overrides ``max_examples``.  ``limit(rate)`` decides the cap from this
        pass's own rate (images/s of the batches after the first, which also traced or
        restored; None if there was only one batch): the pass stops at the images it returns.
        ``shard`` (I, N): only part I of N of those images, positions I, I + N … (``part_images``).
        """
        cap = max_images if max_images is not None else self.max_examples
        expected = part_images(min(split_images, cap) if cap else split_images, shard)
        set_images, cap = cap, part_images(cap, shard) if cap else cap
        if shard and limit is not None:
            raise ValueError("a part of a sharded evaluation has a fixed size: no limit")
        if set_images and not cap:  # a part holding none of the set's first images
            return Validation(loss=LossResult(0.0, 1.0, 0, 0), captions={}, images=0, timings=Timings())
        total, words, examples, unknown, images = 0.0, 0.0, 0, 0, 0
        captions: dict[int, str] = {}
        image_losses: dict[int, tuple[float, float]] = {}
        first: tuple[float, int] | None = None  # (when the first batch was done, its images)
        timings = Timings()
        batches = self._batches(cap, features, timings, set_images, shard)
        while True:
            waited = time.monotonic()
            batch = next(batches, None)
            timings.features += time.monotonic() - waited
            if batch is None:
                break
            started = time.monotonic()
            batch_captions = batch["captions"]
            if self._table is not None:
                batch_captions, lost = inputs.remap_captions(batch_captions, self._table)
                unknown += int(lost)
            if self._decode is None:
                self._decode = tf.function(self._decode_fn, autograph=False, input_signature=[
                    tf.TensorSpec([None, batch["features"].shape[-1]], tf.float32),
                    tf.RaggedTensorSpec([None, None, None], batch_captions.dtype, ragged_rank=2,
                                        row_splits_dtype=batch_captions.row_splits.dtype)])
            loss_sums, counts, scored, best = self._decode(batch["features"], batch_captions)
            loss_sums, counts = loss_sums.numpy().astype(float), counts.numpy().astype(float)
            total += float(loss_sums.sum())
            words += float(counts.sum())
            examples += int(scored)
            images += int(batch["image_id"].shape[0])
            for image_id, ids, loss_sum, count in zip(batch["image_id"].numpy(), best.numpy(), loss_sums,
                                                      counts, strict=True):
                captions[int(image_id)] = self.vocab.decode(ids)
                image_losses[int(image_id)] = (float(loss_sum), float(count))
            timings.decoder += time.monotonic() - started
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
        batches.close()
        if limit is not None:  # one batch: nothing to time
            limit(None)
        loss = total / max(words, 1.0)
        result = LossResult(loss=loss, perplexity=math.exp(min(loss, 50.0)), examples=examples,
                            words=int(words), unknown_words=unknown)
        return Validation(loss=result, captions=captions, images=images, image_losses=image_losses,
                          timings=timings)
