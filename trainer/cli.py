"""``showtell train`` / ``python -m showtell.trainer`` — flags → configs → ``Trainer.run``.

The configuration flags come from the config dataclasses (``showtell.captioning.config``);
written here are only the flags that are not configuration: where the data and model live,
how the run is distributed, and whom to follow for early stop.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from pathlib import Path

from showtell.api.transport import ClientSecurity, add_client_arguments
from showtell.captioning.config import (
    MIN_IMAGE_SIZE,
    WEIGHTS_IMAGENET,
    WEIGHTS_NONE,
    CacheConfig,
    InputConfig,
    ModelConfig,
)
from showtell.common import exposition
from showtell.common.errors import ShowtellError
from showtell.common.exposition import MonitoringConfig
from showtell.common.flags import (
    Parser,
    add_config_file_flag,
    add_config_flags,
    add_keys,
    add_verbose_flag,
    boolean,
    flag_type,
    hide_flags,
    or_auto,
    parse_args,
    positive_float,
    positive_int,
    run_command,
    settings_yaml,
    start_command,
)
from showtell.common.locks import DirectoryLock
from showtell.trainer import follow
from showtell.trainer.cluster import STRATEGIES  # no TensorFlow import: --help stays instant
from showtell.trainer.config import ComputeConfig, OptimizerConfig, TrainConfig
from showtell.trainer.experiment import (
    StepRange,
    TrainExperiment,
    from_flags,
    keys,
)

PROG = "showtell train"
log = logging.getLogger(__name__)
CONFIGS = (TrainConfig, InputConfig, ModelConfig, OptimizerConfig, CacheConfig, ComputeConfig)


@flag_type("image size")
def _image_size(text: str) -> int:
    value = positive_int(text)
    if value < MIN_IMAGE_SIZE:
        raise argparse.ArgumentTypeError(f"must be ≥ {MIN_IMAGE_SIZE}, Inception v3's minimum (got {text})")
    return value


@flag_type("device list")
def _device_list(text: str) -> list[str]:
    devices = [d.strip() for d in text.split(",") if d.strip()]
    if not devices:
        raise argparse.ArgumentTypeError(f"expected DEVICE[,DEVICE…] such as GPU:0,GPU:1 (got '{text}')")
    return devices


@flag_type("step range A:B")
def _step_range(text: str) -> StepRange:
    first, _, last = text.partition(":")
    try:
        a, b = int(first), int(last)
    except ValueError:
        a = b = 0
    if not 1 <= a <= b:
        raise argparse.ArgumentTypeError(f"expected A:B with 1 ≤ A ≤ B, e.g. 100:110 (got '{text}')")
    return StepRange(a, b)


def add_arguments(p: argparse.ArgumentParser) -> None:
    # required, but not by argparse: --print-config prints a config without them (run() checks)
    p.add_argument("--data", type=Path, help="dataset directory (from `showtell data`); required")
    p.add_argument("--model-dir", type=Path, help="checkpoints and summaries go here; required")
    p.add_argument("--image-size", type=_image_size,
                   help="model input pixels (default: the dataset's image size)")
    p.add_argument("--inception-weights", default=WEIGHTS_NONE, metavar="SOURCE",
                   help="encoder start for a new model dir: a Keras .h5/.weights.h5 file, a TF-slim "
                        f"inception_v3.ckpt, {WEIGHTS_IMAGENET} (download) or {WEIGHTS_NONE} (default)")
    p.add_argument("--train-inception", type=or_auto(boolean),
                   help="train the encoder (phase 2); default (auto) false for a pretrained encoder "
                        "(phase 1, frozen), true from scratch")
    p.add_argument("--follow-encoder", type=boolean, default=False,
                   help="wait for the --inception-weights file, and when a pretraining writes a newer "
                        "encoder there, end the run and start a new one on it (the run before is kept "
                        "in <model-dir>-preview): a trainer started beside `showtell pretrain "
                        "--first-save-after`, as compose does")
    p.add_argument("--preview-secs", type=positive_float, default=60.0, metavar="S",
                   help="with --follow-encoder, on a first encoder (its pretraining not done): train S "
                        "seconds, then wait, asleep, for the final one (the pretraining gets the CPU "
                        "back); default 60")
    for config in (*CONFIGS, MonitoringConfig):
        add_config_flags(p.add_argument_group(f"{config.__doc__.splitlines()[0].rstrip('.')}"), config)
    e = p.add_argument_group("early stop (follows an evaluator)")
    e.add_argument("--stop-when", metavar="'METRIC>=X'",
                   help="stop (final checkpoint, exit 0) when the evaluator reports this, e.g. 'cider>=0.9' "
                        "or 'loss<=2.1'")
    e.add_argument("--patience", type=positive_int, default=1,
                   help="consecutive qualifying evaluations needed (default 1)")
    e.add_argument("--stop-when-by", choices=("value", "interval"), default="value",
                   help="value: the metric itself meets the target (default); interval: its confidence "
                        "interval's far bound does — met beyond noise, later and surer")
    e.add_argument("--evaluator", metavar="HOST:PORT", help="the evaluator's gRPC address for --stop-when")
    add_client_arguments(e, prefix="evaluator-", what="--evaluator")
    d = p.add_argument_group("distribution (tf.distribute)")
    d.add_argument("--strategy", choices=STRATEGIES, default=os.environ.get("SHOWTELL_STRATEGY") or "auto",
                   help="auto: mirrored over several GPUs, else one_device; with a cluster, "
                        "parameter_server if it has ps tasks, else multi_worker (default: env "
                        "SHOWTELL_STRATEGY, else auto)")
    d.add_argument("--devices", type=_device_list, help="towers for mirrored / the device for one_device, "
                                                        "e.g. GPU:0,GPU:1 (default: all GPUs)")
    d.add_argument("--logical-cpus", type=positive_int,
                   help="split the CPU into N logical devices (towers without GPUs, for tests)")
    d.add_argument("--ps-hosts", help="h:p,… parameter servers (or TF_CONFIG)")
    d.add_argument("--worker-hosts", help="h:p,… workers")
    d.add_argument("--chief-host", help="h:p of the chief (parameter_server's coordinator)")
    d.add_argument("--job-name", help="this task's job: chief, worker or ps")
    d.add_argument("--task-index", type=int, help="this task's index in its job (default 0)")
    d.add_argument("--log-device-placement", action="store_true",
                   help="log every op's device (TensorFlow's own, very verbose)")
    p.add_argument("--profile-steps", type=_step_range, metavar="A:B",
                   help="write a TensorFlow profiler trace of global steps A to B into the model dir's "
                        "TensorBoard run (TensorBoard's Profile tab; pip install tensorboard-plugin-profile)")
    add_keys(p, keys(), sections="docs/cli.md lists them")
    add_config_file_flag(p, records=True, print_help=(
        "print the run's configuration as YAML --config reads back (every setting; and what it resolves "
        "to, when --data exists) and exit, training and writing nothing"))
    add_verbose_flag(p)
    hide_flags(p, EVERYDAY)


# What --help shows (one screen): the names ../DESIGN's command line promises, and what people
# type every day; every other setting works as before and by its dotted key (docs/cli.md).
EVERYDAY = ("help", "data", "model_dir", "steps", "batch_size", "image_size", "save_every_secs",
            "save_every_steps", "keep", "inception_weights", "train_inception", "strategy", "devices",
            "logical_cpus", "ps_hosts", "worker_hosts", "chief_host", "job_name", "task_index",
            "config", "print_config", "set", "learning_rate", "optimizer", "seed", "follow_encoder",
            "evaluator", "stop_when", "verbose", "log_format", "prometheus_port")


def experiment(args: argparse.Namespace) -> TrainExperiment:
    """The run's configuration, built once from the parsed flags (defaults, ``--config`` files and
    environment already applied); nothing past this module sees ``args``."""
    from showtell.trainer import run_config

    return from_flags(vars(args), run_config.settings(vars(args)))


def run(args: argparse.Namespace) -> int:
    problem = argument_problem(args)
    if problem:
        sys.stderr.write(f"{PROG}: error: {problem} (see --help)\n")
        return 2
    start_command(args)
    exp = experiment(args)
    if args.print_config:
        return run_command(PROG, lambda: _print_config(exp))
    code = run_command(PROG, lambda: _body(exp))
    if code == follow.RESTART and exp.follow.enabled:
        return follow.restart()  # returns only if the exec failed
    return code


def _body(exp: TrainExperiment) -> int:
    from showtell.trainer.signals import StopRequest

    stop = StopRequest().install()  # early: a SIGTERM during start-up still saves cleanly
    try:
        return _train(exp, stop)
    finally:
        stop.restore()


def _cluster(exp: TrainExperiment):
    """This task's cluster (None: a single process) and the strategy's name it resolves to."""
    from showtell.trainer import strategy as strategies
    from showtell.trainer.cluster import check_for_strategy, from_flags, from_tf_config

    d = exp.distribution
    cluster = from_flags(d.ps_hosts, d.worker_hosts, d.chief_host, d.job_name,
                         d.task_index) or from_tf_config(os.environ.get("TF_CONFIG"))
    name = strategies.resolve_name(d.strategy, cluster)
    check_for_strategy(cluster, name)
    strategies.configure_devices(d.logical_cpus, d.log_device_placement)
    if cluster is not None:
        log.info("this task: %s", cluster.describe())
    return cluster, name


def _train(exp: TrainExperiment, stop) -> int:
    """This task's part: a parameter server's or worker's server, or training."""
    cluster, name = _cluster(exp)
    if name == "parameter_server" and cluster.task_type != "chief":
        return _serve(cluster, stop)
    if cluster is not None and not cluster.is_chief:  # a multi-worker worker: writes scratch copies
        return _train_task(exp, stop, cluster, name)
    encoder = exp.followed_encoder
    if exp.follow.enabled and encoder is None:
        log.info("--follow-encoder: --inception-weights %s is not a file; nothing to follow",
                 exp.source.inception_weights)
    if encoder is not None and not follow.wait_for_encoder(encoder, stop):
        log.info("stopped (%s) while waiting for the encoder: nothing was trained; exit %d (not finished)",
                 stop.reason, stop.exit_code(finished=False))
        return stop.exit_code(finished=False)
    # One trainer per model dir, and the chief is the one that writes it.  Held until this
    # process ends, however it ends.
    with DirectoryLock(directory=exp.source.model_dir, role="trainer", flag="--model-dir"):
        if encoder is not None:
            follow.set_aside_other_encoders_run(exp.source.model_dir, encoder)
        return _train_task(exp, stop, cluster, name)


