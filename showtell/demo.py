"""``showtell demo`` — the no-Docker path: Show and Tell's whole recipe in miniature, on the
synthetic default, with the evaluator beside it and its evaluations printed as they arrive.

The recipe is the one a COCO run follows, on the same code: an encoder pretrained on
classification (offline there is no ImageNet download, so ``showtell pretrain`` trains
Inception v3 on the synthetic train split's scene labels and writes an ordinary weights file),
then phase 1 — the decoder on the frozen encoder, from the feature cache — and phase 2, everything
fine-tuned, in the same model dir.  Every phase is the real command, started as a user would
start it; this module only supervises them (by PID), follows the evaluator over gRPC, and stops
everything cleanly on Ctrl-C or when the time is up.
"""

from __future__ import annotations

import argparse
import logging
import signal
import subprocess
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

from showtell.api.client import STOPPING, WatchFollower
from showtell.captioning.config import SyntheticConfig
from showtell.common import processes
from showtell.common.flags import Parser, flag_type, positive_float, positive_int, setup_logging
from showtell.v1 import metrics_pb2 as pb

log = logging.getLogger("showtell.demo")
ENCODER_FILE = "encoder.weights.h5"
# The decoder's settings on the synthetic default: Adam, constant rate, little dropout (a small
# dataset whose every caption is true).  The phases add what differs between them.
TRAIN_FLAGS = ["--batch-size", "32", "--optimizer", "adam", "--learning-rate", "0.001",
               "--epochs-per-decay", "0", "--lstm-dropout", "0.1", "--image-dropout", "0",
               "--save-every-secs", "60", "--log-every-steps", "100"]
PHASE2_FLAGS = ["--train-inception", "true", "--learning-rate", "0.0003",
                "--inception-learning-rate", "0.0001"]


@dataclass(frozen=True)
class Phases:
    """How the demo's seconds are split: pretraining the encoder, phase 1, phase 2."""

    pretrain: float
    phase1: float
    phase2: float

    def seconds(self, total: float) -> tuple[float, float, float]:
        whole = self.pretrain + self.phase1 + self.phase2
        return tuple(total * part / whole for part in (self.pretrain, self.phase1, self.phase2))


@flag_type("phase split")
def _phases(text: str) -> Phases:
    try:
        parts = [float(p) for p in text.split(",")]
    except ValueError:
        parts = []
    if len(parts) != 3 or min(parts) < 0 or parts[1] <= 0:
        raise argparse.ArgumentTypeError(
            f"expected PRETRAIN,PHASE1,PHASE2 shares such as 0.4,0.5,0.1 (phase 1 > 0; got '{text}')")
    return Phases(*parts)


# Chosen by the 10-minute figure (BENCHMARKS.md): the encoder's pretraining is what limits the
# captions, and a phase 2 of a minute costs more than it gives (its first steps leave batch norm's
# inference mode); `--phases 0.6,0.3,0.1` runs all three.
DEFAULT_PHASES = "0.7,0.3,0"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--dir", type=Path, default=Path("runs/demo"), help="data, model and eval dirs go here")
    p.add_argument("--seconds", type=positive_float, default=600.0,
                   help="training time, all phases together (default 600)")
    p.add_argument("--phases", type=_phases, default=_phases(DEFAULT_PHASES), metavar="P,P1,P2",
                   help="shares of --seconds for pretraining the encoder, phase 1 (frozen encoder) and "
                        f"phase 2 (fine-tuning) (default {DEFAULT_PHASES})")
    p.add_argument("--train-images", type=positive_int, default=SyntheticConfig().train_images,
                   help=f"synthetic training images (default {SyntheticConfig().train_images})")
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


def _follow(follower: WatchFollower, seen: list[pb.Evaluation], arrived: threading.Condition) -> None:
    from showtell.commands.metrics import format_evaluation  # the client's own formatting

    for evaluation in follower:
        with arrived:
            seen.append(evaluation)
            arrived.notify_all()
        print(f"[evaluation] {format_evaluation(evaluation)}", flush=True)
        for sample in evaluation.samples[:2]:
            print(f"    {sample.caption!r}  (ref: {sample.references[0]!r})", flush=True)


def _interrupt(signum, frame) -> None:
    raise KeyboardInterrupt


class _Children:
    """The demo's processes, each stopped by its PID whatever happens."""

    def __init__(self) -> None:
        self.running: dict[str, subprocess.Popen] = {}

    def start(self, name: str, args: list[str], log_path: Path) -> subprocess.Popen:
        proc = processes.start(args, log_path)
        self.running[name] = proc
        log.info("%s pid %d (log %s)", name, proc.pid, log_path)
        return proc

    def wait(self, name: str) -> int:
        code = self.running[name].wait()
        del self.running[name]
        return code

    def stop_all(self) -> None:
        for name, proc in reversed(list(self.running.items())):
            _stop(proc, name)
        self.running.clear()


def _phase(text: str) -> None:
    print(f"[phase] {text}", flush=True)


