"""``showtell data synthetic|coco`` — build the embedded default dataset, or MSCOCO's."""

from __future__ import annotations

import argparse
import logging
from pathlib import Path

from showtell.captioning.config import MIN_IMAGE_SIZE, CocoConfig, SyntheticConfig
from showtell.captioning.data.dataset import MANIFEST
from showtell.common.flags import Parser, add_verbose_flag, positive_int, run_command, start_command

PROG = "showtell data"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="builder", required=True, metavar="{synthetic,coco}")
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
    synth.add_argument("--if-missing", action="store_true",
                       help="keep any dataset already in --out (e.g. one mounted there) and build only "
                            "when there is none: the compose stack's first-start step")
    add_verbose_flag(synth)

    coco = sub.add_parser("coco", help="MSCOCO captions JSON + image folders")
    c = CocoConfig()
    coco.add_argument("--captions", type=Path, action="append", required=True,
                      help="captions JSON (repeat: train2014 and val2014; a file named *train* is a "
                           "train pool)")
    coco.add_argument("--images", type=Path, action="append", required=True,
                      help="image folder (repeat; each file_name is looked up in order)")
    coco.add_argument("--out", type=Path, required=True, help="output directory")
    coco.add_argument("--min-word-count", type=positive_int, default=c.min_word_count)
    coco.add_argument("--vocab", type=Path, metavar="FILE",
                      help="build in this vocabulary instead of one from the training captions: a "
                           "model dir's vocab.txt or im2txt's word_counts.txt — data to continue "
                           "training that model (e.g. one from import-im2txt)")
    coco.add_argument("--train-shards", type=positive_int, default=c.train_shards)
    coco.add_argument("--val-shards", type=positive_int, default=c.val_shards)
    coco.add_argument("--test-shards", type=positive_int, default=c.test_shards)
    coco.add_argument("--workers", type=positive_int, default=c.workers, help="image reading threads")
    coco.add_argument("--split", choices=("im2txt", "karpathy"), default=c.split)
    coco.add_argument("--karpathy-json", type=Path, help="dataset_coco.json (with --split karpathy)")
    add_verbose_flag(coco)


def run(args: argparse.Namespace) -> int:
    start_command(args)

    def body() -> int:
        if args.builder == "coco":
            return _coco(args)
        from showtell.captioning.data import synthetic

        if args.if_missing and (args.out / MANIFEST).is_file():
            logging.getLogger(PROG).info("%s already holds a dataset; kept (--if-missing)", args.out)
            return 0
        config = SyntheticConfig(
            train_images=args.train, val_images=args.val, image_size=args.image_size,
            seed=args.seed, train_shards=args.train_shards,
        )
        synthetic.build(args.out, config)
        return 0

    return run_command(PROG, body)


def _coco(args: argparse.Namespace) -> int:
    from showtell.captioning.data import coco
    from showtell.common.errors import DataError

    if (args.split == "karpathy") != (args.karpathy_json is not None):
        raise DataError("--split karpathy and --karpathy-json FILE go together")
    config = CocoConfig(
        captions=tuple(args.captions), images=tuple(args.images), min_word_count=args.min_word_count,
        train_shards=args.train_shards, val_shards=args.val_shards, test_shards=args.test_shards,
        workers=args.workers, split=args.split, karpathy_json=args.karpathy_json,
        vocab=str(args.vocab) if args.vocab else None,
    )
    coco.build(args.out, config)
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = Parser(prog=PROG, description=__doc__)
    add_arguments(parser)
    return run(parser.parse_args(argv))
