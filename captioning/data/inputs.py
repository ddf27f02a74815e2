"""``tf.data`` input pipelines: training batches, and validation images with all their captions.

Everything runs inside TensorFlow (no Python feeding): shards are read in parallel and
interleaved, records (one per image) shuffled, parsed, decoded and augmented in parallel,
captions padded per batch (dynamic padding: a batch is as long as its longest caption), then
prefetched.  Training shows each image once per pass with one of its captions, in turn
(``records.caption_for_visit``); evaluation decodes each image once and scores every caption.

Errors from a corrupt shard or undecodable image surface from the iterator as
TensorFlow's anonymous ``DataLossError``/``InvalidArgumentError``; ``checked`` turns them
into a ``DataError`` naming the shard and record.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sequence

import tensorflow as tf

from showtell.captioning.config import InputConfig
from showtell.captioning.data.records import caption_for_visit, find_bad_record, parse_example
from showtell.captioning.data.vocab import UNKNOWN_ID, Vocabulary
from showtell.common.errors import DataError

AUTOTUNE = tf.data.AUTOTUNE
# tf.data converts a mapped function with AutoGraph unless told not to; ours are graph code as
# written (CONTRIBUTING: traced code), and converting them cost every process ≈ 0.2 CPU-s.
graph_fn = tf.autograph.experimental.do_not_convert


def one_pass(ds: tf.data.Dataset) -> tf.data.Dataset:
    """``ds`` without tf.data's autotuning thread, for a pass that ends (an evaluation, a cache
    build): releasing the pass's iterator joins that thread, which sleeps on a timer that doubles
    to tens of seconds (gdb: ``RootDataset::Iterator::~Iterator`` waiting on the thread in
    ``model::Model::OptimizeLoop``'s ``CondVar`` wait): evaluations of 128 images took 41.8 s in
    3 rounds of 5 and 23.7 s in the others, at the same CPU-s.  ``AUTOTUNE`` values then stay at
    tf.data's untuned defaults: evaluations measured so run every round at the same rate
    (BENCHMARKS, "The evaluator")."""
    options = tf.data.Options()
    options.autotune.enabled = False
    return ds.with_options(options)


def decode_image(image_data: tf.Tensor) -> tf.Tensor:
    """Encoded JPEG/PNG → float32 RGB in [0, 1]."""
    image = tf.io.decode_image(image_data, channels=3, expand_animations=False)
    return tf.image.convert_image_dtype(image, tf.float32)


def preprocess_image(
    image: tf.Tensor, image_size: int, training: bool, config: InputConfig, seed: tf.Tensor | None = None
) -> tf.Tensor:
    """Resize (and on train, scale-jitter, crop and photometric noise), scale to [-1, 1].

    Evaluation resizes the whole image to ``image_size`` — scale 1.0, the low end of the
    training jitter — so nothing a caption mentions is cropped away.  Augmentation draws from
    ``seed`` (shape [2]) when given — the feature cache's reproducible variants — else from a
    fresh random seed per image.
    """
    if training and config.augment:
        if seed is None:
            seed = tf.random.uniform([2], maxval=2**31 - 1, dtype=tf.int64)
        image = _augment(image, image_size, config, seed)
    else:
        image = tf.image.resize(image, [image_size, image_size])
    image = tf.ensure_shape(image, [image_size, image_size, 3])
    return image * 2.0 - 1.0  # Inception v3's input range


def _augment(image: tf.Tensor, image_size: int, config: InputConfig, seed: tf.Tensor) -> tf.Tensor:
    seeds = tf.random.experimental.stateless_split(seed, 5)
    scale = tf.random.stateless_uniform([], seeds[0], 1.0, config.crop_scale)
    side = tf.cast(tf.round(scale * image_size), tf.int32)
    image = tf.image.resize(image, tf.stack([side, side]))
    image = tf.image.stateless_random_crop(image, [image_size, image_size, 3], seeds[1])
    if config.brightness_delta:
        image = tf.image.stateless_random_brightness(image, config.brightness_delta, seeds[3])
    low, high = config.contrast_range
    if high > low:
        image = tf.image.stateless_random_contrast(image, low, high, seeds[4])
    return tf.clip_by_value(image, 0.0, 1.0)


def split_caption(caption: tf.Tensor) -> dict[str, tf.Tensor]:
    """``<S> w1 … wn </S>`` → input ``<S> w1 … wn``, target ``w1 … wn </S>``, mask of ones."""
    caption = tf.cast(caption, tf.int32)
    target = caption[1:]
    return {"input_ids": caption[:-1], "target_ids": target, "mask": tf.ones_like(target, tf.float32)}


def _example_fn(image_size: int, config: InputConfig):
    """(visit, serialized image record) → one augmented training example."""

    def fn(visit: tf.Tensor, serialized: tf.Tensor) -> dict[str, tf.Tensor]:
        record = parse_example(serialized)
        image = preprocess_image(decode_image(record["image_data"]), image_size, True, config)
        caption = caption_for_visit(record["captions"], record["image_id"], visit)
        return {"image": image, "image_id": record["image_id"], **split_caption(caption)}

    return fn


def train_dataset(
    files: Sequence[str], image_size: int, config: InputConfig, batch_size: int | None = None
) -> tf.data.Dataset:
    """An endless stream of shuffled, augmented, padded training batches."""
    return train_pipeline(files, _example_fn(image_size, config), config, batch_size)


def train_pipeline(
    files: Sequence[str], example_fn: Callable[[tf.Tensor, tf.Tensor], dict[str, tf.Tensor]],
    config: InputConfig, batch_size: int | None = None,
) -> tf.data.Dataset:
    """Shard order shuffled each pass, shards interleaved, records shuffled, mapped, padded.

    ``example_fn(visit, record)`` gets the number of the pass over the data the record comes
    from (which caption it shows).  Shared by image shards and feature-cache shards: given
    records in the same order per file, both yield the same examples in the same order
    (exactly, with ``config.deterministic``).
    """
    batch_size = batch_size or config.batch_size
    count = len(files)
    ds = tf.data.Dataset.from_tensor_slices(list(files))
    ds = ds.shuffle(count, seed=config.seed, reshuffle_each_iteration=True).repeat().enumerate()
    ds = ds.interleave(
        graph_fn(lambda index, path: tf.data.TFRecordDataset(path).map(
            graph_fn(lambda record: (index // count, record)))),
        cycle_length=min(config.interleave_cycle, len(files)),
        num_parallel_calls=AUTOTUNE,
        deterministic=config.deterministic,
    )
    ds = ds.shuffle(config.shuffle_buffer, seed=config.seed)
    ds = ds.map(graph_fn(example_fn), num_parallel_calls=AUTOTUNE, deterministic=config.deterministic)
    ds = ds.padded_batch(batch_size, drop_remainder=True)
    if config.caption_multiple > 1:
        ds = ds.map(graph_fn(lambda batch: pad_captions(batch, config.caption_multiple)),
                    num_parallel_calls=AUTOTUNE)
    return ds.prefetch(AUTOTUNE)


CAPTION_FIELDS = ("input_ids", "target_ids", "mask")


def pad_captions(batch: dict[str, tf.Tensor], multiple: int) -> dict[str, tf.Tensor]:
    """Pad a batch's captions (ids 0, mask 0: nothing the loss counts) to a multiple of
    ``multiple`` words, so a compiled step meets a few lengths instead of every one."""
    length = tf.shape(batch["input_ids"])[1]
    extra = (multiple - length % multiple) % multiple
    return {key: tf.pad(value, [[0, 0], [0, extra]]) if key in CAPTION_FIELDS else value
            for key, value in batch.items()}


def eval_images(
    files: Sequence[str], image_size: int, batch_size: int, config: InputConfig | None = None,
    max_images: int | None = None, id_map: Sequence[int] | None = None, skip: int = 0,
    shard: tuple[int, int] | None = None, set_images: int | None = None,
) -> tf.data.Dataset:
    """Each validation image once, in file order, batched with all its captions.

    Batches hold ``image`` [B, S, S, 3], ``image_id`` [B] and ``captions``, ragged
    [B, (captions), (words)].  ``id_map`` re-encodes captions into a model's own vocabulary
    (``Vocabulary.id_map``); each batch then counts, in ``unknown``, the reference words that
    became ``<UNK>`` on the way.  ``skip``: start after the first N images (whose features an
    evaluation read from its cache; skipped records are read, not decoded).  ``shard`` (I, N):
    only the images at positions I, I + N, I + 2N … of the set's first ``set_images`` (all when
    None) — one part of an evaluation split across evaluators; ``skip`` and ``max_images`` then
    count the part's images.  Records of other parts are read, not decoded.
    """
    fn_config = config or InputConfig()
    table = None if id_map is None else tf.constant(list(id_map), tf.int64)
    ds = tf.data.TFRecordDataset(list(files))
    if shard is not None:
        if set_images:
            ds = ds.take(set_images)
        ds = ds.shard(shard[1], shard[0])
    if skip:
        ds = ds.skip(skip)
    if max_images:
        ds = ds.take(max_images)

    def example(serialized: tf.Tensor) -> dict[str, tf.Tensor]:
        record = parse_example(serialized)
        captions, extra = record["captions"], {}
        if table is not None:
            captions, extra["unknown"] = remap_captions(captions, table)
        image = preprocess_image(decode_image(record["image_data"]), image_size, False, fn_config)
        return {"image": image, "image_id": record["image_id"], "captions": captions, **extra}

    ds = ds.map(graph_fn(example), num_parallel_calls=AUTOTUNE)
    return one_pass(ds.batch(batch_size).prefetch(AUTOTUNE))


def remap_captions(captions: tf.RaggedTensor, table: tf.Tensor) -> tuple[tf.RaggedTensor, tf.Tensor]:
    """Caption ids re-encoded through ``table`` (``Vocabulary.id_map``), and how many words became
    ``<UNK>`` on the way (any ragged rank: one image's captions or a batch's)."""
    mapped = tf.gather(table, captions.flat_values)
    became_unknown = tf.logical_and(tf.equal(mapped, UNKNOWN_ID),
                                    tf.not_equal(captions.flat_values, UNKNOWN_ID))
    return captions.with_flat_values(mapped), tf.reduce_sum(tf.cast(became_unknown, tf.int32))


def teacher_forcing(captions: tf.RaggedTensor) -> dict[str, tf.Tensor]:
    """Ragged [B, (captions), (words)] → one padded row per caption and the image it belongs to.

    ``owner`` [M] indexes the batch, so an image is encoded once however many captions it has.
    """
    flat = tf.cast(captions.values, tf.int32)  # [M, (words)], <S> … </S>
    inputs, targets = flat[:, :-1], flat[:, 1:]
    return {"owner": tf.cast(captions.value_rowids(), tf.int32), "input_ids": inputs.to_tensor(),
            "target_ids": targets.to_tensor(),
            "mask": tf.ones_like(targets, tf.float32).to_tensor()}


def caption_records(files: Sequence[str]) -> tf.data.Dataset:
    """(image id, ragged caption ids) per record, in file order — no image decoded."""
    return one_pass(tf.data.TFRecordDataset(list(files)).map(graph_fn(parse_example)).map(
        graph_fn(lambda r: (r["image_id"], r["captions"]))))


def load_references(files: Sequence[str], vocab: Vocabulary) -> dict[int, list[str]]:
    """All reference captions per image id, as text, straight from the records."""
    refs: dict[int, list[str]] = {}
    for image_id, captions in checked(caption_records(files), files):
        refs[int(image_id)] = [vocab.decode(c) for c in captions.to_list()]
    return refs


def image_fingerprints(files: Sequence[str]) -> dict[int, bytes]:
    """Each image's encoded bytes, fingerprinted (farmhash64, 8 bytes), by image id: with the
    references, what tells two evaluation sets whose image ids agree apart (an evaluation's set
    fingerprint is built from these)."""
    def fingerprint(record):
        return record["image_id"], tf.fingerprint(record["image_data"][None])[0]

    records = tf.data.TFRecordDataset(list(files)).map(graph_fn(parse_example))
    ds = one_pass(records.map(graph_fn(fingerprint)))
    return {int(image_id): bytes(digest.numpy()) for image_id, digest in checked(ds, files)}


def input_error(exc: tf.errors.OpError, files: Sequence[str]) -> Exception:
    """The clearest error for a failed input pipeline: name the bad shard if one is found."""
    found = find_bad_record(files)
    if found is None:
        return exc
    return DataError(f"{found}; rebuild the dataset or remove that shard")


def checked(dataset: Iterable, files: Sequence[str]) -> Iterator:
    """Iterate ``dataset``; a data error becomes a ``DataError`` naming the file."""
    iterator = iter(dataset)
    while True:
        try:
            element = next(iterator)
        except (StopIteration, tf.errors.OutOfRangeError):
            return
        except (tf.errors.DataLossError, tf.errors.InvalidArgumentError) as exc:
            raise input_error(exc, files) from exc
        yield element