def _train_task(exp: TrainExperiment, stop, cluster, name: str) -> int:
    from showtell.trainer.cluster import wait_for_ps
    from showtell.trainer.prometheus import TrainerMetrics
    from showtell.trainer.training import Trainer

    if name == "parameter_server" and not wait_for_ps(cluster, stop):
        code = stop.exit_code(finished=False)
        log.info("stopped (%s) while waiting for the parameter servers: nothing was trained, "
                 "nothing to save; exit %d (not finished)", stop.reason, code)
        return code
    chief = cluster is None or cluster.is_chief
    # The chief's figures (a port in use: one line, before the model is built).
    endpoint = exposition.serve("trainer", exp.monitoring) if chief else None
    try:
        chosen, task = _task(exp, cluster, name)
        stop.time_limit(task.train_config.max_seconds)  # counted from here, as before
        encoder = exp.followed_encoder
        trainer = Trainer(task=task, coordinator=chosen.coordinator, profile_steps=exp.runtime.profile_steps,
                          workers=cluster.count("worker") if cluster else 1,
                          strategy_note=f"strategy {chosen.name} ({chosen.why})", strategy_name=chosen.name,
                          settings=exp.settings,
                          metrics=TrainerMetrics(endpoint.registry) if endpoint else None,
                          actions=[follow.EncoderWatch(encoder, stop, exp.follow.preview_secs)]
                          if encoder is not None else [])
        listener = _early_stop(exp, stop) if chief else None
        try:
            result = trainer.run(stop)
        finally:
            if listener is not None:
                listener.close()
        if result.stopped_by in (follow.ENCODER_REPLACED, follow.PREVIEW_DONE):
            return _next_encoder(exp, stop, result)  # still scraped while it waits
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


