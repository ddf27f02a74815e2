"""What the README promises of ``showtell metrics`` and the gRPC API, against a real server in this
process over a planted history: ``best`` (and NOT_FOUND), ``list --from-step/--page-size``,
``--run ID|all`` for GetLatest/GetBest/ListEvaluations, and Watch's replay across runs then live
records.  ``watch --after-step`` runs as its own process (its signal handling is the point)."""

from __future__ import annotations

import asyncio
import json
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator
from dataclasses import dataclass, replace
from pathlib import Path

import grpc
import numpy as np
import pytest

from showtell.api.contract import ALL_RUNS
from showtell.common import processes
from showtell.common.model_dir import ModelDir
from showtell.evaluator.loop.status import Broadcast, Progress, Status
from showtell.evaluator.records.record import Record
from showtell.evaluator.records.store import Store
from showtell.evaluator.scoring.bootstrap import Bootstrap, ImageStats, intervals
from showtell.evaluator.serving.server import MetricsServer
from showtell.evaluator.serving.service import MetricsService
from showtell.metrics.exact_match import EXACT
from showtell.v1 import metrics_pb2 as pb
from showtell.v1 import metrics_pb2_grpc as pb_grpc
from tests.helpers import ROOT, error_lines, wait_for

# (run, step, cider, loss): run "old" was trained before the model dir was started over as "cur".
HISTORY = [("old", 1, 0.9, 0.5), ("old", 2, 1.5, 0.4),
           ("cur", 2, 0.3, 2.0), ("cur", 4, 1.1, 1.0), ("cur", 6, 0.8, 0.7)]


@dataclass
class Board:
    """Where the service reads the evaluator's status from (the controller, in the daemon)."""

    status: Status


@dataclass
class Served:
    target: str
    store: Store
    board: Board
    broadcast: Broadcast
    loop: asyncio.AbstractEventLoop

    def record(self, record: Record) -> None:
        """What the evaluation loop does after an evaluation: store, then broadcast."""
        self.broadcast.notify(self.store.add(record))


def _record(run: str, step: int, cider: float, loss: float, status: str = "ok") -> Record:
    metrics = {"cider": cider, "loss": loss} if status == "ok" else {}
    return Record(step, f"/m/ckpt-{step}", 1.0, 2.0, 0.5, 8, metrics=metrics, status=status,
                  reason="" if status == "ok" else "bad read", run=run)


def _revision(at: str, step: int, **settings) -> dict:
    return {"at": at, "step": step, "settings": {"steps": 10, "learning_rate": 0.001, **settings},
            "environment": {"showtell": "0.1.0", "tensorflow": "2.21.0"}}


# What the trainer recorded of the runs (<model-dir>/runs/<id>.json): "old" stopped, "cur" trains
# (no end after its start), "fresh" started after the evaluator's last evaluation (none of its own).
RECORDS = {
    "old": {"run_id": "old", "revisions": [_revision("2026-11-01T10:00:00+0000", 0, lstm_units=512)],
            "ends": [{"at": "2026-11-01T11:00:00+0000", "step": 2, "finished": False, "reason": "SIGTERM"}]},
    "cur": {"run_id": "cur", "revisions": [_revision("2026-11-02T10:00:00+0000", 0, lstm_units=256)]},
    "fresh": {"run_id": "fresh", "revisions": [_revision("2026-11-03T10:00:00+0000", 0, learning_rate=0.01)]},
}


