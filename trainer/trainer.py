"""One training run of a model dir: restore or start, train to ``--steps``, save, say how it ended.

``Trainer`` composes the parts: the task (``step/task.py``: model, optimizers, datasets, steps —
built, not run), a runner for the strategy (``loop/runners.py``), the controller's loop
(``loop/controller.py``) with its actions (``loop/actions.py``).  It owns the run's state and what
happens once per run — the checkpoints (and a non-chief's scratch dir), the feature cache, the
rates a resume sets back, the encoder's starting weights, the final checkpoint — and, through the
model dir (``ModelDir``), the run's record: its begin, revisions, end and finished marker.  It
turns the distributed runtime's errors into one line.

``steps`` is a total: training runs until the global step (restored from the newest
checkpoint) reaches it, so re-running a crashed command finishes the same run.
"""

from __future__ import annotations

import logging
import shutil
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import tensorflow as tf

from showtell.captioning.config import WEIGHTS_NONE
from showtell.captioning.data.dataset import VOCAB
from showtell.captioning.data.feature_cache import BuildStats, FeatureCache, cache_key, ensure_cache
from showtell.captioning.weights.encoder import load_encoder_weights, weights_digest
from showtell.common import logs
from showtell.common.errors import DataError
from showtell.common.model_dir import ModelDir
from showtell.common.processes import keep_until_exit
from showtell.common.setting_sources import settings_yaml
from showtell.common.tracking import revision_tags, run_params
from showtell.trainer import provenance
from showtell.trainer.distribution.cluster import cluster_failure
from showtell.trainer.distribution.placement import Placement, variable_placement
from showtell.trainer.loop.actions import ProfileSteps, StepReport, WeightHistograms
from showtell.trainer.loop.checkpoints import Checkpoints, SaveSchedule
from showtell.trainer.loop.controller import Action, Controller
from showtell.trainer.loop.prometheus import TrainerFigures
from showtell.trainer.loop.runners import ParameterServerRunner, SynchronousRunner
from showtell.trainer.loop.signals import StopRequest
from showtell.trainer.loop.summaries import TrainSummaries
from showtell.trainer.loop.tracking import TrainTracking
from showtell.trainer.step.optimizer import restore_configured_rates
from showtell.trainer.step.task import CaptionTask

log = logging.getLogger(__name__)

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


@dataclass(frozen=True)
class TrainerSettings:
    """What a run reads of its experiment besides the task: the encoder's start for a new model dir,
    the profiled steps, and the settings its record keeps (the assembly reads them off the
    experiment)."""

    inception_weights: str = WEIGHTS_NONE
    profile_steps: tuple[int, int] | None = None
    # Every setting by its flag's dest, as the run's record holds it (None: nothing recorded — benches),
    # and their dotted keys (the recorded YAML's sections).
    recorded: Mapping[str, Any] | None = None
    keys: Mapping[str, str] = field(default_factory=dict)


