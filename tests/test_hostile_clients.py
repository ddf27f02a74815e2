"""Hostile and broken clients against a real evaluator (token required): garbage bytes and HTTP/1
on the gRPC port, an oversized request, two thousand connections opened and dropped, 40 Watch
clients that never read a 4-MB replay (each seen stalled by flow control), wrong tokens.  The
service stays up, answers health within a second throughout, keeps its threads, descriptors and
memory bounded (no per-client copy of the replay), and never logs a token."""

from __future__ import annotations

import re
import socket
import subprocess
import sys
import time
from pathlib import Path

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from showtell.common.model_dir import ModelDir
from showtell.evaluator.records.record import Record
from showtell.evaluator.records.store import Store
from showtell.evaluator.serving.service import to_proto
from showtell.v1 import metrics_pb2 as pb
from showtell.v1 import metrics_pb2_grpc as pb_grpc
from tests.helpers import ROOT, start_evaluator, wait_for
from tests.measure import figures

pytestmark = pytest.mark.e2e

TOKEN = "s3cret-token-for-the-test"
WRONG = "wrong-token-that-must-not-appear-in-logs"
HISTORY = 2000  # records × ~2 KB of samples: a replay far beyond HTTP/2's flow-control window

STREAMS = 40  # Watch clients that never read: a per-client copy of the replay would cost 40 × 4 MB
# Clients that start a Watch replay each on its own connection and never read it, until killed.
_NEVER_READS = """
import sys, time, grpc
from showtell.v1 import metrics_pb2 as pb, metrics_pb2_grpc as pb_grpc
streams = []
for _ in range(int(sys.argv[3])):
    # Its own connection; no BDP probing, so the stream window stays at HTTP/2's 64 KB and the
    # replay stalls at the server (with probing, gRPC grows the window and takes the whole replay
    # into the client's own buffers: nothing stalls).
    channel = grpc.insecure_channel(sys.argv[1], options=[("grpc.use_local_subchannel_pool", 1),
                                                          ("grpc.http2.bdp_probe", 0)])
    streams.append(pb_grpc.MetricsServiceStub(channel).Watch(
        pb.WatchRequest(after_step=-1), metadata=[("authorization", "Bearer " + sys.argv[2])]))
    streams[-1].initial_metadata()  # connected, its replay begun
print("started", flush=True)
time.sleep(3600)
"""


def _received_by_clients(port: int, pid: int) -> list[int]:
    """Bytes each connection of process ``pid`` to ``port`` has received so far (the kernel's
    count, ``ss``) — that process' only: the test's own channel to the port is not one of them."""
    out = subprocess.run(["ss", "-tinpH", "state", "established", f"( dport = :{port} )"],
                         capture_output=True, text=True, check=True).stdout
    entries = re.split(r"\n(?=\S)", out.strip())  # a socket per entry: its line, then its indented info
    return [int(n) for entry in entries if f"pid={pid}," in entry
            for n in re.findall(r"bytes_received:(\d+)", entry)]


def _health_within_a_second(port: int) -> None:
    with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
        started = time.monotonic()
        answer = health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest(), timeout=1.0)
        assert answer.status == health_pb2.HealthCheckResponse.SERVING
        assert time.monotonic() - started < 1.0


def _raw(port: int, data: bytes) -> bytes:
    with socket.create_connection(("127.0.0.1", port), timeout=5) as s:
        s.sendall(data)
        s.settimeout(2)
        try:
            return s.recv(4096)
        except (TimeoutError, ConnectionResetError):
            return b""