@pytest.fixture
def served(tmp_path: Path) -> Iterator[Served]:
    model_dir = tmp_path / "m"
    (model_dir / "runs").mkdir(parents=True)
    for run, record in RECORDS.items():
        (model_dir / "runs" / f"{run}.json").write_text(json.dumps(record))
    (model_dir / "runs" / "broken.json").write_text("{ half a rec")  # left out, not a failure
    store = Store(tmp_path / "evaluations.sqlite")
    for row in HISTORY:
        store.add(_record(*row))
    store.add(_record("cur", 8, 0, 0, status="failed"))
    broadcast, board = Broadcast(), Board(Status(run_id="cur", last_seen_step=8))
    service = MetricsService(store=store, status=lambda: board.status, broadcast=broadcast,
                             policy="all", model_dir=ModelDir(model_dir), observer="inotify")
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()

    async def start() -> MetricsServer:  # grpc.aio binds a server to the loop it is built on
        server = MetricsServer(service)  # 127.0.0.1, a port of its own choosing
        service.attach(loop)
        await server.start()
        return server

    server = asyncio.run_coroutine_threadsafe(start(), loop).result(30)
    try:
        yield Served(f"127.0.0.1:{server.port}", store, board, broadcast, loop)
    finally:
        asyncio.run_coroutine_threadsafe(server.stop(0), loop).result(30)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(30)
        loop.close()
        store.close()


def _steps(out: str) -> list[tuple[str, int]]:
    return [(e["run_id"], int(e["global_step"])) for e in map(json.loads, out.splitlines())]


def test_best_by_metric_direction_and_run(served: Served, showtell_main):
    def best(*flags: str) -> tuple[str, int]:
        result = showtell_main("metrics", "best", "--server", served.target, "--json", *flags)
        assert result.returncode == 0, result.stderr
        [found] = _steps(result.stdout)
        return found

    assert best() == ("cur", 4)  # cider, higher is better, the current run by default
    assert best("--metric", "loss") == ("cur", 6)  # loss: lower is better
    assert best("--metric", "cider", "--mode", "min") == ("cur", 2)
    assert best("--run", "old") == ("old", 2)
    assert best("--run", "all") == ("old", 2)  # 1.5 beats every step of the current run
    missing = showtell_main("metrics", "best", "--server", served.target, "--run", "never-trained")
    assert missing.returncode == 1
    assert error_lines(missing.stderr) == [
        "showtell metrics: error: not found: no successful evaluation has 'cider' yet"]


def test_list_pages_from_a_step_for_a_run_or_all(served: Served, showtell_main):
    def listed(*flags: str) -> list[tuple[str, int]]:
        result = showtell_main("metrics", "list", "--server", served.target, "--json", *flags)
        assert result.returncode == 0, result.stderr
        return _steps(result.stdout)

    assert listed() == [("cur", 2), ("cur", 4), ("cur", 6), ("cur", 8)]
    assert listed("--from-step", "4", "--page-size", "1") == [("cur", 4), ("cur", 6), ("cur", 8)]  # 3 pages
    assert listed("--run", "old") == [("old", 1), ("old", 2)]
    assert listed("--run", "all", "--from-step", "2", "--page-size", "2") == [  # arrival order
        ("old", 2), ("cur", 2), ("cur", 4), ("cur", 6), ("cur", 8)]
    text = showtell_main("metrics", "list", "--server", served.target, "--from-step", "8").stdout
    assert text.strip() == "step       8  failed: bad read"


def test_latest_per_run(served: Served):
    with grpc.insecure_channel(served.target) as channel:
        stub = pb_grpc.MetricsServiceStub(channel)
        assert stub.GetLatest(pb.GetLatestRequest(), timeout=10).evaluation.global_step == 8
        assert stub.GetLatest(pb.GetLatestRequest(run_id="old"), timeout=10).evaluation.global_step == 2
        newest = stub.GetLatest(pb.GetLatestRequest(run_id=ALL_RUNS), timeout=10).evaluation
        assert newest.run_id == "cur"
        with pytest.raises(grpc.RpcError) as missing:
            stub.GetLatest(pb.GetLatestRequest(run_id="never-trained"), timeout=10)
        assert missing.value.code() == grpc.StatusCode.NOT_FOUND
        with pytest.raises(grpc.RpcError) as no_metric:
            stub.GetBest(pb.GetBestRequest(metric="cider", run_id="never-trained"), timeout=10)
        assert no_metric.value.code() == grpc.StatusCode.NOT_FOUND