def run(args: argparse.Namespace) -> int:
    setup_logging()
    # Explicit handlers: a shell may start us with SIGINT ignored (background jobs), and a
    # supervisor stops us with SIGTERM; both must stop the children cleanly.
    signal.signal(signal.SIGINT, _interrupt)
    signal.signal(signal.SIGTERM, _interrupt)
    base = args.dir
    data, model, work, encoder = base / "data", base / "model", base / "model-eval", base / ENCODER_FILE
    base.mkdir(parents=True, exist_ok=True)
    built = subprocess.run(processes.command("data", "synthetic", "--out", str(data),
                                             "--train", str(args.train_images)))
    if built.returncode:
        return built.returncode
    pretrain_s, phase1_s, phase2_s = args.phases.seconds(args.seconds)
    target = f"127.0.0.1:{args.port}"
    children = _Children()
    seen: list[pb.Evaluation] = []
    arrived = threading.Condition()

    def on_retry(error: grpc.RpcError, wait: float) -> None:
        evaluator = children.running.get("evaluator")
        if evaluator is not None and evaluator.poll() is None and STOPPING not in (error.details() or ""):
            log.warning("evaluator stream: %s; retrying in %.0f s", error.code().name, wait)

    follower = WatchFollower(target=target, persistent=True, on_retry=on_retry)
    code = 0
    started = time.monotonic()
    try:
        # The evaluator first: it starts while the encoder pretrains and then waits, asleep, for
        # the first checkpoint.
        children.start("evaluator", ["evaluate", "--model-dir", str(model), "--data", str(data),
                                     "--work-dir", str(work), "--port", str(args.port), "--policy", "latest",
                                     "--meteor", "false", "--max-eval-examples", str(args.eval_examples),
                                     "--beam-size", "1", "--threads", str(args.eval_threads)],
                       base / "evaluator.log")
        log.info("TensorBoard: .venv/bin/tensorboard --logdir %s ; Ctrl-C stops everything", base)
        common = ["train", "--data", str(data), "--model-dir", str(model), *TRAIN_FLAGS]
        if encoder.is_file():
            _phase(f"pretrained encoder: {encoder} kept from an earlier run")
        elif pretrain_s > 0:
            _phase(f"pretraining Inception v3 on the train split's scene labels ({pretrain_s:.0f} s) "
                   f"→ {encoder}")
            children.start("pretrain", ["pretrain", "--data", str(data), "--out", str(encoder),
                                        "--seconds", str(pretrain_s)], base / "pretrain.log")
        _wait_serving(target, time.monotonic() + 120)
        threading.Thread(target=_follow, args=(follower, seen, arrived), daemon=True).start()
        if "pretrain" in children.running:
            code = children.wait("pretrain")
        if not code:
            if encoder.is_file():
                weights = ["--inception-weights", str(encoder)]
                _phase(f"phase 1: the decoder on the frozen encoder, from the feature cache "
                       f"({phase1_s:.0f} s)")
            else:
                weights = []
                _phase(f"training encoder and decoder from scratch, no pretrained encoder "
                       f"({phase1_s:.0f} s)")
            children.start("trainer", [*common, "--max-seconds", str(phase1_s), *weights],
                           base / "trainer.log")
            code = children.wait("trainer")
        if not code and phase2_s == 0:
            _phase("phase 2 (fine-tuning encoder and decoder together): not in this split; "
                   "--phases P,P1,P2 with P2 > 0 runs it")
        if not code and phase2_s > 0:
            _phase(f"phase 2: fine-tuning encoder and decoder together ({phase2_s:.0f} s)")
            children.start("trainer", [*common, "--max-seconds", str(phase2_s), *PHASE2_FLAGS],
                           base / "trainer.log")
            code = children.wait("trainer")
        log.info("training ended after %.0f s (exit %d); waiting for the evaluation of its last checkpoint",
                 time.monotonic() - started, code)
        final = _newest_step(model)
        with arrived:
            if final is not None and not arrived.wait_for(
                    lambda: any(e.global_step >= final for e in seen), 300):
                log.warning("no evaluation of step %s arrived in 300 s", final)
    except KeyboardInterrupt:
        code = 130
        log.info("interrupted")
    finally:
        follower.close()
        children.stop_all()
    _summary(seen, work)
    return code


def _newest_step(model: Path) -> int | None:
    """The step of the newest checkpoint on disk (the trainer has ended: its final save is done)."""
    steps = [int(p.name[len("ckpt-"):-len(".index")]) for p in model.glob("ckpt-*.index")
             if p.name[len("ckpt-"):-len(".index")].isdigit()]
    return max(steps, default=None)


def _summary(seen: list[pb.Evaluation], work: Path) -> None:
    curve = [(e.global_step, e.metrics.get("exact_match")) for e in seen if e.status == pb.Evaluation.OK]
    if curve:
        print("[summary] exact match by step: " + ", ".join(
            f"{step}: {value:.2f}" for step, value in curve if value is not None), flush=True)
    log.info("%d evaluations; history in %s", len(seen), work / "evaluations.sqlite")


def main(argv: list[str] | None = None) -> int:
    parser = Parser(prog="showtell demo", description=__doc__.splitlines()[0])
    add_arguments(parser)
    return run(parser.parse_args(argv))
