"""Does a CPU evaluator keep up?  Evaluator images/s ÷ plain Inception forward images/s on the
same images, at COCO's shape: 299 px, beam 3, captions up to 20 words, the paper's model size
(512/512) and a COCO-sized vocabulary (12,000 words: the logits and the beam's top-k grow with
it) — one run of this script.

* plain forward: decode + resize + Inception v3 over every image — what an evaluator cannot
  avoid, and the most an evaluation could do;
* evaluator: ``Validator.run`` (the same pipeline, each image encoded once, the teacher-forced
  loss of all 5 of its captions, beam search) plus BLEU/ROUGE-L/CIDEr scoring of the result —
  everything ``CheckpointEvaluator.evaluate`` does after restoring the checkpoint.

A freshly initialised decoder never ends a caption early, so every beam runs all 20 steps: the
worst case.  Both sides run once to trace, then are timed.  Reports minutes per 5,000-image
evaluation here and what ``--max-eval-examples`` keeps an evaluation within half of a 10-minute
checkpoint interval.

    .venv/bin/python bench/eval_throughput.py [--images 128] [--batch-size 64] [--beam-size 3]
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import tempfile
import time
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import tensorflow as tf

from showtell.captioning.config import ModelConfig, SyntheticConfig
from showtell.captioning.data import inputs, synthetic
from showtell.captioning.data.manifest import load_dataset
from showtell.captioning.data.records import ShardedWriter, parse_example, shard_files
from showtell.captioning.data.vocab import Vocabulary
from showtell.captioning.model.network import build_model
from showtell.captioning.model.validation import Validator
from showtell.evaluator.scorers import CaptionScorer

COCO_VOCABULARY = 12000
CAPTIONS_PER_IMAGE = 5  # COCO's (the synthetic scenes have 3: cycled up to 5)


def forward_rate(model, files: list[str], batch_size: int) -> float:
    """Images/s of decode + preprocess + Inception alone, over the same images and batches."""
    features = tf.function(lambda images: model.features(images, training=False), reduce_retracing=True)

    def one_pass() -> int:
        count = 0
        for batch in inputs.eval_images(files, model.config.image_size, batch_size):
            features(batch["image"]).numpy()
            count += int(batch["image"].shape[0])
        return count

    one_pass()  # trace
    started = time.perf_counter()
    count = one_pass()
    return count / (time.perf_counter() - started)


def evaluator_rate(validator: Validator, scorer: CaptionScorer, references) -> tuple[float, dict]:
    validator.run()  # trace
    started = time.perf_counter()
    result = validator.run()
    scoring = time.perf_counter()
    scorer.score(result.captions, references)
    done = time.perf_counter()
    return result.images / (done - started), {"scoring_seconds": round(done - scoring, 2),
                                              "captions_scored_for_loss": result.loss.examples}


def coco_like(files: list[str], out: Path) -> list[str]:
    """The same images with 5 captions each, as COCO's."""
    out.mkdir()
    with ShardedWriter(out, "val", 2) as writer:
        for serialized in tf.data.TFRecordDataset(files):
            record = parse_example(serialized)
            captions = record["captions"].to_list()
            writer.write_image(record["image_data"].numpy(), int(record["image_id"]),
                               [captions[i % len(captions)] for i in range(CAPTIONS_PER_IMAGE)])
    return shard_files(out, "val")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--images", type=int, default=128)
    parser.add_argument("--batch-size", type=int, default=64, help="the evaluator's (64)")
    parser.add_argument("--beam-size", type=int, default=3)
    parser.add_argument("--image-size", type=int, default=299)
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)
    with tempfile.TemporaryDirectory() as tmp:
        data = Path(tmp) / "data"
        synthetic.build(data, SyntheticConfig(train_images=4, val_images=args.images,
                                              image_size=args.image_size))
        _, vocab = load_dataset(data)
        files = coco_like(shard_files(data, "val"), Path(tmp) / "coco-like")
        # The dataset's words first (same ids), then filler up to a COCO-sized vocabulary.
        filler = tuple(f"word{i}" for i in range(COCO_VOCABULARY - len(vocab)))
        big = Vocabulary(vocab.words + filler, vocab.counts + (1,) * len(filler))
        model = build_model(ModelConfig(vocab_size=len(big), image_size=args.image_size))
        references = inputs.load_references(files, vocab)
        scorer = CaptionScorer(meteor=False)
        forward = forward_rate(model, files, args.batch_size)
        validator = Validator(model, files, big, batch_size=args.batch_size, beam_size=args.beam_size)
        evaluator, detail = evaluator_rate(validator, scorer, references)
        forward_again = forward_rate(model, files, args.batch_size)  # drift check: the machine is shared
    minutes = 5000 / evaluator / 60
    print(json.dumps({
        "images": args.images, "image_size": args.image_size, "batch_size": args.batch_size,
        "beam_size": args.beam_size, "vocabulary": len(big),
        "captions_per_image": detail["captions_scored_for_loss"] / args.images,
        "inception_forward_images_per_sec": round(forward, 2),
        "inception_forward_images_per_sec_after": round(forward_again, 2),
        "evaluator_images_per_sec": round(evaluator, 2),
        # against the faster of the two forward passes: the machine is shared, be conservative
        "ratio_evaluator_over_forward": round(evaluator / max(forward, forward_again), 3),
        **detail,
        "minutes_per_5000_images": round(minutes, 1),
        "max_eval_examples_for_half_of_10_minutes": int(evaluator * 300),
    }, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
