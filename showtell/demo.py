"""``showtell demo`` — the no-Docker path: trainer and evaluator as local processes on the
synthetic default, evaluations printed as they arrive (a ``Watch`` stream), both stopped
cleanly on Ctrl-C or when the time is up.

The processes are the real services, started exactly as a user would start them; this
module only supervises them (by PID) and follows the evaluator over gRPC.
"""

from __future__ import annotations

import argparse
import logging
import signal
import subprocess
import threading
import time
from pathlib import Path

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

from showtell.api.client import STOPPING, WatchFollower
from showtell.common import processes
from showtell.common.flags import Parser, positive_float, positive_int, setup_logging
from showtell.v1 import metrics_pb2 as pb

log = logging.getLogger("showtell.demo")
# Synthetic default: Adam 3e-4, constant; low dropout; the encoder trains from scratch here
# (no pretrained weights yet), which im2txt's SGD 2.0 schedule is not made for.
TRAIN_FLAGS = ["--batch-size", "32", "--optimizer", "adam", "--learning-rate", "0.0003",
               "--epochs-per-decay", "0", "--lstm-dropout", "0.1", "--image-dropout", "0",
               "--save-every-secs", "120", "--log-every-steps", "50"]


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--dir", type=Path, default=Path("runs/demo"), help="data, model and eval dirs go here")
    p.add_argument("--seconds", type=positive_float, default=600.0, help="training time (default 600)")
    p.add_argument("--port", type=int, default=50051, help="evaluator gRPC port on 127.0.0.1")
    p.add_argument("--eval-examples", type=positive_int, default=100, help="validation images per evaluation")
    p.add_argument("--eval-threads", type=positive_int, default=1, help="evaluator's TensorFlow threads")


def _stop(proc: subprocess.Popen, name: str, timeout: float = 60.0) -> None:
    if proc.poll() is None:
        log.info("stopping %s (pid %d)", name, proc.pid)
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def _wait_serving(target: str, deadline: float) -> None:
    with grpc.insecure_channel(target) as channel:
        stub = health_pb2_grpc.HealthStub(channel)
        while time.monotonic() < deadline:
            try:
                if stub.Check(health_pb2.HealthCheckRequest(), timeout=2).status == \
                        health_pb2.HealthCheckResponse.SERVING:
                    return
            except grpc.RpcError:
                time.sleep(0.5)
    raise RuntimeError(f"evaluator at {target} did not become healthy")


def _follow(follower: WatchFollower, seen: list[pb.Evaluation]) -> None:
    from showtell.commands.metrics import format_evaluation  # the client's own formatting

    for evaluation in follower:
        seen.append(evaluation)
        print(f"[evaluation] {format_evaluation(evaluation)}", flush=True)
        for sample in evaluation.samples[:2]:
            print(f"    {sample.caption!r}  (ref: {sample.references[0]!r})", flush=True)


def _interrupt(signum, frame) -> None:
    raise KeyboardInterrupt


def run(args: argparse.Namespace) -> int:
    setup_logging()
    # Explicit handlers: a shell may start us with SIGINT ignored (background jobs), and a
    # supervisor stops us with SIGTERM; both must stop the children cleanly.
    signal.signal(signal.SIGINT, _interrupt)
    signal.signal(signal.SIGTERM, _interrupt)
    base = args.dir
    data, model, work = base / "data", base / "model", base / "model-eval"
    base.mkdir(parents=True, exist_ok=True)
    built = subprocess.run(processes.command("data", "synthetic", "--out", str(data)))
    if built.returncode:
        return built.returncode
    target = f"127.0.0.1:{args.port}"
    trainer = processes.start(["train", "--data", str(data), "--model-dir", str(model),
                               "--max-seconds", str(args.seconds), *TRAIN_FLAGS], base / "trainer.log")
    evaluator = processes.start(["evaluate", "--model-dir", str(model), "--data", str(data),
                                 "--work-dir", str(work), "--port", str(args.port), "--policy", "latest",
                                 "--meteor", "false", "--max-eval-examples", str(args.eval_examples),
                                 "--beam-size", "1", "--threads", str(args.eval_threads),
                                 "--exit-when-trained"],
                                base / "evaluator.log")
    log.info("trainer pid %d → %s (log %s)", trainer.pid, model, base / "trainer.log")
    log.info("evaluator pid %d → %s, gRPC %s (log %s)", evaluator.pid, work, target, base / "evaluator.log")
    log.info("TensorBoard: .venv/bin/tensorboard --logdir %s ; Ctrl-C stops both", base)
    seen: list[pb.Evaluation] = []

    def on_retry(error: grpc.RpcError, wait: float) -> None:
        if evaluator.poll() is None and STOPPING not in (error.details() or ""):
            log.warning("evaluator stream: %s; retrying in %.0f s", error.code().name, wait)

    follower = WatchFollower(target=target, persistent=True, on_retry=on_retry)
    interrupted = False
    try:
        _wait_serving(target, time.monotonic() + 120)
        threading.Thread(target=_follow, args=(follower, seen), daemon=True).start()
        trainer.wait()
        log.info("trainer finished (exit %d); waiting for the evaluation of its last checkpoint",
                 trainer.returncode)
        # --exit-when-trained: the evaluator ends by itself once the final checkpoint is evaluated.
        try:
            evaluator.wait(timeout=300)
        except subprocess.TimeoutExpired:
            log.warning("the evaluator did not finish in 300 s; stopping it")
    except KeyboardInterrupt:
        interrupted = True
        log.info("interrupted")
    finally:
        follower.close()
        _stop(trainer, "trainer")
        _stop(evaluator, "evaluator")
    log.info("%d evaluations; history in %s", len(seen), work / "evaluations.sqlite")
    return 130 if interrupted else trainer.returncode or evaluator.returncode or 0


def main(argv: list[str] | None = None) -> int:
    parser = Parser(prog="showtell demo", description=__doc__.splitlines()[0])
    add_arguments(parser)
    return run(parser.parse_args(argv))
