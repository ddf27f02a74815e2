"""The step inlined in the traced loop's body, or called from it as a function of its own: what
``make_train_loop`` chose, measured against Keras ``fit``'s ``steps_per_execution`` function.

``steps_per_loop.py`` runs every round in a fresh process, and a 2-core VM's speed wanders from
one process to the next by as much as the 3–6 % looked for.  Here **one process** holds one model
and four traced calls of N steps each, all training the same variables on the same batches' shape:

* ``showtell`` — ``CaptionTask.make_train_loop``, as ``showtell train`` runs it (the step a
  ``tf.function`` that the ``while`` body calls, like Keras' ``one_step_on_data``);
* ``showtell_step_inlined`` — the same loop with the same step's ops inlined into the body (the
  loop before 2026-12-06);
* ``keras_fit`` — ``bench/steps_per_loop.py``'s ``FitPeer`` (same network, loss, clipping),
  its ``train_function`` as ``fit`` builds it;
* ``keras_fit_again`` — the same function once more in each round, on an iterator of its own: the
  control (A/A), whose ratio to ``keras_fit`` is what this design shows of nothing.

Each round calls each once, a second apart, order alternating; each call reads its own iterator
over the same phase-1 features.  Reported: each call's seconds (median) and per-round speed ratios
against ``keras_fit`` — paired, so the VM's drift falls on both sides of each — as the median with
its 95 % sign-test interval and the rounds above 1.0 (``rounds.paired``).

    .venv/bin/python bench/step_call.py [--rounds 40] [--n 10] [--model im2txt|small]
        [--out bench/results/step_call.json]
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import keras
import tensorflow as tf
from rounds import add_out, alternate, paired, publish, spread
from steps_per_loop import MODELS, OPTIMIZER, FitPeer, task

from showtell.captioning.config import SyntheticConfig
from showtell.captioning.data import synthetic
from showtell.trainer.step.task import CaptionTask, traced_loop


def inlined_loop(caption: CaptionTask) -> Callable:
    """``make_train_loop``'s loop with the step's ops in the ``while`` body itself (one device)."""
    strategy = caption.strategy
    return traced_loop(lambda batch: strategy.reduce("sum", strategy.run(caption.replica_step, args=(batch,)),
                                                     axis=None))


def calls(data: Path, work: Path, model: str, n: int) -> dict[str, Callable[[], float]]:
    """Each side's call of ``n`` steps → its seconds."""
    caption, dataset = task(data, work, MODELS[model], 32, False, n, autotune=False)
    peer = FitPeer(caption.model, OPTIMIZER.clip_gradients)
    peer.compile(optimizer=keras.optimizers.SGD(OPTIMIZER.learning_rate), steps_per_execution=n,
                 jit_compile=False)
    peer.optimizer.build(peer.trainable_variables)  # as fit does before its first call
    peer.make_train_function()
    dist = caption.strategy.experimental_distribute_dataset(dataset)
    steps = tf.constant(n)

    def timed(run: Callable[[object], object]) -> Callable[[], float]:
        iterator = iter(dist)

        def one() -> float:
            start = time.perf_counter()
            run(iterator)
            return time.perf_counter() - start

        return one

    product, inlined = caption.make_train_loop(), inlined_loop(caption)
    return {"showtell": timed(lambda it: product(it, steps).numpy()),
            "showtell_step_inlined": timed(lambda it: inlined(it, steps).numpy()),
            "keras_fit": timed(peer.train_function), "keras_fit_again": timed(peer.train_function)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=40)
    parser.add_argument("--n", type=int, default=10, help="steps per call on every side")
    parser.add_argument("--model", choices=tuple(MODELS), default="im2txt")
    add_out(parser, "step_call")
    args = parser.parse_args()
    if args.rounds < 6:  # rounds.paired's fewest for a 95 % interval, said before the run, not after
        raise SystemExit(f"--rounds {args.rounds}: at least 6, for the median's 95 % interval")
    with tempfile.TemporaryDirectory() as tmp:
        data = Path(tmp) / "data"
        synthetic.build(data, SyntheticConfig(train_images=600, val_images=8))
        seconds = alternate(calls(data, Path(tmp) / "model", args.model, args.n), rounds=args.rounds, warm=2)
    fit = seconds["keras_fit"]
    report = {"model": args.model, "n": args.n, "batch": 32, "rounds": args.rounds, "one_process": True,
              "seconds_per_call": {k: spread(v, 4) for k, v in seconds.items()},
              # speed ÷ fit's speed = fit's seconds ÷ the side's, call by call
              **{f"{side}_over_keras_fit": paired(fit, seconds[side])
                 for side in ("showtell", "showtell_step_inlined", "keras_fit_again")},
              "showtell_over_showtell_step_inlined": paired(seconds["showtell_step_inlined"],
                                                            seconds["showtell"]),
              "examples_per_sec_median": {k: round(32 * args.n / statistics.median(v), 1)
                                          for k, v in seconds.items()}}
    publish(report, args.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
