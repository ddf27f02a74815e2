"""The evaluator service as real processes beside a real trainer, over real gRPC."""

from __future__ import annotations

import json
import signal
import sqlite3
import threading
import time
from pathlib import Path

import grpc
import numpy as np
import pytest
import tensorflow as tf

from showtell import metrics as registry
from showtell.evaluator.records import sample_images
from showtell.v1 import metrics_pb2 as pb
from tests.helpers import (
    TINY_DATA,
    metrics_stub,
    run_showtell,
    start_evaluator,
    train_more,
    wait_for,
)

pytestmark = pytest.mark.e2e


def _all(stub, eval_set: str = "") -> list[pb.Evaluation]:
    out, token = [], ""
    while True:
        request = pb.ListEvaluationsRequest(page_size=2, page_token=token, eval_set=eval_set)
        page = stub.ListEvaluations(request, timeout=10)
        out += page.evaluations
        token = page.next_page_token
        if not token:
            return out


def test_policy_all_evaluates_every_checkpoint_once_in_order_and_streams_live(
        tiny_data: Path, tmp_path: Path, procs):
    model_dir = tmp_path / "model"
    _, port = start_evaluator(procs, model_dir, tiny_data, tmp_path / "work", tmp_path / "eval.log",
                              "--policy", "all", "--max-eval-examples", "8",
                              "--eval-set", f"small={tiny_data}:4")  # a second set: 4 images
    channel, stub = metrics_stub(port)
    with pytest.raises(grpc.RpcError) as missing:
        stub.GetLatest(pb.GetLatestRequest(), timeout=10)
    assert missing.value.code() == grpc.StatusCode.NOT_FOUND
    nothing = run_showtell("metrics", "latest", "--server", f"127.0.0.1:{port}", timeout=60)
    assert nothing.returncode == 1 and "not found: no evaluation recorded yet" in nothing.stderr

    streamed: list[pb.Evaluation] = []
    stream = stub.Watch(pb.WatchRequest(after_step=-1))

    stream_errors: list[grpc.RpcError] = []  # checked in the test's thread: an assert here only warns

    def read() -> None:
        try:
            streamed.extend(message.evaluation for message in stream)
        except grpc.RpcError as error:  # our own cancel() at the end, or a failure
            stream_errors.append(error)

    reader = threading.Thread(target=read, daemon=True)
    reader.start()

    # the trainer runs while the evaluator watches (the model dir did not even exist yet)
    train_more(tiny_data, model_dir, 6, "--save-every-steps", "2", "--keep", "10")
    wait_for(lambda: len(_all(stub)) >= 3, 240, "three evaluations")
    wait_for(lambda: len(streamed) >= 3, 30, "three streamed evaluations")
    stream.cancel()
    reader.join(timeout=30)
    assert not reader.is_alive()
    assert [e.code() for e in stream_errors] == [grpc.StatusCode.CANCELLED], stream_errors

    records = _all(stub)
    assert [e.global_step for e in records] == [2, 4, 6]  # each once, in step order
    # the second set: a record of its own per checkpoint, its own label; Watch (above) and the
    # default listing are the val set's alone
    everything = list(_all(stub, eval_set="*"))
    assert sorted((e.global_step, e.eval_set) for e in everything) == [
        (step, name) for step in (2, 4, 6) for name in ("small", "val")]
    small = [e for e in everything if e.eval_set == "small"]
    assert {e.num_examples for e in small} == {4 * 3}
    with_statistics = {m.name for m in registry.metrics() if m.columns}  # distinct_2 has no interval
    assert all(set(e.intervals) == set(e.metrics) & with_statistics for e in small)
    assert all("distinct_2" in e.metrics for e in small)
    assert stub.GetLatest(pb.GetLatestRequest(eval_set="small"), timeout=10).evaluation.num_examples == 12
    on_small = pb.CompareRequest(a=pb.EvaluationRef(step=2, eval_set="small"),
                                 b=pb.EvaluationRef(step=6, eval_set="small"))
    assert stub.Compare(on_small, timeout=30).images == 4
    with pytest.raises(grpc.RpcError) as unknown:
        stub.GetLatest(pb.GetLatestRequest(eval_set="nope"), timeout=10)
    assert unknown.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert unknown.value.details() == "eval_set 'nope' is not one of this evaluator's: val, small"
    assert all(e.status == pb.Evaluation.STATUS_OK for e in records)
    assert [e.global_step for e in streamed] == [2, 4, 6]
    assert {"loss", "perplexity", "bleu4", "cider", "rouge_l"} <= set(records[0].metrics)
    assert records[0].checkpoint_path.endswith("ckpt-2")
    assert records[0].num_examples == 8 * 3  # captions scored: 8 images × 3 captions
    # Java is here: COCO's PTB tokenizer, and every record says so (no METEOR: --meteor false)
    assert {(e.scoring.tokenizer, tuple(e.scoring.scorers)) for e in records} == \
        {("ptb", ("bleu1", "bleu2", "bleu3", "bleu4", "cider", "distinct_2", "rouge_l"))}
    latest = stub.GetLatest(pb.GetLatestRequest(), timeout=10).evaluation
    assert latest.global_step == 6
    # every metric with its interval, drawn as the evaluator's defaults say, the value inside it
    # (exact match, a share, may sit on a bound); the streamed records carry them too
    for e in [*records, *streamed]:
        assert set(e.intervals) == set(e.metrics) & with_statistics, e.global_step
        assert (e.bootstrap.samples, e.bootstrap.confidence, e.bootstrap.seed) == (1000, 0.95, 0)
        for name, value in e.metrics.items():
            if name not in with_statistics:
                continue
            assert e.intervals[name].lower - 1e-9 <= value <= e.intervals[name].upper + 1e-9, name
    assert any(e.intervals["loss"].upper > e.intervals["loss"].lower for e in records)
    # the same 8 images at steps 2 and 6: a paired comparison (and a step never evaluated, refused)
    compared = stub.Compare(pb.CompareRequest(a=pb.EvaluationRef(step=2), b=pb.EvaluationRef(step=6)),
                            timeout=30)
    assert compared.images == 8
    assert {c.metric for c in compared.comparisons} == set(records[0].metrics) & with_statistics
    by_name = {c.metric: c for c in compared.comparisons}
    loss_change = records[2].metrics["loss"] - records[0].metrics["loss"]
    assert by_name["loss"].difference == pytest.approx(loss_change, rel=1e-6)
    assert not by_name["loss"].higher_is_better and by_name["cider"].higher_is_better
    with pytest.raises(grpc.RpcError) as never:
        stub.Compare(pb.CompareRequest(a=pb.EvaluationRef(step=3), b=pb.EvaluationRef(step=6)), timeout=30)
    assert never.value.code() == grpc.StatusCode.INVALID_ARGUMENT and "step 3 of run" in never.value.details()
    best = stub.GetBest(pb.GetBestRequest(metric="loss"), timeout=10).evaluation
    assert best.metrics["loss"] == min(e.metrics["loss"] for e in records)
    best_cider = stub.GetBest(pb.GetBestRequest(metric="cider", mode=pb.GetBestRequest.MODE_MAX),
                              timeout=10).evaluation
    assert best_cider.metrics["cider"] == max(e.metrics["cider"] for e in records)
    status = stub.GetStatus(pb.GetStatusRequest(), timeout=10).status
    assert (status.last_seen_step, status.evaluations, status.failures) == (6, 3, 0)  # checkpoints
    assert list(status.eval_sets) == ["val", "small"]
    assert status.observer == "inotify" and status.policy == "all"
    # health, reflection, and the CLI client (--json keeps proto field names)
    from grpc_health.v1 import health_pb2, health_pb2_grpc
    from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc

    health = health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest(), timeout=10)
    assert health.status == health_pb2.HealthCheckResponse.SERVING
    answer = next(reflection_pb2_grpc.ServerReflectionStub(channel).ServerReflectionInfo(
        iter([reflection_pb2.ServerReflectionRequest(list_services="")]), timeout=10))
    assert "showtell.v1.MetricsService" in {s.name for s in answer.list_services_response.service}
    listed = run_showtell("metrics", "list", "--json", "--server", f"127.0.0.1:{port}", timeout=60)
    assert listed.returncode == 0, listed.stderr
    rows = [json.loads(line) for line in listed.stdout.splitlines()]
    assert [int(r["global_step"]) for r in rows] == [2, 4, 6] and "bleu4" in rows[0]["metrics"]
    # the evaluator wrote nothing into the trainer's directory
    assert not (model_dir / "eval").exists() and not list(model_dir.glob("*.sqlite*"))
    channel.close()
    # TensorBoard: every shown sample is a picture — the image with its caption — at every step
    # one run directory, the run's own (its HParams session and scalars are that run's)
    assert [p.name for p in (tmp_path / "work" / "eval").iterdir()] == [records[0].run_id]
    pictures = _summary_images(tmp_path / "work" / "eval" / records[0].run_id)
    scalars = _scalar_tags(tmp_path / "work" / "eval" / records[0].run_id)
    assert {"cider", "cider/lower", "cider/upper", "loss/lower", "loss/upper", "small/cider",
            "small/cider/lower"} <= scalars
    ids = [s.image_id for s in records[0].samples]
    assert ids and set(pictures) == {f"samples/image_{i}" for i in ids}
    expected = sample_images.panel_size(TINY_DATA.image_size, TINY_DATA.image_size)
    for tag, by_step in pictures.items():
        assert sorted(by_step) == [2, 4, 6], tag
        assert all(image.shape == (*expected, 3) for image in by_step.values()), tag
        band = by_step[6][-sample_images.band_height():]
        assert (band < 100).any() and (band == 255).mean() > 0.5, "the caption band holds dark text on white"


