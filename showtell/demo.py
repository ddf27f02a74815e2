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
import json
import logging
import re
import shutil
import signal
import subprocess
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

from showtell.api.client import WatchFollower
from showtell.api.contract import STOPPING
from showtell.captioning.config import SyntheticConfig, pretrain_progress, pretrain_state
from showtell.common import processes
from showtell.common.flags import (
    Parser,
    add_config_file_flag,
    flag_type,
    parse_args,
    positive_float,
    positive_int,
    print_config,
    run_command,
    start_command,
)
from showtell.common.intervals import with_interval
from showtell.common.locks import DirectoryLock
from showtell.evaluator.records.workdir import WorkDir
from showtell.v1 import metrics_pb2 as pb

log = logging.getLogger("showtell.demo")
PROG = "showtell demo"
ENCODER_FILE = "encoder.weights.h5"
# The decoder's settings on the synthetic default: Adam, constant rate, little dropout (a small
# dataset whose every caption is true).  The phases add what differs between them.
TRAIN_FLAGS = ["--batch-size", "32", "--optimizer", "adam", "--learning-rate", "0.001",
               "--epochs-per-decay", "0", "--lstm-dropout", "0.1", "--image-dropout", "0",
               "--save-every-secs", "30", "--log-every-steps", "50"]
PHASE2_FLAGS = ["--train-inception", "true", "--learning-rate", "0.0003",
                "--inception-learning-rate", "0.0001"]


def evaluator_args(model: Path, data: Path, work: Path, *, port: int, examples: int,
                   threads: int, unseen: Path | None = None) -> list[str]:
    """The demo's evaluator (``bench/demo_overhead.py`` measures what it costs the trainer);
    ``unseen``: scenes of another seed, evaluated as a second set (``UNSEEN``)."""
    return ["evaluate", "--model-dir", str(model), "--data", str(data), "--work-dir", str(work),
            "--port", str(port), "--policy", "latest", "--meteor", "false",
            "--max-eval-examples", str(examples), "--beam-size", "1", "--threads", str(threads),
            *(["--eval-set", f"{UNSEEN}={unseen}"] if unseen is not None else [])]


UNSEEN = "unseen"  # the second evaluation set: scenes drawn with another seed than the training data's
UNSEEN_SEED = SyntheticConfig().seed + 1


@dataclass(frozen=True)
class Phases:
    """How the demo's seconds are split: pretraining the encoder, phase 1, phase 2."""

    pretrain: float
    phase1: float
    phase2: float

    def __str__(self) -> str:
        """The flag's own text (``--print-config`` prints it, ``--phases`` reads it back)."""
        return f"{self.pretrain:g},{self.phase1:g},{self.phase2:g}"

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


# Measured (BENCHMARKS.md): what limits the captions is whether the encoder has learnt the shapes'
# kinds, so pretraining gets most of the time — and, with --preview, phase 1 shows evaluations
# from the first minutes on an early encoder while pretraining goes on.  Phase 2 at the end
# measured no better than more phase 1 in ten minutes; `--phases 0.6,0.3,0.1` runs it.
DEFAULT_PHASES = "0.7,0.3,0"


def add_arguments(p: argparse.ArgumentParser) -> None:
    add_config_file_flag(p)
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
    p.add_argument("--preview", type=float, default=75.0, metavar="SECONDS",
                   help="pretraining writes a first encoder after this long and phase 1 runs on it for as "
                        "long while pretraining goes on, so evaluations start early; phase 1 then starts "
                        "again, as a new run, on the finished encoder (0: no preview; default 75)")


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


