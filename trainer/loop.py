"""The training loop: a custom loop over a ``tf.function`` step under a ``tf.distribute``
strategy (the default strategy on one device), with small hooks around each step for
logging, summaries and the checkpoint schedule — the shape of Orbit's StandardTrainer.

``steps`` is a total: training runs until the global step (restored from the newest
checkpoint) reaches it, so re-running a crashed command finishes the same run.
"""

from __future__ import annotations

import dataclasses
import logging
import re
import shutil
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import tensorflow as tf
from showtell.captioning.config import CacheConfig, InputConfig, ModelConfig, OptimizerConfig, TrainConfig
from showtell.captioning.data import inputs
from showtell.captioning.data.feature_cache import BuildStats, cache_key, ensure_cache
from showtell.captioning.data.manifest import VOCAB, Manifest, load_dataset
from showtell.captioning.data.records import shard_files
from showtell.captioning.model.modeldir import (
    check_model_dir,
    clear_finished,
    mark_finished,
    recorded_encoder_init,
    write_metadata,
)
from showtell.captioning.model.network import ShowAndTell, build_model, masked_loss_sum
from showtell.captioning.weights.encoder import NONE, load_encoder_weights, weights_digest
from showtell.trainer.checkpoints import Checkpoints, SaveSchedule
from showtell.trainer.cluster import ClusterError
from showtell.trainer.optimizer import build_optimizer, current_learning_rate, describe_rate
from showtell.trainer.signals import StopRequest
from showtell.trainer.strategy import placement
from showtell.trainer.summaries import NoSummaries, TrainSummaries
from showtell.trainer.transfer import encoder_optimizer_config, pretrained_encoder, resolve_train_inception

from showtell.common.errors import DataError

log = logging.getLogger(__name__)

ENCODER_INIT_REPORT = "encoder-init.tsv"  # which tensor of the weights file went where


