"""Evaluator latency: detection and end-to-end freshness, inotify vs 1 s polling, one run.

A real trainer (tiny model, a checkpoint every few steps) writes checkpoints; two real
evaluator services watch the same model dir — one with inotify, one polling every 1 s
(the SidecarEvaluator's interval). This script follows both evaluators' ``Watch`` streams
and takes each state-file write's time from the kernel: the ``mtime`` of the file the
``checkpoint`` rename brought (written just before the rename; the kernel's coarse clock, a few
ms).  Its own inotify watch only says which file to stat — its delay (seen − mtime) is
reported, not assumed.

  detection  = evaluation start (evaluated_at − eval_seconds) − state-file write
  freshness  = arrival on the Watch stream − state-file write − eval_seconds

    .venv/bin/python bench/evaluator_latency.py [--checkpoints 24]
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import grpc
from watchdog.events import FileSystemEventHandler
from watchdog.observers import Observer

ROOT = Path(__file__).resolve().parents[1]
from rounds import add_out, publish  # noqa: E402

from showtell.common import processes  # noqa: E402
from showtell.v1 import metrics_pb2 as pb  # noqa: E402
from showtell.v1 import metrics_pb2_grpc as pb_grpc  # noqa: E402


def _seconds(duration) -> float:
    return duration.ToNanoseconds() / 1e9


def showtell(*args: str, log: Path) -> subprocess.Popen:
    return processes.start(list(args), log, cwd=ROOT)


def wait_port(log: Path, proc: subprocess.Popen) -> int:
    for _ in range(600):
        if proc.poll() is not None:
            raise SystemExit(f"evaluator exited: {log.read_text()[-2000:]}")
        found = re.search(r"on 127\.0\.0\.1:(\d+)", log.read_text())
        if found:
            return int(found.group(1))
        time.sleep(0.2)
    raise SystemExit("evaluator did not start")


LATEST = re.compile(r'^model_checkpoint_path: "(?:.*/)?ckpt-(\d+)"', re.MULTILINE)


class StateWrites(FileSystemEventHandler):
    """When the state file first named each step as the newest checkpoint: read from the file the
    rename brought, not inferred from the renames' order (a save renames it twice, and a save the
    watch missed would shift every later pairing)."""

    def __init__(self) -> None:
        self.named_at: dict[int, float] = {}  # step → the state file's mtime (the write)
        self.seen_after: list[float] = []  # this watch's own delay: seen − mtime, seconds

    def on_moved(self, event) -> None:
        if os.path.basename(os.fsdecode(event.dest_path)) != "checkpoint":
            return
        now = time.time()
        path = Path(os.fsdecode(event.dest_path))
        try:
            with path.open() as handle:  # the same file for the stat and the read
                written = os.fstat(handle.fileno()).st_mtime_ns / 1e9
                found = LATEST.search(handle.read())
        except OSError:
            return  # replaced again already: the next event reads it
        if found and int(found.group(1)) not in self.named_at:
            self.named_at[int(found.group(1))] = written
            self.seen_after.append(now - written)


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--checkpoints", type=int, default=24)
    parser.add_argument("--every-steps", type=int, default=30)
    add_out(parser, "evaluator_latency")
    args = parser.parse_args()
    procs: list[subprocess.Popen] = []
    with tempfile.TemporaryDirectory() as tmp:
        tmp_path = Path(tmp)
        data, model = tmp_path / "data", tmp_path / "model"
        subprocess.run([*processes.command(), "data", "synthetic", "--out", str(data),
                        "--train", "200", "--val", "8"], check=True, capture_output=True, cwd=ROOT)
        model.mkdir()
        writes = StateWrites()
        observer = Observer()
        observer.schedule(writes, str(model), recursive=False)
        observer.start()
        arrivals: dict[str, dict[int, tuple[float, pb.Evaluation]]] = {}
        try:
            ports = {}
            for name, extra in (("inotify", []), ("poll_1s", ["--poll-secs", "1"])):
                log = tmp_path / f"{name}.log"
                proc = showtell("evaluate", "--model-dir", str(model), "--data", str(data), "--work-dir",
                                str(tmp_path / name), "--port", "0", "--policy", "all", "--meteor", "false",
                                "--max-eval-examples", "8", "--beam-size", "1", "--threads", "1", *extra,
                                log=log)
                procs.append(proc)
                ports[name] = wait_port(log, proc)

            def follow(name: str, port: int) -> None:
                got = arrivals.setdefault(name, {})
                channel = grpc.insecure_channel(f"127.0.0.1:{port}")
                try:
                    for message in pb_grpc.MetricsServiceStub(channel).Watch(pb.WatchRequest(after_step=-1)):
                        got[message.evaluation.global_step] = (time.time(), message.evaluation)
                except grpc.RpcError as exc:  # the evaluators stop at the end: their streams end UNAVAILABLE
                    if exc.code() != grpc.StatusCode.UNAVAILABLE:
                        raise

            for name, port in ports.items():
                threading.Thread(target=follow, args=(name, port), daemon=True).start()
            steps = args.checkpoints * args.every_steps
            trainer = showtell("train", "--data", str(data), "--model-dir", str(model), "--steps", str(steps),
                               "--save-every-steps", str(args.every_steps), "--save-every-secs", "0",
                               "--keep", "1000", "--batch-size", "4", "--embedding-size", "32",
                               "--lstm-units", "32", "--optimizer", "adam", log=tmp_path / "trainer.log")
            procs.append(trainer)
            trainer.wait()
            deadline = time.time() + 300
            while time.time() < deadline and not all(
                    len(arrivals.get(n, {})) >= args.checkpoints for n in ports):
                time.sleep(0.5)
        finally:
            observer.stop()
            for proc in procs:
                processes.stop(proc)
        step_writes = writes.named_at
        result = {}
        for name, got in arrivals.items():
            detection, freshness = [], []
            for step, (arrived, evaluation) in got.items():
                written = step_writes.get(step)
                if written is None:
                    continue
                start = evaluation.evaluated_at.ToNanoseconds() / 1e9 - _seconds(evaluation.eval_duration)
                detection.append(1000 * (start - written))
                freshness.append(1000 * (arrived - written - _seconds(evaluation.eval_duration)))
            result[name] = {
                "checkpoints": len(detection),
                "checkpoints_without_a_seen_write": len(got) - len(detection),
                "detection_ms": {"median": round(statistics.median(detection), 1),
                                 "p95": round(percentile(detection, 0.95), 1)},
                "freshness_minus_eval_ms": {"median": round(statistics.median(freshness), 1),
                                            "p95": round(percentile(freshness, 0.95), 1)},
            }
        delays = [1000 * d for d in writes.seen_after]
        result["this_script_saw_each_write_after_ms"] = {"median": round(statistics.median(delays), 1),
                                                         "p95": round(percentile(delays, 0.95), 1)}
        result["goals"] = {"inotify detection median ms": 50, "freshness ms": 100}
        publish(result, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
