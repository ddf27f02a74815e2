"""gRPC serving: ``GetLatest`` vs the health check on the same server, 50 concurrent clients.

Starts a real evaluator service (no checkpoints to watch; its store is pre-filled with a
realistic evaluation so ``GetLatest`` returns a full record with metrics and samples),
then drives each RPC for the same wall time from 50 client threads with their own
channels, in alternating rounds after a warm-up round each (``rounds.py``). Prints requests/s per
round (median, spread), median / p99 latency over all rounds, and the ratio GetLatest ÷ health
throughput as the median of the per-round ratios (goal ≥ 0.8).

    .venv/bin/python bench/grpc_throughput.py [--clients 50] [--seconds 5] [--rounds 3]
"""

from __future__ import annotations

import argparse
import re
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc
from rounds import add_out, alternate, publish, ratio, spread

ROOT = Path(__file__).resolve().parents[1]
from showtell.common import processes  # noqa: E402
from showtell.evaluator.records.record import Record  # noqa: E402
from showtell.evaluator.records.store import Store  # noqa: E402
from showtell.v1 import metrics_pb2 as pb  # noqa: E402
from showtell.v1 import metrics_pb2_grpc as pb_grpc  # noqa: E402


def drive(port: int, clients: int, seconds: float, kind: str) -> list[float]:
    latencies: list[list[float]] = [[] for _ in range(clients)]
    start = threading.Barrier(clients + 1)
    stop_at: list[float] = []

    def client(i: int) -> None:
        channel = grpc.insecure_channel(f"127.0.0.1:{port}")
        if kind == "latest":
            call, request = pb_grpc.MetricsServiceStub(channel).GetLatest, pb.GetLatestRequest()
        else:
            call, request = health_pb2_grpc.HealthStub(channel).Check, health_pb2.HealthCheckRequest()
        call(request, timeout=10)  # connect before timing
        start.wait()
        while time.perf_counter() < stop_at[0]:
            t0 = time.perf_counter()
            call(request, timeout=10)
            latencies[i].append(time.perf_counter() - t0)
        channel.close()

    threads = [threading.Thread(target=client, args=(i,)) for i in range(clients)]
    for t in threads:
        t.start()
    stop_at.append(time.perf_counter() + seconds + 0.0)
    start.wait()
    stop_at[0] = time.perf_counter() + seconds
    for t in threads:
        t.join()
    return [x for per in latencies for x in per]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clients", type=int, default=50)
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--rounds", type=int, default=3)
    add_out(parser, "grpc_throughput")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        tmp_path = Path(tmp)
        data = tmp_path / "data"
        subprocess.run([*processes.command(), "data", "synthetic", "--out", str(data),
                        "--train", "20", "--val", "4"], check=True, capture_output=True, cwd=ROOT)
        store = Store(tmp_path / "work" / "evaluations.sqlite")
        metrics = {k: 0.5 for k in ("loss", "perplexity", "exact_match", "bleu1", "bleu2", "bleu3", "bleu4",
                                    "rouge_l", "cider", "meteor")}
        samples = [{"image_id": i, "caption": "a small red circle left of a large blue square",
                    "references": ["a small red circle left of a large blue square"] * 4} for i in range(5)]
        for step in range(1, 101):
            store.add(Record(step * 100, f"/m/ckpt-{step * 100}", time.time(), time.time(), 2.0, 200,
                             metrics, samples))
        store.close()
        log = tmp_path / "eval.log"
        proc = processes.start(["evaluate", "--model-dir", str(tmp_path / "no-model-yet"), "--data",
                                str(data), "--work-dir", str(tmp_path / "work"), "--port", "0",
                                "--meteor", "false"], log, cwd=ROOT)
        try:
            port = None
            for _ in range(600):
                found = re.search(r"on 127\.0\.0\.1:(\d+)", log.read_text())
                if found:
                    port = int(found.group(1))
                    break
                time.sleep(0.2)
            assert port, log.read_text()
            latencies: dict[str, list[float]] = {"latest": [], "health": []}
            warmed: set[str] = set()

            def per_sec(kind: str) -> float:
                got = drive(port, args.clients, args.seconds, kind)
                if kind in warmed:
                    latencies[kind] += got
                warmed.add(kind)
                return len(got) / args.seconds

            throughput = alternate({kind: (lambda kind=kind: per_sec(kind)) for kind in latencies},
                                   rounds=args.rounds, warm=1)
        finally:
            processes.stop(proc)
    out: dict[str, object] = {}
    for kind, lat in latencies.items():
        lat_ms = sorted(1000 * x for x in lat)
        out[kind] = {"requests_per_sec": spread(throughput[kind], 1),
                     "median_ms": round(statistics.median(lat_ms), 2),
                     "p99_ms": round(lat_ms[int(0.99 * (len(lat_ms) - 1))], 2)}
    out["ratio_latest_over_health_throughput"] = ratio(throughput["latest"], throughput["health"])
    out["goal"] = 0.8
    out["clients"] = args.clients
    publish(out, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
