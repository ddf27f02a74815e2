"""Metric correctness: COCO scores are pycocoevalcap's own; perplexity is exp(mean token loss)."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
import tensorflow as tf
from pycocoevalcap.bleu.bleu import Bleu
from pycocoevalcap.cider.cider import Cider
from pycocoevalcap.rouge.rouge import Rouge

from showtell import metrics as registry
from showtell.captioning.config import ModelConfig
from showtell.captioning.data import inputs
from showtell.captioning.data.dataset import load_dataset, shard_files
from showtell.captioning.data.records import parse_example
from showtell.captioning.model.network import build_model
from showtell.captioning.model.validation import Validator
from showtell.common.errors import ShowtellError
from showtell.evaluator.scoring.bootstrap import ImageStats
from showtell.evaluator.scoring.scorers import CaptionScorer
from showtell.metrics.exact_match import exact_match


def _scorers(scoring: str, tokenizer: str) -> set[str]:
    """The scorers a ``scoring`` description names, after checking its tokenizer."""
    head, _, names = scoring.partition(" scorers=")
    assert head == f"tokenizer={tokenizer}", scoring
    return set(names.split(","))


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


@pytest.fixture(scope="module")
def reference_meteor(java):
    """pycocoevalcap's own METEOR, one JVM for both tests that compare with it (its start, the
    paraphrase table's load, is ≈ 11 CPU-s); they share a worker (xdist_group) to share it."""
    from pycocoevalcap.meteor.meteor import Meteor

    meteor = Meteor()
    yield meteor
    meteor.meteor_p.kill()
    meteor.meteor_p.wait()


@pytest.mark.xdist_group("meteor")
def test_coco_scores_equal_pycocoevalcap(reference_meteor):
    scorer = CaptionScorer(meteor=True, tokenizer="regex")
    try:
        scored = scorer.score_images(PREDICTIONS, REFERENCES)
    finally:
        scorer.close()
    got = scored.corpus
    # the per-image statistics a bootstrap resamples give back the corpus scores: BLEU rebuilt
    # exactly from its counts, loss and the means from their sums.  Not METEOR: its corpus score is
    # the JVM's aggregate, and the statistics carry the difference from their mean as an offset,
    # so its "rebuilt" value equals the corpus one by construction — nothing to check there.
    rebuilt = ImageStats(np.asarray(scored.image_ids), scored.columns, scored.offsets).metrics()
    # every caption metric with per-image statistics is rebuilt (one without has no interval)
    with_columns = {name for name in got if registry.get(name).columns}
    assert set(rebuilt) == with_columns >= {"bleu1", "bleu4", "rouge_l", "cider", "meteor"}
    assert scored.image_ids == list(PREDICTIONS)
    for name, value in got.items():
        if name in with_columns - {"meteor"}:
            assert rebuilt[name][0] == pytest.approx(value, rel=1e-12, abs=1e-15), name
    per_image = np.mean(scored.columns["meteor"])
    assert scored.offsets == {"meteor": pytest.approx(got["meteor"] - per_image)}  # what the offset is
    # what COCO's PTBTokenizer leaves of these captions: the same words, punctuation dropped
    res = {i: [c.replace(" ,", "")] for i, c in PREDICTIONS.items()}
    gts = {i: [r.replace(" ,", "") for r in refs] for i, refs in REFERENCES.items()}
    bleu, _ = Bleu(4).compute_score(gts, res, verbose=0)
    for n in range(4):
        assert got[f"bleu{n + 1}"] == bleu[n]
    assert got["rouge_l"] == Rouge().compute_score(gts, res)[0]
    assert got["cider"] == Cider().compute_score(gts, res)[0]
    assert 0 < got["bleu4"] < got["bleu1"] < 1
    assert got["meteor"] == reference_meteor.compute_score(gts, res)[0]
    assert exact_match(PREDICTIONS, REFERENCES) == 0.25  # only image 1 is word for word


# COCO-style raw text: capitals, punctuation, contractions, hyphens — where PTB and a regex differ.
RAW_PREDICTIONS = {
    7: "A man riding a wave on top of a surfboard.",
    8: "Two dogs play with a frisbee in the park",
    9: "A kitchen with a stove, a sink and a refrigerator.",
    10: "",  # an empty caption is scored, not dropped
}
RAW_REFERENCES = {
    7: ["A surfer rides a large wave in the ocean.", "A man on a surfboard riding a wave!",
        "Surfer catching a wave -- on his board."],
    8: ["Two dogs playing with a Frisbee in a grassy park.", "The dog's frisbee is in the air.",
        "Dogs chase a frisbee; it's a sunny day."],
    9: ["A kitchen that has a stove, sink, and fridge.", "An old-fashioned kitchen with white cabinets."],
    10: ["A cat sleeping on a couch."],
}


