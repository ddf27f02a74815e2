"""TensorBoard HParams: the evaluator writes each run's training settings (the trainer's record in
``<model-dir>/runs/``) as an HParams session in the run's own directory (``<work-dir>/eval/<run
id>``), beside that run's metrics — read back as TensorBoard reads them: its event multiplexer, its
data provider and its HParams plugin's handlers.  In process: actions and summary writers."""

from __future__ import annotations

import json
import time
from pathlib import Path

from tensorboard import context
from tensorboard.backend.event_processing import data_provider, plugin_event_multiplexer
from tensorboard.plugins import base_plugin
from tensorboard.plugins.hparams import api_pb2, backend_context, get_experiment, list_session_groups

from showtell.common.model_dir import ModelDir
from showtell.evaluator.records.actions import HParamsSession, WriteSummaries, session_hparams
from showtell.evaluator.records.record import Record
from showtell.evaluator.records.summaries import EvalSummaries


def _revision(learning_rate: float, lstm_units: int) -> dict:
    """A trainer's run record revision, as the trainer's ``ModelDir.revise`` writes it (abridged)."""
    return {"settings": {"learning_rate": learning_rate, "log_format": "json", "prometheus_host": "0.0.0.0",
                         "model_dir": "/checkpoints/model", "evaluator": "evaluator:50051"},
            "resolved": {"model": {"vocab_size": 24, "lstm_units": lstm_units, "train_inception": False},
                         "input": {"batch_size": 32, "contrast_range": [0.9, 1.1], "augment": True},
                         "optimizer": {"name": "adam", "learning_rate": learning_rate,
                                       "inception_learning_rate": None},
                         "encoder_optimizer": None,
                         "train": {"steps": 900, "keep": 10, "save_every_secs": 120, "log_every_steps": 100,
                                   "seed": 0},
                         "compute": {"mixed_precision": "off", "jit_compile": False, "steps_per_loop": 10},
                         "phase": "encoder frozen: pretrained encoder, phase 1", "strategy": "one_device",
                         "replicas": 1, "global_batch": 32, "steps_per_epoch": 30}}


def test_a_revision_gives_its_training_settings_not_its_placement():
    assert session_hparams(_revision(0.001, 512)) == {
        "phase": "encoder frozen: pretrained encoder, phase 1", "strategy": "one_device", "replicas": 1,
        "global_batch": 32, "model.vocab_size": 24, "model.lstm_units": 512, "model.train_inception": False,
        "input.batch_size": 32, "input.contrast_range": "0.9,1.1", "input.augment": True,
        "optimizer.name": "adam", "optimizer.learning_rate": 0.001, "train.steps": 900, "train.seed": 0,
        "compute.mixed_precision": "off", "compute.jit_compile": False, "compute.steps_per_loop": 10}


def _tensorboard(logdir: Path):
    """What ``tensorboard --logdir`` builds to answer the HParams tab: (request, backend)."""
    multiplexer = plugin_event_multiplexer.EventMultiplexer()
    multiplexer.AddRunsFromDirectory(str(logdir))
    multiplexer.Reload()
    provider = data_provider.MultiplexerDataProvider(multiplexer, str(logdir))
    tb = base_plugin.TBContext(data_provider=provider, logdir=str(logdir), multiplexer=multiplexer)
    return context.RequestContext(), backend_context.Context(tb)


def test_two_runs_in_one_work_dir_are_two_sessions_each_with_its_own_metrics(tmp_path: Path):
    model_dir, work = tmp_path / "model", tmp_path / "work"
    (model_dir / "runs").mkdir(parents=True)
    runs = {"run-1": (0.001, 512), "run-2": (0.01, 256)}
    for run, (rate, units) in runs.items():
        (model_dir / "runs" / f"{run}.json").write_text(json.dumps({"run_id": run,
                                                                  "revisions": [_revision(rate, units)]}))
    summaries = EvalSummaries(str(work / "eval"))
    actions = [WriteSummaries(summaries), HParamsSession(ModelDir(model_dir), summaries)]
    # the runs' evaluations interleaved, as an evaluator following a preview and a final run sees them
    for step, run, status in ((10, "run-1", "failed"), (20, "run-1", "ok"), (10, "run-2", "ok"),
                              (30, "run-1", "ok"), (20, "run-2", "ok"), (5, "", "ok")):
        exact = step / 100 + (0.5 if run == "run-2" else 0)
        record = Record(step, f"{model_dir}/ckpt-{step}", 0.0, time.time(), 1.0, 8, status=status, run=run,
                        metrics={"exact_match": exact} if status == "ok" else {})
        for action in actions:
            action(record)  # a run without a record ("", an import): its scalars, no session
    summaries.close()
    assert sorted(p.name for p in (work / "eval").iterdir()) == ["run-1", "run-2", "unrecorded"]

    request, backend = _tensorboard(work)
    experiment = get_experiment.Handler(request, backend, "", api_pb2.GetExperimentRequest()).run()
    names = {h.name for h in experiment.hparam_infos}
    assert {"optimizer.learning_rate", "model.lstm_units", "train.steps"} <= names
    assert not names & {"log_format", "prometheus_host", "model_dir", "evaluator", "train.keep",
                        "train.save_every_secs", "learning_rate"}  # placement and bookkeeping: not hparams
    assert {m.name.tag for m in experiment.metric_infos} >= {"exact_match"}

    groups = list_session_groups.Handler(request, backend, "", api_pb2.ListSessionGroupsRequest(
        start_index=0, slice_size=10, aggregation_type=api_pb2.AGGREGATION_AVG,
        allowed_statuses=[api_pb2.STATUS_UNKNOWN, api_pb2.STATUS_SUCCESS, api_pb2.STATUS_RUNNING])).run()
    sessions = {g.name: g for g in groups.session_groups}
    assert set(sessions) == {"run-1", "run-2"}  # two rows, not one over both runs' scalars
    for run, (rate, units) in runs.items():
        group = sessions[run]
        assert group.hparams["optimizer.learning_rate"].number_value == rate
        assert group.hparams["model.lstm_units"].number_value == units
        [metric] = [m for m in group.metric_values if m.name.tag == "exact_match"]
        last_step = 30 if run == "run-1" else 20  # its own last evaluation, not the other run's
        assert (metric.training_step, round(metric.value, 6)) == (
            last_step, round(last_step / 100 + (0.5 if run == "run-2" else 0), 6))
