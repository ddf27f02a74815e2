"""One training run of a model dir: restore or start, train to ``--steps``, save, say how it ended.

``Trainer`` composes the parts: the task (``task.py``: model, optimizers, datasets, steps —
built, not run), a runner for the strategy (``runners.py``), the controller's loop
(``controller.py``) with its actions (``actions.py``).  It owns the run's state and what happens
once per run — the checkpoints (and a non-chief's scratch dir), the feature cache, the rates a
resume sets back, the model dir's record of the run, the encoder's starting weights, the final
checkpoint and the finished marker — and turns the distributed runtime's errors into one line.

``steps`` is a total: training runs until the global step (restored from the newest
checkpoint) reaches it, so re-running a crashed command finishes the same run.
"""

from __future__ import annotations

import logging
import shutil
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import tensorflow as tf

from showtell.captioning.data.feature_cache import BuildStats, FeatureCache, cache_key, ensure_cache
from showtell.captioning.data.manifest import VOCAB
from showtell.captioning.model.modeldir import clear_finished, mark_finished, read_run_id, write_metadata
from showtell.captioning.weights.encoder import NONE, load_encoder_weights, weights_digest
from showtell.common import logs
from showtell.common.errors import DataError
from showtell.common.processes import keep_until_exit
from showtell.trainer import run_config
from showtell.trainer.distribution.cluster import cluster_failure
from showtell.trainer.distribution.strategy import Chosen, placement
from showtell.trainer.experiment import TrainExperiment
from showtell.trainer.loop.actions import ProfileSteps, StepReport, WeightHistograms
from showtell.trainer.loop.checkpoints import Checkpoints, SaveSchedule
from showtell.trainer.loop.controller import Action, Controller
from showtell.trainer.loop.prometheus import TrainerMetrics
from showtell.trainer.loop.runners import ParameterServerRunner, SynchronousRunner
from showtell.trainer.loop.signals import StopRequest
from showtell.trainer.loop.summaries import TrainSummaries
from showtell.trainer.step.optimizer import restore_configured_rates
from showtell.trainer.step.task import CaptionTask

log = logging.getLogger(__name__)

ENCODER_INIT_REPORT = "encoder-init.tsv"  # which tensor of the weights file went where

# What the distributed runtime raises when a ps task or the connection to it is gone.
_CLUSTER_ERRORS = (tf.errors.UnavailableError, tf.errors.AbortedError, tf.errors.CancelledError,
                   tf.errors.DeadlineExceededError)


@dataclass(frozen=True)
class TrainResult:
    start_step: int
    final_step: int
    checkpoint: str
    stopped_by: str | None  # None: reached --steps; otherwise the signal or time limit
    finished: bool = False  # ended on its own terms (steps, time limit, early stop): marked in the model dir


