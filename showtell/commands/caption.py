"""``showtell caption`` — caption your own pictures with a trained model.

From a model dir (its newest checkpoint, or ``--checkpoint``) or from an exported SavedModel
(``--saved-model``, e.g. the evaluator's ``export/best``).  Both run the same serving code
(``showtell.captioning.model.export.Captioner``), so a checkpoint and its export caption identically.  A file
that is not an image gets one error line and the others are still captioned (exit 1 then).
"""

from __future__ import annotations

import argparse
import json
import logging
import math
import sys
from pathlib import Path

from showtell.common.errors import ModelDirError, ShowtellError
from showtell.common.flags import Parser, add_verbose_flag, positive_int, run_command, start_command

PROG = "showtell caption"
log = logging.getLogger(__name__)


def add_arguments(p: argparse.ArgumentParser) -> None:
    source = p.add_mutually_exclusive_group(required=True)
    source.add_argument("--model-dir", help="a trained model dir (showtell train --model-dir)")
    source.add_argument("--saved-model", type=Path,
                        help="an exported SavedModel dir, or a base of numbered versions (the newest)")
    p.add_argument("--checkpoint", help="with --model-dir: checkpoint prefix (default: the newest)")
    p.add_argument("--data", type=Path,
                   help="with --model-dir and no vocab.txt in it (older model dirs): a dataset whose "
                        "vocabulary is the training data's, word for word")
    p.add_argument("--beam-size", type=positive_int,
                   help="print the top K captions with probabilities (default: the top one, beam 3)")
    p.add_argument("--json", action="store_true", help="one JSON object per image, one per line")
    add_verbose_flag(p)
    p.add_argument("images", nargs="+", type=Path, metavar="IMAGE")


def run(args: argparse.Namespace) -> int:
    start_command(args)
    return run_command(PROG, lambda: _body(args))


def _body(args: argparse.Namespace) -> int:
    import tensorflow as tf

    if args.checkpoint and not args.model_dir:
        raise ShowtellError("--checkpoint goes with --model-dir")
    good, failed = [], 0
    for path in args.images:
        try:
            data = path.read_bytes()
            tf.io.decode_image(data, channels=3, expand_animations=False)
            good.append((path, data))
        except OSError as exc:
            failed += _fail(path, f"cannot read ({exc.strerror})")
        except (tf.errors.InvalidArgumentError, tf.errors.UnknownError):
            failed += _fail(path, "not an image (JPEG, PNG, GIF or BMP expected)")
    if good:
        serve, beam = _captioner(args)
        shown = args.beam_size or 1
        if shown > beam:
            raise ShowtellError(f"--beam-size {shown}: this model decodes with beam {beam}; pass ≤ {beam}")
        out = serve(tf.constant([data for _, data in good]))
        captions, scores = out["captions"].numpy(), out["scores"].numpy()
        for (path, _), texts, logps in zip(good, captions, scores, strict=True):
            _print(path, [t.decode() for t in texts[:shown]], [float(s) for s in logps[:shown]], args)
    return 1 if failed else 0


def _fail(path: Path, reason: str) -> int:
    sys.stderr.write(f"{PROG}: error: {path}: {reason}\n")
    return 1


def _captioner(args: argparse.Namespace):
    """(serve function, beam size) from a SavedModel or a model dir's checkpoint."""
    from showtell.captioning.model import export

    if args.saved_model:
        path = export.resolve(args.saved_model)  # a versioned base: its newest version
        if not (path / export.INFO).is_file():
            raise ShowtellError(f"--saved-model {args.saved_model}: no {export.INFO} and no numbered "
                                "version holding one; not a showtell export")
        serve, info = export.load(path)
        return (lambda images: serve(images=images)), int(info["beam_size"])
    model, vocab = _restore(args)
    captioner = export.Captioner(model, vocab, beam_size=max(3, args.beam_size or 3))
    # The closure keeps the module alive: a bound tf.function holds its instance weakly.
    return (lambda images: captioner.serve(images)), captioner.beam_size


def _restore(args: argparse.Namespace):
    import tensorflow as tf

    from showtell.captioning.data.dataset import VOCAB
    from showtell.captioning.data.vocab import Vocabulary
    from showtell.captioning.model.network import build_model
    from showtell.captioning.model.restoring import (
        latest_checkpoint,
        model_vocabulary,
        read_model_config,
        restore,
    )
    from showtell.common.model_dir import ModelDir

    model_dir = ModelDir(args.model_dir)
    checkpoint = args.checkpoint or latest_checkpoint(model_dir)
    model = build_model(read_model_config(model_dir))
    restore(tf.train.Checkpoint(model=model), checkpoint, "pass another --checkpoint", partial=True)
    dataset = None
    if args.data:
        dataset = (str(args.data / VOCAB), Vocabulary.load(args.data / VOCAB))
    vocab = model_vocabulary(model_dir, dataset)  # the model's own: ids mean its words
    if len(vocab) != model.config.vocab_size:
        raise ModelDirError(f"{model_dir.file(ModelDir.VOCAB)}: {len(vocab)} words, the model has "
                            f"{model.config.vocab_size}; it is not this model's vocabulary")
    log.info("captioning with %s", checkpoint)
    return model, vocab


def _print(path: Path, captions: list[str], log_probs: list[float], args: argparse.Namespace) -> None:
    if args.json:
        ranked = [{"caption": c, "log_prob": lp, "probability": math.exp(lp)}
                  for c, lp in zip(captions, log_probs, strict=True)]
        print(json.dumps({"image": str(path), "captions": ranked}))
    elif args.beam_size:
        for rank, (c, lp) in enumerate(zip(captions, log_probs, strict=True), 1):
            print(f"{path}\t{rank}\t{math.exp(lp):.4f}\t{c}")
    else:
        print(f"{path}\t{captions[0]}")


def main(argv: list[str] | None = None) -> int:
    parser = Parser(prog=PROG, description=__doc__.splitlines()[0])
    add_arguments(parser)
    return run(parser.parse_args(argv))