def _scalar_tags(logdir: Path) -> set[str]:
    """The scalar tags TensorBoard finds (tf.summary writes scalars as tensors)."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = EventAccumulator(str(logdir), size_guidance={"tensors": 0})
    events.Reload()
    return {tag for tag in events.Tags()["tensors"] if not tag.startswith("samples")}


def _summary_images(logdir: Path) -> dict[str, dict[int, np.ndarray]]:
    """tag → step → decoded image, from the event files TensorBoard reads."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = EventAccumulator(str(logdir), size_guidance={"tensors": 0})
    events.Reload()
    found: dict[str, dict[int, np.ndarray]] = {}
    for tag in events.Tags()["tensors"]:
        if tag.startswith("samples/image_"):
            for event in events.Tensors(tag):
                encoded = tf.make_ndarray(event.tensor_proto)  # [width, height, png]
                found.setdefault(tag, {})[event.step] = tf.io.decode_png(encoded[2]).numpy()
    return found


def test_sigkill_mid_evaluation_loses_and_repeats_nothing(tiny_data: Path, tmp_path: Path, procs):
    model_dir = tmp_path / "model"
    train_more(tiny_data, model_dir, 4, "--save-every-steps", "1", "--keep", "10")
    log = tmp_path / "eval1.log"
    first, _ = start_evaluator(procs, model_dir, tiny_data, tmp_path / "work", log,
                               "--policy", "all", "--max-eval-examples", "8")
    wait_for(lambda: "step 1: ok" in log.read_text() and "(step 2)" in log.read_text(), 240,
             "the second evaluation to start")
    first.send_signal(signal.SIGKILL)
    first.wait(timeout=30)
    done_before = log.read_text().count(": ok ")
    # The kill landed mid-evaluation: step 2 had begun and was not recorded (read after the death).
    assert "step 2: ok" not in log.read_text() and done_before == 1, log.read_text()[-2000:]

    _, port = start_evaluator(procs, model_dir, tiny_data, tmp_path / "work", tmp_path / "eval2.log",
                              "--policy", "all", "--max-eval-examples", "8")
    channel, stub = metrics_stub(port)
    wait_for(lambda: len(_all(stub)) >= 4, 240, "four evaluations")
    steps = [e.global_step for e in _all(stub)]
    assert steps == [1, 2, 3, 4]
    # the log line follows the record (GetLatest can answer before it is written)
    log2 = tmp_path / "eval2.log"
    wait_for(lambda: "step 4: ok" in log2.read_text(), 60, "step 4's log line")
    redone = log2.read_text().count(": ok ")
    assert done_before + redone == 4  # nothing skipped
    db = sqlite3.connect(tmp_path / "work" / "evaluations.sqlite")
    assert db.execute("SELECT step, recorded FROM evaluations ORDER BY step").fetchall() == \
        [(1, 1), (2, 1), (3, 1), (4, 1)]  # nothing recorded twice (the store counts a second record)
    db.close()
    channel.close()


