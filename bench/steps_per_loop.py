"""Steps per traced call: showtell's trainer loop (controller + synchronous runner + its step
report, as ``showtell train`` runs it) with ``--steps-per-loop`` 1 and N, against Keras
``model.fit`` with ``steps_per_execution`` N on the same model, data, batch and loss — the peer a
user would pick instead.  Phase 1 (encoder frozen, cached features: small steps, where Python
dispatch shows) and phase 2 (encoder trains on images).

Like with like:

* **every round of every side is a fresh process** (``--one``), the sides' order alternating
  round by round (``rounds.order``): nothing of one side — its input pipeline's threads, its
  iterators, its thread pools' state — lives through another's round;
* in each process, one untimed call of N steps first (tracing, the pipeline filling), then the
  timed round: **the input iterator opened and released inside the timed window** on both sides
  (``fit`` opens its own and drops it when it returns; showtell's round does the same);
* **the same clipping**: both clip the gradients to one global norm with
  ``tf.clip_by_global_norm``, which keeps the embedding's sparse gradient sparse (Keras'
  ``global_clipnorm`` would make it dense);
* **steps counted by the optimizer** (its ``iterations``) on both sides;
* **tf.data's autotuning thread off on both sides** (``--autotune off``, the default): with it on,
  releasing an iterator waits for that thread's timed sleep (gdb: ``RootDataset::Iterator``'s
  destructor joining the thread in ``model::Model::OptimizeLoop``'s ``CondVar`` wait) — up to tens of
  seconds, whichever side it falls on: the rounds of exactly 40.96 s (3,200 examples at 78.1/s) were
  that sleep, not the loop.  ``--autotune on`` measures it as users' pipelines run.

Reported per phase: each side's examples/s (median, spread, every round) and the per-round ratios
showtell(N) ÷ Keras fit(N) (goal ≥ 1.0, every round ≥ 0.95), showtell(N) ÷ showtell(1) and
showtell(1) ÷ Keras fit(N).  Enough to see 3 %: rounds of 300 phase-1 steps (≈ 30 s here: a
2-core VM's speed wanders ±10 % over seconds, which a long round averages out) and 6 of them, so
that the per-round ratios' range is a 97 % interval for their median (a sign test: all six above
the median happen 1 time in 64) — 1.0 inside it says the two are not told apart.
The Keras peer trains one optimizer over all its variables (``fit``
has one); showtell's phase 2 has two (the encoder's own rate) — the same updates' arithmetic.

    .venv/bin/python bench/steps_per_loop.py [--rounds 6] [--n 10] [--batch-size 32]
        [--phase1-steps 300] [--phase2-steps 40] [--model im2txt|small] [--only phase1|phase2]
        [--autotune off|on] [--control]
        [--out bench/results/steps_per_loop.json]
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import keras
import tensorflow as tf
from rounds import MIN_ROUNDS, add_out, order, publish, ratio, spread

from showtell.captioning.config import InputConfig, ModelConfig, SyntheticConfig
from showtell.captioning.data import inputs, synthetic
from showtell.captioning.model.network import masked_loss_sum
from showtell.trainer.assembly import build_task
from showtell.trainer.config import ComputeConfig, OptimizerConfig, TrainConfig
from showtell.trainer.experiment import Source, TrainExperiment
from showtell.trainer.loop.actions import StepReport
from showtell.trainer.loop.checkpoints import SaveSchedule
from showtell.trainer.loop.controller import Controller
from showtell.trainer.loop.runners import SynchronousRunner
from showtell.trainer.loop.signals import StopRequest
from showtell.trainer.loop.summaries import TrainSummaries
from showtell.trainer.step.task import CaptionTask
from showtell.trainer.trainer import open_data, task_checkpoints

OPTIMIZER = OptimizerConfig(name="sgd", learning_rate=0.5, epochs_per_decay=0, clip_gradients=5.0)


MODELS = {"im2txt": ModelConfig(),  # 512 × 512: a step of CPU seconds' tenths
          # A step of milliseconds, as phase 1 on cached features is on a GPU: dispatch shows.
          "small": ModelConfig(embedding_size=32, lstm_units=32)}


def task(data: Path, model_dir: Path, model: ModelConfig, batch: int, encoder_trains: bool,
         n: int, autotune: bool = True) -> tuple[CaptionTask, tf.data.Dataset]:
    """The task and its global batches (phase 1's feature cache: built by the phase's first
    process, then read); without ``autotune``, no tuning thread (the same parallelism elsewhere)."""
    caption = build_task(TrainExperiment(
        source=Source(data=data, model_dir=model_dir, train_inception=encoder_trains), model=model,
        input=InputConfig(batch_size=batch), optimizer=OPTIMIZER, compute=ComputeConfig(steps_per_loop=n)))
    cache, _ = open_data(caption)
    dataset = caption.dataset(cache)
    return caption, dataset if autotune else inputs.one_pass(dataset)  # each round's pass ends


def showtell_side(data: Path, model_dir: Path, model: ModelConfig, batch: int, encoder_trains: bool,
                  n: int, autotune: bool, caption: CaptionTask | None = None) -> Callable[[int], float]:
    """``showtell train``'s loop: a round of ``steps`` steps → examples/s (``caption``: a task
    already built — ``step_profile.py``'s with another step)."""
    if caption is None:
        caption, dataset = task(data, model_dir, model, batch, encoder_trains, n, autotune)
    else:
        dataset = caption.dataset(open_data(caption)[0])
        dataset = dataset if autotune else inputs.one_pass(dataset)
    runner = SynchronousRunner(task=caption, dataset=dataset, steps_per_loop=n)
    checkpoints, _ = task_checkpoints(caption, model_dir)
    train = TrainConfig()
    report = StepReport(summaries=TrainSummaries(model_dir), optimizer=caption.optimizer,
                        every=train.log_every_steps, steps=10**9, encoder_optimizer=caption.encoder_optimizer)

    def one_round(steps: int) -> float:
        controller = Controller(runner=runner, global_step=lambda: caption.step,
                                checkpoints=checkpoints, save_schedule=SaveSchedule(None, None),
                                stop=StopRequest(), actions=[report],
                                boundaries=[train.log_every_steps, train.histogram_every_steps])
        before, start = int(caption.optimizer.iterations.numpy()), time.perf_counter()
        runner.iterator = iter(runner.dist)  # opened inside the window, as fit opens its own …
        controller.train(caption.step + steps)
        runner.iterator = None  # … and released inside it, as fit's is when it returns
        seconds = time.perf_counter() - start
        return (int(caption.optimizer.iterations.numpy()) - before) * caption.batch_size / seconds

    return one_round