def test_status_says_how_far_the_current_evaluation_is(served: Served, showtell_main):
    def status() -> tuple[pb.EvaluatorStatus, str]:
        with grpc.insecure_channel(served.target) as channel:
            reply = pb_grpc.MetricsServiceStub(channel).GetStatus(pb.GetStatusRequest(), timeout=10).status
        shown = showtell_main("metrics", "status", "--server", served.target)
        assert shown.returncode == 0, shown.stderr
        return reply, shown.stdout

    def progress(reply: pb.EvaluatorStatus) -> tuple:
        left = reply.time_left.ToTimedelta().total_seconds() if reply.HasField("time_left") else None
        return reply.evaluating_step, reply.images_done, reply.images_total, left

    reply, shown = status()
    assert progress(reply) == (-1, 0, 0, None)  # unset: not known
    assert "  idle; newest checkpoint seen: step 8" in shown
    board = served.board
    board.status = replace(board.status, evaluating_step=10, progress=Progress.first(64, 2000, now=100.0))
    reply, shown = status()
    assert progress(reply) == (10, 64, 2000, None)
    assert "  evaluating step 10 (64 of 2000 images); newest" in shown
    # 256 images in 10 s after the first batch: 1680 left take 65.6 s.
    board.status = replace(board.status, progress=board.status.progress.advanced(320, now=110.0))
    reply, shown = status()
    assert progress(reply)[1:] == (320, 2000, pytest.approx(65.625))
    assert "  evaluating step 10 (320 of 2000 images, about 1 min 06 s left); newest" in shown
    board.status = replace(board.status, evaluating_step=-1, progress=None)
    assert status()[0].images_total == 0 and not status()[0].HasField("last_costs")  # the last one failed
    # An evaluation that read its features back: its costs in GetLatest, and in the status' words.
    costs = {"features": "reused", "images_reused": 5000, "images_computed": 0, "encoder": "98e5bd3e59ecf4d9",
             "seconds": {"restore": 0.4, "digest": 0.21, "features": 2.5, "decoder": 61.0, "scoring": 9.3,
                         "intervals": 0.3}}
    served.record(replace(_record("cur", 10, 1.3, 0.6), costs=costs))
    reply, shown = status()
    assert (reply.last_costs.features, reply.last_costs.images_reused, reply.last_costs.encoder) == (
        "reused", 5000, "98e5bd3e59ecf4d9")
    assert ("  last evaluation: features reused (5000 of 5000 images reused); restore 0.4 s, digest 0.2 s, "
            "features 2.5 s, decoder 61.0 s, scoring 9.3 s, intervals 0.3 s") in shown
    with grpc.insecure_channel(served.target) as channel:
        latest = pb_grpc.MetricsServiceStub(channel).GetLatest(pb.GetLatestRequest(), timeout=10).evaluation
    assert latest.costs.seconds["decoder"] == pytest.approx(61.0) and latest.costs.images_computed == 0


def test_watch_replays_an_old_run_then_the_current_one_then_live(served: Served):
    with grpc.insecure_channel(served.target) as channel:
        stream = pb_grpc.MetricsServiceStub(channel).Watch(pb.WatchRequest(after_step=1, run_id="old"))
        got = [(e.run_id, e.global_step) for e in (next(stream).evaluation for _ in range(5))]
        assert got == [("old", 2), ("cur", 2), ("cur", 4), ("cur", 6), ("cur", 8)]
        served.record(_record("cur", 10, 1.3, 0.6))
        live = next(stream).evaluation
        assert (live.run_id, live.global_step, live.metrics["cider"]) == ("cur", 10, pytest.approx(1.3))
        stream.cancel()


