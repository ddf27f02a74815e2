"""Kept encoder features on disk, in process (files, no process boundary under test): a damaged
part is named in one line, dropped and computed again while the evaluation lands with the same
numbers; a part a crash left unlisted is never read; what the evaluator appends is whole parts
listed by ``cache.json``.  Reuse across real phase-1 / phase-2 checkpoints is tests/test_phases.py's;
a full disk is tests/test_full_disk.py's."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest

from showtell.captioning.data import feature_cache
from showtell.captioning.data.feature_cache import INFO
from showtell.evaluator.scoring.bootstrap import Bootstrap
from showtell.evaluator.scoring.evaluation import CheckpointEvaluator
from showtell.evaluator.scoring.features import FeatureStore
from tests.helpers import TINY_DATA


@pytest.fixture(scope="module")
def traced(tiny_model: Path, tiny_data: Path, tmp_path_factory):
    """One evaluator for the module, its encoder and decoder traced once — built as the service and
    ``--once`` build theirs, from one typed config (``daemon.build_evaluator``)."""
    from showtell.common.model_dir import ModelDir
    from showtell.evaluator.config import EvaluationConfig, EvaluatorConfig
    from showtell.evaluator.daemon import build_evaluator
    from showtell.evaluator.records.workdir import WorkDir

    work = WorkDir(tmp_path_factory.mktemp("work"))
    made = build_evaluator(EvaluatorConfig(
        model_dir=str(tiny_model), data=tiny_data, work=work,
        evaluation=EvaluationConfig(bootstrap=100, meteor=False, tokenizer="regex")), ModelDir(tiny_model))
    assert made.bootstrap == Bootstrap(100, 0.95) and made.features.root == work.features
    made.open()  # the scorer, as the config says
    assert made.scorer.scoring.startswith("tokenizer=regex scorers=") and "meteor" not in made.scorer.scoring
    yield made
    made.close()


@pytest.fixture
def evaluator(traced: CheckpointEvaluator, tmp_path: Path) -> CheckpointEvaluator:
    """The module's evaluator, keeping its features in this test's own directory."""
    traced.features = FeatureStore(tmp_path / "features", 2)
    return traced


def _cache(root: Path) -> Path:
    [cache] = [p for p in root.iterdir() if not p.name.startswith(".")]
    return cache


def test_a_damaged_part_is_named_dropped_and_computed_again(evaluator: CheckpointEvaluator, tiny_model: Path,
                                                             tmp_path: Path, caplog):
    checkpoint, images = str(tiny_model / "ckpt-2"), TINY_DATA.val_images
    first = evaluator.evaluate(checkpoint, 2)
    assert (first.costs["features"], first.costs["images_computed"]) == ("computed", images)
    cache = _cache(tmp_path / "features")
    info = json.loads((cache / INFO).read_text())
    assert [(p["file"], p["images"]) for p in info["parts"]] == [("part-00000", images)]
    part = cache / "part-00000"
    part.write_bytes(part.read_bytes()[:-100])  # torn: the last record cut short
    with caplog.at_level(logging.WARNING, logger="showtell.evaluator.scoring.features"):
        again = evaluator.evaluate(checkpoint, 2)
    [line] = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert line.startswith(f"feature cache: {part}: its bytes are not the ones cache.json recorded")
    assert line.endswith("dropped, its features are computed again from the images")
    assert (again.costs["features"], again.costs["images_computed"]) == ("rebuilt", images)
    assert again.metrics == first.metrics and again.intervals == first.intervals
    third = evaluator.evaluate(checkpoint, 2)
    assert (third.costs["features"], third.costs["images_reused"]) == ("reused", images)
    assert third.metrics == first.metrics


def test_a_part_a_crash_left_unlisted_is_never_read(evaluator: CheckpointEvaluator, tiny_model: Path,
                                                     tmp_path: Path, monkeypatch):
    """The crash lands between the part's rename and ``cache.json``'s rewrite, the one moment a
    part file is whole on disk yet unlisted; the next evaluation computes the features again."""
    checkpoint, images = str(tiny_model / "ckpt-4"), TINY_DATA.val_images
    crashed = {}

    def crash(path: Path, text: str) -> None:
        crashed["parts"] = sorted(p.name for p in path.parent.iterdir())
        raise KeyboardInterrupt("killed while listing the part")

    monkeypatch.setattr(feature_cache, "write_atomic", crash)
    with pytest.raises(KeyboardInterrupt):
        evaluator.evaluate(checkpoint, 4)
    assert crashed["parts"] == ["part-00000"]  # whole, renamed, and not listed: no cache.json yet
    monkeypatch.undo()
    after = evaluator.evaluate(checkpoint, 4)
    assert (after.costs["features"], after.costs["images_computed"]) == ("computed", images)
    listed = json.loads((_cache(tmp_path / "features") / INFO).read_text())["parts"]
    assert [(p["file"], p["images"]) for p in listed] == [("part-00000", images)]
    assert evaluator.evaluate(checkpoint, 4).costs["features"] == "reused"


def test_the_encoder_digest_sees_one_ulp_of_any_variable_its_shape_and_its_place():
    import numpy as np
    import tensorflow as tf

    from showtell.captioning.weights.encoder import weights_digest

    values = [np.arange(6, dtype=np.float32).reshape(2, 3), np.float32(1.5), np.ones(4, np.float32),
              np.zeros([], np.int64)]
    base = weights_digest([tf.Variable(v) for v in values])
    assert weights_digest([tf.Variable(v.copy()) for v in values]) == base  # values decide, not objects
    for i, value in enumerate(values):
        changed = [v.copy() for v in values]
        changed[i] = np.asarray(value).copy()
        changed[i].flat[-1] = np.nextafter(changed[i].flat[-1], np.inf) if value.dtype.kind == "f" \
            else changed[i].flat[-1] + 1
        assert weights_digest([tf.Variable(v) for v in changed]) != base, f"variable {i}'s change unseen"
    assert weights_digest([tf.Variable(values[0].reshape(3, 2)), *map(tf.Variable, values[1:])]) != base
    assert weights_digest([tf.Variable(v) for v in (values[2], values[1], values[0], values[3])]) != base
