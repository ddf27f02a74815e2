"""The training loop: a custom loop over a ``tf.function`` step under a ``tf.distribute``
strategy (the default strategy on one device), with small hooks around each step for
logging, summaries and the checkpoint schedule — the shape of Orbit's StandardTrainer.

``steps`` is a total: training runs until the global step (restored from the newest
checkpoint) reaches it, so re-running a crashed command finishes the same run.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from dataclasses import dataclass
from pathlib import Path

import tensorflow as tf

from captioning import inputs
from captioning.config import InputConfig, ModelConfig, OptimizerConfig, TrainConfig
from captioning.errors import DataError
from captioning.manifest import Manifest, load_dataset
from captioning.model import ShowAndTell, build_model, masked_loss_sum
from captioning.modeldir import check_model_dir, write_metadata
from captioning.records import shard_files
from trainer.checkpoints import Checkpoints, SaveSchedule
from trainer.optimizer import build_optimizer, current_learning_rate
from trainer.signals import StopRequest
from trainer.summaries import TrainSummaries

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class TrainResult:
    start_step: int
    final_step: int
    checkpoint: str
    stopped_by: str | None  # None: reached --steps; otherwise the signal or time limit


def resolve_model_config(config: ModelConfig, manifest: Manifest, data_dir: Path,
                         image_size: int | None) -> ModelConfig:
    """Fill vocab and image size from the dataset; refuse sizes the data cannot serve."""
    size = image_size or manifest.image_size or config.image_size
    if manifest.image_size and size > manifest.image_size:
        raise DataError(
            f"--image-size {size}: the images in {data_dir} are {manifest.image_size} px and would be "
            f"upsampled; rebuild the data with --image-size {size} or pass --image-size {manifest.image_size}"
        )
    return dataclasses.replace(config, vocab_size=manifest.vocab_size, image_size=size)


class Trainer:
    """Builds model, optimizer, data and checkpoints for one model dir, then trains."""

    def __init__(
        self,
        data_dir: Path,
        model_dir: Path,
        model: ModelConfig,
        input: InputConfig,
        optimizer: OptimizerConfig,
        train: TrainConfig,
        image_size: int | None = None,
        strategy: tf.distribute.Strategy | None = None,
    ) -> None:
        self.data_dir, self.model_dir = data_dir, model_dir
        self.manifest, self.vocab = load_dataset(data_dir)
        self.files = shard_files(data_dir, "train")
        self.model_config = resolve_model_config(model, self.manifest, data_dir, image_size)
        check_model_dir(model_dir, self.model_config)  # before anything is written
        self.input_config, self.optimizer_config, self.train_config = input, optimizer, train
        self.strategy = strategy or tf.distribute.get_strategy()
        self.batch_size = input.batch_size
        records = self.manifest.splits["train"].records
        self.steps_per_epoch = max(1, records // self.batch_size)

        tf.keras.utils.set_random_seed(train.seed)
        with self.strategy.scope():
            self.model: ShowAndTell = build_model(self.model_config)
            self.optimizer = build_optimizer(optimizer, self.steps_per_epoch)
            # Build slots now, inside the scope: lazily built Keras 3 optimizers break
            # under MirroredStrategy and misplace variables under ParameterServerStrategy.
            self.optimizer.build(self.model.trainable_variables)
            self.step = tf.Variable(
                0, dtype=tf.int64, trainable=False, name="global_step",
                aggregation=tf.VariableAggregation.ONLY_FIRST_REPLICA,
            )
        self.checkpoints = Checkpoints(
            model_dir, self.step, train.keep, model=self.model, optimizer=self.optimizer
        )

    # -- the step -------------------------------------------------------------------------

    def _replica_step(self, batch: dict[str, tf.Tensor]) -> tf.Tensor:
        model, clip = self.model, self.optimizer_config.clip_gradients
        with tf.GradientTape() as tape:
            logits = model((batch["image"], batch["input_ids"]), training=True)
            loss_sum, words = masked_loss_sum(logits, batch["target_ids"], batch["mask"])
            # Divide by the words of the *global* batch: replicas' gradients are then summed
            # by the optimizer into exactly the gradient of the global mean loss.
            global_words = tf.distribute.get_replica_context().all_reduce("sum", words)
            loss = loss_sum / tf.maximum(global_words, 1.0)
        variables = model.trainable_variables
        grads = tape.gradient(loss, variables)
        if clip:
            grads, _ = tf.clip_by_global_norm(grads, clip)
        self.optimizer.apply_gradients(zip(grads, variables, strict=True))
        self.step.assign_add(1)
        return loss

    def make_train_step(self, element_spec):
        @tf.function(input_signature=[element_spec])
        def train_step(batch):
            losses = self.strategy.run(self._replica_step, args=(batch,))
            return self.strategy.reduce("sum", losses, axis=None)

        return train_step

    # -- the loop -------------------------------------------------------------------------

    def dataset(self) -> tf.data.Dataset:
        return inputs.train_dataset(self.files, self.model_config.image_size, self.input_config,
                                    self.batch_size)

    def run(self, stop: StopRequest | None = None) -> TrainResult:
        cfg = self.train_config
        stop = StopRequest() if stop is None else stop
        started = time.monotonic()
        restored = self.checkpoints.restore_latest()
        if restored is None:
            log.info("no checkpoint in %s: starting from scratch", self.model_dir)
        else:
            log.info("resumed from %s at step %d", self.checkpoints.manager.latest_checkpoint, restored)
        start_step = int(self.step.numpy())
        self.model_dir.mkdir(parents=True, exist_ok=True)
        write_metadata(self.model_dir, self.model_config, self._data_metadata())
        log.info(
            "training to step %d: batch %d (%d replica%s), %d steps/epoch, images %d px, vocab %d",
            cfg.steps, self.batch_size, self.strategy.num_replicas_in_sync,
            "" if self.strategy.num_replicas_in_sync == 1 else "s", self.steps_per_epoch,
            self.model_config.image_size, self.model_config.vocab_size,
        )
        summaries = TrainSummaries(self.model_dir)
        schedule = SaveSchedule(cfg.save_every_secs, cfg.save_every_steps)
        schedule.start(start_step)
        stopped_by: str | None = None
        try:
            stopped_by = self._loop(stop, summaries, schedule, started)
        except DataError:
            self.checkpoints.save()  # keep the progress made before the bad record
            raise
        finally:
            summaries.close()
        path = self.checkpoints.save()
        final = int(self.step.numpy())
        log.info("final checkpoint %s (step %d)%s", path, final, f" after {stopped_by}" if stopped_by else "")
        return TrainResult(start_step, final, path, stopped_by)

    def _loop(self, stop: StopRequest, summaries: TrainSummaries, schedule: SaveSchedule,
              started: float) -> str | None:
        cfg = self.train_config
        dist = self.strategy.experimental_distribute_dataset(self.dataset())
        train_step = self.make_train_step(dist.element_spec)
        batches = inputs.checked(dist, self.files)
        step = int(self.step.numpy())
        window = _Window()
        first = True  # the first step traces the graph; keep it out of the throughput figures
        while step < cfg.steps:
            if stop:
                return stop.reason
            if cfg.max_seconds is not None and time.monotonic() - started >= cfg.max_seconds:
                return f"the {cfg.max_seconds:g} s time limit"
            t0 = time.perf_counter()
            batch = next(batches)
            t1 = time.perf_counter()
            loss = float(train_step(batch))
            t2 = time.perf_counter()
            step = int(self.step.numpy())
            if first:
                first = False
                log.info("first step (graph tracing) took %.1f s", t2 - t0)
            else:
                window.add(loss, t1 - t0, t2 - t1, self.batch_size)
            if window.steps and (step % cfg.log_every_steps == 0 or step == cfg.steps):
                self._report(step, window, summaries)
                window = _Window()
            if cfg.histogram_every_steps and step % cfg.histogram_every_steps == 0:
                summaries.histograms(step, self.model)
            if schedule.due(step):
                self.checkpoints.save()
                schedule.saved(step)
        return None

    def _report(self, step: int, window: _Window, summaries: TrainSummaries) -> None:
        lr = current_learning_rate(self.optimizer)
        values = {
            "loss": window.mean_loss,
            "learning_rate": lr,
            "examples_per_sec": window.examples_per_sec,
            "input_wait_fraction": window.wait_fraction,
        }
        summaries.scalars(step, values)
        log.info(
            "step %d/%d  loss %.4f  lr %.3g  %.1f examples/s  input wait %.1f%%",
            step, self.train_config.steps, window.mean_loss, lr, window.examples_per_sec,
            100 * window.wait_fraction,
        )

    def _data_metadata(self) -> dict:
        return {"dir": str(self.data_dir), "builder": self.manifest.builder,
                "vocab_size": self.manifest.vocab_size, "image_size": self.manifest.image_size}


@dataclass
class _Window:
    """Running totals between two log lines."""

    loss: float = 0.0
    steps: int = 0
    wait: float = 0.0
    compute: float = 0.0
    examples: int = 0

    def add(self, loss: float, wait: float, compute: float, examples: int) -> None:
        self.loss += loss
        self.steps += 1
        self.wait += wait
        self.compute += compute
        self.examples += examples

    @property
    def mean_loss(self) -> float:
        return self.loss / max(self.steps, 1)

    @property
    def examples_per_sec(self) -> float:
        return self.examples / max(self.wait + self.compute, 1e-9)

    @property
    def wait_fraction(self) -> float:
        return self.wait / max(self.wait + self.compute, 1e-9)
