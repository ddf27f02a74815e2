"""The evaluator's own directory (``--work-dir``): one owner for its layout, so the CLI, the
daemon, the runner and the demo name its files the same way.  It lives beside the model dir,
never inside it — an evaluator works with the trainer's directory read-only."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from showtell.common.files import is_url


@dataclass(frozen=True)
class WorkDir:
    root: Path

    @classmethod
    def beside(cls, model_dir: str) -> WorkDir:
        """The default: ``runs/m`` → ``runs/m-eval``; for a URL model dir, ``./showtell-eval``."""
        if is_url(model_dir):
            return cls(Path.cwd() / "showtell-eval")
        return cls(Path(f"{Path(model_dir)}-eval"))

    @property
    def history(self) -> Path:
        """The evaluation history (``evaluator/records/store.py``)."""
        return self.root / "evaluations.sqlite"

    @property
    def own_parts(self) -> Path:
        """A part of a split evaluation (``--shard I/N``): its history of its own parts, what it has
        published (part 0's merged records are in ``history``)."""
        return self.root / "parts.sqlite"

    @property
    def pins(self) -> Path:
        """Hard links (or copies) of the checkpoints being evaluated, so ``--keep`` cannot delete
        them mid-read (``evaluator/loop/pinning.py``)."""
        return self.root / "pinned"

    @property
    def summaries(self) -> Path:
        """TensorBoard's evaluation runs, one directory per training run (``eval/<run id>``)."""
        return self.root / "eval"

    @property
    def exports(self) -> Path:
        """``--export-best``'s SavedModel versions (TensorFlow Serving's layout)."""
        return self.root / "export" / "best"

    def exports_of(self, eval_set: str) -> Path:
        """An evaluation set's best exports: the default set's are ``exports``; another set's,
        ``export/best-<set>`` beside them."""
        from showtell.api.contract import DEFAULT_SET

        return self.exports if eval_set == DEFAULT_SET else self.exports.with_name(f"best-{eval_set}")

    @property
    def tracking(self) -> Path:
        """How far the history has been sent to MLflow (``evaluator/records/tracking.py``)."""
        return self.root / "tracking.json"

    @property
    def features(self) -> Path:
        """Each evaluation set's encoder features, per encoder (``evaluator/scoring/features.py``)."""
        return self.root / "features"

    @property
    def auto_sizes(self) -> Path:
        """``--max-eval-examples auto``'s size per run (``evaluator/loop/sizing.py``)."""
        return self.root / "auto-size.json"
