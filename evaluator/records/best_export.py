"""``showtell evaluate --export-best METRIC[:max|min]``: keep SavedModels of the best checkpoints,
laid out for TensorFlow Serving.

After each successful evaluation that is strictly better on METRIC than the newest export, the
model just evaluated (still in memory) is exported to ``<work-dir>/export/best/<global step>/``
with a ``showtell-export.json`` naming step, metric, value and checkpoint.  A server watching
``export/best`` (TensorFlow Serving's ``--model_base_path``) switches to each new version by
itself; the last ``--export-keep`` versions stay, so a bad one can be rolled back.  A version
appears only by a rename once complete, and a restart reads the newest one's record, so only a
better evaluation ever adds a version.

``--export-best-when significant`` asks more than a better number: the new evaluation must beat
the exported one beyond noise — the paired-bootstrap interval of their difference on the same
images (``evaluator/scoring/bootstrap.py``) must exclude 0 in the better direction.  Fewer, surer
versions; an improvement smaller than the noise of the evaluation set is never exported, and two
evaluations of different images are never compared (the export stays).
"""

from __future__ import annotations

import json
import logging
import os
import shutil
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from showtell import metrics as registry
from showtell.captioning.model import export
from showtell.common.errors import ShowtellError
from showtell.evaluator.records.record import Record

log = logging.getLogger(__name__)


@dataclass
class BestExport:
    """Args:
      metric: the metric compared (a key of the evaluation's metrics).
      maximize: whether larger is better.
      base: ``<work-dir>/export/best``; each export is a numeric version directory in it.
      keep: how many versions stay (the oldest go first).
      when: ``better`` (the value) or ``significant`` (beyond noise: see the module).
      judge: ``significant``'s test, ``(export's info, record) → why it is not beyond noise``, empty
        when it is (``bootstrap.export_judge``: the scoring layer's, given by the daemon).
    """

    metric: str
    maximize: bool
    base: Path
    keep: int = 3
    when: str = "better"
    judge: Callable[[dict, Record], str] | None = None
    _info: dict | None = field(default=None, init=False, repr=False)
    _loaded: bool = field(default=False, init=False, repr=False)

    @classmethod
    def parse(cls, spec: str, base: Path, keep: int = 3, **options) -> BestExport:
        """``--export-best METRIC[:max|min]``, its versions under ``base``; ``options``: the
        fields after ``keep``."""
        metric, _, mode = spec.partition(":")
        if not metric or mode not in ("", "max", "min"):
            raise ShowtellError(f"--export-best {spec}: expected METRIC[:max|min], e.g. cider:max or "
                                "loss:min")
        known = registry.get(metric)
        if known is None:
            raise ShowtellError(f"--export-best {spec}: {registry.unknown_metric(metric)}")
        if options.get("when") == "significant" and not known.columns:
            with_interval = ", ".join(m.name for m in registry.metrics() if m.columns)
            raise ShowtellError(
                f"--export-best {spec} --export-best-when significant: {metric} has no interval (no "
                "per-image statistics), so no evaluation could beat the export beyond noise and it would "
                f"never move; use --export-best-when better, or a metric with one ({with_interval})")
        maximize = mode == "max" if mode else registry.higher_is_better(metric)
        return cls(metric, maximize, base, keep, **options)

    @property
    def mode(self) -> str:
        return "max" if self.maximize else "min"

    def path(self) -> Path | None:
        """The newest version's directory (what a server would be serving), or None."""
        info = self.current()
        return None if info is None else self.base / str(info["step"])

    def current(self) -> dict | None:
        """The newest version's record: read once (exports from an earlier run), then kept."""
        if not self._loaded:
            self._tidy()
            newest = export.resolve(self.base)
            try:
                self._info = json.loads((newest / export.INFO).read_text())
            except (OSError, ValueError):
                self._info = None
            self._loaded = True
        return self._info

    def describe(self) -> str:
        info = self.current()
        if info is None:
            return ""
        return f"{self.metric}:{self.mode} step {info['step']} ({info['value']:.6g}) -> {self.path()}"

    def consider(self, record: Record, model, vocab) -> bool:
        """Export ``model`` (evaluated as ``record``) as a new version if it beats the newest one."""
        if record.status != "ok" or self.metric not in record.metrics:
            return False
        value = record.metrics[self.metric]
        info = self.current()
        if info is not None:
            better = value > info["value"] if self.maximize else value < info["value"]
            if not better:
                return False
            if self.when == "significant":
                why_not = self.judge(info, record) if self.judge else "no per-image statistics are at hand"
                if why_not:
                    # Two evaluations that cannot be paired never will be: say how to move on.
                    unpaired = why_not.startswith("the two were not the same images")
                    (log.warning if unpaired else log.info)(
                        "--export-best-when significant: step %d's %s %.6g is better than the export's "
                        "(step %d, %.6g) but %s; the export stays%s", record.step, self.metric, value,
                        info["step"], info["value"], why_not,
                        " — evaluate the set the export was (same --data, --max-eval-examples), or "
                        "remove the export's versions to start anew" if unpaired else "")
                    return False
        info = {"step": record.step, "metric": self.metric, "mode": self.mode, "value": value,
                "checkpoint": record.checkpoint, "run": record.run}
        version = export.export(model, vocab, self.base / str(record.step), info)
        self._info = json.loads((version / export.INFO).read_text())
        log.info("exported step %d (%s %.6g) to %s", record.step, self.metric, value, version)
        for old in export.versions(self.base)[:-self.keep]:
            shutil.rmtree(self.base / str(old), ignore_errors=True)
            log.info("removed export version %d (--export-keep %d)", old, self.keep)
        return True

    def _tidy(self) -> None:
        """Before the first export of this process: a crashed export's temporary directory goes
        (it never had a numeric name), and a flat export from before versions becomes one."""
        if (self.base / export.INFO).is_file():  # the old layout: the SavedModel directly in base
            step = json.loads((self.base / export.INFO).read_text())["step"]
            flat = self.base.with_name(f".{self.base.name}.flat-{os.getpid()}")
            self.base.rename(flat)
            self.base.mkdir()
            flat.rename(self.base / str(step))
            log.info("moved the export of step %d into version directory %s", step, self.base / str(step))
        for leftover in self.base.glob(".*.tmp-*"):
            shutil.rmtree(leftover, ignore_errors=True)
            log.info("removed %s, an export cut short", leftover)