def test_garbage_collection_race_never_breaks_an_evaluation(tiny_data: Path, tmp_path: Path, procs):
    model_dir = tmp_path / "model"
    proc, port = start_evaluator(procs, model_dir, tiny_data, tmp_path / "work", tmp_path / "eval.log",
                                 "--policy", "all", "--max-eval-examples", "8")
    deleted: dict[int, float] = {}  # step → when the trainer's --keep deleted its index file
    training = threading.Event()

    def see_deletions() -> None:
        present: set[Path] = set()
        while not training.is_set():
            now = set(model_dir.glob("ckpt-*.index"))
            for gone in present - now:
                deleted[int(gone.stem.split("-")[1])] = time.time()
            present = now
            time.sleep(0.005)

    seer = threading.Thread(target=see_deletions, daemon=True)
    seer.start()
    try:
        # its own process: in this one, it would hold the GIL the deletion timer above needs
        train_more(tiny_data, model_dir, 25, "--save-every-steps", "1", "--keep", "1", own_process=True)
    finally:
        training.set()
        seer.join()
    channel, stub = metrics_stub(port)
    wait_for(lambda: stub.GetStatus(pb.GetStatusRequest(), timeout=10).status.pending_steps == [] and
             any(e.global_step == 25 for e in _all(stub)), 240, "the evaluator to catch up")
    records = _all(stub)
    assert proc.poll() is None  # still up
    assert not [e for e in records if e.status == pb.Evaluation.STATUS_FAILED], records
    ok = [e for e in records if e.status == pb.Evaluation.STATUS_OK]
    assert ok and all(e.num_examples == 8 * 3 and "loss" in e.metrics for e in ok)  # images × captions
    # The race happened: a checkpoint deleted by the trainer while its evaluation ran, evaluated OK.
    def began(e: pb.Evaluation) -> float:
        return (e.evaluated_at.ToNanoseconds() - e.eval_duration.ToNanoseconds()) / 1e9

    raced = [e.global_step for e in ok if e.global_step in deleted and
             began(e) <= deleted[e.global_step] <= e.evaluated_at.ToNanoseconds() / 1e9]
    assert raced, (deleted, [(e.global_step, e.evaluated_at, e.eval_duration) for e in ok])
    skipped = [e for e in records if e.status == pb.Evaluation.STATUS_SKIPPED]
    assert all("deleted" in e.reason or "no longer there" in e.reason or "incomplete" in e.reason
               for e in skipped)
    assert not list((tmp_path / "work" / "pinned").iterdir())  # every pin released
    channel.close()