class Trainer:
    """Trains ``task`` to its ``TrainConfig.steps`` where ``placement`` puts it."""

    def __init__(self, task: CaptionTask, model_dir: ModelDir, settings: TrainerSettings,
                 placement: Placement, *, figures: TrainerFigures | None = None,
                 actions: Sequence[Action] = (), tracking: TrainTracking | None = None) -> None:
        """
        Args:
          task: model, optimizers, data and steps of the run (built by ``assembly.build_task``).
          model_dir: where the run writes its checkpoints and — the chief — its record.
          settings: the run's own settings (``TrainerSettings``).
          placement: the strategy, why, this task's cluster and (parameter_server) its coordinator.
          figures: the Prometheus figures to keep (``--prometheus-port``), or None.
          actions: more controller actions, after the trainer's own (``--follow-encoder``'s watch).
          tracking: the run's MLflow run (``--tracking-uri``; the chief's), begun here, ended by the
            assembly (which sees how the run ended, crashes included).
        """
        self.task, self.model_dir, self.settings, self.placement = task, model_dir, settings, placement
        self.figures, self.extra_actions, self.tracking = figures, list(actions), tracking
        self.is_chief = placement.is_chief
        self.checkpoints, self.scratch = task_checkpoints(task, model_dir.path, self.is_chief)

    def run(self, stop: StopRequest | None = None) -> TrainResult:
        task, cfg = self.task, self.task.train_config
        stop = StopRequest() if stop is None else stop
        encoder_init = self._restore_or_start()
        start_step = task.step
        if self.is_chief:
            self._begin(encoder_init)
            self._revise(start_step)
        self._announce(start_step)
        self._log_shape()
        runner = profiler = summaries = None
        try:
            cache, cache_build = open_data(task)
            runner = self._runner(cache)
            profiler = self._profiler()  # after the cache's build: the trace holds training steps
            summaries = TrainSummaries(self.model_dir.path if self.is_chief else None)
            controller = Controller(
                runner=runner, global_step=lambda: task.step, checkpoints=self.checkpoints,
                save_schedule=SaveSchedule(cfg.save_every_secs, cfg.save_every_steps,
                                           first_secs=cfg.first_save_secs), stop=stop,
                actions=[
                    StepReport(summaries=summaries, optimizer=task.optimizer, every=cfg.log_every_steps,
                               steps=cfg.steps, encoder_optimizer=task.encoder_optimizer,
                               publish=self.figures.report if self.figures else None,
                               track=self.tracking.scalars if self.tracking else None),
                    WeightHistograms(summaries=summaries, model=task.model, every=cfg.histogram_every_steps),
                    *([profiler] if profiler else []),
                    *([self.figures] if self.figures else []),
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
            if summaries is not None:
                summaries.close()
        final = task.step  # before the save: a ps stopped with the chief leaves once it lands
        path = self.checkpoints.save()
        keep_until_exit(runner)  # its tf.data iterator: destroying it can take half a minute
        if self.scratch is not None:
            shutil.rmtree(self.scratch, ignore_errors=True)
        log.info("encoder forward passes this run: %d for the feature cache, %d in training steps",
                 cache_build.forward_passes if cache_build else 0, runner.encoder_images)
        log.info("final checkpoint %s (step %d)%s%s", path, final,
                 f" after {stopped_by}" if stopped_by else "",
                 "" if self.is_chief else " — a non-chief scratch copy, deleted; the chief's is the real one")
        # Over on its own terms (not a signal, not another worker's stop): tell evaluators.
        finished = stopped_by is None or (stop.final and stopped_by == stop.reason)
        if self.is_chief:
            self.model_dir.end(final, path, stopped_by or f"step {cfg.steps} reached", finished,
                               record=self.settings.recorded is not None)
        return TrainResult(start_step, final, path, stopped_by, finished)

    def _profiler(self) -> ProfileSteps | None:
        """``--profile-steps``' trace on the chief, started when its range begins at this step."""
        profile = self.settings.profile_steps
        if not (profile and self.is_chief):
            return None
        profiler = ProfileSteps(logdir=self.model_dir.path / "train", first=profile[0], last=profile[1])
        profiler(self.task.step)  # a range that starts with this run's first step
        return profiler

    def _announce(self, step: int) -> None:
        """Where the run is, for what reads it from outside: the run id in every JSON log record,
        the step and each save's figures for Prometheus (``--prometheus-port``)."""
        logs.CONTEXT["run"] = self.model_dir.run_id or ""
        if self.figures is not None:
            self.figures.start(step, self.task.batch_size, logs.CONTEXT["run"])
            self.checkpoints.on_save = self.figures.saved

    def _log_shape(self) -> None:
        task, replicas, workers = self.task, self.task.strategy.num_replicas_in_sync, self.placement.workers
        log.info(
            "training to step %d: global batch %d = %d per replica × %d replica%s%s, %d steps/epoch, "
            "images %d px, vocab %d", task.train_config.steps, task.batch_size, task.input_config.batch_size,
            replicas, "" if replicas == 1 else "s",
            f" (each of {workers} workers steps on its own)" if self.placement.coordinator else "",
            task.steps_per_epoch, task.model_config.image_size, task.model_config.vocab_size,
        )

    def _runner(self, cache: FeatureCache | None) -> SynchronousRunner | ParameterServerRunner:
        task, coordinator = self.task, self.placement.coordinator
        if coordinator is None:
            steps = task.compute.loop_steps(task.uses_cache)
            log.info("up to %d step%s per call (--steps-per-loop)", steps, "" if steps == 1 else "s")
            return SynchronousRunner(task=task, dataset=task.dataset(cache), steps_per_loop=steps)
        cfg = task.train_config
        return ParameterServerRunner(task=task, dataset_fn=task.dataset_factory(task.input_config.batch_size,
                                                                                 cache),
                                     coordinator=coordinator, workers=self.placement.workers,
                                     steps_per_loop=min(cfg.log_every_steps,
                                                        cfg.save_every_steps or cfg.log_every_steps))

    def _restore_or_start(self):
        """Restore the newest checkpoint, or load the encoder's starting weights: the load's
        record when starting, None when resumed."""
        task, weights, placement = self.task, self.settings.inception_weights, self.placement
        encoder_init = None
        restored = self.checkpoints.restore_latest()
        if restored is None:
            # Before anything is written: a bad weights file leaves the model dir untouched.
            encoder_init = load_encoder_weights(task.model.encoder, weights)
            log.info("no checkpoint in %s: starting from scratch%s", self.model_dir,
                     f", encoder from {weights}" if encoder_init.pretrained else "")
        else:
            log.info("resumed from %s at step %d", self.checkpoints.restored_from, restored)
            for change in restore_configured_rates(task.rates, task.strategy):
                log.info("%s from the flags", change)
            if weights != WEIGHTS_NONE:
                log.info("%s not applied: the model dir's own checkpoint carries the encoder "
                         "(pretrained weights only initialise a new model dir)", weights)
        log.info("%s", task.phase.describe())
        log.info("strategy %s (%s)", placement.name, placement.why)
        variables = task.model.weights + task.optimizer_variables()
        log.info("placement: %s", variable_placement(task.strategy, variables,
                                                     placement.workers if placement.coordinator else None))
        return encoder_init

    def _revise(self, step: int) -> None:
        """The run's whole configuration, or what changed since its last start (``provenance``)."""
        recorded = self.settings.recorded
        if recorded is None:
            return
        task = self.task
        config = provenance.configuration(recorded, task, self.placement.name,
                                          task.compute.loop_steps(task.uses_cache))
        changed = self.model_dir.revise(config, step, lambda header, sections: settings_yaml(
            recorded, header, sections, dict(self.settings.keys)))
        if changed:
            log.info("resumed with changed settings, recorded in %s: %s", ModelDir.RUNS, "; ".join(changed))
        self._track()  # the run recorded: the tracker is told of it

    def _track(self) -> None:
        """The MLflow run begins or resumes: the run's settings (params, when it is created), its
        revisions (tags)."""
        if self.tracking is None:
            return
        run_id, model_dir = self.model_dir.run_id or "", self.model_dir
        self.tracking.begin(run_id, params=run_params(model_dir.run_settings(run_id)),
                            tags={"showtell.model_dir": str(model_dir),
                                  **revision_tags(model_dir.run_record(run_id))})

    def _begin(self, encoder_init) -> None:
        """The chief's once-per-run writes: clear the finished marker; in a new model dir, the
        run's metadata, the encoder-init report and the vocabulary."""
        task, model_dir = self.task, self.model_dir
        if model_dir.clear_finished():
            log.info("training again in %s: its finished marker is removed until this run ends", model_dir)
        if encoder_init is None:
            return
        data = {"dir": str(task.data_dir), "builder": task.manifest.builder,
                "vocab_size": task.manifest.vocab_size, "image_size": task.manifest.image_size}
        run_id = model_dir.begin(task.model_config.shape_fields(), data, encoder_init.metadata(),
                                 optimizer=task.optimizer_config.name)
        log.info("run %s starts in %s", run_id, model_dir)
        if encoder_init.pretrained:
            model_dir.keep_encoder_report(encoder_init.report())
        model_dir.keep_vocabulary(task.data_dir / VOCAB)


def task_checkpoints(task: CaptionTask, model_dir: Path,
                     is_chief: bool = True) -> tuple[Checkpoints, Path | None]:
    """The run's checkpoints of ``task``'s state, and the scratch dir a non-chief writes its own
    into (None for the chief): multi-worker tasks must all save (the save may run collectives),
    and every task restores from the shared model dir."""
    scratch = None if is_chief else Path(tempfile.mkdtemp(prefix="showtell-worker-"))
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