def test_the_service_survives_hostile_clients(tiny_data: Path, tiny_model: Path, tmp_path: Path, procs):
    work = tmp_path / "eval"
    store = Store(work / "evaluations.sqlite")  # a long history of this run, as after weeks of checkpoints
    run = ModelDir(tiny_model).read_run_id()

    def record(step: int) -> Record:
        return Record(step, f"old/ckpt-{step}", 0.0, float(step), 1.0, 4, metrics={"loss": 1.0},
                      samples=[{"image_id": step, "caption": "a red circle " * 150, "references": []}],
                      run=run)

    for step in range(1, HISTORY + 1):
        store.add(record(step))
    store.close()
    (tmp_path / "token").write_text(TOKEN + "\n")
    log = tmp_path / "eval.log"
    proc, port = start_evaluator(procs, tiny_model, tiny_data, work, log, "--auth-token-file",
                                 str(tmp_path / "token"), "--max-eval-examples", "2", "--policy", "all")
    auth = [("authorization", f"Bearer {TOKEN}")]
    channel = grpc.insecure_channel(f"127.0.0.1:{port}")
    stub = pb_grpc.MetricsServiceStub(channel)
    wait_for(lambda: stub.GetStatus(pb.GetStatusRequest(), metadata=auth, timeout=10).status.evaluations
             >= HISTORY + 2, 300, "the tiny model's two checkpoints evaluated")
    before = figures(proc.pid)
    rows = [("start", before)]

    # Garbage and HTTP/1 on the HTTP/2 port: refused connections, not a dead service.
    _raw(port, b"\x00\xff" * 512)
    _raw(port, b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
    _raw(port, b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + b"\xde\xad" * 4096)  # a preface, then nonsense
    _health_within_a_second(port)

    # Oversized request: refused by gRPC before our code sees it.
    with pytest.raises(grpc.RpcError) as big:
        stub.GetBest(pb.GetBestRequest(metric="x" * (2 << 20)), metadata=auth, timeout=10)
    assert big.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED

    # Wrong and missing tokens: refused; the token never reaches the log.
    with pytest.raises(grpc.RpcError) as wrong:
        stub.GetLatest(pb.GetLatestRequest(), metadata=[("authorization", f"Bearer {WRONG}")], timeout=10)
    assert wrong.value.code() == grpc.StatusCode.UNAUTHENTICATED

    # Two thousand connections opened and dropped, 500 at a time.
    for _ in range(4):
        sockets = [socket.create_connection(("127.0.0.1", port), timeout=5) for _ in range(500)]
        for s in sockets:
            s.close()
    _health_within_a_second(port)
    rows.append(("after 2000 dropped connections", figures(proc.pid)))

    # Watch clients that never read a replay of the whole history: each stalls once HTTP/2's flow
    # control window is full — seen, not assumed: every connection has received something, far
    # less than the replay, and nothing more a second later.
    baseline = figures(proc.pid)
    reader = subprocess.Popen([sys.executable, "-c", _NEVER_READS, f"127.0.0.1:{port}", TOKEN, str(STREAMS)],
                              stdout=subprocess.PIPE, text=True, cwd=ROOT)
    try:
        assert reader.stdout.readline().strip() == "started"
        replay = HISTORY * to_proto(record(HISTORY)).ByteSize()
        stalled: list[int] = []

        def stalled_now() -> bool:
            nonlocal stalled
            first = _received_by_clients(port, reader.pid)
            time.sleep(1.0)
            second = _received_by_clients(port, reader.pid)
            stalled = second
            return (len(second) == STREAMS and first == second
                    and all(0 < n < replay / 2 for n in second))

        deadline = time.monotonic() + 60
        while not stalled_now():
            assert time.monotonic() < deadline, f"replays of ≈ {replay} bytes not stalled: {stalled}"
        _health_within_a_second(port)
        latest = stub.GetLatest(pb.GetLatestRequest(), metadata=auth, timeout=2).evaluation
        assert latest.global_step == HISTORY
        during = figures(proc.pid)
        rows.append((f"{STREAMS} Watch clients stalled (received {min(stalled)}–{max(stalled)} of "
                     f"≈ {replay} bytes each)", during))
        # Bounded while they are stalled: a per-client copy of the replay would add ≥ 40 × 4 MB.
        assert during["rss_mb"] <= baseline["rss_mb"] + 40, rows
    finally:
        reader.kill()
        reader.wait(timeout=30)
    wait_for(lambda: figures(proc.pid)["fds"] <= before["fds"] + 4, 60, "the stalled streams' sockets closed")
    _health_within_a_second(port)
    after = figures(proc.pid)
    rows.append(("end", after))
    channel.close()

    print("\n".join(f"{what}: {numbers}" for what, numbers in rows))
    assert proc.poll() is None
    assert after["threads"] <= before["threads"] + 2
    assert after["rss_mb"] <= before["rss_mb"] + 150, rows  # nothing kept after the clients left
    text = log.read_text()
    assert WRONG not in text and TOKEN not in text
    assert "Traceback" not in text