def _next_encoder(exp: TrainExperiment, stop, result) -> int:
    """A run that ended for ``--follow-encoder``: ``follow.RESTART`` once a newer encoder is there
    (after a preview, the wait for it is asleep); a signal while waiting exits as a signal does."""
    encoder = exp.followed_encoder
    log.info("stopped at step %d (from %d) after %s", result.final_step, result.start_step, result.stopped_by)
    if result.stopped_by == follow.PREVIEW_DONE:
        from showtell.captioning.model.modeldir import recorded_encoder_init

        started_from = (recorded_encoder_init(exp.source.model_dir) or {}).get("sha256", "")
        if not (stop.resume() and follow.wait_for_newer(encoder, started_from, stop)):
            code = stop.exit_code(finished=False)
            log.info("stopped (%s) while waiting for the final encoder: exit %d", stop.reason, code)
            return code
    log.info("starting again on the final encoder")
    return follow.RESTART


def _task(exp: TrainExperiment, cluster, name: str):
    """The strategy chosen and the ``CaptionTask`` built (nothing written yet)."""
    from showtell.trainer import strategy as strategies
    from showtell.trainer.task import CaptionTask

    chosen = strategies.choose(name, list(exp.distribution.devices or []) or None, cluster)
    source = exp.source
    task = CaptionTask(data_dir=source.data, model_dir=source.model_dir, train=exp.train,
                       input_config=exp.input, model=exp.model, optimizer=exp.optimizer, cache=exp.cache,
                       compute=exp.compute, strategy=chosen.strategy, image_size=source.image_size,
                       inception_weights=source.inception_weights, train_inception=source.train_inception,
                       is_chief=cluster is None or cluster.is_chief,
                       independent_workers=chosen.coordinator is not None)
    return chosen, task