@pytest.mark.xdist_group("meteor")
def test_ptb_scores_equal_pycocoevalcap_on_its_own_ptb_tokenizer_and_touch_no_package_file(reference_meteor):
    """The paper-comparable path: pycocoevalcap's PTBTokenizer then its Bleu/Cider/Rouge/Meteor
    (SPICE excluded) give exactly showtell's scores — and showtell writes nothing into the
    package (pycocoevalcap's own tokenizer writes a temporary file beside its jar)."""
    from pycocoevalcap.tokenizer import ptbtokenizer

    package = Path(ptbtokenizer.__file__).parents[1]
    before = {p: p.stat().st_mtime_ns for p in [package, *package.rglob("*")] if p.is_dir()}
    scorer = CaptionScorer(meteor=True, tokenizer="auto")
    try:
        assert _scorers(scorer.scoring, "ptb") >= {"bleu1", "bleu4", "cider", "meteor", "rouge_l"}
        got = scorer.score(RAW_PREDICTIONS, RAW_REFERENCES)
        again = scorer.score(RAW_PREDICTIONS, RAW_REFERENCES)  # references remembered, same scores
    finally:
        scorer.close()
    assert again == got
    after = {p: p.stat().st_mtime_ns for p in [package, *package.rglob("*")] if p.is_dir()}
    assert after == before  # no file created or removed in any of the package's directories

    tokenizer = ptbtokenizer.PTBTokenizer()
    gts = tokenizer.tokenize({i: [{"caption": r} for r in refs] for i, refs in RAW_REFERENCES.items()})
    res = tokenizer.tokenize({i: [{"caption": c or "<empty>"}] for i, c in RAW_PREDICTIONS.items()})
    assert gts[7][2] == "surfer catching a wave on his board"  # PTB: lower-cased, punctuation gone
    assert gts[8][1] == "the dog 's frisbee is in the air"  # … and the possessive split off
    bleu, _ = Bleu(4).compute_score(gts, res, verbose=0)
    for n in range(4):
        assert got[f"bleu{n + 1}"] == bleu[n]
    assert got["rouge_l"] == Rouge().compute_score(gts, res)[0]
    assert got["cider"] == Cider().compute_score(gts, res)[0]
    assert got["meteor"] == reference_meteor.compute_score(gts, res)[0]
    # The regex stand-in scores the same captions differently: why each evaluation records which ran.
    regex = CaptionScorer(meteor=False, tokenizer="regex")
    assert regex.score(RAW_PREDICTIONS, RAW_REFERENCES)["cider"] != got["cider"]


@pytest.mark.slow
def test_perplexity_is_exp_of_mean_token_loss(tiny_data: Path):
    manifest, vocab = load_dataset(tiny_data)
    model = build_model(ModelConfig(vocab_size=manifest.vocab_size, image_size=75, embedding_size=16,
                                    lstm_units=16))
    files = shard_files(tiny_data, "val")
    images, progress = manifest.splits["val"].images, []
    validator = Validator(model, files, vocab, batch_size=7)
    validation = validator.run(  # padded batches, a short last one
        lambda done, total: progress.append((done, total)), split_images=images)
    result = validation.loss
    assert progress == [(min(done, images), images) for done in range(7, images + 7, 7)]
    # the encoder and the decoder traced once each: not again for the short last batch
    assert [f.experimental_get_tracing_count() for f in (validator._encode, validator._decode)] == [1, 1]
    # --max-eval-examples auto: the cap decided from the pass's own rate after its second batch.
    rates, shown = [], []
    capped = Validator(model, files, vocab, batch_size=2).run(
        lambda done, total: shown.append((done, total)), split_images=images,
        limit=lambda rate: rates.append(rate) or 4)
    assert capped.images == len(capped.captions) == 4 and len(rates) == 1 and rates[0] > 0
    assert shown == [(2, images), (4, 4)]

    # independently: one unpadded example at a time, log-softmax in numpy (the model's own call,
    # traced once for any caption length: 40 eager passes through Inception cost 10 s)
    forward = tf.function(lambda image, words: model((image, words), training=False),
                          input_signature=[tf.TensorSpec([1, 75, 75, 3]), tf.TensorSpec([1, None], tf.int32)])
    total, words, per_image = 0.0, 0, {}
    for serialized in tf.data.TFRecordDataset(files):
        record = parse_example(serialized)
        before = (total, words)
        image = inputs.preprocess_image(inputs.decode_image(record["image_data"]), 75, False,
                                        inputs.InputConfig())
        for caption in record["captions"].to_list():
            caption = np.array(caption, np.int32)
            logits = forward(image[None], caption[None, :-1]).numpy()[0].astype(np.float64)
            top = logits.max(-1, keepdims=True)
            log_probs = logits - np.log(np.exp(logits - top).sum(-1, keepdims=True)) - top
            total -= log_probs[np.arange(len(caption) - 1), caption[1:]].sum()
            words += len(caption) - 1
        per_image[int(record["image_id"])] = (total - before[0], words - before[1])
    assert result.words == words
    # each image's own loss and words, what the bootstrap over images resamples
    assert validation.image_losses.keys() == per_image.keys()
    for image_id, (loss_sum, count) in per_image.items():
        assert validation.image_losses[image_id][1] == count
        assert math.isclose(validation.image_losses[image_id][0], loss_sum, rel_tol=1e-4)
    assert result.examples == manifest.splits["val"].captions
    assert math.isclose(result.loss, total / words, rel_tol=1e-4)
    assert math.isclose(result.perplexity, math.exp(total / words), rel_tol=1e-4)

    # XLA (--jit-compile): the loss over every position with padding masked, not only the words.
    # One batch of the whole split: XLA compiles Inception once per batch shape (7 + 1: 10 CPU-s).
    compiled = Validator(model, files, vocab, batch_size=images, jit_compile=True).run()
    assert math.isclose(compiled.loss.loss, result.loss, rel_tol=1e-4) and compiled.loss.words == words
    for image_id, (loss_sum, count) in per_image.items():
        assert compiled.image_losses[image_id][1] == count
        assert math.isclose(compiled.image_losses[image_id][0], loss_sum, rel_tol=1e-4)


