"""What is trained: model, optimizers, global step, datasets and steps — built, not run.

``CaptionTask`` builds everything a step needs — under the strategy's scope, in ``__init__``,
so no state appears later — and defines one replica's step, the traced step and loop, and the
datasets.  Like Model Garden's ``Task`` it only builds: the ``Trainer``
(``showtell.trainer.trainer``) owns the checkpoints, the feature cache, scratch dirs and the
learning rates a resume resets; the runners run its steps, the controller decides how many.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Protocol

import keras
import tensorflow as tf

from showtell.captioning.config import CacheConfig, InputConfig, ModelConfig
from showtell.captioning.data import inputs
from showtell.captioning.data.dataset import TRAIN, SplitData
from showtell.captioning.model.network import ShowAndTell, build_model, masked_loss_sum
from showtell.trainer.config import ComputeConfig, OptimizerConfig, TrainConfig
from showtell.trainer.step.optimizer import build_optimizers
from showtell.trainer.step.transfer import Phase

log = logging.getLogger(__name__)
XLA_CAPTION_MULTIPLE = 8  # words: a synthetic caption (≤ 20) meets 3 lengths, a COCO one (≤ 50) 7


@dataclass(frozen=True)
class TaskSections:
    """The experiment's sections a task builds from, resolved by the assembly (the model's
    vocabulary, image size and phase filled in, the input's seed and lengths settled)."""

    model: ModelConfig
    input: InputConfig
    optimizer: OptimizerConfig
    train: TrainConfig
    compute: ComputeConfig = field(default_factory=ComputeConfig)
    cache: CacheConfig = field(default_factory=CacheConfig)


def task_input(config: InputConfig, compute: ComputeConfig, independent_workers: bool) -> InputConfig:
    """Parameter-server workers read with no shared seed (each would read the same examples);
    under XLA, caption lengths round up to a few sizes (it compiles once for each)."""
    if independent_workers and config.seed is not None:
        config = replace(config, seed=None)
    if compute.jit_compile:
        config = replace(config, caption_multiple=XLA_CAPTION_MULTIPLE)
    return config


class FeatureSource(Protocol):
    """What a task on the feature cache reads (``FeatureCache``, which the trainer opens)."""

    def train_dataset(self, config: InputConfig, batch_size: int) -> tf.data.Dataset: ...


