"""What kept encoder features buy the evaluator: evaluations of real checkpoints, each against a
plain Inception forward pass over the same images, at COCO's shape (299 px, 5 captions an image,
the paper's 512/512 model, a 12,000-word vocabulary, beam 3, captions up to 20 words) — in one run
of this script, one process.

Three checkpoints of one model dir: ``a`` (random weights), ``b`` (``a``'s encoder, another
decoder: a frozen-encoder phase's next checkpoint), ``c`` (another encoder: a phase-2 checkpoint).
Timed, in this order, each once over ``--images`` images (the evaluator's whole product path,
``CheckpointEvaluator.evaluate``: restore, the encoder's digest, features, decoder and beam search,
BLEU/ROUGE-L/CIDEr (+ METEOR with Java, COCO's PTB tokenizer), every interval):

* ``forward``: decode + resize + Inception over the images — the least an evaluation that runs the
  encoder can cost;
* ``today``: ``a`` with features not kept (``--feature-cache-keep 0``: what every evaluation cost
  before);
* ``first``: ``a`` with features kept — a new encoder: computed and written;
* ``reused``: ``b`` — the same encoder: read back, no encoder pass;
* ``phase2``: ``c`` — a new encoder again: computed;
* ``today_b``: ``b`` not kept — ``reused``'s numbers must equal it (checked, reported).

Both evaluators are warmed first on 64 images of a fourth encoder (tracing), whose features are
then deleted.  Ratios are images/s ÷ the forward pass's images/s, all from this one run; each part's
share of the ``reused`` evaluation comes from its own costs record.  The projection to val2014's
40,504 images multiplies the ``reused`` evaluation's measured seconds per image by 40,504 (every
part of it grows with the images: reading features, the decoder, the scorers' per-caption work
and the bootstrap's resamples); the first evaluation of an encoder at that size is projected the
same way from ``first``.

    .venv/bin/python bench/feature_reuse.py [--images 5000] [--out bench/results/feature_reuse.json]
"""

from __future__ import annotations

import argparse
import logging
import os
import shutil
import tempfile
import time
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import tensorflow as tf
from eval_throughput import COCO_VOCABULARY, coco_like, forward_pass
from rounds import add_out, publish

from showtell.captioning.config import ModelConfig, SyntheticConfig
from showtell.captioning.data import synthetic
from showtell.captioning.data.dataset import MANIFEST, VOCAB, load_dataset, shard_files
from showtell.captioning.data.vocab import Vocabulary
from showtell.captioning.model.network import build_model
from showtell.common.model_dir import ModelDir
from showtell.evaluator.scoring.bootstrap import Bootstrap
from showtell.evaluator.scoring.evaluation import CheckpointEvaluator
from showtell.evaluator.scoring.features import FeatureStore
from showtell.evaluator.scoring.scorers import CaptionScorer

VAL2014 = 40_504


def dataset(root: Path, images: int, image_size: int) -> Path:
    """A dataset dir whose val split has ``images`` synthetic scenes with 5 captions each."""
    raw = root / "raw"
    synthetic.build(raw, SyntheticConfig(train_images=4, val_images=images, image_size=image_size))
    data = root / "data"
    files = coco_like(shard_files(raw, "val"), data)
    for name in (MANIFEST, VOCAB):
        shutil.copy(raw / name, data / name)
    assert len(files) == 2
    return data


