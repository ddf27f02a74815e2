"""Where a training job is assembled, as Model Garden's ``train_lib``: experiment → placement →
model dir → task → trainer → actions (early stop, following an encoder, Prometheus), then run.  The
experiment stops here: below, each part receives only what it uses.  ``showtell train`` parses its
flags into a ``TrainExperiment`` and calls ``run``; a notebook calls it the same way::

    from pathlib import Path
    from showtell.trainer import TrainExperiment, run
    from showtell.trainer.experiment import Source
    run(TrainExperiment(source=Source(data=Path("data"), model_dir=Path("runs/m"))))

What the task must not do itself is done here: read the dataset and the model dir's record,
decide the phase, check the model dir, seed the run.
"""

from __future__ import annotations

import dataclasses
import logging
import os
from typing import TYPE_CHECKING, Any

from showtell.common import exposition
from showtell.common.locks import DirectoryLock
from showtell.common.model_dir import RECORD_SECTIONS, ModelDir
from showtell.common.tracking import require_client
from showtell.trainer.experiment import TrainExperiment, keys
from showtell.trainer.experiment import settings as recorded_settings
from showtell.trainer.following import follow
from showtell.trainer.loop.signals import StopRequest

if TYPE_CHECKING:
    from showtell.trainer.distribution.placement import Placement, Site
    from showtell.trainer.step.task import CaptionTask
    from showtell.trainer.trainer import Trainer, TrainResult

log = logging.getLogger(__name__)
RESTART = follow.RESTART  # ``run``'s code when a newer encoder is there: run it again (the command execs)


def run(experiment: TrainExperiment, stop: StopRequest | None = None) -> int:
    """Train ``experiment`` in this process: this task's part of it (a parameter server's or a
    worker's server, or training); returns the exit code — 0 done, 128 + a signal stopped early,
    ``RESTART`` when ``--follow-encoder`` found a newer encoder.  ``stop``: a ``StopRequest``
    already installed (default: one installed here, for SIGTERM and SIGINT, restored after)."""
    own = stop is None
    stop = StopRequest().install() if own else stop  # early: a SIGTERM during start-up still saves
    try:
        return _train(experiment, stop)
    finally:
        if own:
            stop.restore()


def _train(experiment: TrainExperiment, stop: StopRequest) -> int:
    from showtell.trainer.distribution.placement import locate, serve

    site = locate(experiment.distribution, os.environ.get("TF_CONFIG"))
    if site.serves:
        # Never 0: a server is part of a job that is not done while it runs — a Kubernetes Job
        # whose evicted worker exited 0 would count it complete and never replace it.
        serve(site.cluster, stop, ModelDir(experiment.source.model_dir),
              experiment.distribution.server_grace_secs)
        code = stop.exit_code(finished=False)
        log.info("stopping %s:%d (%s): exit %d", site.cluster.task_type, site.cluster.task_index, stop.reason,
                 code)
        return code
    model_dir = ModelDir(experiment.source.model_dir)
    if not site.is_chief:  # a multi-worker worker: writes scratch copies
        return _train_task(experiment, stop, site, model_dir)
    require_client(experiment.tracking)
    encoder = experiment.followed_encoder
    if experiment.follow.enabled and encoder is None:
        log.info("--follow-encoder: --inception-weights %s is not a file; nothing to follow",
                 experiment.source.inception_weights)
    if encoder is not None and not follow.wait_for_encoder(encoder, stop):
        log.info("stopped (%s) while waiting for the encoder: nothing was trained; exit %d (not finished)",
                 stop.reason, stop.exit_code(finished=False))
        return stop.exit_code(finished=False)
    # One trainer per model dir, and the chief is the one that writes it.  Held until this
    # process ends, however it ends.
    with DirectoryLock(directory=model_dir.path, role="trainer", flag="--model-dir"):
        if encoder is not None:
            follow.set_aside_other_encoders_run(model_dir, encoder)
        return _train_task(experiment, stop, site, model_dir)


