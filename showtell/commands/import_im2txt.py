"""``showtell import-im2txt`` — the published Show-and-Tell model (an im2txt checkpoint and its
``word_counts.txt``) as a showtell model dir: ``showtell caption`` and ``showtell evaluate`` use
it like any trained one (``captioning.weights.im2txt`` says how the weights map)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from showtell.common.errors import ModelDirError
from showtell.common.flags import Parser, add_verbose_flag, positive_int, run_command, start_command

PROG = "showtell import-im2txt"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--im2txt-checkpoint", required=True, metavar="PREFIX",
                   help="im2txt's checkpoint prefix, e.g. model.ckpt-3000000")
    p.add_argument("--im2txt-vocab", type=Path, required=True, metavar="FILE",
                   help="the word_counts.txt the checkpoint was trained with")
    p.add_argument("--model-dir", type=Path, required=True, help="the showtell model dir to write (new)")
    p.add_argument("--image-size", type=positive_int, default=299, help="input size (default 299, as im2txt)")
    add_verbose_flag(p)


def run(args: argparse.Namespace) -> int:
    start_command(args)
    return run_command(PROG, lambda: _body(args))


def _body(args: argparse.Namespace) -> int:
    import tensorflow as tf

    from showtell.captioning.weights.im2txt import import_checkpoint
    from showtell.common.model_dir import ModelDir

    if args.model_dir.exists() and any(args.model_dir.iterdir()):
        raise ModelDirError(f"--model-dir {args.model_dir}: not empty; import into a new directory")
    imported = import_checkpoint(args.im2txt_checkpoint, args.im2txt_vocab, args.image_size)
    args.model_dir.mkdir(parents=True, exist_ok=True)
    data = {"dir": "", "builder": "im2txt", "vocab_size": len(imported.vocab), "image_size": args.image_size,
            "im2txt_checkpoint": args.im2txt_checkpoint, "im2txt_vocab": str(args.im2txt_vocab)}
    model_dir = ModelDir(args.model_dir)
    imported.vocab.save(model_dir.path / ModelDir.VOCAB)
    model_dir.begin(imported.model.config.shape_fields(), data, imported.encoder_init.metadata())
    step = tf.Variable(imported.step, dtype=tf.int64)
    checkpoint = tf.train.Checkpoint(step=step, model=imported.model)
    path = tf.train.CheckpointManager(checkpoint, str(args.model_dir), max_to_keep=1).save(
        checkpoint_number=imported.step)
    # What went where: the command's output, so it can be kept beside the model dir.
    for source, target in imported.mapping:
        sys.stdout.write(f"  {source:<36} → {target}\n")
    config = imported.model.config
    sys.stdout.write(f"wrote {path} ({len(imported.vocab)} words, embedding {config.embedding_size}, "
                     f"LSTM {config.lstm_units}, {args.image_size} px): caption with `showtell caption "
                     f"--model-dir {args.model_dir} IMAGE`\n")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = Parser(prog=PROG, description=__doc__.splitlines()[0])
    add_arguments(parser)
    return run(parser.parse_args(argv))
