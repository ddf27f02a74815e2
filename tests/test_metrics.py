"""Metric correctness: COCO scores are pycocoevalcap's own; perplexity is exp(mean token loss)."""

from __future__ import annotations

import math
import shutil
from pathlib import Path

import numpy as np
import tensorflow as tf
from pycocoevalcap.bleu.bleu import Bleu
from pycocoevalcap.cider.cider import Cider
from pycocoevalcap.rouge.rouge import Rouge

from showtell.captioning.config import ModelConfig
from showtell.captioning.data import inputs
from showtell.captioning.data.manifest import load_dataset
from showtell.captioning.data.records import parse_example, shard_files
from showtell.captioning.model.network import build_model
from showtell.captioning.model.validation import Validator, exact_match
from showtell.evaluator.scorers import CaptionScorer

PREDICTIONS = {
    1: "a red circle left of a blue square",
    2: "a small green triangle",
    3: "a yellow square above a purple circle",
    4: "a large blue circle , a red square and a green triangle from left to right",
}
REFERENCES = {
    1: ["a red circle left of a blue square", "a blue square right of a red circle"],
    2: ["a large green triangle", "a green triangle", "one large green triangle"],
    3: ["a small yellow square above a large purple circle", "a purple circle below a yellow square"],
    4: ["a large blue circle , a small red square and a small green triangle from left to right",
        "a green triangle , a red square and a blue circle from right to left"],
}


def test_coco_scores_equal_pycocoevalcap():
    java = shutil.which("java") is not None
    scorer = CaptionScorer(meteor=java)
    try:
        got = scorer.score(PREDICTIONS, REFERENCES)
    finally:
        scorer.close()
    res = {i: [c] for i, c in PREDICTIONS.items()}
    bleu, _ = Bleu(4).compute_score(REFERENCES, res, verbose=0)
    for n in range(4):
        assert got[f"bleu{n + 1}"] == bleu[n]
    assert got["rouge_l"] == Rouge().compute_score(REFERENCES, res)[0]
    assert got["cider"] == Cider().compute_score(REFERENCES, res)[0]
    assert 0 < got["bleu4"] < got["bleu1"] < 1
    if java:
        from pycocoevalcap.meteor.meteor import Meteor

        meteor = Meteor()
        try:
            assert got["meteor"] == meteor.compute_score(REFERENCES, res)[0]
        finally:
            meteor.meteor_p.kill()
            meteor.meteor_p.wait()
    assert exact_match(PREDICTIONS, REFERENCES) == 0.25  # only image 1 is word for word


def test_perplexity_is_exp_of_mean_token_loss(tiny_data: Path):
    manifest, vocab = load_dataset(tiny_data)
    model = build_model(ModelConfig(vocab_size=manifest.vocab_size, image_size=75, embedding_size=16,
                                    lstm_units=16))
    files = shard_files(tiny_data, "val")
    result = Validator(model, files, vocab, batch_size=7).run().loss  # padded batches, a short last one

    # independently: one unpadded example at a time, log-softmax in numpy
    total, words = 0.0, 0
    for serialized in tf.data.TFRecordDataset(files):
        record = parse_example(serialized)
        image = inputs.preprocess_image(inputs.decode_image(record["image_data"]), 75, False,
                                        inputs.InputConfig())
        for caption in record["captions"].to_list():
            caption = np.array(caption, np.int32)
            logits = model((image[None], caption[None, :-1]), training=False).numpy()[0].astype(np.float64)
            top = logits.max(-1, keepdims=True)
            log_probs = logits - np.log(np.exp(logits - top).sum(-1, keepdims=True)) - top
            total -= log_probs[np.arange(len(caption) - 1), caption[1:]].sum()
            words += len(caption) - 1
    assert result.words == words
    assert result.examples == manifest.splits["val"].captions
    assert math.isclose(result.loss, total / words, rel_tol=1e-4)
    assert math.isclose(result.perplexity, math.exp(total / words), rel_tol=1e-4)