def test_watch_after_step_prints_what_follows_and_ends_on_sigterm(served: Served):
    command = processes.command("metrics", "watch", "--server", served.target, "--after-step", "4", "--json")
    with subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT,
                          env=processes.environment(), start_new_session=True) as watch:
        try:
            first = [json.loads(watch.stdout.readline()) for _ in range(2)]
            assert [int(e["global_step"]) for e in first] == [6, 8]  # replay after step 4
            served.record(_record("cur", 10, 1.3, 0.6))
            assert int(json.loads(watch.stdout.readline())["global_step"]) == 10  # then live
            watch.send_signal(signal.SIGTERM)
            assert watch.wait(timeout=30) == 0, watch.stderr.read()
        finally:
            processes.kill_tree(watch.pid)


def test_list_runs_gives_each_runs_facts_newest_first(served: Served, tmp_path: Path):
    from showtell.common.locks import DirectoryLock

    served.record(Record(10, "/m/ckpt-10", 1.0, 2.0, 0.5, 8, metrics={"cider": 1.4, "loss": 0.6}, run="cur",
                         train_seconds=95.5))
    with grpc.insecure_channel(served.target) as channel, \
            DirectoryLock(directory=tmp_path / "m", role="trainer", flag="--model-dir"):  # a trainer on it
        stub = pb_grpc.MetricsServiceStub(channel)
        reply = stub.ListRuns(pb.ListRunsRequest(metric="cider", target=1.2), timeout=10)
        by_loss = stub.ListRuns(pb.ListRunsRequest(metric="loss", target=0.5), timeout=10)
        with pytest.raises(grpc.RpcError) as unknown:
            stub.ListRuns(pb.ListRunsRequest(metric="ciderr"), timeout=10)
        first = stub.ListRuns(pb.ListRunsRequest(page_size=2), timeout=10)
        second = stub.ListRuns(pb.ListRunsRequest(page_size=2, page_token=first.next_page_token), timeout=10)
        bad_tokens = []
        for token in ("bm90IG91cnM=", "@@", first.next_page_token + "x"):  # base64 of another's, not base64
            with pytest.raises(grpc.RpcError) as bad:
                stub.ListRuns(pb.ListRunsRequest(page_token=token), timeout=10)
            bad_tokens.append((bad.value.code(), bad.value.details()))
    assert [r.run_id for r in first.runs] == ["cur", "old"] and [r.run_id for r in second.runs] == ["fresh"]
    assert first.next_page_token and not second.next_page_token
    assert {code for code, _ in bad_tokens} == {grpc.StatusCode.INVALID_ARGUMENT}
    assert bad_tokens[0][1] == "page_token is not one this server issued for ListRuns"
    cur, old, fresh = reply.runs
    assert (cur.run_id, cur.evaluations, cur.latest_step) == ("cur", 5, 10)  # 2, 4, 6, a failed 8, 10
    assert (cur.best_value, cur.best_step) == (1.4, 10)
    assert (cur.target_step, cur.time_to_target.ToTimedelta().total_seconds()) == (10, 95.5)  # 1.1 at 4
    assert (old.run_id, old.best_value, old.best_step, old.target_step) == ("old", 1.5, 2, 2)
    assert not old.HasField("time_to_target")  # reached, but its checkpoint held no training time
    loss_cur, loss_old, _ = by_loss.runs
    assert (loss_cur.best_value, loss_cur.best_step, loss_cur.target_step) == (0.6, 10, 0)  # lower is better
    assert (loss_old.best_value, loss_old.target_step) == (0.4, 1)  # 0.5 at step 1 is "reached"
    assert unknown.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    # the model dir's record of each run: its start, step, --steps and state; a run it records
    # with no evaluation yet comes after the evaluated ones; an unreadable record is left out
    assert (cur.status, cur.step, cur.steps) == ("training", 8, 10)  # its newest checkpoint seen: 8
    assert cur.started.ToJsonString() == "2026-11-02T10:00:00Z"
    assert (old.status, old.step) == ("stopped (SIGTERM)", 2)
    assert (fresh.run_id, fresh.evaluations) == ("fresh", 0)
    assert fresh.status == "stopped (no end recorded: killed?)"
    assert not fresh.HasField("best_value")


