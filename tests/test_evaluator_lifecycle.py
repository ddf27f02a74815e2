"""The evaluator as a long-running neighbour: idle costs nothing and it still notices (every
observer), a model dir started over or replaced is a new run to every observer, it ends with the
job when told to, and ``showtell metrics watch`` follows it across a restart."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import threading
import time
from pathlib import Path

import pytest

from showtell.api.client import WatchFollower
from showtell.api.contract import ALL_RUNS
from showtell.captioning.model.restoring import read_state
from showtell.common import processes
from showtell.common.model_dir import ModelDir
from showtell.v1 import metrics_pb2 as pb
from tests.helpers import (
    TINY_MODEL,
    copy_model,
    error_lines,
    metrics_stub,
    renice_session,
    run_showtell,
    start_evaluator,
    train_more,
    wait_for,
)
from tests.measure import figures, tree_cpu_seconds

pytestmark = pytest.mark.e2e
IDLE_SECONDS = 20.0
IDLE_CORE_FRACTION = 0.02


def _list(stub, run: str = "") -> list[tuple[str, int, str]]:
    page = stub.ListEvaluations(pb.ListEvaluationsRequest(page_size=1000, run_id=run), timeout=10)
    return [(e.run_id, e.global_step, pb.Evaluation.Status.Name(e.status).removeprefix("STATUS_"))
            for e in page.evaluations]


def _steps(port: int) -> list[int]:
    channel, stub = metrics_stub(port)
    with channel:
        page = stub.ListEvaluations(pb.ListEvaluationsRequest(page_size=1000), timeout=10)
    return [e.global_step for e in page.evaluations]


def test_every_observer_sleeps_while_idle_notices_and_tells_runs_apart(
        tiny_data: Path, tiny_model: Path, tmp_path: Path, procs):
    """inotify, watchdog's polling observer (``--poll-secs``, network filesystems) and tf.io.gfile
    polling (a ``file://`` URL, as object stores such as gs:// take), each a real evaluator: idle,
    it costs nothing; a new checkpoint is evaluated; the model dir wiped and trained again (same
    path, step numbers and file names), then replaced by a rename, is a new run each time — its
    checkpoints evaluated, the service answering for the current run unless asked for another."""
    model_dir = copy_model(tiny_model, tmp_path / "model")
    run_a = ModelDir(model_dir).read_run_id()
    evaluators = {}
    for name, location in (("inotify", str(model_dir)), ("polling", str(model_dir)),
                           ("gfile-polling", f"file://{model_dir}")):
        # inotify as a user runs it: METEOR on (the default), so its JVM waits beside it and its
        # CPU counts too; the polling ones without, to keep the test's JVMs to one.
        extra = ["--meteor", "true"] if name == "inotify" else ["--poll-secs", "1"]
        evaluators[name] = start_evaluator(procs, location, tiny_data, tmp_path / name,
                                           tmp_path / f"{name}.log", "--policy", "all",
                                           "--max-eval-examples", "4", *extra)
    # A client following one of them the whole time, pinging its quiet stream as often as the
    # server permits: it must never be sent away (GOAWAY too_many_pings) nor miss anything.
    retries: list[str] = []
    follower = WatchFollower(target=f"127.0.0.1:{evaluators['inotify'][1]}", keepalive_secs=10,
                             persistent=True, on_retry=lambda error, wait: retries.append(error.details()))
    followed: list[int] = []
    threading.Thread(target=lambda: followed.extend(e.global_step for e in follower), daemon=True).start()
    for name, (_, port) in evaluators.items():
        wait_for(lambda port=port: _steps(port) == [2, 4], 240, f"{name}: both checkpoints evaluated")
    time.sleep(2)  # let the last recording's work (summaries, logging) finish

    jvms = [pid for pid in processes.descendants(evaluators["inotify"][0].pid)
            if "java" in Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace")]
    assert jvms, "the inotify evaluator scored METEOR: its JVM should be waiting beside it"
    before = {name: tree_cpu_seconds(proc.pid) for name, (proc, _) in evaluators.items()}
    started = time.monotonic()
    time.sleep(IDLE_SECONDS)
    elapsed = time.monotonic() - started
    used = {name: (tree_cpu_seconds(proc.pid) - before[name]) / elapsed
            for name, (proc, _) in evaluators.items()}
    print("idle CPU incl. children (the JVM), fraction of one core:",
          {k: round(v, 4) for k, v in used.items()},
          "threads/fds/rss:", {k: figures(proc.pid) for k, (proc, _) in evaluators.items()})
    assert all(fraction <= IDLE_CORE_FRACTION for fraction in used.values()), used

    train_more(tiny_data, model_dir, 6, "--save-every-steps", "2", "--keep", "10")
    for name, (_, port) in evaluators.items():
        wait_for(lambda port=port: _steps(port) == [2, 4, 6], 120, f"{name}: the new checkpoint evaluated")
    wait_for(lambda: followed == [2, 4, 6], 30, "the follower to see step 6")
    follower.close()
    assert retries == [] and follower.reconnects == 0, retries
    stubs = {}
    for name, (_, port) in evaluators.items():
        stubs[name] = metrics_stub(port)[1]
        assert stubs[name].GetStatus(pb.GetStatusRequest(), timeout=10).status.observer == name

    # wiped and trained again: same path, same step numbers, same file names
    shutil.rmtree(model_dir)
    train_more(tiny_data, model_dir, 4, "--save-every-steps", "2", "--keep", "10")
    run_b = ModelDir(model_dir).read_run_id()
    assert run_b != run_a
    for name, stub in stubs.items():
        wait_for(lambda stub=stub: _list(stub) == [(run_b, 2, "OK"), (run_b, 4, "OK")], 240, f"{name}: run B")

    # replaced by a rename (a new run trained elsewhere, moved into place)
    fresh = tmp_path / "fresh"
    train_more(tiny_data, fresh, 2, "--save-every-steps", "2", "--keep", "10")
    run_c = ModelDir(fresh).read_run_id()
    os.rename(model_dir, tmp_path / "old")
    os.rename(fresh, model_dir)
    run_a_list = [(run_a, 2, "OK"), (run_a, 4, "OK"), (run_a, 6, "OK")]
    for name, stub in stubs.items():
        wait_for(lambda stub=stub: _list(stub) == [(run_c, 2, "OK")], 240, f"{name}: run C")
        everything = _list(stub, ALL_RUNS)
        assert sorted(everything) == sorted([*run_a_list, (run_b, 2, "OK"), (run_b, 4, "OK"),
                                             (run_c, 2, "OK")]), (name, everything)
        assert _list(stub, run_a) == run_a_list
        latest = stub.GetLatest(pb.GetLatestRequest(), timeout=10).evaluation
        assert (latest.run_id, latest.global_step) == (run_c, 2)
        status = stub.GetStatus(pb.GetStatusRequest(), timeout=10).status
        assert (status.run_id, status.runs) == (run_c, 3)
        log = (tmp_path / f"{name}.log").read_text()
        assert f"run {run_b} (was {run_a}); its checkpoints are evaluated afresh" in log, name


def test_the_evaluator_ends_with_the_job(tiny_data: Path, tmp_path: Path, procs):
    # --exit-when-trained, started before the model dir exists; the trainer finishes by --steps.
    model_dir = tmp_path / "model"
    trained, _ = start_evaluator(procs, model_dir, tiny_data, tmp_path / "w-trained",
                                 tmp_path / "trained.log", "--policy", "all",
                                 "--max-eval-examples", "4", "--exit-when-trained")
    # (--until-step and --max-evaluations end the loop alike: tests/test_eval_loop.py, in process)
    train_more(tiny_data, model_dir, 6, "--save-every-steps", "2", "--keep", "10")
    marker = json.loads((model_dir / "showtell-finished.json").read_text())
    assert marker["step"] == 6 and marker["checkpoint"] == "ckpt-6" and "step 6 reached" in marker["reason"]

    assert trained.wait(timeout=240) == 0, (tmp_path / "trained.log").read_text()[-3000:]
    log = (tmp_path / "trained.log").read_text()
    assert "done: the trainer finished (step 6 reached) and its final checkpoint, step 6, is evaluated" in log
    assert log.count(": ok ") == 3  # steps 2, 4, 6 — the final one included

    # A run that restarts clears the marker; one stopped by SIGTERM does not write it.
    trainer_log = tmp_path / "again.log"
    trainer = procs.start("train", "--data", str(tiny_data), "--model-dir", str(model_dir), *TINY_MODEL,
                          "--steps", "100000", "--save-every-secs", "0", "--save-every-steps", "50",
                          log=trainer_log)
    wait_for(lambda: "training again" in trainer_log.read_text(), 120, "the trainer to clear the marker")
    renice_session(trainer.pid, 10)  # open-ended while the evaluator starts
    assert not (model_dir / "showtell-finished.json").exists()
    waiting, port = start_evaluator(procs, model_dir, tiny_data, tmp_path / "w-trained",
                                    tmp_path / "waiting.log", "--policy", "latest",
                                    "--max-eval-examples", "4", "--exit-when-trained")
    wait_for(lambda: "ckpt-" in trainer_log.read_text().split("training again", 1)[1], 240,
             "a checkpoint of the new run")
    trainer.send_signal(signal.SIGTERM)
    assert trainer.wait(timeout=120) == 143  # stopped, not finished: Kubernetes must not read "done"
    assert "after SIGTERM" in trainer_log.read_text()
    assert not (model_dir / "showtell-finished.json").exists()
    final = _newest_step(model_dir)
    wait_for(lambda: final in _steps(port), 240, "the SIGTERM checkpoint evaluated")
    time.sleep(3)
    assert waiting.poll() is None  # not finished: the trainer was stopped, not done
    # Stopped itself before its end came: not done either (a job's evaluator pod must not succeed).
    waiting.send_signal(signal.SIGTERM)
    assert waiting.wait(timeout=60) == 143, (tmp_path / "waiting.log").read_text()[-3000:]
    assert ("stopped by SIGTERM before the trainer's final checkpoint is evaluated: exit 143"
            in (tmp_path / "waiting.log").read_text())


def _newest_step(model_dir: Path) -> int:
    named = read_state(ModelDir(model_dir))
    assert named, "no checkpoint"
    return ModelDir.step_of(named[-1])


def test_metrics_watch_prints_every_evaluation_once_across_a_restart(
        tiny_data: Path, tiny_model: Path, tmp_path: Path, procs):
    model_dir = copy_model(tiny_model, tmp_path / "model")
    work = tmp_path / "work"
    # the port the first evaluator bound itself; its restart takes it again
    first, port = start_evaluator(procs, model_dir, tiny_data, work, tmp_path / "eval1.log",
                                  "--policy", "all", "--max-eval-examples", "4")
    out, err = tmp_path / "watch.out", tmp_path / "watch.err"
    with open(out, "w") as stdout, open(err, "w") as stderr:
        command = processes.command("metrics", "watch", "--json", "--server", f"127.0.0.1:{port}")
        watch = subprocess.Popen(command, stdout=stdout, stderr=stderr, env=processes.environment(),
                                 text=True)
    try:
        printed = lambda: [json.loads(line)["global_step"] for line in out.read_text().splitlines()]  # noqa: E731
        wait_for(lambda: len(printed()) == 2, 240, "the watch to print steps 2 and 4")

        # a second evaluator on a port the first holds: one line, not a shared port
        second = run_showtell("evaluate", "--model-dir", str(model_dir), "--data", str(tiny_data),
                              "--work-dir", str(tmp_path / "other"), "--port", str(port), timeout=60)
        assert second.returncode == 1 and error_lines(second.stderr) == [
            f"showtell evaluate: error: --host 127.0.0.1 --port {port}: cannot listen there (Address already "
            "in use); is another evaluator using it? pick another --port (0: any free one)"]

        first.send_signal(signal.SIGTERM)  # a restart, as docker/kubernetes do it
        assert first.wait(timeout=60) == 0
        wait_for(lambda: "went away" in err.read_text(), 30, "the watch to notice")
        train_more(tiny_data, model_dir, 8, "--save-every-steps", "2", "--keep", "10")  # 6, 8 while down
        start_evaluator(procs, model_dir, tiny_data, work, tmp_path / "eval2.log", "--policy", "all",
                        "--max-eval-examples", "4", port=port)
        wait_for(lambda: len(printed()) >= 4, 240, "the watch to print steps 6 and 8")
        time.sleep(2)
        assert [int(s) for s in printed()] == [2, 4, 6, 8]  # each once, none missing
        assert watch.poll() is None  # still following
        assert "reconnecting" in err.read_text()
    finally:
        # SIGTERM, not SIGINT: a child of a background job (as `make test &` or some CI runners
        # start us) inherits an ignored SIGINT.
        watch.send_signal(signal.SIGTERM)
        try:
            code = watch.wait(timeout=30)
        except subprocess.TimeoutExpired as exc:
            watch.kill()  # never left behind, and a SIGTERM that does not stop it is a failure
            watch.wait()
            stderr = err.read_text()[-2000:]
            raise AssertionError(f"metrics watch ignored SIGTERM for 30 s:\n{stderr}") from exc
        assert code == 0, err.read_text()[-2000:]