def _follow(follower: WatchFollower, seen: list[pb.Evaluation], arrived: threading.Condition,
            console: _Console, unseen: list[pb.Evaluation]) -> None:
    """Print each evaluation of the validation scenes as it lands, and beside it the same
    checkpoint's evaluation on the unseen scenes (recorded with it, in one transaction)."""
    from showtell.api.client import MetricsClient
    from showtell.commands.metrics import format_evaluation  # the client's own formatting

    with MetricsClient(follower.target, timeout=10) as client:
        for evaluation in follower:
            other = None
            if evaluation.status == pb.Evaluation.STATUS_OK:
                try:
                    other = client.latest(evaluation.run_id, eval_set=UNSEEN)
                except grpc.RpcError:
                    other = None  # an evaluator without the second set (an earlier demo's history)
            if other is not None and other.global_step == evaluation.global_step:
                unseen.append(other)
            else:
                other = None
            with arrived:
                seen.append(evaluation)
                arrived.notify_all()
            samples = [f"    {s.caption!r}  (ref: {s.references[0]!r})" for s in evaluation.samples[:2]]
            also = [f"    unseen scenes (seed {UNSEEN_SEED}): " + "  ".join(
                f"{name} {_metric(other, name)}" for name in ("exact_match", "loss"))] if other else []
            console.say("evaluation", format_evaluation(evaluation), *also, *samples)


class _Console:
    """Everything the demo prints, one tagged line at a time with the minutes since it started;
    and a heartbeat: after ``quiet`` seconds without a line it says what is running."""

    def __init__(self, quiet: float = 25.0) -> None:
        self.started = self.last = time.monotonic()
        self.quiet = quiet
        self.status = "starting"
        self._lock = threading.Lock()
        self._done = threading.Event()
        self._heartbeat = threading.Thread(target=self._beat, name="demo-heartbeat", daemon=True)
        self._heartbeat.start()

    def say(self, tag: str, text: str, *more: str) -> None:
        with self._lock:
            elapsed = time.monotonic() - self.started
            stamp = f"{int(elapsed // 60):2d}:{int(elapsed % 60):02d}"
            print(f"{stamp} [{tag}] {text}", *more, sep="\n", flush=True)
            self.last = time.monotonic()

    def close(self) -> None:
        self._done.set()

    def _beat(self) -> None:
        while not self._done.wait(1.0):
            if time.monotonic() - self.last >= self.quiet:
                self.say("demo", self.status)


class _Relay:
    """Follows a child's log file and passes its progress to the console: lines matching
    ``keep`` at once, the newest ``progress`` line at most every ``every`` seconds (a phase-1
    trainer logs several a second), with the time left in its phase."""

    _PREFIX = re.compile(r"^\d\d:\d\d:\d\d [A-Z] [\w.]+: ")

    def __init__(self, *, console: _Console, tag: str, path: Path, keep: str, progress: str = r"(?!)",
                 ends_at: float | None = None, every: float = 20.0) -> None:
        self.console, self.tag, self.path = console, tag, path
        self.keep, self.progress = re.compile(keep), re.compile(progress)
        self.ends_at, self.every = ends_at, every
        self.final_at: float | None = None  # when its "final checkpoint" line was read (monotonic)
        self._offset = path.stat().st_size if path.exists() else 0  # only this run's lines
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"relay-{tag}", daemon=True)
        self._thread.start()

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)

    def _run(self) -> None:
        shown, pending = 0.0, None
        while True:
            stopping = self._stop.wait(1.0)
            for line in self._new_lines():
                text = self._PREFIX.sub("", line)
                if self.keep.search(text):
                    self.console.say(self.tag, text)
                    if text.startswith("final checkpoint"):  # said again when the trainer has exited
                        self.final_at = time.monotonic()
                        self.console.status = f"{self.tag}: final checkpoint written; waiting for it to exit"
                elif self.progress.search(text):
                    pending = text
            if pending and (stopping or time.monotonic() - shown >= self.every):
                left = "" if self.ends_at is None else \
                    f"; {max(0, self.ends_at - time.monotonic()):.0f} s left"
                self.console.say(self.tag, pending + left)
                shown, pending = time.monotonic(), None
            if stopping:
                return

    def _new_lines(self) -> list[str]:
        try:
            with open(self.path, "rb") as handle:
                handle.seek(self._offset)
                chunk = handle.read()
        except FileNotFoundError:
            return []
        complete = chunk[:chunk.rfind(b"\n") + 1]  # a line still being written waits for its end
        self._offset += len(complete)
        return complete.decode(errors="replace").replace("\r", "\n").splitlines()


