"""The tracker down for a long while (``--tracking-uri``): does the evaluator's cadence change, and
how soon after it returns does the backlog reach MLflow?

A real trainer (tiny model, a checkpoint every ``--save-secs``), a real evaluator (``--policy all``)
and a real ``mlflow server`` (tests/tracking_server.py: SQLite, 127.0.0.1), in three phases of one
run: the tracker up for ``--up`` seconds, down (SIGKILLed) for ``--down`` seconds, up again.
Measured, from the evaluator's own history and its status:

* each record's time from its checkpoint (the ``.index`` file's mtime) to its record; the median
  of the records made while the tracker was down ÷ the median of those made while it was up
  (both up phases), with each phase's quartiles;
* the backlog the evaluator reported just before the tracker returned, and the seconds from the
  tracker's return (healthy again) to a backlog of 0 (``GetStatus``, polled every 0.5 s);
* then, against the server: every ok record's points there once, at its step (0 lost, 0 twice).

    .venv/bin/python bench/tracking_outage.py [--up 120] [--down 600]
        [--out bench/results/tracking_outage.json]
"""

from __future__ import annotations

import argparse
import os
import signal
import statistics
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from rounds import add_out, publish  # noqa: E402

from showtell.common import processes  # noqa: E402
from showtell.evaluator.records.store import Store  # noqa: E402
from tests.measure import free_ports  # noqa: E402
from tests.tracking_server import MlflowServer, exactly_once  # noqa: E402

TINY = ["--embedding-size", "32", "--lstm-units", "32", "--batch-size", "4", "--shuffle-buffer", "64",
        "--train-inception", "false"]


def status(port: int):
    import grpc

    from showtell.v1 import metrics_pb2 as pb
    from showtell.v1 import metrics_pb2_grpc

    with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
        stub = metrics_pb2_grpc.MetricsServiceStub(channel)
        return stub.GetStatus(pb.GetStatusRequest(), timeout=10).status


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--up", type=float, default=120, help="seconds up before the outage (and after it)")
    p.add_argument("--down", type=float, default=600, help="seconds the tracker is down")
    p.add_argument("--save-secs", type=float, default=5)
    add_out(p, "tracking_outage")
    args = p.parse_args(argv)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # a harness's SIGTERM: through the clean-up
    from showtell.captioning.config import SyntheticConfig
    from showtell.captioning.data import synthetic

    base = Path(tempfile.mkdtemp(prefix="tracking-outage-"))
    data, model, work = base / "data", base / "model", base / "eval"
    synthetic.build(data, SyntheticConfig(train_images=40, val_images=4, image_size=75, seed=3,
                                          train_shards=4))
    server = MlflowServer(base / "mlflow").start()
    port = free_ports(1)[0]
    tracked = ["--tracking-uri", server.uri]
    trainer = processes.start(["train", "--data", str(data), "--model-dir", str(model), *TINY,
                               "--steps", "100000000",
                               "--save-every-secs", str(args.save_secs), "--keep", "100000",
                               "--log-every-steps", "1000", *tracked], base / "trainer.log")
    evaluator = processes.start(["evaluate", "--model-dir", str(model), "--data", str(data),
                                 "--work-dir", str(work),
                                 "--port", str(port), "--policy", "all", "--max-eval-examples", "2",
                                 "--beam-size", "1", "--meteor", "false", *tracked], base / "evaluator.log")
    try:
        time.sleep(args.up)
        went = time.time()
        server.stop()
        time.sleep(args.down)
        before = status(port).tracking
        server.start()
        back = time.time()
        while status(port).tracking.backlog:
            time.sleep(0.5)
        flushed = time.time() - back
        time.sleep(args.up)
        came = time.time()
        processes.stop(trainer)  # no more checkpoints: what the evaluator recorded is sent, then checked
        while (now := status(port)).tracking.backlog or now.pending_steps or now.evaluating_step >= 0:
            time.sleep(0.5)
        store = Store(work / "evaluations.sqlite")
        records = [r for r in store.arrived_after(0) if r.status == "ok"]
        store.close()
        counts = exactly_once(server, records)
    finally:
        processes.stop(trainer)
        processes.stop(evaluator)
        server.stop()
    latency = {"up": [], "down": []}
    for r in records:
        if r.evaluated_at < came:
            phase = "down" if went <= r.evaluated_at < back else "up"
            latency[phase].append(r.evaluated_at - r.checkpoint_mtime)

    def quartiles(values: list[float]) -> list[float]:
        return [round(v, 3) for v in statistics.quantiles(values, n=4)]

    report = {
        "bench": "tracking_outage", "up_s": args.up, "down_s": args.down, "save_every_s": args.save_secs,
        "records": len(records), "records_up": len(latency["up"]), "records_down": len(latency["down"]),
        "checkpoint_to_record_s": {
            phase: {"median": round(statistics.median(v), 3), "quartiles": quartiles(v)}
            for phase, v in latency.items()},
        "down_over_up": round(statistics.median(latency["down"]) / statistics.median(latency["up"]), 3),
        "backlog_at_return": before.backlog, "last_error_while_down": before.last_error[:160],
        "flush_s_after_return": round(flushed, 1),
        **counts,
    }
    publish(report, args.out)
    return 0 if counts["points_missing"] == counts["points_twice"] == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
