"""``showtell train`` / ``python -m trainer`` — flags → configs → ``Trainer.run``."""

from __future__ import annotations

import argparse
import logging
import os
import sys
from pathlib import Path

from showtell.captioning.config import (
    IM2TXT_INCEPTION_LEARNING_RATE,
    MIN_IMAGE_SIZE,
    OPTIMIZERS,
    WEIGHTS_IMAGENET,
    WEIGHTS_NONE,
    CacheConfig,
    InputConfig,
    ModelConfig,
    OptimizerConfig,
    TrainConfig,
    replace_some,
)
from showtell.trainer.cluster import STRATEGIES  # no TensorFlow import: --help stays instant

from showtell.api.transport import ClientSecurity, add_client_arguments
from showtell.common.errors import ShowtellError
from showtell.common.flags import (
    Parser,
    boolean,
    non_negative_float,
    positive_float,
    positive_int,
    quiet_tensorflow,
    run_command,
    setup_logging,
)

PROG = "showtell train"
log = logging.getLogger(__name__)


def _image_size(text: str) -> int:
    value = positive_int(text)
    if value < MIN_IMAGE_SIZE:
        raise argparse.ArgumentTypeError(f"must be ≥ {MIN_IMAGE_SIZE}, Inception v3's minimum (got {text})")
    return value


_image_size.__name__ = "image size"


def _fraction(text: str) -> float:
    value = float(text)
    if not 0.0 <= value < 1.0:
        raise argparse.ArgumentTypeError(f"must be in [0, 1) (got {text})")
    return value


_fraction.__name__ = "fraction"


