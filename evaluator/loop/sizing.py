"""``--max-eval-examples auto``: the largest evaluation that fits in half of the trainer's
checkpoint interval, at this evaluator's own rate — chosen once per run and kind of evaluation,
from the first such evaluation's own batches, and kept for the run's every such checkpoint (the
same first N images: metrics of one run stay comparable).  Kept in the work dir, so a restarted
evaluator keeps it.

Two kinds, because their cost differs fivefold: an evaluation whose encoder features are there
to read (``reused``: the checkpoint's encoder was seen before — a frozen-encoder phase) costs the
decoder and the scoring; one that computes them (``computed``: a new encoder at each checkpoint,
or the first of a phase) costs Inception as well.  So a frozen-encoder phase evaluates more
images in the same time; the images beyond what the first evaluation computed are computed once,
by the second, and read back from then on."""

from __future__ import annotations

import itertools
import json
import logging
import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from showtell.common.files import write_atomic
from showtell.common.model_dir import ModelDir
from showtell.evaluator.loop.protocol import COMPUTED

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
    """The sizes chosen for each run, in ``<work-dir>/auto-size.json``: ``{run: {images, reason,
    reused: {images, reason}}}`` (the computed kind's at the top, as before kinds)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        try:
            self._sizes: dict[str, dict] = json.loads(path.read_text())
        except (OSError, ValueError):
            self._sizes = {}

    def for_run(self, run: str, named: Sequence[str], model_dir: ModelDir) -> Sizer:
        """The run's sizes (``Sizer``): known ones as they are, an unknown one decided by the first
        evaluation of its kind once it has timed its own batches.  ``named``: the checkpoints the
        state file names (their save times give the interval)."""
        return Sizer(self, run, named, model_dir)

    def get(self, run: str, kind: str = COMPUTED) -> int | None:
        entry = self._sizes.get(run) or {}
        entry = entry if kind == COMPUTED else entry.get(kind) or {}
        return int(entry["images"]) if "images" in entry else None

    def set(self, run: str, size: Size, kind: str = COMPUTED) -> None:
        entry = self._sizes.setdefault(run, {})
        chosen = {"images": size.images, "reason": size.reason}
        if kind == COMPUTED:
            entry.update(chosen)
        else:
            entry[kind] = chosen
        log.info("--max-eval-examples auto for run %s (features %s): %s", run or "''", kind, size.reason)
        try:
            write_atomic(self.path, json.dumps(self._sizes, indent=2) + "\n")
        except OSError as exc:  # kept in memory: a restart chooses again
            log.warning("%s: cannot record the chosen size (%s)", self.path, exc)


class Sizer:
    """One run's ``--max-eval-examples auto``: ``known(kind)``, or ``sizer(rate, split_images,
    batch_size, kind)`` — the known size, or the one this rate fits, kept."""

    def __init__(self, sizes: RunSizes, run: str, named: Sequence[str], model_dir: ModelDir) -> None:
        self.sizes, self.run, self.named, self.model_dir = sizes, run, list(named), model_dir

    def known(self, kind: str = COMPUTED) -> int | None:
        return self.sizes.get(self.run, kind)

    def __call__(self, rate: float | None, split_images: int, batch_size: int, kind: str = COMPUTED) -> int:
        known = self.known(kind)
        if known is not None:
            return known
        if rate is None:
            size = Size(split_images, f"all {split_images} images: one batch, nothing to time")
        else:
            saves = [ModelDir.saved_at(p) for p in self.named]
            interval = checkpoint_interval(saves, self.model_dir.started())
            size = choose(rate=rate, interval=interval, split_images=split_images, batch_size=batch_size)
        self.sizes.set(self.run, size, kind)
        return size.images