def _train_task(experiment: TrainExperiment, stop: StopRequest, site: Site, model_dir: ModelDir) -> int:
    from showtell.trainer.distribution.placement import place
    from showtell.trainer.following.early_stop import EarlyStop
    from showtell.trainer.loop.prometheus import TrainerFigures
    from showtell.trainer.loop.tracking import TrainTracking
    from showtell.trainer.trainer import Trainer, TrainerSettings

    # The chief's figures (a port in use: one line, before the model is built).
    endpoint = exposition.serve("trainer", experiment.monitoring) if site.is_chief else None
    try:
        placement = place(site, experiment.distribution.devices, stop)
        if placement is None:
            code = stop.exit_code(finished=False)
            log.info("stopped (%s) while waiting for the parameter servers: nothing was trained, "
                     "nothing to save; exit %d (not finished)", stop.reason, code)
            return code
        task = build_task(experiment, placement, model_dir)
        stop.time_limit(experiment.train.max_seconds)  # counted from here, as before
        encoder = experiment.followed_encoder
        settings = TrainerSettings(inception_weights=experiment.source.inception_weights,
                                   profile_steps=experiment.runtime.profile_steps,
                                   recorded=recorded_settings(experiment), keys=keys())
        trainer = Trainer(task, model_dir, settings, placement,
                          figures=TrainerFigures(endpoint.registry) if endpoint else None,
                          actions=[follow.EncoderWatch(encoder, stop, experiment.follow.preview_secs)]
                          if encoder is not None else [],
                          tracking=TrainTracking(experiment.tracking)
                          if site.is_chief and experiment.tracking.enabled else None)
        listener = (EarlyStop.listen(experiment.early_stop, stop, lambda: model_dir.run_id)
                    if site.is_chief and experiment.early_stop.stop_when else None)
        result = _run_trainer(trainer, stop, listener)
        if result.stopped_by in (follow.ENCODER_REPLACED, follow.PREVIEW_DONE):
            return follow.next_encoder(encoder, model_dir, stop, result)  # still scraped while it waits
    finally:
        if endpoint is not None:
            endpoint.close()
    if result.finished:
        log.info("done: step %d → %d", result.start_step, result.final_step)
        return 0
    code = stop.exit_code(finished=False)
    log.info("stopped at step %d (from %d) by %s before finishing: exit %d — not done; started "
             "again, it resumes from its final checkpoint", result.final_step, result.start_step,
             result.stopped_by, code)
    return code


def _run_trainer(trainer: Trainer, stop: StopRequest, listener: Any) -> TrainResult:
    """``trainer.run``, then what listened to it closed and its MLflow run ended as it ended:
    FINISHED on its own terms, KILLED by a signal (preempted), FAILED by an exception."""
    tracking = trainer.tracking
    try:
        result = trainer.run(stop)
    except BaseException:
        if tracking is not None:
            tracking.end("FAILED")
        raise
    finally:
        if listener is not None:
            listener.close()
    if tracking is not None:
        tracking.end("FINISHED" if result.finished else "KILLED")
    return result


def build_task(experiment: TrainExperiment, placement: Placement | None = None,
               model_dir: ModelDir | None = None) -> CaptionTask:
    """The ``CaptionTask`` of ``experiment`` where ``placement`` puts it (default: the current
    strategy), nothing written: the dataset read, ``model_dir``'s record read and checked (None: a
    task of no model dir — benches, tests), the phase decided, the run seeded.  Parameter-server
    workers each build their own input pipeline and must not share a seed (every worker would
    read the same examples)."""
    import tensorflow as tf

    from showtell.captioning.data.dataset import TRAIN, read_split
    from showtell.captioning.model.restoring import model_to_train
    from showtell.trainer.step.task import CaptionTask, TaskSections, task_input
    from showtell.trainer.step.transfer import decide_phase

    source = experiment.source
    data = read_split(source.data, TRAIN)
    phase = decide_phase(train_inception=source.train_inception, inception_weights=source.inception_weights,
                         recorded_init=model_dir.encoder_init() if model_dir else None,
                         cache_enabled=experiment.cache.enabled, optimizer=experiment.optimizer)
    model = model_to_train(model_dir, experiment.model, data, source.image_size, experiment.optimizer.name)
    independent = placement is not None and placement.coordinator is not None
    sections = TaskSections(
        model=dataclasses.replace(model, train_inception=phase.trains_encoder),
        input=task_input(experiment.input, experiment.compute, independent),
        optimizer=experiment.optimizer, train=experiment.train, compute=experiment.compute,
        cache=experiment.cache)
    tf.keras.utils.set_random_seed(experiment.train.seed)
    return CaptionTask(sections, data, phase, placement.strategy if placement else None)


def resolved_sections(experiment: TrainExperiment) -> dict[str, Any]:
    """What ``experiment`` resolves to on this machine (the phase, the strategy, the global batch,
    the steps per call) and the versions — ``--print-config``'s sections besides the settings;
    {} unless its model dir is named and its dataset exists.  Nothing is written."""
    from showtell.captioning.data.dataset import MANIFEST
    from showtell.trainer import provenance
    from showtell.trainer.distribution.placement import locate, place

    source = experiment.source
    if source.model_dir is None or source.data is None or not (source.data / MANIFEST).is_file():
        return {}
    placement = place(locate(experiment.distribution, os.environ.get("TF_CONFIG")),
                      experiment.distribution.devices, StopRequest())
    task = build_task(experiment, placement, ModelDir(source.model_dir))
    config = provenance.configuration(recorded_settings(experiment), task, placement.name,
                                      task.compute.loop_steps(task.uses_cache), encoder=False)
    return {k: config[k] for k in RECORD_SECTIONS}
