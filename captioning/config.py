"""Configuration dataclasses: the one home for every default.

Defaults follow im2txt (Show and Tell, Vinyals et al. 2016) so that a run on MSCOCO behaves
like the paper's; command-line flags override single fields with ``dataclasses.replace``.
Sizes that change a checkpoint's variables live in ``ModelConfig`` and are recorded in the
model directory, so a restart with a different shape is refused instead of half-restored.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

MIN_IMAGE_SIZE = 75  # Inception v3's smallest valid input (74 fails in keras.applications).
WEIGHTS_NONE, WEIGHTS_IMAGENET = "none", "imagenet"  # the two non-file --inception-weights sources


@dataclass(frozen=True)
class ModelConfig:
    """Shape and regularisation of the Show-and-Tell network."""

    vocab_size: int = 12000
    image_size: int = 299
    embedding_size: int = 512
    lstm_units: int = 512
    init_scale: float = 0.08  # uniform(-s, s) for every non-Inception variable, as im2txt.
    image_dropout: float = 0.2  # Inception's own dropout (im2txt keep_prob 0.8).
    lstm_dropout: float = 0.3  # on LSTM input and output (im2txt keep_prob 0.7).
    # Phase 2 (fine-tuning) when true.  The trainer defaults it from the encoder's origin:
    # frozen (phase 1) when it starts from pretrained weights, trained from scratch otherwise.
    train_inception: bool = True
    # Batch-norm moving-average momentum for Inception.  Keras' 0.99 (im2txt: 0.9997) suits a
    # pretrained encoder; trained from scratch its weights move so fast that 0.99-averaged
    # statistics lag far behind and inference-mode features collapse (measured: chance-level
    # probe accuracy at 0.99 where 0.9 tracks training mode).  Ignored while frozen.
    bn_momentum: float = 0.9

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

    batch_size: int = 32
    shuffle_buffer: int = 2048
    interleave_cycle: int = 4
    crop_scale: float = 1.125  # resize to up to this × image_size, then crop back randomly.
    brightness_delta: float = 0.1
    contrast_range: tuple[float, float] = (0.9, 1.1)
    flip: bool = False
    augment: bool = True  # false: training images are resized like evaluation images
    # Reproducible element order (tf.data ``deterministic``) at some throughput cost; lets two
    # runs — e.g. with and without the feature cache — be compared step by step.
    deterministic: bool = False
    seed: int | None = None


OPTIMIZERS = ("sgd", "momentum", "adam")


@dataclass(frozen=True)
class OptimizerConfig:
    """im2txt's training schedule: SGD 2.0, halved every 8 epochs, global-norm clip 5.0."""

    name: str = "sgd"  # sgd | momentum | adam
    learning_rate: float = 2.0
    decay_factor: float = 0.5
    epochs_per_decay: float = 8.0
    clip_gradients: float = 5.0
    # The encoder's own (constant) rate while it trains.  None: IM2TXT_INCEPTION_LEARNING_RATE
    # for a pretrained encoder; an encoder trained from scratch follows the decoder's schedule.
    inception_learning_rate: float | None = None


IM2TXT_INCEPTION_LEARNING_RATE = 0.0005


@dataclass(frozen=True)
class CacheConfig:
    """The phase-1 feature cache: pooled encoder outputs computed once per image and variant.

    Variant 0 is the image as evaluation sees it (resized whole); variants 1…K-1 are augmented
    crops drawn once, from seeds derived from (image id, variant), so a cache is reproducible.
    Training picks one variant per image per visit.
    """

    enabled: bool = True  # used whenever the encoder is frozen; never while it trains
    variants: int = 1
    root: str | None = None  # default: <data dir>/feature-cache
    batch_size: int = 32  # encoder forward batch (images × variants) while building


@dataclass(frozen=True)
class TrainConfig:
    """How long to train and when to checkpoint and log."""

    steps: int = 1_000_000  # a total: training stops when the global step reaches it.
    max_seconds: float | None = None  # wall-clock bound for this run (demo, smoke tests).
    save_every_secs: float | None = 600.0
    save_every_steps: int | None = None
    keep: int = 5
    log_every_steps: int = 100
    histogram_every_steps: int = 1000
    seed: int = 0


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


def replace_some(config, **overrides):
    """``dataclasses.replace`` that ignores ``None`` overrides (flags the user left unset)."""
    return dataclasses.replace(config, **{k: v for k, v in overrides.items() if v is not None})
