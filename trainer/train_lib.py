"""One place that assembles a training job from its experiment, as Model Garden's ``train_lib``:
experiment → cluster and strategy → task → trainer → actions (early stop, following an encoder,
Prometheus), then run.  ``showtell train`` parses its flags into a ``TrainExperiment`` and calls
``run``; a notebook calls it the same way, with no argparse::

    from showtell.trainer import TrainExperiment, run
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
from showtell.trainer.config import ComputeConfig
from showtell.trainer.experiment import TrainExperiment
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


def cluster_and_strategy(experiment: TrainExperiment):
    """This task's cluster (None: a single process) and the strategy's name it resolves to; the
    devices configured (logical CPUs, placement logging) before TensorFlow starts."""
    from showtell.trainer.distribution import strategy as strategies
    from showtell.trainer.distribution.cluster import check_for_strategy, from_flags, from_tf_config

    d = experiment.distribution
    cluster = from_flags(d.ps_hosts, d.worker_hosts, d.chief_host, d.job_name,
                         d.task_index) or from_tf_config(os.environ.get("TF_CONFIG"))
    name = strategies.resolve_name(d.strategy, cluster)
    check_for_strategy(cluster, name)
    strategies.configure_devices(d.logical_cpus, d.log_device_placement)
    if cluster is not None:
        log.info("this task: %s", cluster.describe())
    return cluster, name


def build_task(experiment: TrainExperiment, strategy=None, *, is_chief: bool = True,
               independent_workers: bool = False):
    """The ``CaptionTask`` of ``experiment`` under ``strategy`` (default: the current one), nothing
    written: the dataset read, the model dir's record checked, the phase decided, the run seeded.
    ``independent_workers``: parameter-server workers, which each build their own input pipeline
    and must not share a seed (every worker would read the same examples)."""
    import tensorflow as tf

    from showtell.captioning.data.manifest import load_dataset
    from showtell.captioning.data.records import shard_files
    from showtell.captioning.model.modeldir import (
        check_model_dir,
        recorded_encoder_init,
        trained_vocabulary_size,
    )
    from showtell.trainer.step.task import CaptionTask, TaskSections, TrainData
    from showtell.trainer.step.transfer import decide_phase

    source, model_dir = experiment.source, experiment.source.model_dir
    manifest, vocab = load_dataset(source.data)
    data = TrainData(source.data, manifest, vocab, shard_files(source.data, "train"))
    phase = decide_phase(train_inception=source.train_inception, inception_weights=source.inception_weights,
                         recorded_init=recorded_encoder_init(model_dir) if model_dir else None,
                         cache_enabled=experiment.cache.enabled, optimizer=experiment.optimizer)
    recorded = trained_vocabulary_size(model_dir, vocab, source.data) if model_dir is not None else None
    model = resolve_model_config(experiment.model, manifest, source.data, source.image_size, recorded)
    if model_dir is not None:
        check_model_dir(model_dir, model, experiment.optimizer.name)
    sections = TaskSections(
        model=dataclasses.replace(model, train_inception=phase.trains_encoder),
        input=task_input(experiment.input, experiment.compute, independent_workers),
        optimizer=experiment.optimizer, train=experiment.train, compute=experiment.compute,
        cache=experiment.cache)
    tf.keras.utils.set_random_seed(experiment.train.seed)
    return CaptionTask(sections, data, phase, strategy, is_chief)


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
    from showtell.trainer import run_config

    source = experiment.source
    if source.model_dir is None or source.data is None or not (source.data / MANIFEST).is_file():
        return {}
    cluster, name = cluster_and_strategy(experiment)
    chosen, task = _chosen_task(experiment, cluster, name)
    config = run_config.configuration(experiment, task, chosen.name, task.compute.loop_steps(task.uses_cache),
                                      encoder=False)
    return {k: config[k] for k in run_config.SECTIONS}


def _chosen_task(experiment: TrainExperiment, cluster, name: str):
    from showtell.trainer.distribution import strategy as strategies

    chosen = strategies.choose(name, list(experiment.distribution.devices or []) or None, cluster)
    task = build_task(experiment, chosen.strategy, is_chief=cluster is None or cluster.is_chief,
                      independent_workers=chosen.coordinator is not None)
    return chosen, task


def _train(experiment: TrainExperiment, stop: StopRequest) -> int:
    cluster, name = cluster_and_strategy(experiment)
    if name == "parameter_server" and cluster.task_type != "chief":
        return _serve(cluster, stop)
    if cluster is not None and not cluster.is_chief:  # a multi-worker worker: writes scratch copies
        return _train_task(experiment, stop, cluster, name)
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
    with DirectoryLock(directory=experiment.source.model_dir, role="trainer", flag="--model-dir"):
        if encoder is not None:
            follow.set_aside_other_encoders_run(experiment.source.model_dir, encoder)
        return _train_task(experiment, stop, cluster, name)


def _train_task(experiment: TrainExperiment, stop: StopRequest, cluster, name: str) -> int:
    from showtell.trainer.distribution.cluster import wait_for_ps
    from showtell.trainer.loop.prometheus import TrainerMetrics
    from showtell.trainer.training import Trainer

    if name == "parameter_server" and not wait_for_ps(cluster, stop):
        code = stop.exit_code(finished=False)
        log.info("stopped (%s) while waiting for the parameter servers: nothing was trained, "
                 "nothing to save; exit %d (not finished)", stop.reason, code)
        return code
    chief = cluster is None or cluster.is_chief
    # The chief's figures (a port in use: one line, before the model is built).
    endpoint = exposition.serve("trainer", experiment.monitoring) if chief else None
    try:
        chosen, task = _chosen_task(experiment, cluster, name)
        stop.time_limit(experiment.train.max_seconds)  # counted from here, as before
        encoder = experiment.followed_encoder
        trainer = Trainer(task, experiment, chosen=chosen, workers=cluster.count("worker") if cluster else 1,
                          metrics=TrainerMetrics(endpoint.registry) if endpoint else None,
                          actions=[follow.EncoderWatch(encoder, stop, experiment.follow.preview_secs)]
                          if encoder is not None else [])
        listener = _early_stop(experiment, stop) if chief else None
        try:
            result = trainer.run(stop)
        finally:
            if listener is not None:
                listener.close()
        if result.stopped_by in (follow.ENCODER_REPLACED, follow.PREVIEW_DONE):
            return _next_encoder(experiment, stop, result)  # still scraped while it waits
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


def _next_encoder(experiment: TrainExperiment, stop: StopRequest, result) -> int:
    """A run that ended for ``--follow-encoder``: ``RESTART`` once a newer encoder is there
    (after a preview, the wait for it is asleep); a signal while waiting exits as a signal does."""
    encoder = experiment.followed_encoder
    log.info("stopped at step %d (from %d) after %s", result.final_step, result.start_step, result.stopped_by)
    if result.stopped_by == follow.PREVIEW_DONE:
        from showtell.captioning.model.modeldir import recorded_encoder_init

        started_from = (recorded_encoder_init(experiment.source.model_dir) or {}).get("sha256", "")
        if not (stop.resume() and follow.wait_for_newer(encoder, started_from, stop)):
            code = stop.exit_code(finished=False)
            log.info("stopped (%s) while waiting for the final encoder: exit %d", stop.reason, code)
            return code
    log.info("starting again on the final encoder")
    return RESTART


def _early_stop(experiment: TrainExperiment, stop: StopRequest):
    """``--stop-when``'s listener to the evaluator, started; None without the flag."""
    e = experiment.early_stop
    if not e.stop_when:
        return None
    from showtell.api.transport import ClientSecurity
    from showtell.captioning.model.modeldir import read_run_id
    from showtell.trainer.following.early_stop import EarlyStop, StopWhen

    security = ClientSecurity(e.ca, e.auth_token_file, e.tls_server_name)
    model_dir = str(experiment.source.model_dir)
    return EarlyStop(StopWhen.parse(e.stop_when, e.patience, e.by), e.evaluator, stop, security,
                     run=lambda: read_run_id(model_dir)).start()


def _serve(cluster, stop: StopRequest) -> int:
    """A ps or worker task of a parameter-server cluster: serve until SIGTERM/SIGINT, then exit
    128 + the signal.  Never 0: a server is part of a job that is not done while it runs — a
    Kubernetes Job whose evicted worker exited 0 would count it complete and never replace it."""
    from showtell.trainer.distribution.strategy import serve

    stop.action = "stopping the server"
    server = serve(cluster)
    log.info("serving %s:%d at %s until stopped", cluster.task_type, cluster.task_index, server.target)
    while not stop.wait(3600):  # sleeps until a signal sets it
        pass
    code = stop.exit_code(finished=False)
    log.info("stopping %s:%d (%s): exit %d", cluster.task_type, cluster.task_index, stop.reason, code)
    return code
