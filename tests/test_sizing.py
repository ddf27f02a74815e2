"""``--max-eval-examples auto`` in process: the interval and the size as pure decisions, and the
loop choosing once per run (from the first evaluation's own rate) and keeping it — across a
restart, not across runs.  The fake evaluator and clock of tests/fakes.py."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from showtell.common.model_dir import ModelDir
from showtell.evaluator.loop.sizing import RunSizes, Size, checkpoint_interval, choose
from tests.fakes import FakeEvaluator, build


@pytest.mark.parametrize("times, started, expected", [
    ([100.0, 160.0, 220.0, 400.0], None, (60.0, "median gap of 4 checkpoints")),
    ([160.0, 100.0], 50.0, (60.0, "median gap of 2 checkpoints")),  # any order
    ([130.0], 100.0, (30.0, "the run's start to its first checkpoint")),
    ([130.0], None, None),
    ([], 100.0, None),
    ([100.0, 100.0], None, None),  # one save time twice: no gap
])
def test_the_checkpoint_interval(times, started, expected):
    assert checkpoint_interval(times, started) == expected


def test_the_size_is_whole_batches_within_the_split():
    size = choose(rate=10.0, interval=(600.0, "median gap of 3 checkpoints"), split_images=5000,
                  batch_size=64)
    assert size == Size(2944, "2944 of 5000 images: 10.0 images/s × 0.5 × a checkpoint every 600 s "
                              "(median gap of 3 checkpoints) = 3000 (whole batches)")
    assert choose(rate=10.0, interval=(6000.0, "x"), split_images=5000, batch_size=64).images == 5000
    assert choose(rate=0.1, interval=(60.0, "x"), split_images=5000, batch_size=64).images == 64  # ≥ 1 batch
    assert choose(rate=10.0, interval=None, split_images=5000, batch_size=64) == Size(
        5000, "all 5000 images: no checkpoint interval to fit yet")


def test_the_loop_chooses_once_per_run_and_keeps_it(tmp_path: Path, caplog):
    evaluator = FakeEvaluator(rate=2.0)
    sizes = RunSizes(tmp_path / "work" / "auto-size.json")
    controller, model, _, _ = build(tmp_path, evaluator=evaluator, sizes=sizes)
    os.utime(model.root / ModelDir.METADATA, (1000, 1000))
    for step, saved in ((1, 1100), (2, 1200)):
        model.save(step)
        os.utime(model.prefix(step) + ".index", (saved, saved))
    model.name(1, 2)
    with caplog.at_level("INFO", logger="showtell.evaluator.loop.sizing"):
        controller.look()
    # 2 images/s × 0.5 × 100 s = 100 images: 2 batches of 50; the second checkpoint keeps them.
    assert evaluator.asked == [100, 100]
    assert "--max-eval-examples auto for run run-1 (features computed): 100 of 1000 images: 2.0 images/s × " \
           "0.5 × a checkpoint every 100 s (median gap of 2 checkpoints) = 100 (whole batches)" in caplog.text
    # A restarted evaluator keeps the run's size, whatever its rate now.
    restarted = FakeEvaluator(rate=50.0)
    controller, model, _, _ = build(tmp_path, evaluator=restarted, sizes=RunSizes(sizes.path))
    model.save(3)
    model.name(1, 2, 3)
    controller.look()
    assert restarted.asked == [100]
    # A new run chooses again.
    (model.root / ModelDir.METADATA).write_text(json.dumps({"run_id": "run-2"}))
    os.utime(model.root / ModelDir.METADATA, (2000, 2000))
    for step in (1, 2, 3):
        model.delete(step)
    model.save(1)
    os.utime(model.prefix(1) + ".index", (2100, 2100))
    model.name(1)
    controller.look()
    assert restarted.asked == [100, 1000]  # 50 images/s × 0.5 × 100 s from its start: all fit
    assert json.loads((tmp_path / "work" / "auto-size.json").read_text())["run-1"]["images"] == 100


def test_evaluations_that_reuse_features_are_sized_apart_from_those_that_compute_them(tmp_path: Path):
    """A frozen-encoder phase: the first checkpoint computes its features (Inception's cost), the
    later ones read them back — five times cheaper, so they get a size of their own, kept as the
    other is; a size file from before the kinds reads as the computed kind's."""
    path = tmp_path / "work" / "auto-size.json"
    path.parent.mkdir()
    path.write_text(json.dumps({"run-1": {"images": 100, "reason": "chosen before kinds"}}))
    evaluator = FakeEvaluator(rate=10.0)
    controller, model, _, _ = build(tmp_path, evaluator=evaluator, sizes=RunSizes(path))
    os.utime(model.root / ModelDir.METADATA, (1000, 1000))
    for step in (1, 2, 3):
        model.save(step)
        os.utime(model.prefix(step) + ".index", (1000 + 100 * step,) * 2)
    model.name(1)
    controller.look()
    evaluator.kind = "reused"
    model.name(1, 2)
    controller.look()
    model.name(1, 2, 3)
    evaluator.rate = 1.0  # slower now: the kept size stands
    controller.look()
    assert evaluator.asked == [100, 500, 500]  # 10 images/s × 0.5 × 100 s
    sizes = json.loads(path.read_text())["run-1"]
    assert (sizes["images"], sizes["reused"]["images"]) == (100, 500)
