"""Does a CPU evaluator keep up?  Evaluator images/s ÷ plain Inception forward images/s on the
same images, at COCO's shape: 299 px, beam 3, captions up to 20 words, the paper's model size
(512/512) and a COCO-sized vocabulary (12,000 words: the logits and the beam's top-k grow with
it) — in one run of this script.

* plain forward: decode + resize + Inception v3 over every image — what an evaluator cannot
  avoid, and the most an evaluation could do;
* evaluator: ``Validator.run`` (the same pipeline, each image encoded once, the teacher-forced
  loss of all 5 of its captions, beam search) plus BLEU/ROUGE-L/CIDEr — and METEOR, on by default
  as in ``showtell evaluate`` (``--meteor false``: off) — scoring of the result with COCO's PTB
  tokenizer: everything ``CheckpointEvaluator.evaluate`` does after restoring the checkpoint.  The
  scorer is kept across passes as the evaluator keeps it (references tokenized once, METEOR's JVM
  warm) and tokenizes each pass's captions afresh, as it does at every checkpoint: one JVM per
  pass, whose CPU (a finished child's) is counted; METEOR's JVM lives on, so its CPU is read from
  ``/proc/<pid>/stat`` before and after each pass and counted too;
* the intervals: the evaluator pass draws every metric's interval (1,000 resamples of its images,
  as ``CheckpointEvaluator`` does), and their CPU at 5,000 images is timed apart and reported as a
  share of a 5,000-image evaluation's CPU (issue 54's budget: ≤ 5 %);
* ``--levers``: the evaluator again with each speed lever alone (XLA for its step), in the same
  rounds.

A freshly initialised decoder never ends a caption early, so every beam runs all 20 steps: the
worst case.  Measured with ``rounds.py``: ``--warm`` untimed passes per path (3: tracing, warm
caches, tf.data's autotuning), then ``--rounds`` rounds, the order reversed every other round.  CPU
seconds are this process's and its children's (the tokenizer's JVM, and METEOR's).  Reported: each path's
median images/s and spread per wall-clock and per CPU second, the ratio to the forward pass (the
median of per-round ratios); the tokenizer's CPU per evaluation of this size and per 1,000
captions (timed apart at this size and at 5,000); and the ratio for a 5,000-image evaluation
(COCO's per checkpoint), computed from those measured parts: the evaluator's CPU per image
without its tokenizer, plus one tokenizer run over 5,000 captions.

    .venv/bin/python bench/eval_throughput.py [--images 128] [--rounds 5] [--warm 3] [--warm-images N]
        [--meteor false] [--levers] [--threads N] [--out bench/results/eval_throughput.json]

COCO's own size in one run (``--images 5000 --warm-images 256``, ≈ 40 min here) measures the
5,000-image ratio directly; its results file is ``eval_throughput.5000.json``.
"""

from __future__ import annotations

import argparse
import logging
import os
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np
import tensorflow as tf
from rounds import add_out, alternate, publish, ratio, spread

from showtell.captioning.config import ModelConfig, SyntheticConfig
from showtell.captioning.data import inputs, synthetic
from showtell.captioning.data.dataset import load_dataset, shard_files
from showtell.captioning.data.records import ShardedWriter, parse_example
from showtell.captioning.data.vocab import Vocabulary
from showtell.captioning.model.network import build_model
from showtell.captioning.model.validation import Validator
from showtell.evaluator.scoring import bootstrap
from showtell.evaluator.scoring.bootstrap import Bootstrap, ImageStats
from showtell.evaluator.scoring.scorers import CaptionScorer, ptb_tokenize, score
from showtell.metrics import Inputs

COCO_VOCABULARY = 12000
COCO_EVALUATION = 5000  # images a COCO run evaluates per checkpoint
CAPTIONS_PER_IMAGE = 5  # COCO's (the synthetic scenes have 3: cycled up to 5)
# Tracing, then warm caches; tf.data's autotuning still slowed the first timed forward pass by
# a fifth after two.
WARM_PASSES = 3


def forward_pass(model, files: list[str], batch_size: int) -> Callable[..., int]:
    """Decode + preprocess + Inception alone, over the same images and batches (``max_images``:
    the first so many).  One trace for every batch size, as the evaluator's step has."""
    size = model.config.image_size
    features = tf.function(lambda images: model.features(images, training=False),
                           input_signature=[tf.TensorSpec([None, size, size, 3], tf.float32)])

    def one_pass(max_images: int | None = None) -> int:
        count = 0
        for batch in inputs.eval_images(files, size, batch_size, max_images=max_images):
            features(batch["image"]).numpy()
            count += int(batch["image"].shape[0])
        return count

    return one_pass


