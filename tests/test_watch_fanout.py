"""Many ``Watch`` streams on one real evaluator process: they cost no threads, unary calls and
health stay quick beside them, a new evaluation reaches all of them, and when they go the
process's threads and file descriptors are what they were.  Beyond ``--max-streams``:
RESOURCE_EXHAUSTED."""

from __future__ import annotations

import asyncio
import gc
import time
from pathlib import Path

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from showtell.v1 import metrics_pb2 as pb
from showtell.v1 import metrics_pb2_grpc as pb_grpc
from tests.helpers import copy_model, start_evaluator, train_more, wait_for
from tests.measure import figures

pytestmark = pytest.mark.e2e
STREAMS = 200
CHANNELS = 20  # a mix: several streams share each connection, as dashboards and CLIs would


async def _exercise(port: int, model_dir: Path, data: Path, pid: int) -> dict:
    target = f"127.0.0.1:{port}"
    # each channel its own connection (gRPC would otherwise share one subchannel among them)
    channels = [grpc.aio.insecure_channel(target, [("grpc.use_local_subchannel_pool", 1)])
                for _ in range(CHANNELS)]
    received: list[list[int]] = [[] for _ in range(STREAMS)]
    opened = asyncio.Semaphore(0)

    async def follow(i: int) -> None:
        call = pb_grpc.MetricsServiceStub(channels[i % CHANNELS]).Watch(pb.WatchRequest(after_step=-1))
        await call.initial_metadata()
        opened.release()
        try:
            async for message in call:
                received[i].append(message.evaluation.global_step)
        except asyncio.CancelledError:
            call.cancel()
            raise

    tasks = [asyncio.create_task(follow(i)) for i in range(STREAMS)]
    for _ in range(STREAMS):
        await asyncio.wait_for(opened.acquire(), 60)
    await asyncio.sleep(1)
    threads_open, fds_open = _threads_and_fds(pid)

    # one stream too many
    extra = pb_grpc.MetricsServiceStub(channels[0]).Watch(pb.WatchRequest(after_step=-1))
    with pytest.raises(grpc.aio.AioRpcError) as refused:
        async for _ in extra:
            pass
    assert refused.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert "--max-streams" in refused.value.details()
    del extra  # an aio call object keeps its connection open while it lives

    # unary calls and health beside them: each within a second
    async with grpc.aio.insecure_channel(target) as side:
        health = health_pb2_grpc.HealthStub(side)
        metrics = pb_grpc.MetricsServiceStub(side)
        latencies = []
        for _ in range(20):
            t0 = time.perf_counter()
            reply = await health.Check(health_pb2.HealthCheckRequest(), timeout=1.0)
            assert reply.status == health_pb2.HealthCheckResponse.SERVING
            latest = (await metrics.GetLatest(pb.GetLatestRequest(), timeout=1.0)).evaluation
            latencies.append(time.perf_counter() - t0)
        assert latest.global_step == 4

    # a new evaluation reaches every stream
    await asyncio.to_thread(train_more, data, model_dir, 6, "--save-every-steps", "2", "--keep", "10")
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline and not all(6 in r for r in received):
        await asyncio.sleep(0.2)
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
    for channel in channels:
        await channel.close()
    return {"received": received, "threads_open": threads_open, "fds_open": fds_open,
            "max_latency": max(latencies)}


def test_200_watch_streams_cost_no_threads_and_all_get_news(tiny_data: Path, tiny_model: Path,
                                                            tmp_path: Path, procs):
    model_dir = copy_model(tiny_model, tmp_path / "model")
    proc, port = start_evaluator(procs, model_dir, tiny_data, tmp_path / "work", tmp_path / "eval.log",
                                 "--policy", "all", "--max-eval-examples", "4", "--max-streams", str(STREAMS))
    channel_steps = []

    def steps() -> list[int]:
        with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
            stub = pb_grpc.MetricsServiceStub(channel)
            page = stub.ListEvaluations(pb.ListEvaluationsRequest(), timeout=10)
        channel_steps[:] = [e.global_step for e in page.evaluations]
        return channel_steps == [2, 4]

    wait_for(steps, 240, "both checkpoints evaluated")
    time.sleep(1)
    threads_before, fds_before = _threads_and_fds(proc.pid)

    result = asyncio.run(_exercise(port, model_dir, tiny_data, proc.pid))
    gc.collect()  # the test's own aio calls: their connections close when they are collected
    print(f"threads {threads_before} → {result['threads_open']} with {STREAMS} streams; "
          f"fds {fds_before} → {result['fds_open']}; slowest health+GetLatest {result['max_latency']:.3f} s")
    wrong = [r for r in result["received"] if r != [2, 4, 6]]
    assert not wrong, wrong[:3]
    assert result["threads_open"] <= threads_before + 2  # streams are coroutines, not threads
    # gone again: same threads, same descriptors
    # each figure on its own: tuples compare lexicographically, so fewer threads would hide more fds
    def back() -> bool:
        threads, fds = _threads_and_fds(proc.pid)
        return threads <= threads_before and fds <= fds_before

    wait_for(back, 30,
             f"threads/fds back to {threads_before}/{fds_before} (now {_threads_and_fds(proc.pid)})")
    assert proc.poll() is None


def _threads_and_fds(pid: int) -> tuple[int, int]:
    found = figures(pid)
    return found["threads"], found["fds"]
