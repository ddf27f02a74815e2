"""One demo's steps in order — data, the evaluator, pretraining (with its preview), phase 1,
phase 2, the last evaluation — each a method of ``Demo``; and the evaluations followed over gRPC
as they land."""

from __future__ import annotations

import argparse
import logging
import shutil
import threading
import time

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

from showtell.api.client import WatchFollower
from showtell.api.contract import STOPPING
from showtell.captioning.config import SyntheticConfig, pretrain_state
from showtell.commands.demo import scenes, summary
from showtell.commands.demo.console import Children, Console, wait_for_file
from showtell.commands.demo.settings import (
    ENCODER_FILE,
    PHASE2_FLAGS,
    TRAIN_FLAGS,
    UNSEEN,
    UNSEEN_SEED,
    evaluator_args,
)
from showtell.evaluator.records.workdir import WorkDir
from showtell.v1 import metrics_pb2 as pb

log = logging.getLogger("showtell.demo")


def wait_serving(target: str, deadline: float) -> None:
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


def follow(follower: WatchFollower, seen: list[pb.Evaluation], arrived: threading.Condition,
            console: Console, unseen: list[pb.Evaluation]) -> None:
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
                f"{name} {summary.metric(other, name)}" for name in ("exact_match", "loss"))] if other else []
            console.say("evaluation", format_evaluation(evaluation), *also, *samples)


_TRAINER_LINES = (r"^(feature cache: (building|reusing|\d+ images)|no checkpoint in|resumed from"
                  r"|final checkpoint|.*from the flags|.*error)")
_TRAINER_PROGRESS = r"^step \d+/\d+"


class Demo:
    """One demo's steps in order — data, the evaluator, pretraining (with its preview), phase 1,
    phase 2, the last evaluation — each a method; ``run`` says the order and stops at a failure."""

    def __init__(self, args: argparse.Namespace) -> None:
        self.args, base = args, args.dir
        self.base, self.data, self.model = base, base / "data", base / "model"
        self.encoder = base / ENCODER_FILE
        self.work = WorkDir.beside(str(self.model))  # the evaluator's default
        self.console = Console()
        self.children = Children(self.console)
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
        wait_serving(self.target, time.monotonic() + 120)
        threading.Thread(target=follow, args=(self.follower, self.seen, self.arrived, self.console,
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
        code = scenes.build_data(self.console, self.data, self.args.train_images, self.base / "data.log")
        code = code or scenes.build_unseen(self.console, self.unseen_data, self.args.eval_examples,
                                           self.base / "data.log", self.data)
        if code:
            return code
        drawn = SyntheticConfig()
        pictures = scenes.write_pictures(self.base / "pictures", drawn.seed, drawn.image_size)
        self.console.say("data", f"{len(pictures)} validation scenes as PNG for `showtell caption` "
                                 f"afterwards: {pictures[0].parent}/")
        return 0

    def earlier(self) -> None:
        """An earlier demo in this dir: say what it reached, and keep its run aside — this demo's
        pretraining goes on from where that one's ended, and phase 1 trains a new run on the
        better encoder (the evaluator's history keeps both)."""
        run = summary.run_id(self.model)
        if not run:
            return
        from showtell.evaluator.records.store import Store

        store = Store(self.work.history)
        try:
            best = store.best("exact_match", True, run=run)
        finally:
            store.close()
        self.console.say("demo", f"the last demo's run {run} reached "
                                 + (f"exact match {summary.recorded_exact_match(best)} (step {best.step})"
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
                                  f"({pretrain_s:.0f} s) → {encoder}" + summary.going_on(state)
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
        if not (self.preview and wait_for_file(self.encoder, self.children, "pretrain")):
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
        final, run = summary.newest_step(self.model), summary.run_id(self.model)
        self.console.status = f"training ended; waiting for the evaluation of step {final}"
        self.console.say("demo", f"training ended (exit {code}); waiting for the evaluation of its last "
                                 f"checkpoint (step {final})")
        with self.arrived:
            if final is not None and not self.arrived.wait_for(
                    lambda: any(e.global_step >= final and e.run_id == run for e in self.seen), 300):
                log.warning("no evaluation of step %s arrived in 300 s", final)
