"""Small callables the controller runs between chunks of steps (Orbit's ``actions``).

Each takes ``(global_step, logs)`` and decides for itself whether it is due.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import tensorflow as tf

from showtell.trainer.loop.controller import StepLogs
from showtell.trainer.loop.summaries import TrainSummaries
from showtell.trainer.step.optimizer import current_learning_rate

log = logging.getLogger(__name__)


def crossed(step: int, steps_taken: int, every: int) -> bool:
    """True when the last ``steps_taken`` steps, ending at ``step``, passed a multiple of ``every``."""
    return bool(every) and step // every != (step - steps_taken) // every


@dataclass
class _Window:
    """Running totals between two log lines."""

    loss: float = 0.0
    steps: int = 0
    wait: float = 0.0
    compute: float = 0.0
    examples: int = 0
    input_measured: bool = True  # every chunk's input wait was timed

    def add(self, logs: StepLogs) -> None:
        self.input_measured = self.input_measured and logs.input_measured
        self.loss += sum(logs.losses)
        self.steps += logs.steps
        self.wait += logs.input_seconds
        self.compute += logs.compute_seconds
        self.examples += logs.examples

    @property
    def mean_loss(self) -> float:
        return self.loss / max(self.steps, 1)

    @property
    def examples_per_sec(self) -> float:
        return self.examples / max(self.wait + self.compute, 1e-9)

    @property
    def wait_fraction(self) -> float | None:
        """None when the batches were read inside traced loops (``--steps-per-loop`` > 1)."""
        return self.wait / max(self.wait + self.compute, 1e-9) if self.input_measured else None


@dataclass
class StepReport:
    """Loss, learning rate(s), throughput and input wait: one log line and TensorBoard scalars
    every ``every`` steps and at ``steps``.  The first chunk (graph tracing) is logged apart,
    outside the throughput figures."""

    summaries: TrainSummaries
    optimizer: object
    every: int
    steps: int
    encoder_optimizer: object | None = None
    publish: Callable[[dict[str, float]], None] | None = None  # each log line's figures (Prometheus')
    track: Callable[[int, dict[str, float]], None] | None = None  # and at their step (MLflow's)
    _window: _Window = field(default_factory=_Window)

    def __call__(self, step: int, logs: StepLogs) -> None:
        if logs.traced:
            log.info("first step (graph tracing) took %.1f s", logs.input_seconds + logs.compute_seconds)
            return
        self._window.add(logs)
        if not (crossed(step, logs.steps, self.every) or step >= self.steps):
            return
        window, self._window = self._window, _Window()
        lr = current_learning_rate(self.optimizer)
        values = {"loss": window.mean_loss, "learning_rate": lr, "examples_per_sec": window.examples_per_sec}
        wait = window.wait_fraction
        if wait is not None:
            values["input_wait_fraction"] = wait
        if self.encoder_optimizer is not None:
            values["inception_learning_rate"] = current_learning_rate(self.encoder_optimizer)
        self.summaries.scalars(step, values)
        if self.publish is not None:
            self.publish(values)
        if self.track is not None:
            self.track(step, values)
        log.info("step %d/%d  loss %.4f  lr %.3g  %.1f examples/s%s", step, self.steps, window.mean_loss, lr,
                 window.examples_per_sec, "" if wait is None else f"  input wait {100 * wait:.1f}%",
                 extra={"step": step})


@dataclass
class WeightHistograms:
    """Histograms of ``model``'s decoder and image embedding every ``every`` steps (Inception's 376
    variables would drown them)."""

    summaries: TrainSummaries
    model: tf.keras.Model  # a ShowAndTell: its decoder_weights
    every: int

    def __call__(self, step: int, logs: StepLogs) -> None:
        if crossed(step, logs.steps, self.every):
            self.summaries.histograms(step, self.model.decoder_weights, self.model.name + "/")


@dataclass
class ProfileSteps:
    """``--profile-steps A:B``: a TensorFlow profiler trace of steps A to B (global steps,
    inclusive) in ``logdir`` — the model dir's TensorBoard run, so TensorBoard's *Profile* tab
    shows it beside the curves.  Called before training and after every chunk with the global
    step reached; it only starts and stops the profiler (the runner marks every call's steps
    anyway).  The controller ends chunks at A - 1 and B (``marks``), so the range is exact for
    synchronous runners; a parameter-server chief traces its own process, to its chunk boundaries."""

    logdir: Path
    first: int
    last: int
    _on: bool = field(default=False, init=False)

    @property
    def marks(self) -> tuple[int, int]:
        """The global steps a chunk must end at."""
        return self.first - 1, self.last

    def __call__(self, step: int, logs: StepLogs | None = None) -> None:
        if not self._on and self.first - 1 <= step < self.last:
            tf.profiler.experimental.start(str(self.logdir))
            self._on = True
            log.info("profiling steps %d to %d into %s", step + 1, self.last, self.logdir)
        elif self._on and step >= self.last:
            self.close()

    def close(self) -> None:
        """Stop and write the trace (also when training ends inside the range)."""
        if self._on:
            self._on = False
            tf.profiler.experimental.stop()
            log.info("profile written under %s (TensorBoard: Profile tab)",
                     self.logdir / "plugins" / "profile")
