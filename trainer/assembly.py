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
from pathlib import Path
from typing import Any

from showtell.captioning.config import InputConfig, ModelConfig
from showtell.common import exposition
from showtell.common.errors import DataError
from showtell.common.locks import DirectoryLock
from showtell.common.model_dir import RECORD_SECTIONS, ModelDir
from showtell.trainer.config import ComputeConfig
from showtell.trainer.experiment import EarlyStopSettings, TrainExperiment, keys, settings
from showtell.trainer.following import follow
from showtell.trainer.loop.signals import StopRequest

log = logging.getLogger(__name__)
XLA_CAPTION_MULTIPLE = 8  # words: a synthetic caption (≤ 20) meets 3 lengths, a COCO one (≤ 50) 7
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
    from showtell.trainer.distribution.placement import locate

    site = locate(experiment.distribution, os.environ.get("TF_CONFIG"))
    if site.serves:
        return _serve(site.cluster, stop)
    model_dir = ModelDir(experiment.source.model_dir)
    if not site.is_chief:  # a multi-worker worker: writes scratch copies
        return _train_task(experiment, stop, site, model_dir)
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


def _train_task(experiment: TrainExperiment, stop: StopRequest, site, model_dir: ModelDir) -> int:
    from showtell.trainer.distribution.cluster import wait_for_ps
    from showtell.trainer.distribution.placement import place
    from showtell.trainer.loop.prometheus import TrainerMetrics
    from showtell.trainer.trainer import Trainer

    if site.name == "parameter_server" and not wait_for_ps(site.cluster, stop):
        code = stop.exit_code(finished=False)
        log.info("stopped (%s) while waiting for the parameter servers: nothing was trained, "
                 "nothing to save; exit %d (not finished)", stop.reason, code)
        return code
    # The chief's figures (a port in use: one line, before the model is built).
    endpoint = exposition.serve("trainer", experiment.monitoring) if site.is_chief else None
    try:
        placement = place(site, experiment.distribution.devices)
        task = build_task(experiment, placement, model_dir)
        stop.time_limit(experiment.train.max_seconds)  # counted from here, as before
        encoder = experiment.followed_encoder
        trainer = Trainer(task, model_dir, trainer_settings(experiment), placement,
                          metrics=TrainerMetrics(endpoint.registry) if endpoint else None,
                          actions=[follow.EncoderWatch(encoder, stop, experiment.follow.preview_secs)]
                          if encoder is not None else [])
        listener = _early_stop(experiment.early_stop, stop, model_dir) if site.is_chief else None
        try:
            result = trainer.run(stop)
        finally:
            if listener is not None:
                listener.close()
        if result.stopped_by in (follow.ENCODER_REPLACED, follow.PREVIEW_DONE):
            return _next_encoder(encoder, model_dir, stop, result)  # still scraped while it waits
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


def trainer_settings(experiment: TrainExperiment):
    """What the ``Trainer`` reads of the experiment besides its task."""
    from showtell.trainer.trainer import TrainerSettings

    return TrainerSettings(inception_weights=experiment.source.inception_weights,
                           profile_steps=experiment.runtime.profile_steps,
                           recorded=settings(experiment), keys=keys())


def build_task(experiment: TrainExperiment, placement=None, model_dir: ModelDir | None = None):
    """The ``CaptionTask`` of ``experiment`` where ``placement`` puts it (default: the current
    strategy), nothing written: the dataset read, the model dir's record checked, the phase
    decided, the run seeded.  Parameter-server workers each build their own input pipeline and
    must not share a seed (every worker would read the same examples)."""
    import tensorflow as tf

    from showtell.captioning.model.restoring import check_model_dir, trained_vocabulary_size
    from showtell.trainer.step.task import CaptionTask, TaskSections, TrainData
    from showtell.trainer.step.transfer import decide_phase

    source = experiment.source
    if model_dir is None and source.model_dir is not None:
        model_dir = ModelDir(source.model_dir)
    data = TrainData.read(source.data)
    phase = decide_phase(train_inception=source.train_inception, inception_weights=source.inception_weights,
                         recorded_init=model_dir.encoder_init() if model_dir else None,
                         cache_enabled=experiment.cache.enabled, optimizer=experiment.optimizer)
    recorded = trained_vocabulary_size(model_dir, data.vocab, data.dir) if model_dir is not None else None
    model = resolve_model_config(experiment.model, data.manifest, data.dir, source.image_size, recorded)
    if model_dir is not None:
        check_model_dir(model_dir, model, experiment.optimizer.name)
    independent = placement is not None and placement.coordinator is not None
    sections = TaskSections(
        model=dataclasses.replace(model, train_inception=phase.trains_encoder),
        input=task_input(experiment.input, experiment.compute, independent),
        optimizer=experiment.optimizer, train=experiment.train, compute=experiment.compute,
        cache=experiment.cache)
    tf.keras.utils.set_random_seed(experiment.train.seed)
    return CaptionTask(sections, data, phase, placement.strategy if placement else None)