def _interrupt(signum, frame) -> None:
    raise KeyboardInterrupt


class _Children:
    """The demo's processes, each stopped by its PID whatever happens; a child started with a
    ``relay`` has its progress passed to the console."""

    def __init__(self, console: _Console) -> None:
        self.console = console
        self.running: dict[str, subprocess.Popen] = {}
        self.relays: dict[str, _Relay] = {}

    def start(self, name: str, args: list[str], log_path: Path,
              relay: dict | None = None) -> subprocess.Popen:
        if relay is not None:
            tag = "train" if name == "trainer" else name
            self.relays[name] = _Relay(console=self.console, tag=tag, path=log_path, **relay)
        proc = processes.start(args, log_path)
        self.running[name] = proc
        self.console.say("demo", f"{name} pid {proc.pid} (log {log_path})")
        return proc

    def wait(self, name: str) -> int:
        code = self.running[name].wait()  # still listed while waited for: an interrupt stops it
        exited = time.monotonic()
        del self.running[name]
        if name in self.relays:
            relay = self.relays.pop(name)
            relay.close()  # its last lines first
            if relay.final_at is not None:  # read up to a second late: the log is read every second
                after = max(0.0, exited - relay.final_at)
                self.console.say("demo", f"the {name} exited {code}, {after:.0f} s after its final "
                                         "checkpoint")
        return code

    def stop_all(self) -> None:
        """Each running child by its PID, said on the console like every other line."""
        for name, proc in reversed(list(self.running.items())):
            if proc.poll() is None:
                self.console.say("demo", f"stopping the {name} (pid {proc.pid})")
            code = processes.stop(proc, 60.0)
            self.console.say("demo", f"the {name} (pid {proc.pid}) exited {code}")
        self.running.clear()
        for relay in self.relays.values():
            relay.close()
        self.relays.clear()


_TRAINER_LINES = (r"^(feature cache: (building|reusing|\d+ images)|no checkpoint in|resumed from"
                  r"|final checkpoint|.*from the flags|.*error)")
_TRAINER_PROGRESS = r"^step \d+/\d+"


def run(args: argparse.Namespace) -> int:
    if args.print_config:
        return print_config(PROG, args)
    start_command(args)  # TensorFlow's start-up notices stay off the console (it imports TF at the end)
    # Explicit handlers: a shell may start us with SIGINT ignored (background jobs), and a
    # supervisor stops us with SIGTERM; both must stop the children cleanly.
    signal.signal(signal.SIGINT, _interrupt)
    signal.signal(signal.SIGTERM, _interrupt)

    def body() -> int:
        # One demo per directory: a second one would share the evaluator's port and history.
        with DirectoryLock(directory=args.dir, role="demo", flag="--dir"):
            return _demo(args)

    return run_command(PROG, body)


def _demo(args: argparse.Namespace) -> int:
    demo = _Demo(args)
    code = 0
    try:
        code = demo.run()
    except KeyboardInterrupt:
        code = 130
        demo.console.say("demo", "interrupted: stopping every child")
    finally:
        demo.follower.close()
        demo.children.stop_all()
        demo.console.close()
    _summary(demo.seen, demo.work, demo.console, demo.unseen)
    return code