def evaluator_pass(validator: Validator, scorer: CaptionScorer, references,
                   kept: list[ImageStats]) -> Callable[..., int]:
    """Everything an evaluation does after the restore: validation, caption scoring, and each
    metric's interval by bootstrap over the images (its per-image statistics kept in ``kept``;
    ``max_images``: the first so many)."""
    def one_pass(max_images: int | None = None) -> int:
        result = validator.run(max_images=max_images)
        given = scorer.prepare(Inputs(list(result.image_losses), result.captions, references,
                                      image_losses=result.image_losses, loss=result.loss.loss))
        _, stats = score(given)  # every metric, as an evaluation scores them
        bootstrap.intervals(stats, Bootstrap())
        kept[:] = [stats]
        return result.images

    return one_pass


def bootstrap_cost(stats: ImageStats, images: int, rounds: int) -> dict[str, float]:
    """CPU seconds of the default intervals (1,000 resamples) over ``images`` images: this
    evaluation's per-image statistics repeated to that many rows (median of ``rounds``)."""
    rows = np.arange(images) % len(stats)
    tiled = ImageStats(np.arange(images), {k: np.asarray(v)[rows] for k, v in stats.columns.items()})
    costs = []
    for _ in range(rounds):
        before = cpu_seconds()
        bootstrap.intervals(tiled, Bootstrap())
        costs.append(cpu_seconds() - before)
    return spread(costs, 3)


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


def cpu_seconds() -> float:
    """This process's CPU and its finished children's (the PTB tokenizer's JVM)."""
    t = os.times()
    return t.user + t.system + t.children_user + t.children_system


def children_cpu() -> float:
    t = os.times()
    return t.children_user + t.children_system