class Trainer:
    """Trains ``task`` to its ``TrainConfig.steps`` under its strategy."""

    def __init__(self, task: CaptionTask, experiment: TrainExperiment, *, chosen: Chosen | None = None,
                 workers: int = 1, metrics: TrainerMetrics | None = None, actions: Sequence[Action] = (),
                 record: bool = True) -> None:
        """
        Args:
          task: model, optimizers, data and steps of the run (built by ``train_lib.build_task``).
          experiment: the run's configuration: its model dir, encoder start and profile range, and
            — ``record`` — the whole of it, kept in ``<model-dir>/runs/`` by the chief.
          chosen: the strategy chosen, why, and (parameter-server training) its coordinator.
          workers: worker tasks of a parameter-server cluster.
          metrics: the Prometheus figures to keep (``--prometheus-port``), or None.
          actions: more controller actions, after the trainer's own (``--follow-encoder``'s watch).
          record: write the run's configuration and ends (False: benches, tests).
        """
        self.task, self.experiment, self.workers, self.metrics = task, experiment, workers, metrics
        self.model_dir = experiment.source.model_dir
        self.inception_weights = experiment.source.inception_weights
        self.coordinator = chosen.coordinator if chosen else None
        self.strategy_name = chosen.name if chosen else type(task.strategy).__name__
        self.strategy_note = (f"strategy {chosen.name} ({chosen.why})" if chosen
                              else f"strategy {type(task.strategy).__name__}")
        self.profile_steps, self.record = experiment.runtime.profile_steps, record
        self.extra_actions = list(actions)
        self.checkpoints, self.scratch = task_checkpoints(task, self.model_dir)

    def run(self, stop: StopRequest | None = None) -> TrainResult:
        task, cfg = self.task, self.task.train_config
        stop = StopRequest() if stop is None else stop
        encoder_init = self._restore_or_start()
        start_step = task.step
        if task.is_chief:
            self._record_run(encoder_init)
            self._record_configuration(start_step)
        self._announce(start_step)
        self._log_shape()
        summaries = TrainSummaries(self.model_dir if task.is_chief else None)
        runner = profiler = None
        try:
            cache, cache_build = open_data(task)
            runner = self._runner(cache)
            if self.profile_steps and task.is_chief:
                profiler = ProfileSteps(logdir=self.model_dir / "train", first=self.profile_steps[0],
                                        last=self.profile_steps[1])
                profiler(task.step)  # a range that starts with this run's first step
            controller = Controller(
                runner=runner, global_step=lambda: task.step, checkpoints=self.checkpoints,
                save_schedule=SaveSchedule(cfg.save_every_secs, cfg.save_every_steps,
                                           first_secs=cfg.first_save_secs), stop=stop,
                actions=[
                    StepReport(summaries=summaries, optimizer=task.optimizer, every=cfg.log_every_steps,
                               steps=cfg.steps, encoder_optimizer=task.encoder_optimizer,
                               publish=self.metrics.report if self.metrics else None),
                    WeightHistograms(summaries=summaries, model=task.model, every=cfg.histogram_every_steps),
                    *([profiler] if profiler else []),
                    *([self.metrics] if self.metrics else []),
                    *self.extra_actions,
                ],
                boundaries=[cfg.log_every_steps, cfg.save_every_steps, cfg.histogram_every_steps],
                marks=profiler.marks if profiler else (),
            )
            stopped_by = controller.train(cfg.steps)
        except DataError:
            self.checkpoints.save()  # keep the progress made before the bad record
            raise
        except _CLUSTER_ERRORS as exc:
            raise cluster_failure(exc) from exc
        finally:
            if profiler is not None:
                profiler.close()
            summaries.close()
        path = self.checkpoints.save()
        keep_until_exit(runner)  # its tf.data iterator: destroying it can take half a minute
        if self.scratch is not None:
            shutil.rmtree(self.scratch, ignore_errors=True)
        final = task.step
        log.info("encoder forward passes this run: %d for the feature cache, %d in training steps",
                 cache_build.forward_passes if cache_build else 0, runner.encoder_images)
        log.info("final checkpoint %s (step %d)%s%s", path, final,
                 f" after {stopped_by}" if stopped_by else "",
                 "" if task.is_chief else " — a non-chief scratch copy, deleted; the chief's is the real one")
        # Over on its own terms (not a signal, not another worker's stop): tell evaluators.
        finished = stopped_by is None or (stop.final and stopped_by == stop.reason)
        if task.is_chief:
            self._record_end(final, path, stopped_by or f"step {cfg.steps} reached", finished)
        return TrainResult(start_step, final, path, stopped_by, finished)

    def _announce(self, step: int) -> None:
        """Where the run is, for what reads it from outside: the run id in every JSON log record,
        the step and each save's figures for Prometheus (``--prometheus-port``)."""
        logs.CONTEXT["run"] = read_run_id(str(self.model_dir)) or ""
        if self.metrics is not None:
            self.metrics.start(step, self.task.batch_size, logs.CONTEXT["run"])
            self.checkpoints.on_save = self.metrics.saved

    def _log_shape(self) -> None:
        task, replicas = self.task, self.task.strategy.num_replicas_in_sync
        log.info(
            "training to step %d: global batch %d = %d per replica × %d replica%s%s, %d steps/epoch, "
            "images %d px, vocab %d", task.train_config.steps, task.batch_size, task.input_config.batch_size,
            replicas, "" if replicas == 1 else "s",
            f" (each of {self.workers} workers steps on its own)" if self.coordinator else "",
            task.steps_per_epoch, task.model_config.image_size, task.model_config.vocab_size,
        )

    def _record_end(self, step: int, path: str, reason: str, finished: bool) -> None:
        """The chief's: the finished marker (evaluators read it), and the run's end in its record."""
        model_dir = self.model_dir
        if finished:
            mark_finished(model_dir, step, path, reason)
        if self.record:
            run_config.ended(model_dir, read_run_id(str(model_dir)) or "", step, reason, finished)

    def _runner(self, cache: FeatureCache | None) -> SynchronousRunner | ParameterServerRunner:
        task = self.task
        if self.coordinator is None:
            steps = task.compute.loop_steps(task.uses_cache)
            log.info("up to %d step%s per call (--steps-per-loop)", steps, "" if steps == 1 else "s")
            return SynchronousRunner(task=task, dataset=task.dataset(cache), steps_per_loop=steps)
        cfg = task.train_config
        return ParameterServerRunner(task=task, dataset_fn=task.dataset_factory(task.input_config.batch_size,
                                                                                 cache),
                                     coordinator=self.coordinator, workers=self.workers,
                                     steps_per_loop=min(cfg.log_every_steps,
                                                        cfg.save_every_steps or cfg.log_every_steps))

    def _restore_or_start(self):
        """Restore the newest checkpoint, or load the encoder's starting weights: the load's
        record when starting, None when resumed."""
        task = self.task
        encoder_init = None
        restored = self.checkpoints.restore_latest()
        if restored is None:
            # Before anything is written: a bad weights file leaves the model dir untouched.
            encoder_init = load_encoder_weights(task.model.encoder, self.inception_weights)
            log.info("no checkpoint in %s: starting from scratch%s", self.model_dir,
                     f", encoder from {self.inception_weights}" if encoder_init.pretrained else "")
        else:
            log.info("resumed from %s at step %d", self.checkpoints.restored_from, restored)
            for change in restore_configured_rates(task.rates, task.strategy):
                log.info("%s from the flags", change)
            if self.inception_weights != NONE:
                log.info("%s not applied: the model dir's own checkpoint carries the encoder "
                         "(pretrained weights only initialise a new model dir)", self.inception_weights)
        log.info("%s", task.phase.describe())
        log.info("%s", self.strategy_note)
        log.info("placement: %s", placement(task.strategy, task.model.weights + task.optimizer_variables(),
                                            self.workers if self.coordinator else None))
        return encoder_init

    def _record_configuration(self, step: int) -> None:
        """The run's whole configuration, or what changed since its last start (``run_config``)."""
        if not self.record:
            return
        task = self.task
        config = run_config.configuration(self.experiment, task, self.strategy_name,
                                          task.compute.loop_steps(task.uses_cache))
        run_id = read_run_id(str(self.model_dir)) or ""
        changed = run_config.record(self.model_dir, run_id, config, step)
        run_config.record_yaml(self.model_dir, run_id, config, step)
        if changed:
            log.info("resumed with changed settings, recorded in %s: %s", run_config.RUNS, "; ".join(changed))

    def _record_run(self, encoder_init) -> None:
        """The chief's once-per-run writes: clear the finished marker; in a new model dir, the
        run's record, the encoder-init report and the vocabulary."""
        task = self.task
        self.model_dir.mkdir(parents=True, exist_ok=True)
        if clear_finished(self.model_dir):
            log.info("training again in %s: its finished marker is removed until this run ends",
                     self.model_dir)
        if encoder_init is None:
            return
        data = {"dir": str(task.data_dir), "builder": task.manifest.builder,
                "vocab_size": task.manifest.vocab_size, "image_size": task.manifest.image_size}
        run_id = write_metadata(self.model_dir, task.model_config, data, encoder_init.metadata(),
                                optimizer=task.optimizer_config.name)
        log.info("run %s starts in %s", run_id, self.model_dir)
        if encoder_init.pretrained:
            (self.model_dir / ENCODER_INIT_REPORT).write_text(encoder_init.report())
        # The vocabulary travels with the checkpoints: `showtell caption` needs no --data.
        shutil.copyfile(task.data_dir / VOCAB, self.model_dir / VOCAB)