class _Demo:
    """One demo's steps in order — data, the evaluator, pretraining (with its preview), phase 1,
    phase 2, the last evaluation — each a method; ``run`` says the order and stops at a failure."""

    def __init__(self, args: argparse.Namespace) -> None:
        self.args, base = args, args.dir
        self.base, self.data, self.model = base, base / "data", base / "model"
        self.encoder = base / ENCODER_FILE
        self.work = WorkDir.beside(str(self.model))  # the evaluator's default
        self.console = _Console()
        self.children = _Children(self.console)
        self.seen: list[pb.Evaluation] = []
        self.unseen: list[pb.Evaluation] = []  # the same checkpoints on scenes of another seed
        self.unseen_data = base / "data-unseen"
        self.arrived = threading.Condition()
        self.target = f"127.0.0.1:{args.port}"
        self.follower = WatchFollower(target=self.target, persistent=True, on_retry=self._on_retry)
        self.common = ["train", "--data", str(self.data), "--model-dir", str(self.model), *TRAIN_FLAGS]
        self.pretrain_s, self.phase1_s, self.phase2_s = args.phases.seconds(args.seconds)
        self.preview = 0.0

    def _on_retry(self, error: grpc.RpcError, wait: float) -> None:
        evaluator = self.children.running.get("evaluator")
        if evaluator is not None and evaluator.poll() is None and STOPPING not in (error.details() or ""):
            log.warning("evaluator stream: %s; retrying in %.0f s", error.code().name, wait)

    def run(self) -> int:
        code = self.prepare()
        if code:
            return code
        self.earlier()
        self.start_evaluator()
        self.start_pretraining()
        _wait_serving(self.target, time.monotonic() + 120)
        threading.Thread(target=_follow, args=(self.follower, self.seen, self.arrived, self.console,
                                               self.unseen), daemon=True).start()
        code = self.preview_phase()
        if "pretrain" in self.children.running:
            code = self.children.wait("pretrain") or code
        if not code and self.preview and self.model.exists():
            # The finished encoder gives other features: its phase 1 is a new run in the model dir
            # (the evaluator notices and evaluates it afresh); the preview's run is kept aside.
            shutil.rmtree(self.base / "model-preview", ignore_errors=True)
            self.model.rename(self.base / "model-preview")
        code = code or self.phase1()
        code = code or self.phase2()
        self.wait_for_the_last_evaluation(code)
        return code

    def prepare(self) -> int:
        self.console.status = "building the synthetic dataset"
        code = _build_data(self.console, self.data, self.args.train_images, self.base / "data.log")
        code = code or _build_unseen(self.console, self.unseen_data, self.args.eval_examples,
                                     self.base / "data.log", self.data)
        if code:
            return code
        scenes = SyntheticConfig()
        pictures = _write_pictures(self.base / "pictures", scenes.seed, scenes.image_size)
        self.console.say("data", f"{len(pictures)} validation scenes as PNG for `showtell caption` "
                                 f"afterwards: {pictures[0].parent}/")
        return 0

    def earlier(self) -> None:
        """An earlier demo in this dir: say what it reached, and keep its run aside — this demo's
        pretraining goes on from where that one's ended, and phase 1 trains a new run on the
        better encoder (the evaluator's history keeps both)."""
        run = _run_id(self.model)
        if not run:
            return
        from showtell.evaluator.records.store import Store

        store = Store(self.work.history)
        try:
            best = store.best("exact_match", True, run=run)
        finally:
            store.close()
        self.console.say("demo", f"the last demo's run {run} reached "
                                 + (f"exact match {_recorded_exact_match(best)} (step {best.step})"
                                    if best else "no evaluation")
                                 + f"; it is kept in {self.base / 'model-previous'}")
        shutil.rmtree(self.base / "model-previous", ignore_errors=True)
        self.model.rename(self.base / "model-previous")

    def start_evaluator(self) -> None:
        """First: it starts while the encoder pretrains, then waits, asleep, for the first checkpoint."""
        args = self.args
        command = evaluator_args(self.model, self.data, self.work.root, port=args.port,
                                 examples=args.eval_examples, threads=args.eval_threads,
                                 unseen=self.unseen_data)
        self.children.start("evaluator", command, self.base / "evaluator.log")
        self.console.say("demo", f"while it runs: .venv/bin/showtell metrics watch --server {self.target} ; "
                                 f".venv/bin/tensorboard --logdir {self.base} ; Ctrl-C stops everything")

    def start_pretraining(self) -> None:
        encoder, pretrain_s = self.encoder, self.pretrain_s
        state = pretrain_state(encoder)
        if encoder.is_file() and not state.is_dir():  # an encoder of its own: nothing to go on from
            self.console.say("phase", f"pretrained encoder: {encoder} kept from an earlier run")
            return
        if pretrain_s <= 0:
            return
        self.preview = preview = min(self.args.preview, pretrain_s / 2)
        self.console.say("phase", f"pretraining Inception v3 on the train split's scene labels "
                                  f"({pretrain_s:.0f} s) → {encoder}" + _going_on(state)
                                  + ("; phase 1 on the encoder so far meanwhile" if encoder.is_file()
                                     else f"; a first encoder after {preview:.0f} s" if preview else ""))
        self.console.status = "pretraining: loading the train images and tracing the step"
        self.children.start("pretrain", ["pretrain", "--data", str(self.data), "--out", str(encoder),
                                         "--seconds", str(pretrain_s),
                                         *(["--first-save-after", str(preview)] if preview else [])],
                            self.base / "pretrain.log",
                            relay=dict(keep=r"^(pretrain step|pretrained|wrote|resuming)|error"))

    def train(self, seconds: float, *flags: str) -> int:
        """A trainer for ``seconds``, relayed to the console; its exit code."""
        self.children.start("trainer", [*self.common, "--max-seconds", str(seconds), *flags],
                            self.base / "trainer.log",
                            relay=dict(keep=_TRAINER_LINES, progress=_TRAINER_PROGRESS,
                                       ends_at=time.monotonic() + seconds))
        return self.children.wait("trainer")

    def preview_phase(self) -> int:
        """Phase 1 on the first encoder while pretraining goes on: evaluations in the first minutes."""
        if not (self.preview and _wait_for_file(self.encoder, self.children, "pretrain")):
            return 0
        self.console.say("phase", f"phase 1 preview: the decoder on the first encoder ({self.preview:.0f} s) "
                                  "while pretraining goes on")
        self.console.status = "phase 1 preview: starting the trainer (feature cache first)"
        code = self.train(self.preview, "--save-every-secs", "20", "--inception-weights", str(self.encoder))
        self.console.status = "pretraining goes on; phase 1 starts again on the finished encoder"
        return code

    def phase1(self) -> int:
        if self.encoder.is_file():
            weights = ["--inception-weights", str(self.encoder)]
            self.console.say("phase", f"phase 1: the decoder on the frozen encoder, from the feature cache "
                                      f"({self.phase1_s:.0f} s)" + ("; a new run, the preview's is kept in "
                                                                    f"{self.base / 'model-preview'}"
                                                                    if self.preview else ""))
        else:
            weights = []
            self.console.say("phase", f"training encoder and decoder from scratch, no pretrained encoder "
                                      f"({self.phase1_s:.0f} s)")
        self.console.status = "phase 1: starting the trainer (feature cache first)"
        return self.train(self.phase1_s, *weights)

    def phase2(self) -> int:
        if self.phase2_s == 0:
            self.console.say("phase", "phase 2 (fine-tuning encoder and decoder together): not in this "
                                      "split; --phases P,P1,P2 with P2 > 0 runs it")
            return 0
        self.console.say("phase", "phase 2: fine-tuning encoder and decoder together "
                                  f"({self.phase2_s:.0f} s)")
        self.console.status = "phase 2: starting the trainer"
        return self.train(self.phase2_s, *PHASE2_FLAGS)

    def wait_for_the_last_evaluation(self, code: int) -> None:
        final, run = _newest_step(self.model), _run_id(self.model)
        self.console.status = f"training ended; waiting for the evaluation of step {final}"
        self.console.say("demo", f"training ended (exit {code}); waiting for the evaluation of its last "
                                 f"checkpoint (step {final})")
        with self.arrived:
            if final is not None and not self.arrived.wait_for(
                    lambda: any(e.global_step >= final and e.run_id == run for e in self.seen), 300):
                log.warning("no evaluation of step %s arrived in 300 s", final)