def process_cpu(pid: int) -> float:
    """CPU seconds (user + system) a live process has used, from ``/proc/<pid>/stat``."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # utime, stime


def timed(one_pass: Callable[[], int], live: Callable[[], float] = lambda: 0.0
          ) -> Callable[[], tuple[float, float, float, float]]:
    """A pass as (images per wall second, images per CPU second, finished children's CPU seconds,
    ``live`` children's CPU seconds) — ``live()``: the CPU so far of children that outlive a pass
    (METEOR's JVM), counted in the pass's CPU too."""
    def run() -> tuple[float, float, float, float]:
        wall, cpu, child, kept = time.perf_counter(), cpu_seconds(), children_cpu(), live()
        images = one_pass()
        used = live() - kept
        figures = (images / (time.perf_counter() - wall), images / (cpu_seconds() - cpu + used),
                   children_cpu() - child, used)
        logging.warning("%d images: %.2f images/s, %.2f per CPU-s", images, *figures[:2])  # if a run dies
        return figures

    return run


def tokenizer_cost(captions: list[str], rounds: int) -> dict[str, float]:
    """CPU seconds of one PTB tokenizer run over ``captions`` made distinct (median of ``rounds``)."""
    texts = [f"{c} {i}" for i, c in enumerate(captions)]
    costs = []
    for _ in range(rounds):
        before = cpu_seconds()
        ptb_tokenize(texts)
        costs.append(cpu_seconds() - before)
    return spread(costs, 3)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--images", type=int, default=128)
    parser.add_argument("--batch-size", type=int, default=64, help="the evaluator's (64)")
    parser.add_argument("--beam-size", type=int, default=3)
    parser.add_argument("--image-size", type=int, default=299)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--warm", type=int, default=WARM_PASSES, help="untimed passes per path first")
    parser.add_argument("--warm-images", type=int, help="images in each untimed pass (default: all; a "
                                                        "5,000-image run warms on fewer)")
    parser.add_argument("--meteor", choices=("true", "false"), default="true",
                        help="score METEOR too, as `showtell evaluate` does by default (true)")
    add_out(parser, "eval_throughput")
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
        scorer = CaptionScorer(meteor=args.meteor == "true", tokenizer="ptb")
        meteor = scorer._meteor.meteor_p.pid if scorer._meteor is not None else None
        live = (lambda: process_cpu(meteor)) if meteor is not None else (lambda: 0.0)
        passes, kept = {"forward": forward_pass(model, files, args.batch_size)}, []
        for name, jit in (("evaluator", False), ("evaluator_xla", True))[:2 if args.levers else 1]:
            validator = Validator(model, files, big, batch_size=args.batch_size, beam_size=args.beam_size,
                                  jit_compile=jit)
            passes[name] = evaluator_pass(validator, scorer, references, kept)
        for one_pass in passes.values():  # untimed: tracing, warm caches, METEOR's JVM
            for _ in range(args.warm):
                one_pass(args.warm_images)
        paths = {name: timed(one_pass) if name == "forward" else timed(one_pass, live)
                 for name, one_pass in passes.items()}
        measured = alternate(paths, rounds=args.rounds, warm=0)
        scorer.close()
        captions = [c for caps in references.values() for c in caps]
        at_size = tokenizer_cost(captions[:args.images], 3)
        at_coco = tokenizer_cost([captions[i % len(captions)] for i in range(COCO_EVALUATION)], 3)
        intervals_at_coco = bootstrap_cost(kept[0], COCO_EVALUATION, 3)
    rates = {name: {"wall": [r[0] for r in runs], "cpu": [r[1] for r in runs]}
             for name, runs in measured.items()}
    tokenizer = [r[2] for r in measured["evaluator"]]
    meteor_cpu = [r[3] for r in measured["evaluator"]]
    report = {"images": args.images, "image_size": args.image_size, "batch_size": args.batch_size,
              "beam_size": args.beam_size, "vocabulary": len(big), "rounds": args.rounds, "warm": args.warm,
              "warm_images": args.warm_images or args.images,
              "meteor": args.meteor == "true",
              "threads": {"intra_op": tf.config.threading.get_intra_op_parallelism_threads(),
                          "inter_op": tf.config.threading.get_inter_op_parallelism_threads()}}
    for name, clocks in rates.items():
        for clock, values in clocks.items():
            per = "sec" if clock == "wall" else "cpu_sec"
            report[f"{name}_images_per_{per}"] = spread(values, 2)
            if name != "forward":
                report[f"ratio_{name}_over_forward_{clock}"] = ratio(values, rates["forward"][clock])
    # The tokenizer: measured inside each evaluator pass (its JVM's CPU), and apart at two sizes.
    per_1000 = ((at_coco["median"] - at_size["median"]) / (COCO_EVALUATION - args.images) * 1000
                if args.images != COCO_EVALUATION else at_coco["median"] / COCO_EVALUATION * 1000)
    report["tokenizer_cpu_sec_per_evaluation"] = spread(tokenizer, 3)
    report["meteor_cpu_sec_per_evaluation"] = spread(meteor_cpu, 3)  # its warm JVM's, per pass
    report["meteor_share_of_an_evaluation"] = round(statistics.median(meteor_cpu) / (
        args.images / statistics.median(rates["evaluator"]["cpu"])), 4)
    report["tokenizer_cpu_sec_for_captions"] = {str(args.images): at_size, str(COCO_EVALUATION): at_coco}
    report["tokenizer_cpu_sec_per_1000_captions"] = round(per_1000, 4)
    # A 5,000-image evaluation, from each round's measured parts: the evaluator's CPU per image
    # without its tokenizer, plus one tokenizer run over 5,000 captions — against that round's
    # forward pass, as every other ratio here.
    at_5000 = [COCO_EVALUATION / (COCO_EVALUATION * (1 / rate - child / args.images) + at_coco["median"])
               for rate, child in zip(rates["evaluator"]["cpu"], tokenizer, strict=True)]
    report[f"ratio_evaluator_over_forward_cpu_at_{COCO_EVALUATION}_images"] = ratio(
        at_5000, rates["forward"]["cpu"])
    report["tokenizer_share_of_an_evaluation"] = {
        str(args.images): round(statistics.median(tokenizer) / (args.images / statistics.median(
            rates["evaluator"]["cpu"])), 4),
        str(COCO_EVALUATION): round(at_coco["median"] * statistics.median(at_5000) / COCO_EVALUATION, 5)}
    # The intervals (1,000 resamples, every metric) of a 5,000-image evaluation, against the CPU
    # of that evaluation at this run's median rate (the 5,000-image figure above).
    report["bootstrap_cpu_sec_at_5000_images"] = intervals_at_coco
    report["bootstrap_share_of_a_5000_image_evaluation"] = round(
        intervals_at_coco["median"] * statistics.median(at_5000) / COCO_EVALUATION, 5)
    evaluator = statistics.median(rates["evaluator"]["wall"])
    report["minutes_per_5000_images"] = round(COCO_EVALUATION / evaluator / 60, 1)
    report["max_eval_examples_for_half_of_10_minutes"] = int(evaluator * 300)
    publish(report, args.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