def test_without_java_auto_falls_back_to_the_regex_and_says_so(monkeypatch, tmp_path: Path, caplog):
    """No ``java`` on PATH (a slim image): ``auto`` scores with the regex tokenizer and no METEOR,
    with one warning — and each evaluation's ``scoring`` says which ran; ``ptb`` refuses in one line."""
    monkeypatch.setenv("PATH", str(tmp_path))  # an empty directory: no java there
    with caplog.at_level("WARNING"):
        scorer = CaptionScorer(meteor=True, tokenizer="auto")
    names = _scorers(scorer.scoring, "regex")
    assert names >= {"bleu1", "bleu4", "cider", "rouge_l"} and "meteor" not in names
    assert [r.getMessage() for r in caplog.records] == [
        "no java on PATH: captions are tokenized by a regex, not COCO's PTB tokenizer — scores are not "
        "comparable with published ones; METEOR is not computed"]
    scores = scorer.score({1: "A red circle."}, {1: ["a red circle", "a circle that is red"]})
    assert "meteor" not in scores and scores["bleu1"] == pytest.approx(1.0)
    with pytest.raises(ShowtellError, match=r"^--tokenizer ptb needs Java \(`java` on PATH\)"):
        CaptionScorer(tokenizer="ptb")


def test_metrics_are_registered_by_their_modules_and_every_consumer_reads_the_registry():
    """One module per metric under ``showtell/metrics/``, found by name; its direction and name are
    what ``--export-best``, ``--stop-when`` and ``showtell metrics --metric`` accept."""
    import argparse

    from showtell.commands import metrics as metrics_command
    from showtell.evaluator.records.best_export import BestExport
    from showtell.trainer.following.early_stop import StopWhen

    modules = {p.stem for p in Path(registry.__file__).parent.glob("[!_]*.py")}
    names = set(registry.names())
    registered = {type(m).__module__.rsplit(".", 1)[1] for m in registry.metrics()}
    assert registered == modules  # every file registers its metrics
    assert {"loss", "perplexity", "exact_match", "bleu4", "cider", "rouge_l", "meteor"} <= names
    assert registry.lower_is_better() >= {"loss", "perplexity"} and "cider" not in registry.lower_is_better()
    assert registry.get("meteor").needs_jvm and not registry.get("cider").needs_jvm
    assert BestExport.parse("loss", Path("x")).maximize is False  # the direction, from the metric
    for refused in (lambda: BestExport.parse("cidre", Path("x")), lambda: StopWhen.parse("cidre>=1")):
        with pytest.raises(ShowtellError, match="unknown metric 'cidre'; the metrics are bleu1, "):
            refused()
    for described in ("distinct_2:max", "references_with_unknown", "unknown_reference_words"):
        assert BestExport.parse(described, Path("x")).metric == described.partition(":")[0]  # better: moves
        with pytest.raises(ShowtellError, match=rf"^--export-best {described} --export-best-when "
                                                r"significant: .* has no interval .* would never move; use "):
            BestExport.parse(described, Path("x"), when="significant")  # can never move: refused
    parser = argparse.ArgumentParser()
    metrics_command.add_arguments(parser)
    choices = next(a.choices for a in parser._actions if "--metric" in a.option_strings)
    assert list(choices) == sorted(names)
