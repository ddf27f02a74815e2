"""Transfer learning policy: which phase a run is in, and the encoder's learning rate.

Show and Tell trains in two phases: (1) the decoder with Inception frozen at its pretrained
weights, (2) everything, Inception at a small rate of its own.  Phase 2 resumes phase-1
checkpoints in the same model dir: the decoder keeps its optimizer (built on the same variables
in the same order), the encoder gets a second optimizer whose slots start fresh.
"""

from __future__ import annotations

import dataclasses
import logging

from showtell.captioning.config import WEIGHTS_NONE as NONE
from showtell.trainer.config import IM2TXT_INCEPTION_LEARNING_RATE, OptimizerConfig

log = logging.getLogger(__name__)


@dataclasses.dataclass(frozen=True)
class Phase:
    """Which phase a run trains — decided before anything is built (``decide_phase``)."""

    pretrained: bool  # the encoder started from pretrained weights
    trains_encoder: bool
    uses_cache: bool  # phase 1 reads the encoder's outputs from the feature cache
    why: str
    encoder_optimizer: OptimizerConfig | None  # the encoder's own, while it trains

    def describe(self) -> str:
        text = f"encoder {'trains' if self.trains_encoder else 'frozen'}: {self.why}"
        if self.encoder_optimizer is not None:
            text += f"; encoder learning rate {self.encoder_optimizer.describe_rate()}"
        return text


def decide_phase(*, train_inception: bool | None, inception_weights: str, recorded_init: dict | None,
                 cache_enabled: bool, optimizer: OptimizerConfig) -> Phase:
    """The phase from the flags (``--train-inception``, ``--inception-weights``, the cache's) and
    what the model dir records of its encoder's start (None: a new model dir).  Pure: a table test
    (``tests/test_phase_decision.py``) holds every case."""
    pretrained = pretrained_encoder(inception_weights, recorded_init)
    trains, why = resolve_train_inception(train_inception, pretrained)
    return Phase(pretrained=pretrained, trains_encoder=trains, uses_cache=cache_enabled and not trains,
                 why=why,
                 encoder_optimizer=encoder_optimizer_config(optimizer, pretrained) if trains else None)


def pretrained_encoder(weights: str, recorded_init: dict | None) -> bool:
    """Whether the encoder started from pretrained weights: ``--inception-weights`` on a new model
    dir, else what the model dir records (the flag does not apply to an existing model)."""
    if recorded_init is None:
        return weights != NONE
    return recorded_init.get("kind", NONE) != NONE


def resolve_train_inception(flag: bool | None, pretrained: bool) -> tuple[bool, str]:
    """``--train-inception`` as given, else frozen for a pretrained encoder — so restarting phase
    1 without repeating the weights flag does not silently start fine-tuning."""
    if flag is not None:
        return flag, "--train-inception " + ("true" if flag else "false")
    if pretrained:
        return False, "pretrained encoder, phase 1 (pass --train-inception true to fine-tune it)"
    return True, "encoder trained from scratch (no pretrained weights)"


def encoder_optimizer_config(config: OptimizerConfig, pretrained: bool) -> OptimizerConfig:
    """The encoder's optimizer: same kind and clipping; a constant rate of its own when given
    or when the encoder was pretrained (im2txt's 0.0005); else the decoder's schedule."""
    rate = config.inception_learning_rate
    if rate is None and pretrained:
        rate = IM2TXT_INCEPTION_LEARNING_RATE
    if rate is None:
        return config
    return dataclasses.replace(config, learning_rate=rate, epochs_per_decay=0.0)