def resolve_model_config(config: ModelConfig, manifest, data_dir: Path, image_size: int | None,
                         vocab_size: int | None = None) -> ModelConfig:
    """Fill vocab and image size from the dataset (``vocab_size``: the model dir's, when it goes
    on in its own vocabulary); refuse sizes the data cannot serve."""
    size = image_size or manifest.image_size or config.image_size
    if manifest.image_size and size > manifest.image_size:
        raise DataError(
            f"--image-size {size}: the images in {data_dir} are {manifest.image_size} px and would be "
            f"upsampled; rebuild the data with --image-size {size} or pass --image-size {manifest.image_size}"
        )
    return dataclasses.replace(config, vocab_size=vocab_size or manifest.vocab_size, image_size=size)


def task_input(config: InputConfig, compute: ComputeConfig, independent_workers: bool) -> InputConfig:
    """Parameter-server workers read with no shared seed (each would read the same examples);
    under XLA, caption lengths round up to a few sizes (it compiles once for each)."""
    if independent_workers and config.seed is not None:
        config = dataclasses.replace(config, seed=None)
    if compute.jit_compile:
        config = dataclasses.replace(config, caption_multiple=XLA_CAPTION_MULTIPLE)
    return config


def resolved_sections(experiment: TrainExperiment) -> dict[str, Any]:
    """What ``experiment`` resolves to on this machine (the phase, the strategy, the global batch,
    the steps per call) and the versions — ``--print-config``'s sections besides the settings;
    {} unless its model dir is named and its dataset exists.  Nothing is written."""
    from showtell.captioning.data.manifest import MANIFEST
    from showtell.trainer import provenance
    from showtell.trainer.distribution.placement import locate, place

    source = experiment.source
    if source.model_dir is None or source.data is None or not (source.data / MANIFEST).is_file():
        return {}
    placement = place(locate(experiment.distribution, os.environ.get("TF_CONFIG")),
                      experiment.distribution.devices)
    task = build_task(experiment, placement)
    config = provenance.configuration(settings(experiment), task, placement.name,
                                      task.compute.loop_steps(task.uses_cache), encoder=False)
    return {k: config[k] for k in RECORD_SECTIONS}


def _next_encoder(encoder: Path, model_dir: ModelDir, stop: StopRequest, result) -> int:
    """A run that ended for ``--follow-encoder``: ``RESTART`` once a newer encoder is there
    (after a preview, the wait for it is asleep); a signal while waiting exits as a signal does."""
    log.info("stopped at step %d (from %d) after %s", result.final_step, result.start_step, result.stopped_by)
    if result.stopped_by == follow.PREVIEW_DONE:
        started_from = (model_dir.encoder_init() or {}).get("sha256", "")
        if not (stop.resume() and follow.wait_for_newer(encoder, started_from, stop)):
            code = stop.exit_code(finished=False)
            log.info("stopped (%s) while waiting for the final encoder: exit %d", stop.reason, code)
            return code
    log.info("starting again on the final encoder")
    return RESTART


def _early_stop(e: EarlyStopSettings, stop: StopRequest, model_dir: ModelDir):
    """``--stop-when``'s listener to the evaluator, started; None without the flag."""
    if not e.stop_when:
        return None
    from showtell.api.transport import ClientSecurity
    from showtell.trainer.following.early_stop import EarlyStop, StopWhen

    security = ClientSecurity(e.ca, e.auth_token_file, e.tls_server_name)
    return EarlyStop(StopWhen.parse(e.stop_when, e.patience, e.by), e.evaluator, stop, security,
                     run=lambda: model_dir.run_id).start()


def _serve(cluster, stop: StopRequest) -> int:
    """A ps or worker task of a parameter-server cluster: serve until SIGTERM/SIGINT, then exit
    128 + the signal.  Never 0: a server is part of a job that is not done while it runs — a
    Kubernetes Job whose evicted worker exited 0 would count it complete and never replace it."""
    from showtell.trainer.distribution.placement import serve

    stop.action = "stopping the server"
    server = serve(cluster)
    log.info("serving %s:%d at %s until stopped", cluster.task_type, cluster.task_index, server.target)
    while not stop.wait(3600):  # sleeps until a signal sets it
        pass
    code = stop.exit_code(finished=False)
    log.info("stopping %s:%d (%s): exit %d", cluster.task_type, cluster.task_index, stop.reason, code)
    return code