@dataclass(frozen=True)
class TrainResult:
    start_step: int
    final_step: int
    checkpoint: str
    stopped_by: str | None  # None: reached --steps; otherwise the signal or time limit
    finished: bool = False  # ended on its own terms (steps, time limit, early stop): marked in the model dir


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
    """Builds model, optimizers, data and checkpoints for one model dir, then trains."""

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
        inception_weights: str = NONE,
        train_inception: bool | None = None,
        cache: CacheConfig | None = None,
        coordinator=None,
        is_chief: bool = True,
        strategy_note: str | None = None,
    ) -> None:
        self.data_dir, self.model_dir = data_dir, model_dir
        self.manifest, self.vocab = load_dataset(data_dir)
        self.files = shard_files(data_dir, "train")
        model = resolve_model_config(model, self.manifest, data_dir, image_size)
        check_model_dir(model_dir, model)  # before anything is written
        self.inception_weights = inception_weights
        self.recorded_init = recorded_encoder_init(model_dir)
        pretrained = pretrained_encoder(inception_weights, self.recorded_init)
        trains_encoder, why = resolve_train_inception(train_inception, pretrained)
        self.model_config = dataclasses.replace(model, train_inception=trains_encoder)
        self.phase = f"encoder {'trains' if trains_encoder else 'frozen'}: {why}"  # logged once restored
        self.input_config, self.optimizer_config, self.train_config = input, optimizer, train
        self.cache_config = cache or CacheConfig()
        self.strategy = strategy or tf.distribute.get_strategy()
        self.coordinator = coordinator  # a ClusterCoordinator: parameter-server training
        self.strategy_note = strategy_note or f"strategy {type(self.strategy).__name__}"
        self.is_chief = is_chief  # only the chief writes checkpoints, summaries and metadata
        self.multi_worker = isinstance(self.strategy, tf.distribute.MultiWorkerMirroredStrategy)
        self._agree_fn = None
        if coordinator is not None and input.seed is not None:
            # Each worker builds its own pipeline: a shared seed would feed all of them the
            # same examples in the same order.
            self.input_config = dataclasses.replace(input, seed=None)
        # --batch-size is per replica; a step consumes batch × replicas examples (the global
        # batch).  Under parameter_server each worker step is one replica's batch.
        self.batch_size = input.batch_size * self.strategy.num_replicas_in_sync
        records = self.manifest.splits["train"].records
        self.steps_per_epoch = max(1, records // self.batch_size)
        self.encoder_forward_images = 0  # counted per step on the image path (none on the cache's)
        self.cache_build: BuildStats | None = None

        tf.keras.utils.set_random_seed(train.seed)
        with self.strategy.scope():
            self.model: ShowAndTell = build_model(self.model_config)
            # Build slots now, inside the scope: lazily built Keras 3 optimizers break
            # under MirroredStrategy and misplace variables under ParameterServerStrategy.
            self.optimizer = build_optimizer(optimizer, self.steps_per_epoch)
            self.optimizer.build(self._decoder_variables())
            self.encoder_optimizer = None
            if trains_encoder:
                config = encoder_optimizer_config(optimizer, pretrained)
                self.encoder_optimizer = build_optimizer(config, self.steps_per_epoch)
                self.encoder_optimizer.build(self.model.encoder.trainable_weights)
                self.phase += f"; encoder learning rate {describe_rate(config)}"
            self.step = tf.Variable(
                0, dtype=tf.int64, trainable=False, name="global_step",
                aggregation=tf.VariableAggregation.ONLY_FIRST_REPLICA,
            )
        optional = {"encoder_optimizer": self.encoder_optimizer} if self.encoder_optimizer else {}
        # Non-chief multi-worker tasks must save too (the save may run collectives) but into a
        # scratch dir of their own; every task restores from the shared model dir.
        self.scratch = None if is_chief else Path(tempfile.mkdtemp(prefix="showtell-worker-"))
        self.checkpoints = Checkpoints(
            model_dir, self.step, train.keep, optional=optional, write_dir=self.scratch,
            model=self.model, optimizer=self.optimizer,
        )

    def _decoder_variables(self) -> list:
        return [v for v in self.model.decoder_weights if v.trainable]

    def _groups(self) -> list[tuple]:
        """(optimizer, variables) pairs: the decoder's, and the encoder's while it trains."""
        groups = [(self.optimizer, self._decoder_variables())]
        if self.encoder_optimizer is not None:
            groups.append((self.encoder_optimizer, self.model.encoder.trainable_weights))
        return groups

    # -- the step -------------------------------------------------------------------------

    def _replica_step(self, batch: dict[str, tf.Tensor]) -> tf.Tensor:
        model, clip = self.model, self.optimizer_config.clip_gradients
        groups = self._groups()
        variables = [v for _, group in groups for v in group]
        with tf.GradientTape() as tape:
            logits = model.batch_logits(batch, training=True)
            loss_sum, words = masked_loss_sum(logits, batch["target_ids"], batch["mask"])
            # Divide by the words of the *global* batch: replicas' gradients are then summed
            # by the optimizer into exactly the gradient of the global mean loss.
            global_words = tf.distribute.get_replica_context().all_reduce("sum", words)
            loss = loss_sum / tf.maximum(global_words, 1.0)
        grads = tape.gradient(loss, variables)
        if clip:  # one global norm over encoder and decoder together, as im2txt
            grads = _clip_global(grads, clip)
        start = 0
        for optimizer, group in groups:
            optimizer.apply_gradients(zip(grads[start:start + len(group)], group, strict=True))
            start += len(group)
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
        """Global batches: cached encoder features while the encoder is frozen (cache on), else images."""
        return self.dataset_factory(self.batch_size)()

    def dataset_factory(self, batch_size: int):
        """Prepare the data (build the feature cache if it is used and missing) and return a
        no-argument function that builds the pipeline — what parameter-server workers call."""
        cfg, size, config = self.cache_config, self.model_config.image_size, self.input_config
        self.uses_cache = cfg.enabled and not self.model_config.train_inception
        if not self.uses_cache:
            if cfg.enabled:
                log.info("feature cache not used: the encoder is training")
            files = self.files
            return lambda: inputs.train_dataset(files, size, config, batch_size)
        cache, self.cache_build = ensure_cache(
            Path(cfg.root) if cfg.root else self.data_dir / "feature-cache",
            cache_key(self.data_dir, self.files, weights_digest(self.model.encoder_weights), size, config,
                      cfg.variants),
            lambda images: self.model.features(images, training=False),
            self.files, size, config, cfg.batch_size,
        )
        return lambda: cache.train_dataset(config, batch_size)

    def run(self, stop: StopRequest | None = None) -> TrainResult:
        cfg = self.train_config
        stop = StopRequest() if stop is None else stop
        started = time.monotonic()
        restored = self.checkpoints.restore_latest()
        encoder_init = None
        if restored is None:
            # Before anything is written: a bad weights file leaves the model dir untouched.
            encoder_init = load_encoder_weights(self.model.encoder, self.inception_weights)
            log.info("no checkpoint in %s: starting from scratch%s", self.model_dir,
                     f", encoder from {self.inception_weights}" if encoder_init.pretrained else "")
        else:
            log.info("resumed from %s at step %d", self.checkpoints.restored_from, restored)
            if self.inception_weights != NONE:
                log.info("%s not applied: the model dir's own checkpoint carries the encoder "
                         "(pretrained weights only initialise a new model dir)", self.inception_weights)
        log.info("%s", self.phase)
        log.info("%s", self.strategy_note)
        log.info("placement: %s", placement(self.strategy, self.model.weights + self._optimizer_variables(),
                                            self._workers() if self.coordinator else None))
        start_step = int(self.step.numpy())
        if self.is_chief:
            self.model_dir.mkdir(parents=True, exist_ok=True)
            if clear_finished(self.model_dir):
                log.info("training again in %s: its finished marker is removed until this run ends",
                         self.model_dir)
        if encoder_init is not None and self.is_chief:
            run_id = write_metadata(self.model_dir, self.model_config, self._data_metadata(),
                                    encoder_init.metadata())
            log.info("run %s starts in %s", run_id, self.model_dir)
            if encoder_init.pretrained:
                (self.model_dir / ENCODER_INIT_REPORT).write_text(encoder_init.report())
            # The vocabulary travels with the checkpoints: `showtell caption` needs no --data.
            shutil.copyfile(self.data_dir / VOCAB, self.model_dir / VOCAB)
        replicas = self.strategy.num_replicas_in_sync
        log.info(
            "training to step %d: global batch %d = %d per replica × %d replica%s%s, %d steps/epoch, "
            "images %d px, vocab %d", cfg.steps, self.batch_size, self.input_config.batch_size, replicas,
            "" if replicas == 1 else "s",
            f" (each of {self._workers()} workers steps on its own)" if self.coordinator else "",
            self.steps_per_epoch, self.model_config.image_size, self.model_config.vocab_size,
        )
        summaries = TrainSummaries(self.model_dir) if self.is_chief else NoSummaries()
        schedule = SaveSchedule(cfg.save_every_secs, cfg.save_every_steps)
        schedule.start(start_step)
        stopped_by: str | None = None
        loop = self._ps_loop if self.coordinator is not None else self._loop
        try:
            stopped_by = loop(stop, summaries, schedule, started)
        except DataError:
            self.checkpoints.save()  # keep the progress made before the bad record
            raise
        except _CLUSTER_ERRORS as exc:
            raise _cluster_failure(exc) from exc
        finally:
            summaries.close()
        path = self.checkpoints.save()
        if self.scratch is not None:
            shutil.rmtree(self.scratch, ignore_errors=True)
        final = int(self.step.numpy())
        built = self.cache_build.forward_passes if self.cache_build else 0
        log.info("encoder forward passes this run: %d for the feature cache, %d in training steps",
                 built, self.encoder_forward_images)
        log.info("final checkpoint %s (step %d)%s%s", path, final,
                 f" after {stopped_by}" if stopped_by else "",
                 "" if self.is_chief else " — a non-chief scratch copy, deleted; the chief's is the real one")
        # Over on its own terms (not a signal, not another worker's stop): tell evaluators.
        finished = stopped_by is None or (stop.final and stopped_by == stop.reason)
        if finished and self.is_chief:
            mark_finished(self.model_dir, final, path, stopped_by or f"step {cfg.steps} reached")
        return TrainResult(start_step, final, path, stopped_by, finished)

    def _stop_reason(self, stop: StopRequest, started: float) -> str | None:
        cfg = self.train_config
        if not stop and cfg.max_seconds is not None and time.monotonic() - started >= cfg.max_seconds:
            stop.request(f"the {cfg.max_seconds:g} s time limit", final=True)
        return stop.reason if stop else None

    def _agree(self, *flags: bool) -> list[bool]:
        """Multi-worker: every worker must stop and save at the same step (they run collectives
        in lock step), so a flag raised on any worker holds for all.  Elsewhere: as given."""
        if not self.multi_worker:
            return list(flags)
        if self._agree_fn is None:
            @tf.function
            def agree(local: tf.Tensor) -> tf.Tensor:
                per_replica = self.strategy.run(lambda: tf.identity(local))
                return self.strategy.reduce("sum", per_replica, axis=None)

            self._agree_fn = agree
        total = self._agree_fn(tf.constant([float(f) for f in flags]))
        return [bool(v > 0) for v in total.numpy()]

    def _loop(self, stop: StopRequest, summaries: TrainSummaries, schedule: SaveSchedule,
              started: float) -> str | None:
        cfg = self.train_config
        dist = self.strategy.experimental_distribute_dataset(self.dataset())
        train_step = self.make_train_step(dist.element_spec)
        batches = inputs.checked(dist, self.files)
        step = int(self.step.numpy())
        window = _Window()
        first = True  # the first step traces the graph; keep it out of the throughput figures
        reason = self._stop_reason(stop, started)
        if self._agree(reason is not None)[0]:
            return reason or "another worker's stop"
        local_examples = self.input_config.batch_size * len(self.strategy.extended.worker_devices)
        while step < cfg.steps:
            t0 = time.perf_counter()
            batch = next(batches)
            t1 = time.perf_counter()
            loss = float(train_step(batch))
            t2 = time.perf_counter()
            if not self.uses_cache:
                self.encoder_forward_images += local_examples  # this process's share
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
            reason = self._stop_reason(stop, started)
            halt, save = self._agree(reason is not None, schedule.due(step))
            if save:
                self.checkpoints.save()
                schedule.saved(step)
            if halt and step < cfg.steps:
                return reason or "another worker's stop"
        return None

    def make_worker_step(self):
        """Parameter-server mode: one step on whichever worker the coordinator picks."""
        @tf.function
        def worker_step(iterator):
            return self.strategy.run(self._replica_step, args=(next(iterator),))  # one replica

        return worker_step

    def _ps_loop(self, stop: StopRequest, summaries: TrainSummaries, schedule: SaveSchedule,
                 started: float) -> str | None:
        """Schedule steps on the workers in chunks; between chunks (after ``join``) log, write
        summaries and checkpoints.  Workers that fail are dropped by the coordinator (their
        steps re-run elsewhere) and come back when they restart; a lost ps fails the run."""
        cfg, coordinator = self.train_config, self.coordinator
        per_worker = coordinator.create_per_worker_dataset(self.dataset_factory(self.input_config.batch_size))
        iterator = iter(per_worker)
        worker_step = self.make_worker_step()
        step = int(self.step.numpy())
        chunk_limit = min(cfg.log_every_steps, cfg.save_every_steps or cfg.log_every_steps)
        first = True
        while step < cfg.steps:
            reason = self._stop_reason(stop, started)
            if reason:
                return reason
            # One step first (tracing), then chunks ending on multiples of the log/save interval.
            chunk = 1 if first else min(cfg.steps - step, chunk_limit - step % chunk_limit)
            t0 = time.perf_counter()
            results = [coordinator.schedule(worker_step, args=(iterator,)) for _ in range(chunk)]
            coordinator.join()
            seconds = time.perf_counter() - t0
            losses = [float(r.fetch()) for r in results]
            if not self.uses_cache:
                self.encoder_forward_images += chunk * self.batch_size
            step = int(self.step.numpy())
            if first:
                first = False
                log.info("first step (graph tracing on the workers) took %.1f s", seconds)
            else:
                window = _Window()
                for loss in losses:
                    window.add(loss, 0.0, seconds / chunk, self.batch_size)
                self._report(step, window, summaries)
            if cfg.histogram_every_steps and step // cfg.histogram_every_steps != (step - chunk) // \
                    cfg.histogram_every_steps:
                summaries.histograms(step, self.model)
            if schedule.due(step):
                self.checkpoints.save()
                schedule.saved(step)
        return None

    def _workers(self) -> int:
        return len(self.coordinator._cluster.workers) if self.coordinator else 1

    def _optimizer_variables(self) -> list:
        optimizers = [self.optimizer] + ([self.encoder_optimizer] if self.encoder_optimizer else [])
        return [v for o in optimizers for v in o.variables]

    def _report(self, step: int, window: _Window, summaries: TrainSummaries) -> None:
        lr = current_learning_rate(self.optimizer)
        values = {
            "loss": window.mean_loss,
            "learning_rate": lr,
            "examples_per_sec": window.examples_per_sec,
            "input_wait_fraction": window.wait_fraction,
        }
        if self.encoder_optimizer is not None:
            values["inception_learning_rate"] = current_learning_rate(self.encoder_optimizer)
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


# What the distributed runtime raises when a ps task or the connection to it is gone.
_CLUSTER_ERRORS = (tf.errors.UnavailableError, tf.errors.AbortedError, tf.errors.CancelledError,
                   tf.errors.DeadlineExceededError)


def _cluster_failure(exc: Exception) -> ClusterError:
    """One line naming the unreachable task(s) — found in TensorFlow's many-line gRPC error."""
    text = str(exc)
    lost = sorted({f"/job:{job}/task:{task}" for job, task in
                   re.findall(r"remote target /job:(\w+)/replica:\d+/task:(\d+)", text)})
    ps = [t for t in lost if t.startswith("/job:ps/")]
    if ps:
        what = f"parameter server {', '.join(ps)} is unreachable"
    elif lost:
        what = f"{', '.join(lost)} unreachable"
    else:
        what = (text.strip().splitlines() or [type(exc).__name__])[0][:240]
    return ClusterError(f"the training cluster failed: {what} ({type(exc).__name__}); restart the failed "
                        "task(s) and this command — training resumes from the last checkpoint")
