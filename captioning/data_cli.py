"""``showtell data synthetic`` — build the embedded default dataset."""

from __future__ import annotations

import argparse
from pathlib import Path

from captioning.cli_util import Parser, positive_int, quiet_tensorflow, run_command, setup_logging
from captioning.config import MIN_IMAGE_SIZE, SyntheticConfig

PROG = "showtell data"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="builder", required=True, metavar="{synthetic}")
    synth = sub.add_parser("synthetic", help="procedurally drawn shape scenes (no download)")
    defaults = SyntheticConfig()
    synth.add_argument("--out", type=Path, required=True, help="output directory")
    synth.add_argument("--train", type=positive_int, default=defaults.train_images,
                       help=f"training images (default {defaults.train_images})")
    synth.add_argument("--val", type=positive_int, default=defaults.val_images,
                       help=f"validation images (default {defaults.val_images})")
    synth.add_argument("--image-size", type=positive_int, default=defaults.image_size,
                       help=f"pixels per side, ≥ {MIN_IMAGE_SIZE} (default {defaults.image_size})")
    synth.add_argument("--seed", type=int, default=defaults.seed, help="random seed (default 0)")
    synth.add_argument("--train-shards", type=positive_int, default=defaults.train_shards)


def run(args: argparse.Namespace) -> int:
    quiet_tensorflow()
    setup_logging()

    def body() -> int:
        from captioning import synthetic

        config = SyntheticConfig(
            train_images=args.train, val_images=args.val, image_size=args.image_size,
            seed=args.seed, train_shards=args.train_shards,
        )
        synthetic.build(args.out, config)
        return 0

    return run_command(PROG, body)


def main(argv: list[str] | None = None) -> int:
    parser = Parser(prog=PROG, description=__doc__)
    add_arguments(parser)
    return run(parser.parse_args(argv))