def _print_config(exp: TrainExperiment) -> int:
    """``--print-config``: the settings as YAML that ``--config`` reads back to the same settings;
    given a model dir and a dataset that exists, then what they resolve to (the phase, the
    strategy, the global batch, the steps per call) and the versions, as sections ``--config``
    passes over.  Nothing is written; neither is needed for the settings."""
    from showtell.captioning.data.manifest import MANIFEST
    from showtell.trainer import run_config

    sections: dict[str, object] = {}
    source = exp.source
    if source.model_dir is not None and source.data is not None and (source.data / MANIFEST).is_file():
        cluster, name = _cluster(exp)
        chosen, task = _task(exp, cluster, name)
        config = run_config.configuration(exp.settings, task, chosen.name,
                                          task.compute.loop_steps(task.uses_cache), encoder=False)
        sections = {k: config[k] for k in run_config.SECTIONS}
    sys.stdout.write(settings_yaml(
        exp.settings, f"{PROG}: its settings (feed this file back: --config FILE); "
        "resolved and environment are what they came to, read by people, passed over by --config", sections,
        keys()))
    return 0


def _early_stop(exp: TrainExperiment, stop):
    """``--stop-when``'s listener to the evaluator, started; None without the flag."""
    e = exp.early_stop
    if not e.stop_when:
        return None
    from showtell.captioning.model.modeldir import read_run_id
    from showtell.trainer.early_stop import EarlyStop, StopWhen

    security = ClientSecurity(e.ca, e.auth_token_file, e.tls_server_name)
    model_dir = str(exp.source.model_dir)
    return EarlyStop(StopWhen.parse(e.stop_when, e.patience, e.by), e.evaluator, stop, security,
                     run=lambda: read_run_id(model_dir)).start()


def _serve(cluster, stop) -> int:
    """A ps or worker task of a parameter-server cluster: serve until SIGTERM/SIGINT, then exit
    128 + the signal.  Never 0: a server is part of a job that is not done while it runs — a
    Kubernetes Job whose evicted worker exited 0 would count it complete and never replace it."""
    from showtell.trainer.strategy import serve

    stop.action = "stopping the server"
    server = serve(cluster)
    log.info("serving %s:%d at %s until stopped", cluster.task_type, cluster.task_index, server.target)
    while not stop.wait(3600):  # sleeps until a signal sets it
        pass
    code = stop.exit_code(finished=False)
    log.info("stopping %s:%d (%s): exit %d", cluster.task_type, cluster.task_index, stop.reason, code)
    return code


def main(argv: list[str] | None = None) -> int:
    parser = Parser(prog=PROG, description="Train Show and Tell; checkpoints on a schedule.")
    add_arguments(parser)
    return run(parse_args(parser, argv))


def argument_problem(args: argparse.Namespace) -> str | None:
    """Flag combinations argparse cannot see."""
    missing = [flag for flag, value in (("--data", args.data), ("--model-dir", args.model_dir))
               if value is None]
    if missing and not args.print_config:
        return f"the following arguments are required: {', '.join(missing)}"
    if args.cache_variants > 1 and not args.augment:
        return "--cache-variants > 1 needs --augment true (the variants would be identical)"
    if args.stop_when and not args.evaluator:  # --evaluator alone is unused: compose always passes it
        return "--stop-when needs --evaluator HOST:PORT (the evaluator whose metrics it follows)"
    if args.stop_when:
        from showtell.trainer.early_stop import StopWhen

        try:
            StopWhen.parse(args.stop_when, args.patience)
        except ShowtellError as exc:
            return str(exc)
    return None