def add_arguments(p: argparse.ArgumentParser) -> None:
    m, i, o, t, c = ModelConfig(), InputConfig(), OptimizerConfig(), TrainConfig(), CacheConfig()
    p.add_argument("--data", type=Path, required=True, help="dataset directory (from `showtell data`)")
    p.add_argument("--model-dir", type=Path, required=True, help="checkpoints and summaries go here")
    p.add_argument("--steps", type=positive_int, default=t.steps,
                   help=f"train until the global step reaches this total (default {t.steps})")
    p.add_argument("--max-seconds", type=positive_float, help="stop (and save) after this many seconds")
    p.add_argument("--batch-size", type=positive_int, default=i.batch_size,
                   help=f"examples per step (default {i.batch_size})")
    p.add_argument("--image-size", type=_image_size,
                   help="model input pixels (default: the dataset's image size)")
    p.add_argument("--embedding-size", type=positive_int, default=m.embedding_size)
    p.add_argument("--lstm-units", type=positive_int, default=m.lstm_units)
    p.add_argument("--inception-weights", default=WEIGHTS_NONE, metavar="SOURCE",
                   help="encoder start for a new model dir: a Keras .h5/.weights.h5 file, a TF-slim "
                        f"inception_v3.ckpt, {WEIGHTS_IMAGENET} (download) or {WEIGHTS_NONE} (default)")
    p.add_argument("--train-inception", type=boolean,
                   help="train the encoder (phase 2); default false for a pretrained encoder "
                        "(phase 1, frozen), true from scratch")
    p.add_argument("--inception-learning-rate", type=positive_float,
                   help="the encoder's constant rate while it trains (default "
                        f"{IM2TXT_INCEPTION_LEARNING_RATE}, im2txt's, when pretrained; from scratch it "
                        "follows --learning-rate)")
    p.add_argument("--feature-cache", type=boolean, default=c.enabled,
                   help="while the encoder is frozen, compute its features once per image and train "
                        "from them (default true)")
    p.add_argument("--cache-variants", type=positive_int, default=c.variants,
                   help=f"cached views per image: the plain one + K-1 augmented crops (default {c.variants})")
    p.add_argument("--cache-dir", help="where feature caches live (default <data>/feature-cache)")
    p.add_argument("--augment", type=boolean, default=i.augment,
                   help="scale-jitter crops and photometric noise on training images (default true)")
    p.add_argument("--deterministic-input", action="store_true",
                   help="reproducible example order (slower input); to compare runs step by step")
    p.add_argument("--lstm-dropout", type=_fraction, default=m.lstm_dropout,
                   help=f"dropout on LSTM input and output (default {m.lstm_dropout}, im2txt keep 0.7)")
    p.add_argument("--image-dropout", type=_fraction, default=m.image_dropout,
                   help=f"dropout on Inception's pooled output (default {m.image_dropout})")
    p.add_argument("--bn-momentum", type=positive_float, default=m.bn_momentum,
                   help=f"Inception batch-norm moving-average momentum (default {m.bn_momentum})")
    p.add_argument("--optimizer", choices=OPTIMIZERS, default=o.name,
                   help=f"default {o.name} (im2txt)")
    p.add_argument("--learning-rate", type=positive_float, default=o.learning_rate,
                   help=f"initial rate (default {o.learning_rate}, im2txt's SGD rate)")
    p.add_argument("--decay-factor", type=positive_float, default=o.decay_factor,
                   help=f"multiply the rate by this every --epochs-per-decay (default {o.decay_factor})")
    p.add_argument("--epochs-per-decay", type=non_negative_float, default=o.epochs_per_decay,
                   help=f"default {o.epochs_per_decay}; 0 keeps the rate constant")
    p.add_argument("--clip-gradients", type=non_negative_float, default=o.clip_gradients,
                   help=f"global-norm clip, 0 disables (default {o.clip_gradients})")
    p.add_argument("--save-every-secs", type=non_negative_float, default=t.save_every_secs,
                   help=f"checkpoint every S seconds, 0 disables (default {t.save_every_secs:g})")
    p.add_argument("--save-every-steps", type=positive_int, help="checkpoint every K steps")
    p.add_argument("--keep", type=positive_int, default=t.keep,
                   help=f"checkpoints kept on disk (default {t.keep})")
    p.add_argument("--log-every-steps", type=positive_int, default=t.log_every_steps)
    p.add_argument("--histogram-every-steps", type=positive_int, default=t.histogram_every_steps)
    p.add_argument("--shuffle-buffer", type=positive_int, default=i.shuffle_buffer)
    p.add_argument("--seed", type=int, default=t.seed)
    e = p.add_argument_group("early stop (follows an evaluator)")
    e.add_argument("--stop-when", metavar="'METRIC>=X'",
                   help="stop (final checkpoint, exit 0) when the evaluator reports this, e.g. 'cider>=0.9' "
                        "or 'loss<=2.1'")
    e.add_argument("--patience", type=positive_int, default=1,
                   help="consecutive qualifying evaluations needed (default 1)")
    e.add_argument("--evaluator", metavar="HOST:PORT", help="the evaluator's gRPC address for --stop-when")
    add_client_arguments(e, prefix="evaluator-", what="--evaluator")
    d = p.add_argument_group("distribution (tf.distribute)")
    d.add_argument("--strategy", choices=STRATEGIES, default="auto",
                   help="auto: mirrored over several GPUs, else one_device; with a cluster, "
                        "parameter_server if it has ps tasks, else multi_worker")
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
    p.add_argument("-v", "--verbose", action="store_true")


def configs(args: argparse.Namespace) -> tuple[ModelConfig, InputConfig, OptimizerConfig, TrainConfig]:
    model = replace_some(ModelConfig(), embedding_size=args.embedding_size, lstm_units=args.lstm_units,
                         bn_momentum=args.bn_momentum, lstm_dropout=args.lstm_dropout,
                         image_dropout=args.image_dropout)
    inputs = replace_some(InputConfig(), batch_size=args.batch_size, shuffle_buffer=args.shuffle_buffer,
                          seed=args.seed, augment=args.augment, deterministic=args.deterministic_input)
    optimizer = OptimizerConfig(
        name=args.optimizer, learning_rate=args.learning_rate, decay_factor=args.decay_factor,
        epochs_per_decay=args.epochs_per_decay, clip_gradients=args.clip_gradients,
        inception_learning_rate=args.inception_learning_rate,
    )
    train = TrainConfig(
        steps=args.steps, max_seconds=args.max_seconds, save_every_secs=args.save_every_secs or None,
        save_every_steps=args.save_every_steps, keep=args.keep, log_every_steps=args.log_every_steps,
        histogram_every_steps=args.histogram_every_steps, seed=args.seed,
    )
    return model, inputs, optimizer, train