def _build_data(console: _Console, data: Path, train_images: int, log_path: Path) -> int:
    started = time.monotonic()
    with open(log_path, "a") as log_file:
        built = subprocess.run(processes.command("data", "synthetic", "--out", str(data), "--train",
                                                 str(train_images)),
                               stdout=log_file, stderr=subprocess.STDOUT, env=processes.environment())
    lines = [line for line in log_path.read_text(errors="replace").splitlines() if line.strip()]
    if built.returncode:
        console.say("data", lines[-1] if lines else f"showtell data exited {built.returncode}")
        return built.returncode
    console.say("data", f"{data}: {train_images} synthetic training scenes ready "
                        f"({time.monotonic() - started:.0f} s; log {log_path})")
    return 0


# The training scenes the unseen set's vocabulary is counted from.  4 lacked five of the grammar's
# words ("yellow", "left", ",", "from", "to"): 64 of 100 references held <UNK>, and no model could
# score above exact match 0.36 on the set — a generalisation gap that was an artefact.
UNSEEN_TRAIN = 400


def _build_unseen(console: _Console, data: Path, images: int, log_path: Path, trained_on: Path) -> int:
    """Validation scenes drawn with ``UNSEEN_SEED``: the second evaluation set ("does it generalise"),
    kept across demos — unless its vocabulary lacks words of ``trained_on``'s (a set built by an
    older demo), which would turn its references' words into <UNK>."""
    from showtell.captioning.data.vocab import Vocabulary

    if (data / "vocab.txt").exists() and (set(Vocabulary.load(trained_on / "vocab.txt").words)
                                          - set(Vocabulary.load(data / "vocab.txt").words)):
        console.say("data", f"{data}: its vocabulary lacks words of the training data's: built again")
        shutil.rmtree(data)
    with open(log_path, "a") as log_file:
        built = subprocess.run(processes.command("data", "synthetic", "--out", str(data), "--train",
                                                 str(UNSEEN_TRAIN),
                                                 "--train-shards", "1", "--val", str(images), "--seed",
                                                 str(UNSEEN_SEED), "--if-missing"),
                               stdout=log_file, stderr=subprocess.STDOUT, env=processes.environment())
    if built.returncode:
        console.say("data", f"the unseen scenes: showtell data exited {built.returncode} (log {log_path})")
        return built.returncode
    console.say("data", f"{data}: {images} validation scenes of seed {UNSEEN_SEED}, never trained on, "
                        f"evaluated as the set {UNSEEN!r} beside the validation split")
    return 0


