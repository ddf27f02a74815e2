"""Steps per traced call: showtell's trainer loop (controller + synchronous runner + its step
report, as ``showtell train`` runs it) with ``--steps-per-loop`` 1 and N, against Keras
``model.fit`` with ``steps_per_execution`` N on the same model, data, batch and loss — the peer a
user would pick instead.  Phase 1 (encoder frozen, cached features: small steps, where Python
dispatch shows) and phase 2 (encoder trains on images).

One process, one model per path, alternated rounds (``rounds.py``) after a warm-up round each;
every round opens a fresh input iterator for every path (Keras' ``fit`` opens its own).  Prints
each path's examples/s and, per phase, the per-round ratios showtell(N) ÷ Keras fit(N) (goal
≥ 1.0), showtell(N) ÷ showtell(1) and showtell(1) ÷ Keras fit(N), each median with its spread.

The Keras peer trains one optimizer over all its variables (``fit`` has one); showtell's phase 2
has two (the encoder's own rate) — the same updates' arithmetic.

    .venv/bin/python bench/steps_per_loop.py [--rounds 5] [--n 10] [--batch-size 32]
        [--phase1-steps 100] [--phase2-steps 20] [--model im2txt|small] [--only phase1|phase2]
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import keras
import tensorflow as tf
from rounds import alternate, ratio, spread

from showtell.captioning.config import InputConfig, ModelConfig, SyntheticConfig
from showtell.captioning.data import synthetic
from showtell.captioning.model.network import masked_loss_sum
from showtell.trainer.actions import StepReport
from showtell.trainer.checkpoints import SaveSchedule
from showtell.trainer.config import ComputeConfig, OptimizerConfig, TrainConfig
from showtell.trainer.controller import Controller
from showtell.trainer.runners import SynchronousRunner
from showtell.trainer.signals import StopRequest
from showtell.trainer.summaries import TrainSummaries
from showtell.trainer.task import CaptionTask

OPTIMIZER = OptimizerConfig(name="sgd", learning_rate=0.5, epochs_per_decay=0, clip_gradients=5.0)


MODELS = {"im2txt": ModelConfig(),  # 512 × 512: a step of CPU seconds' tenths
          # A step of milliseconds, as phase 1 on cached features is on a GPU: dispatch shows.
          "small": ModelConfig(embedding_size=32, lstm_units=32)}


def task(data: Path, model_dir: Path, model: ModelConfig, batch: int, encoder_trains: bool,
         n: int) -> CaptionTask:
    caption = CaptionTask(data_dir=data, model_dir=model_dir, model=model,
                          input_config=InputConfig(batch_size=batch), optimizer=OPTIMIZER,
                          train=TrainConfig(), train_inception=encoder_trains,
                          compute=ComputeConfig(steps_per_loop=n))
    caption.prepare_data()  # phase 1's feature cache: built by the first path, reused by the others
    return caption


def showtell_path(data: Path, model_dir: Path, model: ModelConfig, batch: int, encoder_trains: bool, n: int,
                  steps: int) -> Callable[[], float]:
    """``showtell train``'s loop for ``steps`` steps a round: examples/s."""
    caption = task(data, model_dir, model, batch, encoder_trains, n)
    runner = SynchronousRunner(task=caption, steps_per_loop=n)
    train = TrainConfig()
    report = StepReport(summaries=TrainSummaries(model_dir), optimizer=caption.optimizer,
                        every=train.log_every_steps, steps=10**9, encoder_optimizer=caption.encoder_optimizer)

    def one_round() -> float:
        runner.iterator = iter(runner.dist)
        controller = Controller(runner=runner, global_step=lambda: caption.step,
                                checkpoints=caption.checkpoints, save_schedule=SaveSchedule(None, None),
                                stop=StopRequest(), actions=[report],
                                boundaries=[train.log_every_steps, train.histogram_every_steps])
        before, start = caption.step, time.perf_counter()
        controller.train(before + steps)
        return (caption.step - before) * caption.batch_size / (time.perf_counter() - start)

    return one_round


