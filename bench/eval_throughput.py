"""Does a CPU evaluator keep up?  Evaluator images/s ÷ plain Inception forward images/s on the
same images, at COCO's shape: 299 px, beam 3, captions up to 20 words, the paper's model size
(512/512) and a COCO-sized vocabulary (12,000 words: the logits and the beam's top-k grow with
it) — in one run of this script.

* plain forward: decode + resize + Inception v3 over every image — what an evaluator cannot
  avoid, and the most an evaluation could do;
* evaluator: ``Validator.run`` (the same pipeline, each image encoded once, the teacher-forced
  loss of all 5 of its captions, beam search) plus BLEU/ROUGE-L/CIDEr scoring of the result —
  everything ``CheckpointEvaluator.evaluate`` does after restoring the checkpoint;
* ``--levers``: the evaluator again with each speed lever alone (XLA for its step), in the same
  rounds.

A freshly initialised decoder never ends a caption early, so every beam runs all 20 steps: the
worst case.  Every path runs three times before timing (tracing, then warm caches and
tf.data's autotuning); then ``--rounds`` rounds each time every path once, in turn, so drift on a shared
machine falls on all of them alike.  Reported: each path's median images/s and its spread
(min–max) per wall-clock second and per CPU second of this process, and the ratio to the
forward pass as the median of the per-round ratios, on either clock.

    .venv/bin/python bench/eval_throughput.py [--images 128] [--rounds 5] [--levers] [--threads N]
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import statistics
import tempfile
import time
from collections.abc import Callable
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
# Tracing, then warm caches; tf.data's autotuning still slowed the first timed forward pass by
# a fifth after two.
WARM_PASSES = 3


def forward_pass(model, files: list[str], batch_size: int) -> Callable[[], int]:
    """Decode + preprocess + Inception alone, over the same images and batches."""
    features = tf.function(lambda images: model.features(images, training=False), reduce_retracing=True)

    def one_pass() -> int:
        count = 0
        for batch in inputs.eval_images(files, model.config.image_size, batch_size):
            features(batch["image"]).numpy()
            count += int(batch["image"].shape[0])
        return count

    return one_pass


def evaluator_pass(validator: Validator, scorer: CaptionScorer, references) -> Callable[[], int]:
    """Everything an evaluation does after the restore: validation, then caption scoring."""
    def one_pass() -> int:
        result = validator.run()
        scorer.score(result.captions, references)
        return result.images

    return one_pass


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


def measure(paths: dict[str, Callable[[], int]], rounds: int) -> dict[str, dict[str, list[float]]]:
    """Images per wall-clock second and per CPU second (all of this process's threads) of each
    path per round, after ``WARM_PASSES`` untimed passes each.  CPU seconds do not count what a neighbour on
    a shared host takes from the wall clock."""
    for one_pass in paths.values():
        for _ in range(WARM_PASSES):
            one_pass()
    rates: dict[str, dict[str, list[float]]] = {name: {"wall": [], "cpu": []} for name in paths}
    for _ in range(rounds):
        for name, one_pass in paths.items():
            wall, cpu = time.perf_counter(), time.process_time()
            images = one_pass()
            rates[name]["wall"].append(images / (time.perf_counter() - wall))
            rates[name]["cpu"].append(images / (time.process_time() - cpu))
    return rates


def spread(values: list[float], digits: int) -> dict[str, float]:
    return {"median": round(statistics.median(values), digits), "min": round(min(values), digits),
            "max": round(max(values), digits)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--images", type=int, default=128)
    parser.add_argument("--batch-size", type=int, default=64, help="the evaluator's (64)")
    parser.add_argument("--beam-size", type=int, default=3)
    parser.add_argument("--image-size", type=int, default=299)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--levers", action="store_true", help="also the evaluator with XLA (jit_compile)")
    parser.add_argument("--threads", type=int, help="TensorFlow's intra- and inter-op threads, as the "
                                                    "evaluator's --threads (default: TensorFlow's choice)")
    args = parser.parse_args()
    if args.threads:
        tf.config.threading.set_intra_op_parallelism_threads(args.threads)
        tf.config.threading.set_inter_op_parallelism_threads(args.threads)
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
        paths = {"forward": forward_pass(model, files, args.batch_size)}
        for name, jit in (("evaluator", False), ("evaluator_xla", True))[:2 if args.levers else 1]:
            validator = Validator(model, files, big, batch_size=args.batch_size, beam_size=args.beam_size,
                                  jit_compile=jit)
            paths[name] = evaluator_pass(validator, scorer, references)
        rates = measure(paths, args.rounds)
    report = {"images": args.images, "image_size": args.image_size, "batch_size": args.batch_size,
              "beam_size": args.beam_size, "vocabulary": len(big), "rounds": args.rounds,
              "threads": {"intra_op": tf.config.threading.get_intra_op_parallelism_threads(),
                          "inter_op": tf.config.threading.get_inter_op_parallelism_threads()}}
    for name, clocks in rates.items():
        for clock, values in clocks.items():
            per = "sec" if clock == "wall" else "cpu_sec"
            report[f"{name}_images_per_{per}"] = {**spread(values, 2),
                                                 "rounds": [round(v, 2) for v in values]}
            if name != "forward":
                ratios = [e / f for e, f in zip(values, rates["forward"][clock], strict=True)]
                report[f"ratio_{name}_over_forward_{clock}"] = spread(ratios, 3)
    evaluator = statistics.median(rates["evaluator"]["wall"])
    report["minutes_per_5000_images"] = round(5000 / evaluator / 60, 1)
    report["max_eval_examples_for_half_of_10_minutes"] = int(evaluator * 300)
    print(json.dumps(report, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
