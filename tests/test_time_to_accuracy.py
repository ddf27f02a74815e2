"""Time to accuracy: the trainer saves the run's training wall-clock seconds in every checkpoint
(summed over the run's starts); the evaluator reads it from the checkpoint it evaluates and
carries it in the record, the history, Watch and ``showtell metrics``; the demo's summary says
when its run reached exact match 0.5.  The training runs in process (``showtell_main``)."""

from __future__ import annotations

from pathlib import Path

import pytest
import tensorflow as tf

from showtell.commands.demo.summary import time_to_target
from showtell.commands.metrics import format_evaluation
from showtell.evaluator.records.record import Record
from showtell.evaluator.scoring.evaluation import train_seconds
from showtell.evaluator.serving.service import to_proto
from showtell.v1 import metrics_pb2 as pb
from tests.helpers import TINY_MODEL


@pytest.mark.e2e
def test_each_checkpoint_carries_the_runs_training_time(tiny_data: Path, tmp_path: Path, showtell_main):
    model_dir = tmp_path / "model"
    common = ["train", "--data", str(tiny_data), "--model-dir", str(model_dir), *TINY_MODEL,
              "--save-every-secs", "0", "--save-every-steps", "1", "--keep", "10"]
    assert showtell_main(*common, "--steps", "2").returncode == 0
    first, second = train_seconds(str(model_dir / "ckpt-1")), train_seconds(str(model_dir / "ckpt-2"))
    assert 0 < first <= second
    assert showtell_main(*common, "--steps", "3").returncode == 0  # resumed: the run's time goes on
    third = train_seconds(str(model_dir / "ckpt-3"))
    assert third >= second
    # A checkpoint without it (an import, an older showtell): unknown, not zero.
    other = tf.train.Checkpoint(v=tf.Variable(1.0)).write(str(tmp_path / "other" / "ckpt-1"))
    assert train_seconds(other) is None


def _evaluation(step: int, exact: float, seconds: float | None) -> pb.Evaluation:
    record = Record(step, f"/m/ckpt-{step}", 0.0, 1.8e9, 1.0, 8, metrics={"exact_match": exact},
                    run="r", train_seconds=seconds)
    return to_proto(record)


def test_the_training_time_reaches_watch_metrics_and_the_demo_summary():
    reached = _evaluation(20, 0.55, 151.25)
    assert (reached.train_time.seconds, reached.train_time.nanos) == (151, 250_000_000)
    assert not _evaluation(20, 0.55, None).HasField("train_time")  # unknown stays unset, not 0
    assert "after 2 min 31 s of training" in format_evaluation(reached)
    assert "of training" not in format_evaluation(_evaluation(20, 0.55, None))
    curve = [_evaluation(10, 0.30, 60.0), reached, _evaluation(30, 0.60, 200.0)]
    assert time_to_target(curve) == "exact match 0.5 reached after 2:31 of training (step 20)"
    assert time_to_target(curve[:1]) == "exact match 0.5 not reached (best 0.30 at step 10)"