class FitPeer(keras.Model):
    """The same network and loss, trained by ``model.fit``, clipped as showtell clips."""

    def __init__(self, net: keras.Model, clip: float) -> None:
        super().__init__()
        self.net, self.clip = net, clip

    def call(self, batch, training=False):
        return self.net.batch_logits(batch, training=training)

    def train_step(self, batch):
        with tf.GradientTape() as tape:
            logits = self.net.batch_logits(batch, training=True)
            loss_sum, _ = masked_loss_sum(logits, batch["target_ids"], batch["mask"])
            loss = loss_sum / tf.maximum(tf.reduce_sum(tf.cast(batch["mask"], tf.float32)), 1.0)
        variables = self.trainable_variables
        grads, _ = tf.clip_by_global_norm(tape.gradient(loss, variables), self.clip)  # sparse stays sparse
        self.optimizer.apply(grads, variables)
        return {"loss": loss}


def keras_side(data: Path, model_dir: Path, model: ModelConfig, batch: int, encoder_trains: bool,
               n: int, autotune: bool) -> Callable[[int], float]:
    """``model.fit(steps_per_epoch=steps)`` with ``steps_per_execution`` n → examples/s."""
    caption, dataset = task(data, model_dir, model, batch, encoder_trains, 1, autotune)
    peer = FitPeer(caption.model, OPTIMIZER.clip_gradients)
    peer.compile(optimizer=keras.optimizers.SGD(OPTIMIZER.learning_rate), steps_per_execution=n,
                 jit_compile=False)

    def one_round(steps: int) -> float:
        """With ``steps`` not a multiple of n, fit runs its last execution whole (n steps) on an
        endless dataset: the optimizer's count says what ran."""
        before, start = int(peer.optimizer.iterations.numpy()), time.perf_counter()
        peer.fit(dataset, steps_per_epoch=steps, epochs=1, verbose=0)
        seconds = time.perf_counter() - start
        return (int(peer.optimizer.iterations.numpy()) - before) * caption.batch_size / seconds

    return one_round


