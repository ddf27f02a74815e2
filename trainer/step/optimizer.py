"""Optimizer and learning-rate schedule from an ``OptimizerConfig``.

im2txt trains with plain SGD at 2.0, halved every 8 epochs.  Gradient clipping is done by
the training step (global norm over all gradients), not by the optimizer, so the rule is
visible in one place.
"""

from __future__ import annotations

import math

import keras
import tensorflow as tf

from showtell.trainer.config import OPTIMIZERS, OptimizerConfig


def learning_rate(config: OptimizerConfig, steps_per_epoch: int):
    """Step-wise decay by ``decay_factor`` every ``epochs_per_decay`` epochs (or constant)."""
    if not config.decays:
        return config.learning_rate
    return keras.optimizers.schedules.ExponentialDecay(
        config.learning_rate,
        decay_steps=max(1, round(steps_per_epoch * config.epochs_per_decay)),
        decay_rate=config.decay_factor,
        staircase=True,
    )


def build_optimizer(config: OptimizerConfig, steps_per_epoch: int) -> keras.optimizers.Optimizer:
    lr = learning_rate(config, steps_per_epoch)
    if config.name == "sgd":
        return keras.optimizers.SGD(lr)
    if config.name == "momentum":
        return keras.optimizers.SGD(lr, momentum=0.9)
    if config.name == "adam":
        return keras.optimizers.Adam(lr)
    raise ValueError(f"unknown optimizer {config.name!r}; choose one of {', '.join(OPTIMIZERS)}")


def build_optimizers(decoder: OptimizerConfig, encoder: OptimizerConfig | None,
                     steps_per_epoch: int) -> tuple[keras.Optimizer, keras.Optimizer | None]:
    """The decoder's optimizer and, while the encoder trains (``encoder`` given), the encoder's."""
    return (build_optimizer(decoder, steps_per_epoch),
            build_optimizer(encoder, steps_per_epoch) if encoder is not None else None)


def current_learning_rate(optimizer: keras.optimizers.Optimizer) -> float:
    """The rate the optimizer applies at its current iteration."""
    return float(keras.ops.convert_to_numpy(optimizer.learning_rate))


def restore_configured_rates(rates: list[tuple[str, keras.Optimizer, OptimizerConfig]],
                             strategy: tf.distribute.Strategy) -> list[str]:
    """After a restore: a constant rate is a variable the checkpoint brought back, but the
    configuration wins — a phase 2 started with another ``--learning-rate`` must train at it.
    (A decaying schedule is code, not a variable: nothing to do.)  What changed, in words."""
    changed = []
    with strategy.scope():
        for name, optimizer, config in rates:
            restored = current_learning_rate(optimizer)
            if not config.decays and not math.isclose(restored, config.learning_rate, rel_tol=1e-6):
                optimizer.learning_rate = config.learning_rate  # assigns the rate variable
                changed.append(f"{name} {config.learning_rate:g} (the checkpoint's was {restored:g})")
    return changed
