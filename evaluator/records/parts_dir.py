"""``--parts-dir``: where the parts of a split evaluation (``--shard I/N``) meet.

Each part publishes its result for a checkpoint — its images' captions and losses, or why it
failed or skipped — as one file, written whole under a hidden name and renamed into place, so a
reader sees a part completely or not at all; then it rewrites ``I-of-N.published``, the one
file per part the merger's watcher wakes on (inotify, polling or a gfile poll, as for the model
dir).  Part 0 merges a checkpoint once every part's file is in, records it, and leaves a
``.merged`` marker in place of its directory.

Nothing here is a queue or a lock: the split is fixed (``plan.json``, written by the first part
to start and checked by every other), a part's files are its alone, and a restarted part
re-evaluates what its own history lacks and publishes it again — the same images, so a file
replaced is the same result.  A merged record is written once: the merger checks its history
before merging.
"""

from __future__ import annotations

import contextlib
import json
import logging
import re
import shutil
from dataclasses import dataclass
from pathlib import Path

from showtell.common.errors import ShowtellError
from showtell.common.files import write_atomic
from showtell.evaluator.records import parts
from showtell.evaluator.records.record import Record

log = logging.getLogger(__name__)

PLAN = "plan.json"
CHECKPOINTS = "checkpoints"
MERGED = ".merged"


@dataclass(frozen=True)
class Group:
    """One checkpoint's parts: the directory they are published in."""

    run: str
    step: int
    name: str  # the checkpoint's file name (parts may mount the model dir at different paths)
    path: Path


@dataclass(frozen=True)
class Published:
    """One part's file read back: the record's fields and, when it is ok, each set's part."""

    header: dict
    sets: list[parts.SetPart]


def _safe(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]", "_", text) or "_"


class PartsDir:
    def __init__(self, root: Path, index: int, count: int, plan: dict) -> None:
        """Part ``index`` of ``count``'s view.  ``plan``: what every part must agree on (the split,
        the sets, the beam) — the first part to start writes it, a part started otherwise is
        refused (``check_plan``)."""
        self.root, self.index, self.count = Path(root), index, count
        self.plan = {"parts": count, **plan}

    @property
    def signals(self) -> tuple[str, ...]:
        """The files whose rewrite says a part published something (what the merger watches)."""
        return tuple(self._signal(i) for i in range(self.count))

    def _signal(self, index: int) -> str:
        return f"{index}-of-{self.count}.published"

    def check_plan(self) -> None:
        """Write the plan if none is there; refuse one line if it differs from this part's."""
        path = self.root / PLAN
        try:
            self.root.mkdir(parents=True, exist_ok=True)
            with open(path, "x") as f:  # the first part to start writes it; never replaced
                json.dump(self.plan, f, indent=1, sort_keys=True)
            return
        except FileExistsError:
            pass
        except OSError as exc:
            raise ShowtellError(f"--parts-dir {self.root}: cannot write {PLAN} ({exc.strerror}); give a "
                                "directory every part can write") from exc
        try:
            found = json.loads(path.read_text())
        except (OSError, ValueError) as exc:
            raise ShowtellError(f"--parts-dir {self.root}: {PLAN} is unreadable ({exc}); remove it and start "
                                "the parts again") from exc
        if found != self.plan:
            differ = sorted(k for k in set(found) | set(self.plan) if found.get(k) != self.plan.get(k))
            what = ", ".join(f"{k} {found.get(k)!r} (this part: {self.plan.get(k)!r})" for k in differ)
            raise ShowtellError(
                f"--shard {self.index}/{self.count}: --parts-dir {self.root} is a split evaluation's with "
                f"{what}; start every part the same way, or give a new --parts-dir (a changed split starts "
                "afresh)")

    def _group_path(self, run: str, step: int, checkpoint: str) -> Path:
        return self.root / CHECKPOINTS / f"run-{_safe(run)}" / f"{step}-{_safe(Path(checkpoint).name)}"

    def publish(self, record: Record) -> None:
        """This part's ``record`` of a checkpoint, as its part file; then its signal.  Raises
        ``OSError`` (the caller retries, as for the history's own trouble)."""
        header = {"status": record.status, "reason": record.reason, "run": record.run, "step": record.step,
                  "checkpoint": record.checkpoint, "checkpoint_mtime": record.checkpoint_mtime,
                  "evaluated_at": record.evaluated_at, "eval_seconds": record.eval_seconds,
                  "num_examples": record.num_examples, "train_seconds": record.train_seconds,
                  "shard": [self.index, self.count]}
        sets = parts.from_bytes(record.image_stats)[1] if record.image_stats else []
        group = self._group_path(record.run, record.step, record.checkpoint)
        if group.with_name(group.name + MERGED).exists():
            return  # merged already (this part evaluated it again after a restart)
        group.mkdir(parents=True, exist_ok=True)
        write_atomic(group / f"{self.index}-of-{self.count}.part", parts.to_bytes(header, sets))
        write_atomic(self.root / self._signal(self.index),
                     json.dumps({"run": record.run, "step": record.step}).encode())

    def groups(self) -> list[Group]:
        """Every checkpoint with a part published and not merged yet, by step."""
        found = []
        for run_dir in sorted((self.root / CHECKPOINTS).glob("run-*")):
            for path in run_dir.iterdir():
                step, dash, name = path.name.partition("-")
                if path.is_dir() and dash and step.isdigit():
                    found.append(Group(run_dir.name.removeprefix("run-"), int(step), name, path))
        return sorted(found, key=lambda g: (g.step, g.name, g.run))

    def missing(self, group: Group) -> list[int]:
        """The parts not published yet for ``group``."""
        return [i for i in range(self.count) if not (group.path / f"{i}-of-{self.count}.part").exists()]

    def passed(self, index: int, group: Group) -> bool:
        """Whether part ``index`` has published a later checkpoint of ``group``'s run: parts go in
        step order, so it never will publish ``group``'s (deleted by ``--keep`` while it was down)."""
        try:
            last = json.loads((self.root / self._signal(index)).read_text())
        except (OSError, ValueError):
            return False
        return _safe(str(last.get("run", ""))) == group.run and int(last.get("step", -1)) > group.step

    def read(self, group: Group) -> list[Published]:
        """Every part's file of a complete ``group``, part 0 first; ``ValueError`` names a bad one."""
        out = []
        for i in range(self.count):
            path = group.path / f"{i}-of-{self.count}.part"
            try:
                header, sets = parts.from_bytes(path.read_bytes())
            except ValueError as exc:
                raise ValueError(f"{path}: {exc}") from exc
            out.append(Published(header, sets))
        return out

    def read_any(self, group: Group) -> dict:
        """The header of a part file ``group`` holds (the first published): which checkpoint it is."""
        for path in sorted(group.path.glob(f"*-of-{self.count}.part")):
            with contextlib.suppress(ValueError, OSError):
                return parts.from_bytes(path.read_bytes())[0]
        raise ValueError(f"{group.path}: no readable part file")

    def merged(self, group: Group) -> None:
        """``group`` is recorded: its files go, a marker stays (a part evaluating it again after a
        restart does not publish it again)."""
        write_atomic(group.path.with_name(group.path.name + MERGED), b"")
        shutil.rmtree(group.path, ignore_errors=True)
