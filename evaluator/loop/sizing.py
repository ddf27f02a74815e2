"""``--max-eval-examples auto``: the largest evaluation that fits in half of the trainer's
checkpoint interval, at this evaluator's own rate — chosen once per run, from the first
evaluation's own batches, and kept for the run's every checkpoint (the same first N images:
metrics of one run stay comparable).  Kept in the work dir, so a restarted evaluator keeps it."""

from __future__ import annotations

import itertools
import json
import logging
import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from showtell.captioning.model.modeldir import run_started, saved_at
from showtell.common.files import write_atomic

log = logging.getLogger(__name__)

AUTO = "auto"
FRACTION = 0.5  # of the checkpoint interval; the rest for a backlog, restarts and METEOR


@dataclass(frozen=True)
class Size:
    images: int
    reason: str


def checkpoint_interval(save_times: list[float], run_started: float | None) -> tuple[float, str] | None:
    """Seconds between the trainer's saves: the median gap of the checkpoints on disk, or with
    one checkpoint the time from the run's start to it (which includes the trainer's start-up:
    an overestimate).  None when neither is known."""
    times = sorted(save_times)
    gaps = [b - a for a, b in itertools.pairwise(times) if b > a]
    if gaps:
        return statistics.median(gaps), f"median gap of {len(gaps) + 1} checkpoints"
    if times and run_started is not None and times[0] > run_started:
        return times[0] - run_started, "the run's start to its first checkpoint"
    return None


def choose(*, rate: float, interval: tuple[float, str] | None, split_images: int, batch_size: int) -> Size:
    """Whole batches (so a capped evaluation covers the same images as the full one's start),
    at least one, at most the split."""
    if interval is None:
        return Size(split_images, f"all {split_images} images: no checkpoint interval to fit yet")
    seconds, how = interval
    fits = int(rate * FRACTION * seconds)
    images = min(split_images, max(batch_size, fits // batch_size * batch_size))
    why = f"{rate:.1f} images/s × {FRACTION:g} × a checkpoint every {seconds:.0f} s ({how}) = {fits}"
    return Size(images, f"{images} of {split_images} images: {why}"
                        + (" (whole batches)" if images < split_images else ", so all of them"))


class RunSizes:
    """The size chosen for each run, in ``<work-dir>/auto-size.json``."""

    def __init__(self, path: Path) -> None:
        self.path = path
        try:
            self._sizes: dict[str, dict] = json.loads(path.read_text())
        except (OSError, ValueError):
            self._sizes = {}

    def for_run(self, run: str, named: Sequence[str],
                model_dir: str) -> int | Callable[[float | None, int, int], int]:
        """The run's size, or — at its first evaluation — how that evaluation decides it once it
        has timed its own batches: ``decide(rate, split_images, batch_size)``, which keeps it.
        ``named``: the checkpoints the state file names (their save times give the interval)."""
        known = self.get(run)
        if known is not None:
            return known

        def decide(rate: float | None, split_images: int, batch_size: int) -> int:
            if rate is None:
                size = Size(split_images, f"all {split_images} images: one batch, nothing to time")
            else:
                saves = [saved_at(p) for p in named]
                interval = checkpoint_interval(saves, run_started(model_dir))
                size = choose(rate=rate, interval=interval, split_images=split_images, batch_size=batch_size)
            self.set(run, size)
            return size.images

        return decide

    def get(self, run: str) -> int | None:
        entry = self._sizes.get(run)
        return int(entry["images"]) if entry else None

    def set(self, run: str, size: Size) -> None:
        self._sizes[run] = {"images": size.images, "reason": size.reason}
        log.info("--max-eval-examples auto for run %s: %s", run or "''", size.reason)
        try:
            write_atomic(self.path, json.dumps(self._sizes, indent=2) + "\n")
        except OSError as exc:  # kept in memory: a restart chooses again
            log.warning("%s: cannot record the chosen size (%s)", self.path, exc)
