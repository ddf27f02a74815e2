"""MLflow as teams use it, against a real ``mlflow server`` (SQLite, proxied artifacts) on 127.0.0.1:
real trainer and evaluator processes put one showtell run into one MLflow run — its settings as
params, its training scalars, every evaluation at its step with its interval, each best export a
registered model version — exactly once, while the tracker goes down and comes back, and while the
evaluator is killed after MLflow acknowledged a record but before it could note so."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import yaml

from showtell.commands.metrics import format_status
from showtell.common import processes
from showtell.common.options import Invalid
from showtell.common.tracking import (
    RUN_TAG,
    Tracker,
    TrackerRefused,
    TrackingConfig,
    run_params,
    tracking_uri,
)
from showtell.evaluator.records.store import Store
from showtell.v1 import metrics_pb2 as pb
from tests.helpers import TINY_MODEL, copy_model, metrics_stub, start_evaluator, wait_for
from tests.tracking_server import MlflowServer

# The shared tiny model's run (tests/conftest.py: trained to step 4, a checkpoint every 2 steps)
TINY_RUN = ("--save-every-secs", "0", "--save-every-steps", "2", "--keep", "10")


def _status(port: int) -> pb.EvaluatorStatus:
    channel, stub = metrics_stub(port)
    with channel:
        return stub.GetStatus(pb.GetStatusRequest(), timeout=10).status


@pytest.mark.e2e
def test_every_evaluation_reaches_mlflow_once_whatever_fails(
        tiny_data: Path, tiny_model: Path, tmp_path: Path, procs, monkeypatch, showtell_main):
    server = MlflowServer(tmp_path / "mlflow").start()
    try:
        _every_evaluation_once(server, tiny_data, tiny_model, tmp_path, procs, monkeypatch, showtell_main)
    finally:
        server.stop()


def _every_evaluation_once(server: MlflowServer, data: Path, tiny_model: Path, tmp_path: Path, procs,
                           monkeypatch, showtell_main) -> None:
    # A run trained without a tracker (ckpt-2, ckpt-4): its evaluator creates the MLflow run.
    model_dir, work = copy_model(tiny_model, tmp_path / "model"), tmp_path / "eval"
    monkeypatch.setenv("MLFLOW_TRACKING_URI", server.uri)  # MLflow's own convention, for every process
    evaluator_flags = ("--policy", "all", "--max-eval-examples", "4", "--export-best", "loss:min",
                       "--export-keep", "100")
    first, port = start_evaluator(procs, model_dir, data, work, tmp_path / "eval-1.log", *evaluator_flags)
    wait_for(lambda: (s := _status(port)).evaluations == 2 and s.tracking.backlog == 0, 180,
             "ckpt-2 and 4 evaluated and sent")

    server.stop()  # the tracker goes away: training (here, in this process) and evaluation go on
    trained = showtell_main("train", "--data", str(data), "--model-dir", str(model_dir), *TINY_MODEL,
                            "--steps", "8", *TINY_RUN)
    assert trained.returncode == 0, trained.logs[-3000:]
    assert re.search(r"tracking-uri MLflow http://127\.0\.0\.1:\d+.*training continues", trained.logs)
    # its scalars are in TensorBoard; what MLflow did not take before it ended is said, not resent
    assert re.search(r"the run's end \(FINISHED\) and \d+ training scalar\(s\) not sent", trained.logs)
    down = wait_for(lambda: (s := _status(port)).evaluations == 4 and s, 180, "ckpt-6 and 8 evaluated")
    assert down.tracking.backlog >= 2 and "127.0.0.1" in down.tracking.last_error, down.tracking
    assert f"{down.tracking.backlog} evaluation(s) waiting to be sent" in format_status(down)
    assert "evaluations continue" in (tmp_path / "eval-1.log").read_text()

    # The next acknowledgement cannot be noted (its marks' file is in the way): kill the evaluator there.
    marks = work / "tracking.json"
    marks.unlink()
    marks.mkdir()
    server.start()
    wait_for(lambda: "cannot note what was sent" in (tmp_path / "eval-1.log").read_text(), 120,
             "a record acknowledged by MLflow that the evaluator could not note")
    client = server.client()
    [run] = client.search_runs([client.get_experiment_by_name("showtell").experiment_id])
    assert 6 in {m.step for m in client.get_metric_history(run.info.run_id, "val/loss")}  # it landed
    processes.kill_tree(first.pid)
    first.wait(timeout=30)
    marks.rmdir()

    trained = showtell_main("train", "--data", str(data), "--model-dir", str(model_dir), *TINY_MODEL,
                            "--steps", "10", *TINY_RUN)
    assert trained.returncode == 0, trained.logs[-3000:]
    second, _ = start_evaluator(procs, model_dir, data, work, tmp_path / "eval-2.log", *evaluator_flags,
                                "--exit-when-trained")
    assert second.wait(timeout=300) == 0, (tmp_path / "eval-2.log").read_text()[-3000:]
    assert re.search(r"step 6 \(val\): MLflow already holds \d+ of its \d+ points; nothing sent again",
                     (tmp_path / "eval-2.log").read_text())
    monkeypatch.delenv("MLFLOW_TRACKING_URI")  # as the tiny model's run was trained: with no tracker
    _check_run(server, model_dir, work, data, tiny_model, showtell_main)


def _check_run(server: MlflowServer, model_dir: Path, work: Path, data: Path, tiny_model: Path,
               showtell_main) -> None:
    client = server.client()
    experiment = client.get_experiment_by_name("showtell").experiment_id
    [run] = client.search_runs([experiment])  # one MLflow run for the showtell run, found by its tag
    showtell_run = json.loads((model_dir / "showtell-model.json").read_text())["run_id"]
    assert run.data.tags[RUN_TAG] == showtell_run and run.info.status == "FINISHED"
    assert run.data.tags["showtell.revision.3"].endswith("--steps: 8 → 10"), run.data.tags
    run_id = run.info.run_id

    # Every evaluation in the history, once, at its step, with its bounds; nothing else.
    store = Store(work / "evaluations.sqlite")
    try:
        records = [r for r in store.arrived_after(0) if r.status == "ok"]
    finally:
        store.close()
    assert sorted(r.step for r in records) == [2, 4, 6, 8, 10]
    for name in records[0].metrics:
        expected = {r.step: (r.metrics[name], *r.intervals.get(name, ())) for r in records}
        for i, suffix in enumerate(("", ".lo", ".hi")[:len(expected[2])]):
            history = client.get_metric_history(run_id, f"val/{name}{suffix}")
            assert sorted(m.step for m in history) == sorted(expected), (name, suffix, history)
            for m in history:
                assert m.value == pytest.approx(expected[m.step][i], rel=1e-6, abs=1e-9), (name, m)
    # the last report of each start, when the tracker was up (step 8's was made while it was down)
    assert [m.step for m in client.get_metric_history(run_id, "train/loss")] == [10]

    # The params are the run's settings as --print-config prints them (the evaluator made the run
    # from the run's record: its first start's, the shared tiny model's).
    printed = showtell_main("train", "--data", str(data), "--model-dir", str(tiny_model), *TINY_MODEL,
                            "--steps", "4", *TINY_RUN, "--print-config")
    settings = {f"{section}.{key}": value for section, values in yaml.safe_load(printed.stdout).items()
                if section not in ("resolved", "environment") for key, value in values.items()}
    params = {k: v for k, v in run.data.params.items() if not k.startswith("resolved.")}
    # as docs/tracking.md says: a string as it is, any other value as JSON
    assert params == {k: v if isinstance(v, str) else json.dumps(v) for k, v in settings.items()}

    # Bad tracker input is one line: a deleted experiment (with what to do), a URI of no tracker.
    gone = client.create_experiment("gone")
    client.delete_experiment(gone)
    with pytest.raises(TrackerRefused, match=rf"--tracking-experiment gone: deleted .*experiments restore "
                                             rf"--experiment-id {gone}"):
        Tracker(TrackingConfig(server.uri, "gone")).experiment_id()
    with pytest.raises(TrackerRefused, match=r"--tracking-uri MLflow htp://nowhere, experiment showtell: "
                                             r"connect: .*unsupported URI 'htp://nowhere'"):
        _ = Tracker(TrackingConfig("htp://nowhere")).client

    # The registered versions are exactly the exports.
    exported = sorted(int(p.name) for p in (work / "export" / "best").iterdir())
    versions = client.search_model_versions("name = 'showtell'")
    assert sorted(int(v.tags["showtell.step"]) for v in versions) == exported and len(exported) >= 3
    for version in versions:
        assert version.run_id == run_id and version.tags["showtell.metric"] == "loss:min"
        assert float(version.tags["showtell.lo"]) <= float(version.tags["showtell.value"]) <= float(
            version.tags["showtell.hi"])


def test_a_tracker_uri_with_a_password_is_refused_and_settings_become_params():
    with pytest.raises(Invalid, match="MLFLOW_TRACKING_PASSWORD"):
        tracking_uri("https://me:secret@mlflow.example.com")
    assert tracking_uri("https://mlflow.example.com") == "https://mlflow.example.com"
    assert TrackingConfig("https://mlflow.example.com:5000/x?token=t").describe() == \
        "MLflow https://mlflow.example.com:5000/x, experiment showtell"
    settings = "model:\n  lstm_units: 32\n  dropout: null\nsource:\n  data: d\nenvironment:\n  host: h\n" \
               "resolved:\n  phase: 1\n  devices: {cpu: 1}\nrevision:\n  number: 2\n"
    assert run_params(settings) == {"model.lstm_units": "32", "model.dropout": "null", "source.data": "d",
                                    "resolved.phase": "1"}
    assert run_params(None) == {} and run_params("[1, 2") == {}


def test_the_server_requirements_are_pinned_whole():
    """``pip install --no-deps -r`` installs exactly what is listed: every line a pin."""
    lines = [line for line in (Path(__file__).parents[1] / "deploy" / "tracking-server.txt").read_text()
             .splitlines() if line and not line.startswith("#")]
    pin = re.compile(r"[A-Za-z0-9_.-]+==[0-9][A-Za-z0-9.+-]*")
    assert lines and all(pin.fullmatch(line) for line in lines), lines
    assert "mlflow==3.17.2" in lines


def test_without_a_tracker_nothing_of_mlflow_is_imported():
    """The services' modules, tracking's own included, import the client only when tracking is on."""
    import subprocess
    import sys

    modules = ("showtell.trainer.assembly", "showtell.trainer.trainer", "showtell.trainer.loop.tracking",
               "showtell.evaluator.daemon", "showtell.evaluator.records.tracking", "showtell.commands.train",
               "showtell.commands.evaluate")
    code = (f"import sys\nfor m in {modules!r}: __import__(m)\n"
            "print(sorted(n for n in sys.modules if 'mlflow' in n))")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                            env=processes.environment())
    assert result.returncode == 0 and result.stdout.strip() == "[]", result.stderr[-2000:] + result.stdout
