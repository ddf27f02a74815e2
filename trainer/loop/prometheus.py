"""The trainer's figures for Prometheus (``--prometheus-port``, the chief's): where training is,
how fast it goes, whether it waits on its input, and how its checkpoints are saved — for
alerts like "no checkpoint for 30 minutes" that hold whether or not an evaluator runs."""

from __future__ import annotations

import time

from prometheus_client import CollectorRegistry, Counter, Gauge, Info

from showtell.trainer.loop.controller import StepLogs


class TrainerFigures:
    """Set by the trainer's own actions: after every chunk of steps (the global step, the examples
    counted), at each log line (``report``: input wait) and after each save (``saved``).
    Throughput is a counter (``showtell_trainer_examples_total``): ``rate()`` over any window is
    Prometheus' job, not a gauge of the last log interval's."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.step = Gauge("showtell_trainer_step", "The global step reached.", registry=registry)
        self.examples = Counter("showtell_trainer_examples", "Training examples (images with a caption each) "
                                "processed by the steps of this process' runs; rate() is the throughput.",
                                registry=registry)
        self.input_wait = Gauge("showtell_trainer_input_wait_ratio",
                                "Share of the last log interval spent waiting for input (not measured inside "
                                "traced multi-step loops).", registry=registry)
        self.save_seconds = Gauge("showtell_trainer_last_save_duration_seconds",
                                  "How long the last checkpoint took to write.", registry=registry)
        self.saved_at = Gauge("showtell_trainer_last_save_timestamp_seconds",
                              "When the last checkpoint was written (Unix time).", registry=registry)
        self.saves = Counter("showtell_trainer_checkpoints_saved", "Checkpoints written by this process.",
                             registry=registry)
        self.run = Info("showtell_trainer_run", "The training run this process trains now: one series, "
                        "its label changes with the run.", registry=registry)
        self._last_step: int | None = None
        self._batch = 0

    def start(self, step: int, global_batch: int, run_id: str) -> None:
        """A run (re)starts at ``step``: examples count from here, ``global_batch`` per step."""
        self._last_step, self._batch = step, global_batch
        self.run.info({"run_id": run_id})
        self.step.set(step)

    def __call__(self, step: int, logs: StepLogs | None = None) -> None:
        if self._last_step is not None and step > self._last_step:
            self.examples.inc((step - self._last_step) * self._batch)
        self._last_step = step
        self.step.set(step)

    def report(self, values: dict[str, float]) -> None:
        """One log line's figures (``StepReport``)."""
        if "input_wait_fraction" in values:
            self.input_wait.set(values["input_wait_fraction"])

    def saved(self, step: int, seconds: float) -> None:
        self.step.set(step)
        self.save_seconds.set(seconds)
        self.saved_at.set(time.time())
        self.saves.inc()