def run(args: argparse.Namespace) -> int:
    problem = argument_problem(args)
    if problem:
        sys.stderr.write(f"{PROG}: error: {problem} (see --help)\n")
        return 2
    quiet_tensorflow()
    setup_logging(args.verbose)

    def body() -> int:
        from showtell.trainer import strategy as strategies
        from showtell.trainer.cluster import check_for_strategy, from_flags, from_tf_config
        from showtell.trainer.loop import Trainer
        from showtell.trainer.signals import StopRequest

        stop = StopRequest().install()  # early: a SIGTERM during start-up still saves cleanly
        cluster = from_flags(args.ps_hosts, args.worker_hosts, args.chief_host, args.job_name,
                             args.task_index) or from_tf_config(os.environ.get("TF_CONFIG"))
        name = strategies.resolve_name(args.strategy, cluster)
        check_for_strategy(cluster, name)
        strategies.configure_devices(args.logical_cpus, args.log_device_placement)
        if cluster is not None:
            log.info("this task: %s", cluster.describe())
        if name == "parameter_server" and cluster.task_type != "chief":
            return _serve(cluster, stop)
        chosen = strategies.choose(name, args.devices, cluster)
        model, inputs, optimizer, train = configs(args)
        cache = CacheConfig(enabled=args.feature_cache, variants=args.cache_variants, root=args.cache_dir)
        trainer = Trainer(args.data, args.model_dir, model, inputs, optimizer, train,
                          image_size=args.image_size, strategy=chosen.strategy,
                          inception_weights=args.inception_weights, train_inception=args.train_inception,
                          cache=cache, coordinator=chosen.coordinator,
                          is_chief=cluster is None or cluster.is_chief,
                          strategy_note=f"strategy {chosen.name} ({chosen.why})")
        listener = None
        if args.stop_when and (cluster is None or cluster.is_chief):  # only the chief listens
            from showtell.trainer.early_stop import EarlyStop, StopWhen

            listener = EarlyStop(StopWhen.parse(args.stop_when, args.patience), args.evaluator, stop,
                                 ClientSecurity.from_args(args, prefix="evaluator_")).start()
        try:
            result = trainer.run(stop)
        finally:
            if listener is not None:
                listener.close()
        log.info("done: step %d → %d", result.start_step, result.final_step)
        return 0

    return run_command(PROG, body)


def _serve(cluster, stop) -> int:
    """A ps or worker task of a parameter-server cluster: serve until SIGTERM/SIGINT."""
    import time

    from showtell.trainer.strategy import serve

    stop.action = "stopping the server"
    server = serve(cluster)
    log.info("serving %s:%d at %s until stopped", cluster.task_type, cluster.task_index, server.target)
    while not stop:
        time.sleep(0.2)
    log.info("stopping %s:%d (%s)", cluster.task_type, cluster.task_index, stop.reason)
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = Parser(prog=PROG, description="Train Show and Tell; checkpoints on a schedule.")
    add_arguments(parser)
    return run(parser.parse_args(argv))


def _device_list(text: str) -> list[str]:
    devices = [d.strip() for d in text.split(",") if d.strip()]
    if not devices:
        raise argparse.ArgumentTypeError(f"expected DEVICE[,DEVICE…] such as GPU:0,GPU:1 (got '{text}')")
    return devices


_device_list.__name__ = "device list"


def argument_problem(args: argparse.Namespace) -> str | None:
    """Flag combinations argparse cannot see."""
    if args.cache_variants > 1 and not args.augment:
        return "--cache-variants > 1 needs --augment true (the variants would be identical)"
    if bool(args.stop_when) != bool(args.evaluator):
        return "--stop-when and --evaluator HOST:PORT go together"
    if args.stop_when:
        from showtell.trainer.early_stop import StopWhen

        try:
            StopWhen.parse(args.stop_when, args.patience)
        except ShowtellError as exc:
            return str(exc)
    return None