def task_checkpoints(task: CaptionTask, model_dir: Path) -> tuple[Checkpoints, Path | None]:
    """The run's checkpoints of ``task``'s state, and the scratch dir a non-chief writes its own
    into (None for the chief): multi-worker tasks must all save (the save may run collectives),
    and every task restores from the shared model dir."""
    scratch = None if task.is_chief else Path(tempfile.mkdtemp(prefix="showtell-worker-"))
    return Checkpoints(model_dir, task.global_step, task.train_config.keep,
                       optional=task.checkpointed_optimizers(), write_dir=scratch, model=task.model), scratch


def open_data(task: CaptionTask) -> tuple[FeatureCache | None, BuildStats | None]:
    """The feature cache a task on it reads, built if missing — once the encoder's weights are in
    place (restored or loaded): the cache holds its outputs — and the build's figures (None when
    nothing was built).  (None, None) when the encoder trains."""
    if not task.uses_cache:
        if task.cache_config.enabled:
            log.info("feature cache not used: the encoder is training")
        return None, None
    cfg, size, config = task.cache_config, task.model_config.image_size, task.input_config
    return ensure_cache(
        Path(cfg.root) if cfg.root else task.data_dir / "feature-cache",
        cache_key(task.data_dir, task.files, weights_digest(task.model.encoder_weights), size, config,
                  cfg.variants),
        lambda images: task.model.features(images, training=False),
        task.files, size, config, cfg.batch_size,
    )