def test_runs_over_grpc_list_show_and_diff_as_from_a_model_dir(served: Served, showtell_main,
                                                               tmp_path: Path):
    """``showtell runs --server``: the evaluator's answer (ListRuns, GetRun) in the model-dir
    command's forms; a run id it does not record and a bad use are usage errors (exit 2)."""
    listed = showtell_main("runs", "--server", served.target, "--metric", "cider", "--target", "cider=1.2",
                           "--json")
    assert listed.returncode == 0, listed.stderr
    rows = {r["run_id"]: r for r in map(json.loads, listed.stdout.splitlines())}
    assert list(rows) == ["cur", "old", "fresh"] and rows["old"]["status"] == "stopped (SIGTERM)"
    assert (rows["old"]["best"], rows["old"]["target_step"]) == (1.5, 2) and rows["fresh"]["best"] is None
    assert rows["cur"]["model_dir"] == str(tmp_path / "m")
    assert rows["old"]["started"] == "2026-11-01T10:00:00+0000"
    table = showtell_main("runs", "--server", served.target, "--metric", "cider", "--target", "cider=1.2")
    assert "1.5000 (step 2)" in table.stdout and "TIME TO cider=1.2" in table.stdout

    shown = showtell_main("runs", "show", "old", "--server", served.target)
    assert json.loads(shown.stdout) == RECORDS["old"]
    differ = showtell_main("runs", "diff", "old", "fresh", "--server", served.target)
    assert differ.stdout.splitlines() == ["--learning-rate: 0.001 → 0.01", "--lstm-units: 512 → unset",
                                          "best by exact_match: not compared (a: run old has no successful "
                                          "evaluation with 'exact_match')"]
    # the same from the model dir, read without the evaluator: the same settings
    local = showtell_main("runs", "diff", "old", "fresh", str(tmp_path / "m"))
    assert local.stdout.splitlines() == differ.stdout.splitlines()[:2]
    for words, expected in (
            (("runs", "show", "nope", "--server", served.target),
             f"showtell runs: error: {served.target}: run nope: not recorded in {tmp_path / 'm'} "
             "(ListRuns lists the runs)"),
            (("runs", "show", "nope", str(tmp_path / "m")),
             f"showtell runs: error: run nope: not recorded in {tmp_path / 'm'} "
             "(showtell runs DIR lists them)"),
            (("runs", str(tmp_path / "m"), "--server", served.target),
             "showtell runs: error: with --server, no model dirs: showtell runs [show RUN_ID | diff RUN_A "
             "RUN_B] --server HOST:PORT"),
            (("runs",), "showtell runs: error: usage: showtell runs MODEL_DIR [MODEL_DIR ...], or --server "
                        "HOST:PORT"),
            (("runs", "--server", served.target, "--target", "loss=0.5", "--metric", "cider"),
             "showtell runs: error: --target loss=0.5: with --server, the target is on --metric (cider); "
             "e.g. --target cider=0.5")):
        result = showtell_main(*words)
        assert (result.returncode, error_lines(result.stderr)) == (2, [expected]), words
    with grpc.insecure_channel(served.target) as channel, pytest.raises(grpc.RpcError) as path:
        pb_grpc.MetricsServiceStub(channel).GetRun(pb.GetRunRequest(run_id="../m/runs/old"), timeout=10)
    assert path.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    runs = showtell_main("metrics", "runs", "--server", served.target)
    assert runs.returncode == 0 and runs.stdout.splitlines()[0].split()[:5] == \
        ["RUN", "STARTED", "STEP", "STATUS", "BEST"]


