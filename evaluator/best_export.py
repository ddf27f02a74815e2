"""``showtell evaluate --export-best METRIC[:max|min]``: keep a SavedModel of the best checkpoint.

After each successful evaluation, if it is strictly better on METRIC than the current export,
the model just evaluated (still in memory) is exported to ``<work-dir>/export/best`` with a
``showtell-export.json`` naming step, metric, value and checkpoint.  A restart reads that file,
so only a better evaluation ever replaces the export.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass, field
from pathlib import Path

from showtell.captioning.model import export
from showtell.common.errors import ShowtellError
from showtell.evaluator.metric_names import LOWER_IS_BETTER
from showtell.evaluator.store import Record

log = logging.getLogger(__name__)


@dataclass
class BestExport:
    metric: str
    maximize: bool
    directory: Path
    _info: dict | None = field(default=None, init=False, repr=False)
    _loaded: bool = field(default=False, init=False, repr=False)

    @classmethod
    def parse(cls, spec: str, work_dir: Path) -> BestExport:
        metric, _, mode = spec.partition(":")
        if not metric or mode not in ("", "max", "min"):
            raise ShowtellError(f"--export-best {spec}: expected METRIC[:max|min], e.g. cider:max or "
                                "loss:min")
        maximize = mode == "max" if mode else metric not in LOWER_IS_BETTER
        return cls(metric, maximize, work_dir / "export" / "best")

    @property
    def mode(self) -> str:
        return "max" if self.maximize else "min"

    def current(self) -> dict | None:
        """The current export's record: read once (an export from an earlier run), then kept."""
        if not self._loaded:
            try:
                self._info = json.loads((self.directory / export.INFO).read_text())
            except (OSError, ValueError):
                self._info = None
            self._loaded = True
        return self._info

    def describe(self) -> str:
        info = self.current()
        if info is None:
            return ""
        return f"{self.metric}:{self.mode} step {info['step']} ({info['value']:.6g}) -> {self.directory}"

    def consider(self, record: Record, model, vocab) -> bool:
        """Export ``model`` (evaluated as ``record``) if it beats the current export."""
        if record.status != "ok" or self.metric not in record.metrics:
            return False
        value = record.metrics[self.metric]
        info = self.current()
        if info is not None:
            better = value > info["value"] if self.maximize else value < info["value"]
            if not better:
                return False
        info = {"step": record.step, "metric": self.metric, "mode": self.mode, "value": value,
                "checkpoint": record.checkpoint}
        export.export(model, vocab, self.directory, info)
        self._info = json.loads((self.directory / export.INFO).read_text())
        log.info("exported step %d (%s %.6g) to %s", record.step, self.metric, value, self.directory)
        return True
