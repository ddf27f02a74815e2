"""TensorBoard HParams: the evaluator writes each run's configuration (the trainer's record in
``<model-dir>/runs/``) as an HParams session beside its metrics, once per run, at the run's
first successful evaluation — read back here from the event files, as TensorBoard reads them.
In process: an action and a summary writer."""

from __future__ import annotations

import json
import time
from pathlib import Path

import tensorflow as tf
from tensorboard.plugins.hparams import metadata, plugin_data_pb2

from showtell.evaluator.records.actions import HParamsSession, WriteSummaries
from showtell.evaluator.records.store import Record
from showtell.evaluator.records.summaries import EvalSummaries

REVISION = {"settings": {"batch_size": 32, "learning_rate": 0.001, "optimizer": "adam", "steps": 900,
                         "deterministic_input": False, "cache_dir": None, "devices": ["CPU:0"]},
            "resolved": {"phase": "encoder frozen: pretrained encoder, phase 1", "strategy": "one_device",
                         "replicas": 1, "global_batch": 32, "compute": {"steps_per_loop": 10}}}


def _sessions(logdir: Path) -> list[tuple[str, dict]]:
    """(trial id, hparams) of every HParams session start written under ``logdir``."""
    found = []
    for events in logdir.glob("events.out.tfevents.*"):
        for event in tf.compat.v1.train.summary_iterator(str(events)):
            for value in event.summary.value:
                if value.metadata.plugin_data.plugin_name != metadata.PLUGIN_NAME:
                    continue
                data = plugin_data_pb2.HParamsPluginData.FromString(value.metadata.plugin_data.content)
                if data.HasField("session_start_info"):
                    info = data.session_start_info
                    found.append((info.group_name, {k: getattr(v, v.WhichOneof("kind"))
                                                    for k, v in info.hparams.items()}))
    return found


def _scalar_tags(logdir: Path) -> set[str]:
    return {v.tag for events in logdir.glob("events.out.tfevents.*")
            for e in tf.compat.v1.train.summary_iterator(str(events)) for v in e.summary.value}


def test_each_runs_configuration_is_an_hparams_session_beside_its_metrics(tmp_path: Path):
    model_dir, logdir = tmp_path / "model", tmp_path / "work" / "eval"
    (model_dir / "runs").mkdir(parents=True)
    (model_dir / "runs" / "run-1.json").write_text(json.dumps({"run_id": "run-1", "revisions": [REVISION]}))
    summaries = EvalSummaries(str(logdir))
    actions = [WriteSummaries(summaries), HParamsSession(str(model_dir), summaries)]
    for step, status in ((10, "failed"), (20, "ok"), (30, "ok")):
        record = Record(step, f"{model_dir}/ckpt-{step}", 0.0, time.time(), 1.0, 8, status=status,
                        run="run-1", metrics={"exact_match": step / 100} if status == "ok" else {})
        for action in actions:
            action(record)
    other = Record(5, f"{model_dir}/ckpt-5", 0.0, time.time(), 1.0, 8, metrics={"exact_match": 0.1},
                   run="old")
    for action in actions:
        action(other)  # a run without a record: no session
    summaries.close()
    [(trial, hparams)] = _sessions(logdir)  # once per run, at its first successful evaluation
    assert trial == "run-1"
    assert hparams == {"batch_size": 32.0, "learning_rate": 0.001, "optimizer": "adam", "steps": 900.0,
                       "deterministic_input": False, "strategy": "one_device", "replicas": 1.0,
                       "phase": "encoder frozen: pretrained encoder, phase 1", "global_batch": 32.0,
                       "steps_per_loop": 10.0}
    assert "exact_match" in _scalar_tags(logdir)  # its metrics, in the same logdir