@pytest.mark.e2e
def test_the_client_alone_installs_without_tensorflow_and_queries_an_evaluator(served: Served,
                                                                                tmp_path: Path):
    """``pip install 'showtell[client]'`` into a new venv: grpcio and protobuf (and gRPC's health
    stubs) only; ``showtell metrics`` and ``MetricsClient`` answer from a real evaluator service;
    a service command says in one line which extra it needs."""
    def run(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run(args, capture_output=True, text=True, cwd=tmp_path, timeout=600)

    built = run(sys.executable, "-m", "pip", "wheel", "--no-deps", "--quiet", "-w", str(tmp_path / "dist"),
                str(ROOT))
    assert built.returncode == 0, built.stderr[-2000:]
    [wheel] = (tmp_path / "dist").glob("showtell-*.whl")
    venv = tmp_path / "client"
    assert run(sys.executable, "-m", "venv", str(venv)).returncode == 0
    pip, python, showtell = (str(venv / "bin" / name) for name in ("pip", "python", "showtell"))
    installed = run(pip, "install", "--quiet", "-c", str(ROOT / "constraints.txt"), f"{wheel}[client]")
    assert installed.returncode == 0, installed.stderr[-3000:]
    listed = json.loads(run(pip, "list", "--format", "json").stdout)
    frozen = {package["name"].lower().replace("_", "-") for package in listed} - {"pip", "setuptools"}
    assert frozen - {"showtell"} <= {"grpcio", "grpcio-health-checking", "protobuf", "typing-extensions"}, \
        frozen

    latest = run(showtell, "metrics", "latest", "--json", "--server", served.target)
    assert latest.returncode == 0, latest.stderr
    assert json.loads(latest.stdout)["global_step"] == "8"  # int64 in protobuf's JSON mapping
    script = ("from showtell.api.client import MetricsClient\n"
              f"with MetricsClient({served.target!r}) as client:\n"
              "    steps = [e.global_step for e in client.evaluations(page_size=2)]\n"
              "    print(client.latest().global_step, steps)\n")
    answered = run(python, "-c", script)
    assert answered.stdout == "8 [2, 4, 6, 8]\n", answered.stderr[-2000:]

    # showtell runs: over gRPC, and from a model dir, without TensorFlow
    over_grpc = run(showtell, "runs", "--server", served.target, "--json")
    assert over_grpc.returncode == 0, over_grpc.stderr[-2000:]
    assert [json.loads(line)["run_id"] for line in over_grpc.stdout.splitlines()] == ["cur", "old", "fresh"]
    model_dir = str(tmp_path / "m")
    from_dir = run(showtell, "runs", model_dir, "--json")
    assert from_dir.returncode == 0, from_dir.stderr[-2000:]
    assert sorted(json.loads(line)["run_id"] for line in from_dir.stdout.splitlines()) == \
        ["cur", "fresh", "old"]
    assert run(showtell, "runs", "diff", "old", "cur", model_dir).stdout == "--lstm-units: 512 → 256\n"
    history = run(showtell, "runs", model_dir, "--history", str(tmp_path / "evaluations.sqlite"))
    assert history.returncode == 1 and "showtell runs --server HOST:PORT" in history.stderr, history.stderr

    service = run(showtell, "train", "--data", "d", "--model-dir", str(tmp_path / "m2"))
    assert service.returncode == 1 and len(service.stderr.strip().splitlines()) == 1, service.stderr
    assert service.stderr.startswith("showtell train: error: ") and "'showtell[cpu]'" in service.stderr
    assert not (tmp_path / "m2").exists()


def _with_stats(step: int, right, ids=None, fingerprint: str = "a" * 64) -> Record:
    """Run "cmp"'s evaluation at ``step``: exact match per image (``right``), stats kept, of the
    set ``fingerprint`` names."""
    right = np.asarray(right, dtype=float)
    stats = ImageStats(np.arange(len(right)) if ids is None else np.asarray(ids), {EXACT: right},
                       fingerprint=fingerprint)
    drawn = Bootstrap(samples=500)
    bounds = {k: list(v) for k, v in intervals(stats, drawn).items()}
    return Record(step, f"/c/ckpt-{step}", 1.0, 2.0, 0.5, len(right), metrics={"exact_match": right.mean()},
                  run="cmp", intervals=bounds, bootstrap=drawn.as_dict(), image_stats=stats.to_bytes())


def test_compare_two_evaluations_of_the_same_images_and_refuse_what_cannot_be(served: Served,
                                                                               showtell_main):
    rng = np.random.default_rng(7)
    before = (rng.random(300) < 0.4).astype(float)
    after = np.where(rng.random(300) < 0.15, 1.0, before)  # right wherever step 10 was, and more
    for record in (_with_stats(10, before), _with_stats(20, after),
                   _with_stats(30, before, ids=np.arange(300) + 1000),  # other images
                   replace(_with_stats(5, before), image_stats=b"", intervals={}, bootstrap={})):  # older
        served.record(record)
    served.record(replace(_with_stats(10, before), run="cmp2"))
    # the same ids, of another set (the demo's val and unseen sets both number their scenes from 0)
    served.record(replace(_with_stats(10, after, fingerprint="b" * 64), run="cmp3"))
    for run in ("cmp", "cmp2", "cmp3"):
        (Path(served.store.path).parent / "m" / "runs" / f"{run}.json").write_text(json.dumps(
            {"run_id": run, "revisions": [_revision("2026-11-04T10:00:00+0000", 0, seed=len(run))]}))
    differ = showtell_main("runs", "diff", "cmp", "cmp2", "--metric", "exact_match", "--server",
                           served.target)
    assert differ.returncode == 0, differ.stderr
    lines = differ.stdout.splitlines()
    assert lines[:2] == ["--seed: 3 → 4", "best by exact_match, compared:"]
    assert lines[2].startswith("B step 10 of run cmp2 against A step 20 of run cmp: 300 images")
    assert lines[-1].startswith("  exact_match") and lines[-1].endswith("B worse")
    other_set = showtell_main("runs", "diff", "cmp", "cmp3", "--metric", "exact_match", "--server",
                              served.target)
    assert other_set.returncode == 2 and other_set.stdout.startswith("--seed: 3 → 4"), other_set.stdout
    assert error_lines(other_set.stderr) == [
        "showtell runs: error: best by exact_match: not compared (step 20 and step 10 were not the same "
        "images (300 with the same ids, but of different sets: other images or references, set fingerprints "
        "aaaaaaaaaaaa and bbbbbbbbbbbb): a paired comparison needs evaluations of the same images (the same "
        "set and size))"]
    latest = showtell_main("metrics", "latest", "--server", served.target, "--run", "cmp")
    low, high = served.store.at_step("cmp", 30)[0].intervals["exact_match"]
    assert f"exact_match {before.mean():.4f} ({low:.4f}–{high:.4f})" in latest.stdout

    answer = showtell_main("metrics", "compare", "cmp:10", "cmp:20", "--server", served.target, "--json")
    assert answer.returncode == 0, answer.stderr
    reply = json.loads(answer.stdout)
    [m] = reply["comparisons"]
    assert (reply["a"]["global_step"], reply["b"]["global_step"], reply["images"]) == ("10", "20", "300")
    assert m["difference"] == pytest.approx(after.mean() - before.mean()) and m["significant"]
    assert 0 < m["interval"]["lower"] < m["difference"] < m["interval"]["upper"] and m["p_value"] < 0.01
    assert reply["bootstrap"] == {"samples": 1000, "confidence": 0.95, "seed": "0"}  # the evaluator's own
    text = showtell_main("metrics", "compare", "cmp:10", "cmp:best", "--metric", "exact_match",
                         "--bootstrap", "200", "--confidence", "0.9", "--server", served.target)
    assert text.returncode == 0, text.stderr
    assert ("B step 20 of run cmp against A step 10 of run cmp: 300 images, 200 paired resamples, 90 %"
            in text.stdout)
    assert text.stdout.rstrip().endswith("B better")
    same = json.loads(showtell_main("metrics", "compare", "cmp:20", "cmp:20", "--server", served.target,
                                    "--json").stdout)["comparisons"][0]
    assert (same["difference"], same["significant"]) == (0.0, False)

    def refused(*refs: str) -> list[str]:
        result = showtell_main("metrics", "compare", *refs, "--server", served.target)
        assert result.returncode == 2, result.stdout
        return error_lines(result.stderr)

    where = f"showtell metrics: error: {served.target}: "
    assert refused("cmp:10", "cmp:30") == [
        where + "step 10 and step 30 were not the same images (300 and 300 evaluated, different ones): a "
        "paired comparison needs evaluations of the same images (the same set and size)"]
    # a metric only one side recorded (METEOR where only one evaluator ran Java) is named, not dropped
    served.record(replace(_with_stats(50, before), metrics={"exact_match": before.mean(), "meteor": 0.2}))
    one_sided = showtell_main("metrics", "compare", "cmp:10", "cmp:50", "--server", served.target, "--json")
    assert json.loads(one_sided.stdout)["only_in_b"] == ["meteor"], one_sided.stdout
    assert "  not compared, only B has: meteor" in showtell_main(
        "metrics", "compare", "cmp:10", "cmp:50", "--server", served.target).stdout.splitlines()
    # a metric both have but with no per-image statistics (distinct_2) is named with why
    for step, diversity in ((60, 0.5), (70, 0.6)):
        served.record(replace(_with_stats(step, before), metrics={"exact_match": before.mean(),
                                                                  "distinct_2": diversity}))
    described = showtell_main("metrics", "compare", "cmp:60", "cmp:70", "--server", served.target)
    assert described.stdout.splitlines()[-1] == (
        "  not compared, distinct_2: no per-image statistics (it describes the captions as a whole): no "
        "interval, no paired comparison"), described.stdout
    assert refused("cmp:10", "cmp3:10") == [
        where + "step 10 and step 10 were not the same images (300 with the same ids, but of different "
        "sets: other images or references, set fingerprints aaaaaaaaaaaa and bbbbbbbbbbbb): a paired "
        "comparison needs evaluations of the same images (the same set and size)"]
    assert refused("cmp:10", "cmp:99") == [where + "b: step 99 of run cmp was never evaluated"]
    assert refused("nobody:1", "cmp:10") == [where + "a: step 1 of run nobody was never evaluated"]
    assert refused("cmp:5", "cmp:10") == [where + "a: step 5 (run cmp) was recorded before per-image "
                                          "statistics were kept: it cannot be compared"]
    assert refused("cmp:10", "cmp:best") == [
        where + "b: run cmp has no successful evaluation with 'cider'"]
    assert refused("cmp:10") == [
        "showtell metrics: error: compare takes two evaluations, A and B (got 1): "
        "e.g. `showtell metrics compare 800 1200` or `compare RUN_A:best RUN_B:best`"]
    assert refused("cmp:ten", "cmp:10") == [
        "showtell metrics: error: compare: 'cmp:ten' is not STEP, RUN:STEP, best or RUN:best"]
    assert refused("../x:1", "cmp:10") == [
        where + "a: run_id '../x' is not a run id (letters, digits, . _ -)"]


def test_early_stop_counts_only_its_own_runs_evaluations(served: Served):
    """A replay trained beside its original, told to stop on the original's evaluator (still
    serving, its run "cur" meeting the target at every evaluation): the replay's run never is
    evaluated there, so it never stops; the original's own trainer does (real gRPC, in process)."""
    from showtell.trainer.following.early_stop import EarlyStop, StopWhen
    from showtell.trainer.loop.signals import StopRequest

    def follow(run: str) -> tuple[EarlyStop, StopRequest]:
        stop = StopRequest()
        return EarlyStop(StopWhen.parse("loss<=100"), served.target, stop, run=lambda: run).start(), stop

    replay, replay_stop = follow("replay-of-cur")
    original, original_stop = follow("cur")
    try:
        wait_for(lambda: bool(original_stop), 30, "the original's trainer to stop on its evaluations")
        wait_for(lambda: replay.ignored.get("cur", 0) == 4, 30, "the replay to see the original's 4")
        assert not replay_stop and replay.streak == 0
        assert original_stop.reason.startswith("early stop: loss 2 meets loss<=100")
    finally:
        replay.close()
        original.close()