PICTURES = 6


def _write_pictures(out: Path, seed: int, image_size: int) -> list[Path]:
    """A few validation scenes as PNG files, for ``showtell caption`` after the demo (pictures
    no phase trained on), each named with its first reference caption."""
    from PIL import Image

    from showtell.captioning.data import synthetic

    out.mkdir(parents=True, exist_ok=True)
    written = []
    for index in range(PICTURES):
        scene = synthetic.make_scene(seed, "val", index, image_size)
        path = out / f"val-{index}-{synthetic.captions(scene)[0].replace(' , ', ' ').replace(' ', '-')}.png"
        if not path.exists():
            Image.fromarray(synthetic.draw(scene, image_size)).save(path)
        written.append(path)
    return written


def _wait_for_file(path: Path, children: _Children, name: str) -> bool:
    """Wait (asleep, a second at a time) until ``path`` exists; False if child ``name`` ended first."""
    while not path.is_file():
        proc = children.running.get(name)
        if proc is None or proc.poll() is not None:
            return path.is_file()
        time.sleep(1.0)
    return True


def _going_on(state: Path) -> str:
    """What the last pretraining reached (its ``progress.json``), said where this one goes on."""
    progress = pretrain_progress(state)
    if not progress or "step" not in progress:
        return ""
    accuracy = progress.get("accuracy", {})

    def mean(attr: str) -> float:
        values = [v for head, v in accuracy.items() if head.endswith(f"_{attr}")]
        return sum(values) / max(len(values), 1)

    return (f", going on from step {progress['step']} (held-out accuracy then: colour {mean('colour'):.2f}, "
            f"kind {mean('kind'):.2f}, size {mean('size'):.2f})")


