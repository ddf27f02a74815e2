"""``showtell pretrain`` — an encoder pretrained on the synthetic scenes' labels, for
``showtell train --inception-weights`` (the offline stand-in for ImageNet weights)."""

from __future__ import annotations

import argparse
import logging
from pathlib import Path

from showtell.captioning.config import WEIGHTS_IMAGENET, WEIGHTS_NONE, pretraining_done
from showtell.common import exposition
from showtell.common.exposition import MonitoringConfig
from showtell.common.flags import (
    add_config_file_flag,
    add_config_flags,
    add_verbose_flag,
    config_from_flags,
    positive_float,
    positive_int,
    run_command,
    start_command,
)
from showtell.common.setting_sources import parse_args, print_config

PROG = "showtell pretrain"
log = logging.getLogger(__name__)


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--data", type=Path, required=True, help="a synthetic dataset (`showtell data synthetic`)")
    p.add_argument("--out", type=Path, required=True, help="the weights file to write (*.weights.h5)")
    p.add_argument("--seconds", type=positive_float,
                   help="stop after this many seconds, counted from the start (one step at least, and one "
                        "past --first-save-after's encoder: the final encoder is always newer)")
    p.add_argument("--steps", type=positive_int, help="stop after this many steps (of this run)")
    p.add_argument("--batch-size", type=positive_int, default=32, help="images per step (default 32)")
    p.add_argument("--learning-rate", type=positive_float, default=1e-3, help="Adam's rate (default 0.001)")
    p.add_argument("--seed", type=int, default=0, help="initialisation and order seed (default 0)")
    p.add_argument("--if-missing", action="store_true",
                   help="nothing to do when --out already holds a finished pretraining's encoder (or a file "
                        "from elsewhere: delete it to pretrain again), or is 'none' or 'imagenet' — what "
                        "`train --inception-weights` starts from instead of a file (the compose stack "
                        "passes the same value to both)")
    p.add_argument("--fresh", action="store_true",
                   help="start from random weights, replacing the state an earlier run left beside --out "
                        "(<name>.pretrain/); by default pretraining goes on from it")
    p.add_argument("--first-save-after", type=positive_float, metavar="SECONDS",
                   help="also write --out this long after the start and go on: an early encoder that "
                        "phase 1 can use while pretraining continues (the end writes it again)")
    metrics = p.add_argument_group(MonitoringConfig.__doc__.splitlines()[0].rstrip("."))
    add_config_flags(metrics, MonitoringConfig)
    add_config_file_flag(p)
    add_verbose_flag(p)


def run(args: argparse.Namespace) -> int:
    if args.print_config:
        return print_config(PROG, args)
    start_command(args)

    def body() -> int:
        no_file = str(args.out) in (WEIGHTS_NONE, WEIGHTS_IMAGENET)
        if args.if_missing and (no_file or pretraining_done(args.out)):
            log.info("--if-missing: %s", f"{args.out} is there, kept" if args.out.is_file() else
                     f"--out {args.out} names no file to write: nothing to pretrain")
            return 0
        if args.if_missing and args.out.is_file():
            log.info("--if-missing: %s holds the encoder of a pretraining not done (a first one, or one "
                     "stopped early): going on with it", args.out)
        # The figures a trainer serves (a port in use: one line, before TensorFlow loads).
        endpoint = exposition.serve("pretrain", config_from_flags(MonitoringConfig, args))
        try:
            from showtell.trainer.loop.prometheus import TrainerFigures
            from showtell.trainer.pretraining.pretrain import pretrain

            result = pretrain(data=args.data, out=args.out, seconds=args.seconds, steps=args.steps,
                              batch_size=args.batch_size, learning_rate=args.learning_rate, seed=args.seed,
                              first_save_after=args.first_save_after, fresh=args.fresh,
                              figures=TrainerFigures(endpoint.registry) if endpoint else None)
        finally:
            if endpoint is not None:
                endpoint.close()
        return result.exit_code  # 143/130 when a signal ended it early (the encoder is saved)

    return run_command(PROG, body)


def main(argv: list[str] | None = None) -> int:
    from showtell.common.flags import Parser

    parser = Parser(prog=PROG, description=__doc__.splitlines()[0])
    add_arguments(parser)
    return run(parse_args(parser, argv))