def test_bad_inputs_are_recorded_and_the_service_stays_up(tiny_data: Path, tmp_path: Path, procs):
    model_dir = tmp_path / "model"  # missing at start
    proc, port = start_evaluator(procs, model_dir, tiny_data, tmp_path / "work", tmp_path / "eval.log",
                                 "--policy", "all", "--max-eval-examples", "8")
    channel, stub = metrics_stub(port)
    assert stub.GetStatus(pb.GetStatusRequest(), timeout=10).status.evaluations == 0

    train_more(tiny_data, model_dir, 2, "--save-every-steps", "2", "--keep", "10")
    wait_for(lambda: len(_all(stub)) == 1, 240, "the first evaluation")

    # a garbage state file: reported, nothing recorded, service up
    state = model_dir / "checkpoint"
    good_state = state.read_text()
    state.write_text("this is \x00 not a checkpoint state {{{")
    wait_for(lambda: "unreadable checkpoint state file" in
             stub.GetStatus(pb.GetStatusRequest(), timeout=10).status.last_error, 30, "the state error")

    # a truncated .data file
    for src in model_dir.glob("ckpt-2.*"):
        (model_dir / src.name.replace("ckpt-2", "ckpt-3")).write_bytes(src.read_bytes())
    data3 = next(model_dir.glob("ckpt-3.data-*"))
    data3.write_bytes(data3.read_bytes()[:500])
    # a checkpoint of a different model shape
    other = tmp_path / "other"
    train_more(tiny_data, other, 1, "--lstm-units", "16")
    for src in other.glob("ckpt-1.*"):
        (model_dir / src.name.replace("ckpt-1", "ckpt-5")).write_bytes(src.read_bytes())
    state.write_text(good_state.replace('model_checkpoint_path: "ckpt-2"', 'model_checkpoint_path: "ckpt-5"')
                     + 'all_model_checkpoint_paths: "ckpt-3"\nall_model_checkpoint_paths: "ckpt-5"\n')
    wait_for(lambda: len(_all(stub)) == 3, 240, "two more (failed) evaluations")
    by_step = {e.global_step: e for e in _all(stub)}
    assert by_step[2].status == pb.Evaluation.STATUS_OK
    assert by_step[3].status == pb.Evaluation.STATUS_FAILED and "ckpt-3: cannot restore" in by_step[3].reason
    assert by_step[5].status == pb.Evaluation.STATUS_FAILED and "ckpt-5: cannot restore" in by_step[5].reason
    assert str(tmp_path / "work") not in by_step[3].reason  # names the trainer's file, not our pin
    assert stub.GetStatus(pb.GetStatusRequest(), timeout=10).status.failures == 2

    # malformed requests
    bad = [
        (stub.ListEvaluations, pb.ListEvaluationsRequest(page_size=-1)),
        (stub.ListEvaluations, pb.ListEvaluationsRequest(page_size=100000)),
        (stub.ListEvaluations, pb.ListEvaluationsRequest(from_step=-3)),
        (stub.ListEvaluations, pb.ListEvaluationsRequest(page_token="not-a-token")),
        (stub.GetBest, pb.GetBestRequest(metric="accuracy_of_vibes")),
        (stub.GetBest, pb.GetBestRequest()),
    ]
    for call, request in bad:
        with pytest.raises(grpc.RpcError) as error:
            call(request, timeout=10)
        assert error.value.code() == grpc.StatusCode.INVALID_ARGUMENT, request
    with pytest.raises(grpc.RpcError) as error:
        next(iter(stub.Watch(pb.WatchRequest(after_step=-7), timeout=10)))
    assert error.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert proc.poll() is None
    assert stub.GetLatest(pb.GetLatestRequest(), timeout=10).evaluation.global_step == 5
    channel.close()


def test_metrics_client_errors_are_one_line(tmp_path: Path):
    import socket

    with socket.socket() as sock:  # a port with nobody listening
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    result = run_showtell("metrics", "latest", "--server", f"127.0.0.1:{port}", "--timeout", "3", timeout=60)
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert result.returncode == 1 and len(lines) == 1
    assert f"cannot reach an evaluator at 127.0.0.1:{port}" in lines[0]