def _run_id(model: Path) -> str:
    """The model dir's current run (``showtell-model.json``), read without TensorFlow."""
    try:
        return str(json.loads((model / "showtell-model.json").read_text()).get("run_id", ""))
    except (OSError, ValueError):
        return ""


def _newest_step(model: Path) -> int | None:
    """The step of the newest checkpoint on disk (the trainer has ended: its final save is done)."""
    from showtell.captioning.model.modeldir import checkpoint_steps  # TensorFlow: only once, at the end

    return max(checkpoint_steps(model), default=None)


TARGET_EXACT_MATCH = 0.5  # the demo's summary says when its run reached this


def _summary(seen: list[pb.Evaluation], work: WorkDir, console: _Console,
             unseen: list[pb.Evaluation] = ()) -> None:
    curves: dict[str, list[str]] = {}  # per run (the preview's, then the finished encoder's), in order
    for e in seen:
        if e.status == pb.Evaluation.STATUS_OK and "exact_match" in e.metrics:
            curves.setdefault(e.run_id, []).append(f"{e.global_step}: {_exact_match(e)}")
    for run, curve in curves.items():
        console.say("summary", f"exact match by step, with 95 % intervals (run {run or '-'}): "
                    + ", ".join(curve))
        other = [f"{e.global_step}: {_exact_match(e)}" for e in unseen if e.run_id == run]
        if other:
            console.say("summary", f"  the same checkpoints on unseen scenes (seed {UNSEEN_SEED}): "
                        + ", ".join(other))
    if curves:
        console.say("summary", time_to_target([e for e in seen if e.run_id == list(curves)[-1]]))
    console.say("summary", f"{len(seen)} evaluations; history in {work.history}")


def time_to_target(evaluations: list[pb.Evaluation], target: float = TARGET_EXACT_MATCH) -> str:
    """When the run's exact match first reached ``target``, in training time (the trainer's, saved
    in each checkpoint), or the best it reached."""
    ok = [e for e in evaluations if e.status == pb.Evaluation.STATUS_OK and "exact_match" in e.metrics]
    for e in sorted(ok, key=lambda e: e.global_step):
        if e.metrics["exact_match"] >= target and e.HasField("train_time"):
            seconds = round(e.train_time.ToTimedelta().total_seconds())
            return f"exact match {target:g} reached after {seconds // 60}:{seconds % 60:02d} of training " \
                   f"(step {e.global_step})"
    best = max(ok, key=lambda e: e.metrics["exact_match"], default=None)
    return f"exact match {target:g} not reached" + (
        f" (best {_exact_match(best)} at step {best.global_step})" if best else "")


def _recorded_exact_match(record) -> str:
    return with_interval(record.metrics["exact_match"], record.intervals.get("exact_match"), digits=2)


def _exact_match(e: pb.Evaluation) -> str:
    """``0.77 (0.69–0.85)``: the value and, when recorded, its interval."""
    return _metric(e, "exact_match")


def _metric(e: pb.Evaluation, name: str) -> str:
    bounds = e.intervals.get(name)
    return with_interval(e.metrics[name], (bounds.lower, bounds.upper) if bounds else None, digits=2)


def main(argv: list[str] | None = None) -> int:
    parser = Parser(prog="showtell demo", description=__doc__.splitlines()[0])
    add_arguments(parser)
    return run(parse_args(parser, argv))