class CaptionTask:
    """Show and Tell on one dataset under one ``tf.distribute`` strategy: built from its sections,
    the data read and the phase decided (``assembly.build_task`` does both, and the model dir's
    checks, and seeds the run) — it reads and decides nothing itself."""

    def __init__(self, sections: TaskSections, data: SplitData, phase: Phase,
                 strategy: tf.distribute.Strategy | None = None) -> None:
        """
        Args:
          sections: model, input, optimizer, schedule, compute and cache (``TaskSections``).
          data: the dataset's training split (``SplitData``).
          phase: which parts train, and whether from the feature cache (``transfer.decide_phase``).
          strategy: default the current (default) strategy — one device.
        """
        self.data_dir, self.manifest, self.vocab, self.files = data.dir, data.manifest, data.vocab, data.files
        self.phase, self.uses_cache = phase, phase.uses_cache
        self.model_config, self.input_config = sections.model, sections.input
        self.optimizer_config, self.train_config = sections.optimizer, sections.train
        self.compute, self.cache_config = sections.compute, sections.cache
        self.strategy = strategy or tf.distribute.get_strategy()
        # --batch-size is per replica; a step consumes batch × replicas examples (the global
        # batch).  Under parameter_server each worker step is one replica's batch.
        self.batch_size = self.input_config.batch_size * self.strategy.num_replicas_in_sync
        # An epoch (of the learning-rate schedule) is one pass over the captions, as in im2txt:
        # with one caption per image visit, that is as many passes over the images as an image
        # has captions.
        self.steps_per_epoch = max(1, self.manifest.splits[TRAIN].captions // self.batch_size)
        self._build()

    def _build(self) -> None:
        """The model, its optimizers (slots built now) and the global step, in the strategy's scope."""
        optimizer = self.optimizer_config
        with self.strategy.scope():
            self.model: ShowAndTell = build_model(self.model_config, self.compute.mixed_precision)
            # Build slots now, inside the scope: lazily built Keras 3 optimizers break
            # under MirroredStrategy and misplace variables under ParameterServerStrategy.
            # fp16: each optimizer is applied through a LossScaleOptimizer (its scale is not
            # checkpointed: it re-adapts in a few steps), so checkpoints hold the same optimizer
            # state in every mode.
            self._appliers = []
            config = self.phase.encoder_optimizer
            decoder, encoder = build_optimizers(optimizer, config, self.steps_per_epoch)
            self.optimizer = self._optimizer(decoder, self._decoder_variables())
            # (name, optimizer, config): what a resume sets back to the configured rate
            self.rates = [("learning rate", self.optimizer, optimizer)]
            self.encoder_optimizer = None
            if encoder is not None:
                self.encoder_optimizer = self._optimizer(encoder, self.model.encoder.trainable_weights)
                self.rates.append(("encoder learning rate", self.encoder_optimizer, config))
            # --jit-compile: the loss and gradients XLA compiles (no collectives in them)
            self._gradient_fn = (tf.function(self._loss_and_gradients, jit_compile=True, autograph=False)
                                 if self.compute.jit_compile else self._loss_and_gradients)
            self.global_step = tf.Variable(
                0, dtype=tf.int64, trainable=False, name="global_step",
                aggregation=tf.VariableAggregation.ONLY_FIRST_REPLICA,
            )

    def checkpointed_optimizers(self) -> dict[str, keras.Optimizer]:
        """The optimizers a checkpoint holds, by name.  Optional when restoring: the encoder's
        starts fresh before phase 2, both in a checkpoint ``import-im2txt`` wrote (weights only)."""
        return {"optimizer": self.optimizer,
                **({"encoder_optimizer": self.encoder_optimizer} if self.encoder_optimizer else {})}

    def _optimizer(self, optimizer: keras.Optimizer, variables: list) -> keras.Optimizer:
        """Build ``optimizer`` for ``variables`` and record what applies its gradients."""
        if self.compute.mixed_precision == "fp16":
            scaled = keras.optimizers.LossScaleOptimizer(optimizer)
            scaled.build(variables)  # builds the inner optimizer's slots too
            self._appliers.append(scaled)
        else:
            optimizer.build(variables)
            self._appliers.append(optimizer)
        return optimizer

    @property
    def step(self) -> int:
        return int(self.global_step.numpy())

    @property
    def optimizers(self) -> list:
        return [self.optimizer] + ([self.encoder_optimizer] if self.encoder_optimizer else [])

    def optimizer_variables(self) -> list:
        return [v for o in self.optimizers for v in o.variables]

    def _decoder_variables(self) -> list:
        return [v for v in self.model.decoder_weights if v.trainable]

    def _groups(self) -> list[tuple]:
        """(optimizer, variables) pairs: the decoder's, and the encoder's while it trains."""
        groups = [(self.optimizer, self._decoder_variables())]
        if self.encoder_optimizer is not None:
            groups.append((self.encoder_optimizer, self.model.encoder.trainable_weights))
        return groups

    # -- the step -------------------------------------------------------------------------

    def replica_step(self, batch: dict[str, tf.Tensor], dense: bool = False) -> tf.Tensor:
        """One replica's share of a step: loss of the global batch, gradients, update.  ``dense``:
        sparse gradients (the word embedding's) summed dense (``make_train_loop``'s towers)."""
        clip = self.optimizer_config.clip_gradients
        groups = self._groups()
        # Divide by the words of the *global* batch: replicas' gradients are then summed by the
        # optimizer into exactly the gradient of the global mean loss.
        words = tf.reduce_sum(tf.cast(batch["mask"], tf.float32))
        global_words = tf.maximum(tf.distribute.get_replica_context().all_reduce("sum", words), 1.0)
        loss, grads = self._gradients(batch, global_words)
        if dense:
            grads = [tf.convert_to_tensor(g) if isinstance(g, tf.IndexedSlices) else g for g in grads]
        if clip:  # one global norm over encoder and decoder together, as im2txt
            grads = _clip_global(grads, clip)
        start = 0
        for applier, (_, group) in zip(self._appliers, groups, strict=True):
            part = grads[start:start + len(group)]
            if self.compute.mixed_precision == "fp16":  # in its scale: it divides it out, or skips
                part = [g * tf.cast(applier.dynamic_scale, g.dtype) for g in part]
            applier.apply_gradients(zip(part, group, strict=True))
            start += len(group)
        self.global_step.assign_add(1)
        return loss

    def _gradients(self, batch: dict[str, tf.Tensor], global_words: tf.Tensor) -> tuple[tf.Tensor, list]:
        """The loss and its (unscaled) gradients — the part ``--jit-compile`` hands XLA (no
        collectives in it; clipping and the updates stay outside).  fp16: the loss is scaled by
        the first optimizer's loss scale and the gradients divided by it again, so clipping sees
        true gradients (an overflow stays inf/NaN); each optimizer then gets them in its own
        scale, which its ``LossScaleOptimizer`` divides out — or skips the update and lowers it."""
        return self._gradient_fn(batch, global_words)

    def _loss_and_gradients(self, batch: dict[str, tf.Tensor], global_words: tf.Tensor
                            ) -> tuple[tf.Tensor, list]:
        groups = self._groups()
        variables = [v for _, group in groups for v in group]
        scaled = self.compute.mixed_precision == "fp16"
        with tf.GradientTape() as tape:
            logits = self.model.batch_logits(batch, training=True)
            loss_sum, _ = masked_loss_sum(logits, batch["target_ids"], batch["mask"])
            loss = loss_sum / global_words
            objective = self._appliers[0].scale_loss(loss) if scaled else loss
        grads = tape.gradient(objective, variables)
        if scaled:
            grads = [g / tf.cast(self._appliers[0].dynamic_scale, g.dtype) for g in grads]
        return loss, grads

    def make_train_step(self, element_spec) -> Callable:
        """A traced step over a distributed global batch; returns the global batch's loss."""
        @tf.function(input_signature=[element_spec], autograph=False)
        def train_step(batch):
            losses = self.strategy.run(self.replica_step, args=(batch,))
            return self.strategy.reduce("sum", losses, axis=None)

        return train_step

    def make_train_loop(self) -> Callable:
        """``traced_loop`` over the global step: ``train_loop(iterator, steps)`` → each step's
        global-batch loss, reading ``iterator`` (a distributed one) in the graph.

        The step is a function of its own that the loop's body calls (Keras' shape:
        ``one_step_on_data`` inside ``multi_step_on_iterator``): the call then runs at ``fit``'s
        speed, 2–3 % faster than with the step's ops inlined into the body (``bench/step_call.py``,
        calls interleaved in one process; the same weights to the bit).

        Towers sum sparse gradients (the word embedding's) dense here, as Horovod's
        ``sparse_as_dense`` does: inside the loop, the sparse sum (a gather of each tower's
        length, then a plain or a padded gather) failed with a collective shape mismatch
        (mirrored over 2 logical CPUs, TF 2.21; ``tests/test_steps_per_loop.py``)."""
        dense = self.strategy.num_replicas_in_sync > 1

        @tf.function(autograph=False)
        def step(batch):
            per_replica = self.strategy.run(self.replica_step, args=(batch, dense))
            return self.strategy.reduce("sum", per_replica, axis=None)

        return traced_loop(step)

    # -- the data -------------------------------------------------------------------------

    def dataset(self, cache: FeatureSource | None = None) -> tf.data.Dataset:
        """Global batches: ``cache``'s encoder features while the encoder is frozen (the trainer
        opens it: ``trainer.open_data``), else images."""
        return self.dataset_factory(self.batch_size, cache)()

    def dataset_factory(self, batch_size: int, cache: FeatureSource | None = None
                        ) -> Callable[[], tf.data.Dataset]:
        """A no-argument function that builds the pipeline — what parameter-server workers call."""
        size, config = self.model_config.image_size, self.input_config
        if not self.uses_cache:
            files = self.files
            return lambda: inputs.train_dataset(files, size, config, batch_size)
        if cache is None:
            raise RuntimeError("a task on the feature cache reads the cache trainer.open_data() opened")
        return lambda: cache.train_dataset(config, batch_size)


def traced_loop(step: Callable) -> Callable:
    """``train_loop(iterator, steps)``: up to ``steps`` calls of ``step`` (a batch → its loss) in
    one traced ``while`` loop → their losses.  ``steps`` is a tensor, so every chunk length runs the
    one trace.  Each iteration fetches the *next* batch beside its own step; the last fetches
    nothing, so a call reads exactly ``steps`` batches."""
    @tf.function(autograph=False)
    def train_loop(iterator, steps):
        def body(i, losses, batch):
            loss = step(batch.get_value())
            following = tf.cond(i + 1 < steps, iterator.get_next_as_optional, lambda: batch)
            return i + 1, losses.write(i, loss), following

        _, losses, _ = tf.while_loop(lambda i, *_: i < steps, body,
                                     (tf.constant(0), tf.TensorArray(tf.float32, size=steps),
                                      iterator.get_next_as_optional()))
        return losses.stack()

    return train_loop


def _clip_global(grads: list, clip: float) -> list:
    """Clip to a global norm computed over the gradient of the *global* batch.

    Keras' optimizer sums the replicas' gradients inside ``apply_gradients`` (and clips, if
    asked, per replica before that).  Here the replicas all-reduce first, clip the sum, and
    each hands the optimizer 1/N of it — Keras' own sum then restores the clipped global
    gradient exactly.  One replica: plain clipping.
    """
    context = tf.distribute.get_replica_context()
    replicas = context.num_replicas_in_sync if context else 1
    if replicas == 1:
        return tf.clip_by_global_norm(grads, clip)[0]
    summed = context.all_reduce("sum", grads)
    clipped, _ = tf.clip_by_global_norm(summed, clip)
    return [tf.math.scalar_mul(1.0 / replicas, g) for g in clipped]