def model_dir(root: Path, data: Path, image_size: int) -> dict[str, str]:
    """Checkpoints a, b (a's encoder, another decoder), c (another encoder) and w (warm-up)."""
    _, vocab = load_dataset(data)
    filler = tuple(f"word{i}" for i in range(COCO_VOCABULARY - len(vocab)))
    big = Vocabulary(vocab.words + filler, vocab.counts + (1,) * len(filler))
    config = ModelConfig(vocab_size=len(big), image_size=image_size)
    out = root / "model"
    out.mkdir()
    ModelDir(out).begin(config.shape_fields(), {"dir": str(data)}, {})
    big.save(out / VOCAB)
    model = build_model(config)
    model((tf.zeros([1, image_size, image_size, 3]), tf.zeros([1, 2], tf.int32)))  # build the variables
    saver = tf.train.Checkpoint(model=model)
    paths = {"a": saver.save(str(out / "a"))}
    for w in model.decoder_weights:
        w.assign(w * 0.5 + tf.random.uniform(w.shape, -0.05, 0.05, seed=1))
    paths["b"] = saver.save(str(out / "b"))
    for name in ("c", "w"):
        for w in model.encoder_weights[-4:]:  # the last block's BN: every feature moves
            w.assign(w + tf.random.uniform(w.shape, 0.0, 0.1))
        paths[name] = saver.save(str(out / name))
    return paths


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--images", type=int, default=5000)
    parser.add_argument("--image-size", type=int, default=299)
    add_out(parser, "feature_reuse")
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname).1s %(name)s: %(message)s")
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        data = dataset(root, args.images, args.image_size)
        checkpoints = model_dir(root, data, args.image_size)
        features = root / "work" / "features"

        def evaluator(store: FeatureStore) -> CheckpointEvaluator:
            return CheckpointEvaluator(ModelDir(root / "model"), data, bootstrap=Bootstrap(),
                                       scorer=lambda: CaptionScorer(meteor=True, tokenizer="auto"),
                                       features=store)

        plain, keeping = evaluator(FeatureStore(None, 0)), evaluator(FeatureStore(features, 2))
        for one in (plain, keeping):  # tracing, the scorers' JVMs
            one.evaluate(checkpoints["w"], 0, images=64)
        shutil.rmtree(features)
        forward = forward_pass(plain.model, shard_files(data, "val"), 64)
        forward(64)
        timings, results = {}, {}
        started = time.monotonic()
        assert forward() == args.images
        timings["forward"] = time.monotonic() - started
        for name, chosen, checkpoint in (("today", plain, "a"), ("first", keeping, "a"),
                                         ("reused", keeping, "b"), ("phase2", keeping, "c"),
                                         ("today_b", plain, "b")):
            started = time.monotonic()
            results[name] = chosen.evaluate(checkpoints[checkpoint], 1)
            timings[name] = time.monotonic() - started
            logging.info("%s: %.1f s, %s", name, timings[name], results[name].costs)
        scorer = plain.scorer.scoring if plain.scorer else ""
        plain.close()
        keeping.close()
        kept_bytes = sum(p.stat().st_size for p in features.rglob("*") if p.is_file())
    rate = {k: args.images / v for k, v in timings.items()}
    reused, today_b = results["reused"], results["today_b"]
    differences = {k: abs(reused.metrics[k] - v) for k, v in today_b.metrics.items()}
    interval_differences = {k: max(abs(a - b) for a, b in zip(reused.intervals[k], v, strict=True))
                            for k, v in today_b.intervals.items()}
    seconds = reused.costs["seconds"]
    report = {
        "images": args.images, "image_size": args.image_size, "vocabulary": COCO_VOCABULARY,
        "beam_size": 3, "captions_per_image": 5, "scoring": scorer, "bootstrap": Bootstrap().as_dict(),
        "threads": {"intra_op": tf.config.threading.get_intra_op_parallelism_threads(),
                    "inter_op": tf.config.threading.get_inter_op_parallelism_threads()},
        "seconds": {k: round(v, 2) for k, v in timings.items()},
        "images_per_sec": {k: round(v, 2) for k, v in rate.items()},
        "ratio_over_forward": {k: round(v / rate["forward"], 3) for k, v in rate.items() if k != "forward"},
        "first_over_today": round(timings["first"] / timings["today"], 3),
        "phase2_over_today": round(timings["phase2"] / timings["today"], 3),
        "digest_seconds": round(results["phase2"].costs["seconds"]["digest"], 3),
        "digest_share_of_phase2": round(results["phase2"].costs["seconds"]["digest"] / timings["phase2"], 4),
        "reused_parts_seconds": {k: round(v, 2) for k, v in seconds.items()},
        "reused_parts_share": {k: round(v / timings["reused"], 3) for k, v in seconds.items()},
        "costs": {k: {c: v for c, v in r.costs.items() if c != "seconds"} for k, r in results.items()},
        "reused_equals_images": {"max_metric_difference": max(differences.values()),
                                 "max_interval_difference": max(interval_differences.values()),
                                 "same_captions": reused.samples == today_b.samples},
        "kept_bytes": kept_bytes, "kept_bytes_per_image_and_encoder": round(kept_bytes / (2 * args.images)),
        "projected_val2014": {
            "method": f"this run's seconds per image × {VAL2014} (every part grows with the images)",
            "reused_minutes": round(timings["reused"] / args.images * VAL2014 / 60, 1),
            "first_minutes": round(timings["first"] / args.images * VAL2014 / 60, 1),
            "kept_megabytes": round(kept_bytes / (2 * args.images) * VAL2014 / 1e6, 1)},
    }
    publish(report, args.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
