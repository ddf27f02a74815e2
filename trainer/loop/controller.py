"""The outer loop — one for every strategy, in the shape of Orbit's ``Controller``.

The controller asks its runner for a chunk of steps (``runner.train(n)``), then, between
chunks, calls its actions (progress report, histograms) with the chunk's ``StepLogs``, saves
a checkpoint when the schedule says so, and returns when the global step reaches its goal or
a stop is requested.  Chunks end on multiples of the log / save / histogram intervals, so a
runner that schedules many steps at once (parameter servers) still reports on them.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Protocol

log = logging.getLogger(__name__)

ANOTHER_WORKER = "another worker's stop"


@dataclass
class StepLogs:
    """What ``train(num_steps)`` did: one loss per step and where the time went."""

    losses: list[float] = field(default_factory=list)
    input_seconds: float = 0.0  # waiting for batches (only when ``input_measured``)
    compute_seconds: float = 0.0
    examples: int = 0  # global examples consumed
    traced: bool = False  # the first call: its time is graph tracing, not throughput
    input_measured: bool = True  # False: the batches were read inside the traced loop, untimed

    @property
    def steps(self) -> int:
        return len(self.losses)


Action = Callable[[int, StepLogs], None]  # (global step after the chunk, the chunk's logs)


class Runner(Protocol):
    """Runs chunks of steps (``runners.py``): what the controller needs of one, nothing more."""

    steps_per_loop: int

    def train(self, num_steps: int) -> StepLogs: ...

    def agree(self, flags: list[bool]) -> list[bool]: ...


class Saver(Protocol):
    """Writes a checkpoint now (``checkpoints.Checkpoints``; a pretraining's encoder preview)."""

    def save(self) -> str: ...


class Schedule(Protocol):
    """When a save is due (``checkpoints.SaveSchedule``)."""

    def start(self, step: int) -> None: ...

    def due(self, step: int) -> bool: ...

    def saved(self, step: int) -> None: ...


class Stop(Protocol):
    """A stop requested (``signals.StopRequest``): true once requested, with its reason."""

    reason: str | None

    def __bool__(self) -> bool: ...


class Controller:
    def __init__(self, *, runner: Runner, global_step: Callable[[], int], checkpoints: Saver,
                 save_schedule: Schedule, stop: Stop, actions: Sequence[Action] = (),
                 boundaries: Sequence[int] = (), marks: Sequence[int] = ()) -> None:
        """
        Args:
          runner: runs chunks of steps (``showtell.trainer.loop.runners``).
          global_step: reads the global step (restored from a checkpoint, advanced by steps).
          checkpoints: saved when ``save_schedule`` is due; the final save is the caller's.
          save_schedule: every K steps and/or S seconds.
          stop: checked between chunks; signals, the time limit and early stop raise it.
          actions: called after every chunk with (global step, that chunk's logs).
          boundaries: step intervals a chunk must not cross (log, save, histogram intervals),
            so that the actions see each interval end; chunks are at most
            ``runner.steps_per_loop`` steps, the first is one step (graph tracing).
          marks: global steps a chunk must end at (a profiled range's ends).
        """
        self.runner, self.global_step = runner, global_step
        self.checkpoints, self.save_schedule, self.stop = checkpoints, save_schedule, stop
        self.actions, self.boundaries = list(actions), [b for b in boundaries if b]
        self.marks = sorted(set(marks))

    def train(self, steps: int) -> str | None:
        """Train until the global step reaches ``steps``; the stop reason if stopped before."""
        step = self.global_step()
        self.save_schedule.start(step)
        if self.runner.agree([bool(self.stop)])[0]:
            return self.stop.reason or ANOTHER_WORKER
        first = True
        while step < steps:
            chunk = 1 if first else self._chunk(step, steps)
            first = False
            logs = self.runner.train(chunk)
            before, step = step, self.global_step()
            log.debug("steps %d → %d in one call of %d", before, step, chunk)
            for action in self.actions:
                action(step, logs)
            halt, save = self.runner.agree([bool(self.stop), self.save_schedule.due(step)])
            if save:
                self.checkpoints.save()
                self.save_schedule.saved(step)
            if halt and step < steps:
                return self.stop.reason or ANOTHER_WORKER
        return None

    def _chunk(self, step: int, steps: int) -> int:
        """Up to ``steps_per_loop`` steps, ending at the next interval boundary or mark at the latest."""
        chunk = min(steps - step, self.runner.steps_per_loop)
        for every in self.boundaries:
            chunk = min(chunk, every - step % every)
        for mark in self.marks:
            if mark > step:
                chunk = min(chunk, mark - step)
        return max(chunk, 1)
