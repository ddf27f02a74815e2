"""``showtell demo`` — the no-Docker path: Show and Tell's whole recipe in miniature, on the
synthetic default, with the evaluator beside it and its evaluations printed as they arrive.

The recipe is the one a COCO run follows, on the same code: an encoder pretrained on
classification (offline there is no ImageNet download, so ``showtell pretrain`` trains
Inception v3 on the synthetic train split's scene labels and writes an ordinary weights file),
then phase 1 — the decoder on the frozen encoder, from the feature cache — and phase 2, everything
fine-tuned, in the same model dir.  Every phase is the real command, started as a user would
start it; this module only supervises them (by PID), follows the evaluator over gRPC, and stops
everything cleanly on Ctrl-C or when the time is up.
"""

from __future__ import annotations

import argparse
import signal
from pathlib import Path

from showtell.captioning.config import SyntheticConfig
from showtell.commands.demo import summary
from showtell.commands.demo.recipe import Demo
from showtell.commands.demo.settings import DEFAULT_PHASES, phases
from showtell.common.flags import (
    add_config_file_flag,
    positive_float,
    positive_int,
    run_command,
    start_command,
)
from showtell.common.locks import DirectoryLock
from showtell.common.setting_sources import print_config

PROG = "showtell demo"


def add_arguments(p: argparse.ArgumentParser) -> None:
    add_config_file_flag(p)
    p.add_argument("--dir", type=Path, default=Path("runs/demo"), help="data, model and eval dirs go here")
    p.add_argument("--seconds", type=positive_float, default=600.0,
                   help="training time, all phases together (default 600)")
    p.add_argument("--phases", type=phases, default=phases(DEFAULT_PHASES), metavar="P,P1,P2",
                   help="shares of --seconds for pretraining the encoder, phase 1 (frozen encoder) and "
                        f"phase 2 (fine-tuning) (default {DEFAULT_PHASES})")
    p.add_argument("--train-images", type=positive_int, default=SyntheticConfig().train_images,
                   help=f"synthetic training images (default {SyntheticConfig().train_images})")
    p.add_argument("--port", type=int, default=50051, help="evaluator gRPC port on 127.0.0.1")
    p.add_argument("--eval-examples", type=positive_int, default=100, help="validation images per evaluation")
    p.add_argument("--eval-threads", type=positive_int, default=1, help="evaluator's TensorFlow threads")
    p.add_argument("--preview", type=float, default=75.0, metavar="SECONDS",
                   help="pretraining writes a first encoder after this long and phase 1 runs on it for as "
                        "long while pretraining goes on, so evaluations start early; phase 1 then starts "
                        "again, as a new run, on the finished encoder (0: no preview; default 75)")


def _interrupt(signum, frame) -> None:
    raise KeyboardInterrupt


def run(args: argparse.Namespace) -> int:
    if args.print_config:
        return print_config(PROG, args)
    start_command(args)  # TensorFlow's start-up notices stay off the console (it imports TF at the end)
    # Explicit handlers: a shell may start us with SIGINT ignored (background jobs), and a
    # supervisor stops us with SIGTERM; both must stop the children cleanly.
    signal.signal(signal.SIGINT, _interrupt)
    signal.signal(signal.SIGTERM, _interrupt)

    def body() -> int:
        # One demo per directory: a second one would share the evaluator's port and history.
        with DirectoryLock(directory=args.dir, role="demo", flag="--dir"):
            return _demo(args)

    return run_command(PROG, body)


def _demo(args: argparse.Namespace) -> int:
    demo = Demo(args)
    code = 0
    try:
        code = demo.run()
    except KeyboardInterrupt:
        code = 130
        demo.console.say("demo", "interrupted: stopping every child")
    finally:
        demo.follower.close()
        demo.children.stop_all()
        demo.console.close()
    summary.summary(demo.seen, demo.work, demo.console, demo.unseen)
    return code
