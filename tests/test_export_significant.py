"""``--export-best-when significant``: a new best is exported only when it beats the export beyond
noise — the paired interval of the difference on the same images excludes 0 — in this process,
with a real (small) model exported as a real SavedModel and the history a real SQLite store."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from showtell.captioning.config import ModelConfig
from showtell.captioning.data.vocab import Vocabulary
from showtell.captioning.model.network import build_model
from showtell.evaluator.records.best_export import BestExport
from showtell.evaluator.records.record import Record
from showtell.evaluator.records.store import Store
from showtell.evaluator.scoring.bootstrap import Bootstrap, ImageStats, export_judge
from showtell.metrics.exact_match import EXACT

pytestmark = pytest.mark.slow


def _evaluation(step: int, right: np.ndarray, ids: np.ndarray, fingerprint: str = "val") -> Record:
    stats = ImageStats(ids, {EXACT: right.astype(float)}, fingerprint=fingerprint)
    return Record(step, f"/m/ckpt-{step}", 0.0, 0.0, 1.0, len(ids),
                  metrics={"exact_match": float(right.mean())}, run="r", image_stats=stats.to_bytes())


def test_only_a_gain_beyond_noise_is_exported(tiny_data: Path, tmp_path: Path, caplog):
    rng = np.random.default_rng(2)
    ids = np.arange(400)
    first = rng.random(400) < 0.4
    slightly = first | (rng.random(400) < 0.01)  # a point or so better: within the noise
    clearly = first | (rng.random(400) < 0.2)  # many images more
    elsewhere = np.ones(400, dtype=bool)  # perfect, on other images: never compared
    store = Store(tmp_path / "evaluations.sqlite")
    records = [store.add(_evaluation(step, right, image_ids, where)) for step, right, image_ids, where
               in ((1, first, ids, "val"), (2, slightly, ids, "val"), (3, clearly, ids, "val"),
                   (4, elsewhere, ids + 1000, "val"),
                   (5, elsewhere, ids, "unseen"))]  # perfect, on the same ids of another set
    assert records[1].metrics["exact_match"] > records[0].metrics["exact_match"]
    vocab = Vocabulary.load(tiny_data / "vocab.txt")
    model = build_model(ModelConfig(vocab_size=len(vocab.words), image_size=75, embedding_size=16,
                                    lstm_units=16))
    exporter = BestExport.parse("exact_match", tmp_path / "export", when="significant")
    exporter.judge = export_judge(store.image_stats_at, "exact_match", True, Bootstrap(samples=1000))
    with caplog.at_level("INFO"):
        exported = [exporter.consider(record, model, vocab) for record in records]
    assert exported == [True, False, True, False, False]
    assert sorted(p.name for p in (tmp_path / "export").iterdir()) == ["1", "3"]
    said = [r for r in caplog.records if "--export-best-when significant" in r.getMessage()]
    assert len(said) == 3
    assert said[0].getMessage().startswith("--export-best-when significant: step 2's exact_match")
    assert "includes 0" in said[0].getMessage() and said[0].levelname == "INFO"
    assert "the two were not the same images (400 and 400 evaluated, different ones)" in said[1].getMessage()
    assert "of different sets" in said[2].getMessage()
    assert {r.levelname for r in said[1:]} == {"WARNING"}  # never will be paired: what to do
    assert all("remove the export's versions to start anew" in r.getMessage() for r in said[1:])
    # an export whose evaluation has no statistics (before they were kept) never blocks: the
    # next better evaluation replaces it on its value, with a WARNING (the judge's verdict)
    caplog.clear()
    with caplog.at_level("INFO"):
        assert exporter.judge({"step": 7, "checkpoint": "/m/ckpt-7", "run": "r"}, records[1]) == ""
    [warned] = [r for r in caplog.records if r.levelname == "WARNING"]
    assert "the export (step 7) has no per-image statistics" in warned.getMessage()
    # the plain rule exports the small gain
    plain = BestExport.parse("exact_match", tmp_path / "plain")
    assert [plain.consider(record, model, vocab) for record in records[:2]] == [True, True]
    store.close()
