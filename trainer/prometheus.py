"""The trainer's figures for Prometheus (``--prometheus-port``, the chief's): where training is,
how fast it goes, whether it waits on its input, and how its checkpoints are saved — for
alerts like "no checkpoint for 30 minutes" that hold whether or not an evaluator runs."""

from __future__ import annotations

import time

from prometheus_client import CollectorRegistry, Counter, Gauge

from showtell.trainer.runners import StepLogs


class TrainerMetrics:
    """Gauges set by the trainer's own actions: after every chunk of steps (the global step), at
    each log line (``report``: throughput, input wait) and after each save (``saved``)."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.step = Gauge("showtell_trainer_step", "The global step reached.", registry=registry)
        self.examples = Gauge("showtell_trainer_examples_per_second",
                              "Training examples per second over the last log interval.", registry=registry)
        self.input_wait = Gauge("showtell_trainer_input_wait_ratio",
                                "Share of the last log interval spent waiting for input (not measured inside "
                                "traced multi-step loops).", registry=registry)
        self.save_seconds = Gauge("showtell_trainer_last_save_duration_seconds",
                                  "How long the last checkpoint took to write.", registry=registry)
        self.saved_at = Gauge("showtell_trainer_last_save_timestamp_seconds",
                              "When the last checkpoint was written (Unix time).", registry=registry)
        self.saves = Counter("showtell_trainer_checkpoints_saved", "Checkpoints written by this process.",
                             registry=registry)

    def __call__(self, step: int, logs: StepLogs | None = None) -> None:
        self.step.set(step)

    def report(self, values: dict[str, float]) -> None:
        """One log line's figures (``StepReport``)."""
        self.examples.set(values["examples_per_sec"])
        if "input_wait_fraction" in values:
            self.input_wait.set(values["input_wait_fraction"])

    def saved(self, step: int, seconds: float) -> None:
        self.step.set(step)
        self.save_seconds.set(seconds)
        self.saved_at.set(time.time())
        self.saves.inc()
