"""Watch fan-out: 1,000 concurrent ``Watch`` streams on one real evaluator process.

Trains a tiny model (ckpt-2), starts a real evaluator, opens the streams (over
``--connections`` separate connections), then measures while they are all open: health and
GetLatest latency (p50 / p99; goal p99 ≤ 50 ms), the evaluator's threads, descriptors and
RSS; then trains on to ckpt-4 and times how long its evaluation takes to reach every stream
(last arrival − the record's ``evaluated_at``, same host clock; goal ≤ 1 s).

    .venv/bin/python bench/watch_fanout.py [--streams 1000] [--connections 100] [--calls 200]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

from showtell.common import processes

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # the tests' process measures, from the checkout
from rounds import add_out, publish  # noqa: E402

from showtell.v1 import metrics_pb2 as pb  # noqa: E402
from showtell.v1 import metrics_pb2_grpc as pb_grpc  # noqa: E402
from tests.measure import figures as process_figures  # noqa: E402

TINY = ["--embedding-size", "32", "--lstm-units", "32", "--batch-size", "4", "--save-every-secs", "0",
        "--save-every-steps", "2", "--keep", "10"]


def showtell(*args: str) -> None:
    subprocess.run([*processes.command(), *args], check=True, capture_output=True, cwd=ROOT,
                   env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2"))


def percentiles(values: list[float]) -> dict:
    ms = sorted(1000 * v for v in values)
    return {"p50_ms": round(statistics.median(ms), 2), "p99_ms": round(ms[int(0.99 * (len(ms) - 1))], 2),
            "max_ms": round(ms[-1], 2)}


async def measure(port: int, pid: int, args: argparse.Namespace, data: Path, model: Path) -> dict:
    target = f"127.0.0.1:{port}"
    channels = [grpc.aio.insecure_channel(target, [("grpc.use_local_subchannel_pool", 1)])
                for _ in range(args.connections)]
    arrivals: list[tuple[float, pb.Evaluation] | None] = [None] * args.streams
    ready = asyncio.Semaphore(0)

    async def follow(i: int) -> None:
        call = pb_grpc.MetricsServiceStub(channels[i % args.connections]).Watch(pb.WatchRequest(after_step=2))
        await call.initial_metadata()
        ready.release()
        async for message in call:
            arrivals[i] = (time.time(), message.evaluation)
            return

    figures = {"idle": process_figures(pid)}
    t0 = time.perf_counter()
    tasks = [asyncio.create_task(follow(i)) for i in range(args.streams)]
    for _ in range(args.streams):
        await asyncio.wait_for(ready.acquire(), 120)
    figures["open_seconds"] = round(time.perf_counter() - t0, 2)
    await asyncio.sleep(2)
    figures["streams_open"] = process_figures(pid)

    async with grpc.aio.insecure_channel(target) as side:
        health, metrics = health_pb2_grpc.HealthStub(side), pb_grpc.MetricsServiceStub(side)
        await health.Check(health_pb2.HealthCheckRequest(), timeout=5)
        for name, call, request in (("health", health.Check, health_pb2.HealthCheckRequest()),
                                    ("get_latest", metrics.GetLatest, pb.GetLatestRequest())):
            latencies = []
            for _ in range(args.calls):
                start = time.perf_counter()
                await call(request, timeout=5)
                latencies.append(time.perf_counter() - start)
            figures[name] = percentiles(latencies)

    await asyncio.to_thread(showtell, "train", "--data", str(data), "--model-dir", str(model), *TINY,
                            "--steps", "4")
    await asyncio.wait_for(asyncio.gather(*tasks), 300)
    evaluated_at = arrivals[0][1].evaluated_at.ToNanoseconds() / 1e9
    delays = [t - evaluated_at for t, _ in arrivals]
    figures["fanout"] = {"streams_reached": sum(1 for a in arrivals if a and a[1].global_step == 4),
                         "first_s": round(min(delays), 3), "median_s": round(statistics.median(delays), 3),
                         "last_s": round(max(delays), 3)}
    for channel in channels:
        await channel.close()
    return figures


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--streams", type=int, default=1000)
    parser.add_argument("--connections", type=int, default=100)
    parser.add_argument("--calls", type=int, default=200, help="health and GetLatest calls measured")
    add_out(parser, "watch_fanout")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        tmp_path = Path(tmp)
        data, model = tmp_path / "data", tmp_path / "model"
        showtell("data", "synthetic", "--out", str(data), "--train", "40", "--val", "8", "--image-size", "75")
        showtell("train", "--data", str(data), "--model-dir", str(model), *TINY, "--steps", "2")
        log = tmp_path / "eval.log"
        proc = processes.start(["evaluate", "--model-dir", str(model), "--data", str(data), "--work-dir",
                                str(tmp_path / "work"), "--port", "0", "--meteor", "false", "--policy", "all",
                                "--max-eval-examples", "8"], log, cwd=ROOT)
        try:
            port = None
            for _ in range(1200):
                text = log.read_text()
                found = re.search(r"on 127\.0\.0\.1:(\d+)", text)
                if found and "step 2: ok" in text:
                    port = int(found.group(1))
                    break
                time.sleep(0.2)
            assert port, log.read_text()[-2000:]
            figures = asyncio.run(measure(port, proc.pid, args, data, model))
            time.sleep(3)
            figures["after_close"] = process_figures(proc.pid)
        finally:
            processes.stop(proc)
    figures.update(streams=args.streams, connections=args.connections,
                   goals={"p99_ms": 50, "fanout_last_s": 1.0})
    publish(figures, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