class FitPeer(keras.Model):
    """The same network and loss, trained by ``model.fit``."""

    def __init__(self, net: keras.Model) -> None:
        super().__init__()
        self.net = net

    def call(self, batch, training=False):
        return self.net.batch_logits(batch, training=training)

    def train_step(self, batch):
        with tf.GradientTape() as tape:
            logits = self.net.batch_logits(batch, training=True)
            loss_sum, _ = masked_loss_sum(logits, batch["target_ids"], batch["mask"])
            loss = loss_sum / tf.maximum(tf.reduce_sum(tf.cast(batch["mask"], tf.float32)), 1.0)
        variables = self.trainable_variables
        self.optimizer.apply(tape.gradient(loss, variables), variables)
        return {"loss": loss}


def keras_path(data: Path, model_dir: Path, model: ModelConfig, batch: int, encoder_trains: bool, n: int,
               steps: int) -> Callable[[], float]:
    """``model.fit(steps_per_epoch=steps)`` with ``steps_per_execution`` n: examples/s."""
    caption = task(data, model_dir, model, batch, encoder_trains, 1)
    peer = FitPeer(caption.model)
    sgd = keras.optimizers.SGD(OPTIMIZER.learning_rate, global_clipnorm=OPTIMIZER.clip_gradients)
    peer.compile(optimizer=sgd, steps_per_execution=n, jit_compile=False)
    dataset = caption.dataset()

    def one_round() -> float:
        """Counted by the optimizer's iterations: with ``steps`` not a multiple of n, fit runs its
        last execution whole (n steps) on an endless dataset."""
        before, start = int(peer.optimizer.iterations.numpy()), time.perf_counter()
        peer.fit(dataset, steps_per_epoch=steps, epochs=1, verbose=0)
        seconds = time.perf_counter() - start
        return (int(peer.optimizer.iterations.numpy()) - before) * caption.batch_size / seconds

    return one_round


def phase(data: Path, root: Path, *, model: ModelConfig, encoder_trains: bool, n: int, batch: int, steps: int,
          rounds: int) -> dict[str, object]:
    name = "phase2" if encoder_trains else "phase1"
    paths = {
        "showtell_1": showtell_path(data, root / f"{name}-1", model, batch, encoder_trains, 1, steps),
        f"showtell_{n}": showtell_path(data, root / f"{name}-{n}", model, batch, encoder_trains, n, steps),
        f"keras_fit_{n}": keras_path(data, root / f"{name}-keras", model, batch, encoder_trains, n, steps),
    }
    rates = alternate(paths, rounds=rounds, warm=1)
    ours, one, keras_fit = rates[f"showtell_{n}"], rates["showtell_1"], rates[f"keras_fit_{n}"]
    return {"steps_per_round": steps, "examples_per_sec": {k: spread(v, 1) for k, v in rates.items()},
            f"showtell_{n}_over_keras_fit_{n}": ratio(ours, keras_fit),
            f"showtell_{n}_over_showtell_1": ratio(ours, one),
            f"showtell_1_over_keras_fit_{n}": ratio(one, keras_fit)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--n", type=int, default=10, help="steps per call for showtell(N) and Keras fit")
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--phase1-steps", type=int, default=100)
    parser.add_argument("--phase2-steps", type=int, default=20)
    parser.add_argument("--only", choices=("phase1", "phase2"))
    parser.add_argument("--model", choices=tuple(MODELS), default="im2txt")
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)
    report: dict[str, object] = {"batch": args.batch_size, "n": args.n, "model": args.model}
    with tempfile.TemporaryDirectory() as tmp:
        data = Path(tmp) / "data"
        synthetic.build(data, SyntheticConfig(train_images=600, val_images=8))
        for encoder_trains, steps in ((False, args.phase1_steps), (True, args.phase2_steps)):
            name = "phase2" if encoder_trains else "phase1"
            if args.only in (None, name):
                report[name] = phase(data, Path(tmp), model=MODELS[args.model], encoder_trains=encoder_trains,
                                     n=args.n, batch=args.batch_size, steps=steps, rounds=args.rounds)
    print(json.dumps(report, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