def one(args: argparse.Namespace) -> int:
    """One side's round in this process: build, one untimed call of N steps, the timed round."""
    encoder_trains = args.phase == "phase2"
    kind, n = args.one.rsplit("_", 1)
    side = showtell_side if kind == "showtell" else keras_side  # "control": fit again
    model_dir = Path(tempfile.mkdtemp(dir=args.work))
    run = side(args.data, model_dir, MODELS[args.model], args.batch_size, encoder_trains, int(n),
               args.autotune == "on")
    run(args.n)  # tracing, autotuning: not timed
    rate = run(args.phase2_steps if encoder_trains else args.phase1_steps)
    print(json.dumps({"examples_per_sec": rate}), flush=True)
    os._exit(0)  # no teardown: nothing of this process outlives its figure


def phase(args: argparse.Namespace, name: str, data: Path, work: Path) -> dict[str, object]:
    sides = ["showtell_1", f"showtell_{args.n}", f"keras_fit_{args.n}"] + [f"control_{args.n}"] * args.control
    rates: dict[str, list[float]] = {side: [] for side in sides}
    for index in range(args.rounds):
        for side in order(sides, index):
            argv = [sys.executable, __file__, "--one", side, "--phase", name, "--data", str(data),
                    "--work", str(work), "--n", str(args.n), "--batch-size", str(args.batch_size),
                    "--phase1-steps", str(args.phase1_steps), "--phase2-steps", str(args.phase2_steps),
                    "--model", args.model, "--autotune", args.autotune]
            done = subprocess.run(argv, capture_output=True, text=True, check=False)
            if done.returncode != 0:
                raise SystemExit(f"{name} {side} round {index}: exit {done.returncode}\n"
                                 f"{done.stderr[-3000:]}")
            rates[side].append(json.loads(done.stdout.strip().splitlines()[-1])["examples_per_sec"])
            logging.warning("%s round %d %s: %.1f examples/s", name, index, side, rates[side][-1])
    ours, single, fit = rates[f"showtell_{args.n}"], rates["showtell_1"], rates[f"keras_fit_{args.n}"]
    return {"steps_per_round": args.phase2_steps if name == "phase2" else args.phase1_steps,
            "examples_per_sec": {k: spread(v, 1) for k, v in rates.items()},
            f"showtell_{args.n}_over_keras_fit_{args.n}": ratio(ours, fit),
            f"showtell_{args.n}_over_showtell_1": ratio(ours, single),
            f"showtell_1_over_keras_fit_{args.n}": ratio(single, fit),
            **({f"control_{args.n}_over_keras_fit_{args.n}": ratio(rates[f"control_{args.n}"], fit)}
               if args.control else {})}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--n", type=int, default=10, help="steps per call for showtell(N) and Keras fit")
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--phase1-steps", type=int, default=300)
    parser.add_argument("--phase2-steps", type=int, default=40)
    parser.add_argument("--only", choices=("phase1", "phase2"))
    parser.add_argument("--model", choices=tuple(MODELS), default="im2txt")
    parser.add_argument("--autotune", choices=("on", "off"), default="off",
                        help="tf.data's autotuning thread on both sides (off: an iterator's release "
                             "does not wait for its sleep)")
    parser.add_argument("--control", action="store_true",
                        help="a fourth side, fit again in processes of its own: what the rounds' spread is "
                             "between two identical sides (A/A)")
    add_out(parser, "steps_per_loop")
    # one round of one side, in a process of its own (what the run above starts)
    parser.add_argument("--one", help=argparse.SUPPRESS)
    parser.add_argument("--phase", choices=("phase1", "phase2"), help=argparse.SUPPRESS)
    parser.add_argument("--data", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--work", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING, format="%(message)s")
    if args.one:
        return one(args)
    if args.rounds < MIN_ROUNDS:
        raise SystemExit(f"--rounds {args.rounds}: at least {MIN_ROUNDS}, or the spread means nothing")
    report: dict[str, object] = {"batch": args.batch_size, "n": args.n, "model": args.model,
                                 "rounds": args.rounds, "fresh_process_per_round": True,
                                 "tf_data_autotune": args.autotune == "on"}
    with tempfile.TemporaryDirectory() as tmp:
        data = Path(tmp) / "data"
        synthetic.build(data, SyntheticConfig(train_images=600, val_images=8))
        for name in ("phase1", "phase2"):
            if args.only in (None, name):
                report[name] = phase(args, name, data, Path(tmp))
    publish(report, args.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
