"""The settings both services and the data builders share: model shape, input pipeline, feature
cache, the dataset builders' — and the pretrained encoder's file conventions.

Defaults follow im2txt (Show and Tell, Vinyals et al. 2016) so that a run on MSCOCO behaves
like the paper's.  A field written with ``option(default, help, …)`` is also a command-line
flag: the commands derive their flags (name, type, default, help) from these classes and
build the configs back from them, so a new option is written once, here.
The trainer's own sections (optimizer, schedule, compute) live in ``showtell.trainer.config``,
the evaluator's in ``showtell.evaluator.config``.
Sizes that change a checkpoint's variables live in ``ModelConfig`` and are recorded in the
model directory, so a restart with a different shape is refused instead of half-restored.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from showtell.common.files import sha256_of
from showtell.common.options import (
    boolean,
    fraction,
    option,
    positive_float,
    positive_int,
)

MIN_IMAGE_SIZE = 75  # Inception v3's smallest valid input (74 fails in keras.applications).
WEIGHTS_NONE, WEIGHTS_IMAGENET = "none", "imagenet"  # the two non-file --inception-weights sources


def pretrain_state(weights: Path) -> Path:
    """Where ``showtell pretrain`` keeps what it resumes from, beside the weights file it writes:
    ``encoder.weights.h5`` → ``encoder.pretrain/`` (its checkpoint and ``progress.json``)."""
    return weights.with_name(weights.name[:-len(".weights.h5")] + ".pretrain")


PRETRAIN_PROGRESS = "progress.json"


def pretrain_progress(state: Path) -> dict | None:
    """A pretraining state's ``progress.json`` (None: none, or unreadable): the step and held-out
    accuracy its checkpoint holds, and ``encoder`` — the step, sha256 and finality (``final``
    false: a first encoder, the pretraining goes on) of the weights file it wrote last."""
    try:
        progress = json.loads((state / PRETRAIN_PROGRESS).read_text())
    except (OSError, ValueError):
        return None
    return progress if isinstance(progress, dict) else None


def pretrained_encoder(weights: Path, sha256: str | None = None) -> dict | None:
    """What the pretraining says of the encoder in ``weights`` — ``{"step", "final", "sha256"}`` —
    when the file holds the bytes it describes; None when no pretraining wrote it (a file from
    elsewhere) or the record is of other bytes (the file replaced since, or being replaced)."""
    record = (pretrain_progress(pretrain_state(weights)) or {}).get("encoder")
    if not isinstance(record, dict) or not weights.is_file():
        return None
    return record if record.get("sha256") == (sha256 or sha256_of([weights])) else None


def pretraining_done(weights: Path) -> bool:
    """Whether ``weights`` holds a finished pretraining's encoder, or a file no pretraining of ours
    is writing (nothing to go on with).  A first encoder, or a record of other bytes (a pretraining
    stopped between writing the file and its record), is not done."""
    if not weights.is_file():
        return False
    progress = pretrain_progress(pretrain_state(weights)) or {}
    if "encoder" not in progress:
        return True
    record = pretrained_encoder(weights)
    return bool(record and record.get("final"))


@dataclass(frozen=True)
class ModelConfig:
    """Shape and regularisation of the Show-and-Tell network."""

    vocab_size: int = 12000
    image_size: int = 299
    embedding_size: int = option(512, "word and image embedding size", type=positive_int)
    lstm_units: int = option(512, "LSTM state size", type=positive_int)
    init_scale: float = 0.08  # uniform(-s, s) for every non-Inception variable, as im2txt.
    image_dropout: float = option(0.2, "dropout on Inception's pooled output (im2txt keep 0.8)",
                                  type=fraction)
    lstm_dropout: float = option(0.3, "dropout on LSTM input and output (im2txt keep 0.7)", type=fraction)
    # Phase 2 (fine-tuning) when true.  The trainer defaults it from the encoder's origin:
    # frozen (phase 1) when it starts from pretrained weights, trained from scratch otherwise.
    train_inception: bool = True
    # Batch-norm moving-average momentum for Inception.  Keras' 0.99 (im2txt: 0.9997) suits a
    # pretrained encoder; trained from scratch its weights move so fast that 0.99-averaged
    # statistics lag far behind and inference-mode features collapse (measured: chance-level
    # probe accuracy at 0.99 where 0.9 tracks training mode).  Ignored while frozen.
    bn_momentum: float = option(0.9, "Inception batch-norm moving-average momentum", type=positive_float)

    def shape_fields(self) -> dict[str, int]:
        """The fields that decide variable shapes; a checkpoint must agree on all of them."""
        return {
            "vocab_size": self.vocab_size,
            "image_size": self.image_size,
            "embedding_size": self.embedding_size,
            "lstm_units": self.lstm_units,
        }


@dataclass(frozen=True)
class InputConfig:
    """tf.data reading and augmentation.

    Augmentation must keep captions true: no left/right flip (it turns "left of" into a lie),
    no hue change (it renames colours).  Scale-jittered crops and small brightness/contrast
    changes keep every word of a caption valid.
    """

    batch_size: int = option(32, "examples per step and replica", type=positive_int, shown=True)
    shuffle_buffer: int = option(2048, "examples shuffled together", type=positive_int)
    interleave_cycle: int = 4
    crop_scale: float = 1.125  # resize to up to this × image_size, then crop back randomly.
    brightness_delta: float = 0.1
    contrast_range: tuple[float, float] = (0.9, 1.1)
    augment: bool = option(True, "scale-jitter crops and photometric noise on training images",
                           type=boolean)
    # Reproducible element order (tf.data ``deterministic``) at some throughput cost; lets two
    # runs — e.g. with and without the feature cache — be compared step by step.
    deterministic: bool = option(False, "reproducible example order (slower input); to compare runs step by "
                                 "step", flag="--deterministic-input", action="store_true")
    seed: int | None = None  # the trainer passes TrainConfig.seed
    # Captions padded to a multiple of this many words (1: to the batch's longest).  The trainer
    # sets it under --jit-compile: XLA compiles once per shape, and a batch as long as its longest
    # caption has a new shape for every length (COCO: dozens of compilations, seconds each).
    caption_multiple: int = 1


@dataclass(frozen=True)
class CacheConfig:
    """The phase-1 feature cache: pooled encoder outputs computed once per image and variant.

    Variant 0 is the image as evaluation sees it (resized whole); variants 1…K-1 are augmented
    crops drawn once, from seeds derived from (image id, variant), so a cache is reproducible.
    Training picks one variant per image per visit.
    """

    enabled: bool = option(True, "while the encoder is frozen, compute its features once per image and "
                                 "train from them", flag="--feature-cache", type=boolean)
    variants: int = option(1, "cached views per image: the plain one + K-1 augmented crops",
                           flag="--cache-variants", type=positive_int)
    root: str | None = option(None, "where feature caches live (default <data>/feature-cache)",
                              flag="--cache-dir")
    batch_size: int = 32  # encoder forward batch (images × variants) while building




@dataclass(frozen=True)
class SyntheticConfig:
    """The embedded default dataset: procedurally drawn shape scenes."""

    train_images: int = 4000
    val_images: int = 200
    image_size: int = 75
    seed: int = 0
    train_shards: int = 8
    val_shards: int = 1


@dataclass(frozen=True)
class CocoConfig:
    """``showtell data coco``: MSCOCO captions + images → shards (im2txt's shard counts)."""

    captions: tuple = ()  # captions_train2014.json, captions_val2014.json, …
    images: tuple = ()  # directories searched for each file_name, in order
    min_word_count: int = 4
    train_shards: int = 256
    val_shards: int = 4
    test_shards: int = 8
    workers: int = 4  # image reading / validation threads
    split: str = "im2txt"  # im2txt | karpathy
    karpathy_json: str | None = None
    # A model's vocabulary (its vocab.txt, or im2txt's word_counts.txt) to build in, instead of one
    # from the training captions: data to continue training that model.
    vocab: str | None = None
