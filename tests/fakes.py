"""Fakes shared by the in-process tests, in the style of Orbit's ``controller_test``: a clock
moved by hand, a checkpoint evaluator with no TensorFlow model, a trainer's model dir as files,
and the evaluation loop built on them with the real store and recorder."""

from __future__ import annotations

import json
from pathlib import Path

from showtell.common.errors import ShowtellError
from showtell.common.model_dir import ModelDir
from showtell.evaluator.config import Finish
from showtell.evaluator.loop.controller import EvalController
from showtell.evaluator.loop.protocol import EvalResult
from showtell.evaluator.loop.sizing import RunSizes
from showtell.evaluator.records.recorder import Action, Recorder
from showtell.evaluator.records.store import Store
from showtell.evaluator.records.workdir import WorkDir


class FakeClock:
    """Monotonic seconds a test moves by hand."""

    def __init__(self, now: float = 0.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


class FakeEvaluator:
    """Evaluates instantly; ``broken`` steps fail as a corrupt checkpoint does; with a ``rate``
    (images/s) it answers ``--max-eval-examples auto``'s question and notes each size asked."""

    model = vocab = None

    def __init__(self, broken: tuple[int, ...] = (), batches: list[tuple[int, float]] = (),
                 rate: float | None = None) -> None:
        """``batches``: (images done, seconds it took) reported as an evaluation's progress."""
        self.broken, self.calls, self.opened, self.batches = broken, [], False, list(batches)
        self.rate, self.asked = rate, []  # the sizes asked for (``images``), decided at ``rate``
        self.kind = "computed"  # of the evaluations it is asked to size: features computed or reused
        self.clock: FakeClock | None = None
        self.pins: Path | None = None  # the work dir's pins: every evaluation must read from there
        self.during: list = []  # what ``watch`` returned after each batch
        self.watch = lambda: None

    def open(self) -> None:
        self.opened = True

    def evaluate(self, path: str, step: int | None = None, progress=None, images=None) -> EvalResult:
        # The pinned copy, not the trainer's original (which --keep may delete mid-read): under
        # the pins, with the original's files (a hard link: the same inode).
        pinned = Path(path + ".index")
        assert self.pins is not None and pinned.parent.is_relative_to(self.pins), f"{path} is not pinned"
        assert pinned.exists() and pinned.stat().st_nlink >= 2, f"{path} is not a link to the original"
        self.calls.append(step)
        self.asked.append(images(self.rate, 1000, 50, self.kind) if callable(images) else images)
        for done, seconds in self.batches:
            self.clock.now += seconds
            progress(done, self.batches[-1][0])
            self.during.append(self.watch())
        if step in self.broken:
            raise ShowtellError(f"{path}: cannot restore (corrupt); the checkpoint is corrupt")
        return EvalResult(step=step, checkpoint=path, metrics={"loss": 10.0 / step}, examples=4, seconds=0.01)


class FakeModelDir:
    """A trainer's model dir as the evaluator sees it: checkpoint files and the state file."""

    def __init__(self, root: Path, run: str = "run-1") -> None:
        self.root = root
        root.mkdir(parents=True, exist_ok=True)
        (root / ModelDir.METADATA).write_text(json.dumps({"run_id": run}))

    def prefix(self, step: int) -> str:
        return str(self.root / f"ckpt-{step}")

    def save(self, step: int, data: bool = True) -> None:
        (self.root / f"ckpt-{step}.index").write_bytes(b"index")
        if data:
            self.data(step)

    def data(self, step: int) -> None:
        (self.root / f"ckpt-{step}.data-00000-of-00001").write_bytes(b"data")

    def delete(self, step: int) -> None:
        for path in self.root.glob(f"ckpt-{step}.*"):
            path.unlink()

    def name(self, *steps: int) -> None:
        lines = [f'model_checkpoint_path: "ckpt-{steps[-1]}"'] if steps else []
        lines += [f'all_model_checkpoint_paths: "ckpt-{s}"' for s in steps]
        (self.root / "checkpoint").write_text("\n".join(lines) + "\n")


def build(tmp_path: Path, policy: str = "all", finish: Finish | None = None,
          evaluator: FakeEvaluator | None = None, sizes: RunSizes | None = None,
          actions: list[Action] | None = None) -> tuple[EvalController, FakeModelDir, Store, FakeClock]:
    model, work, clock = FakeModelDir(tmp_path / "model"), WorkDir(tmp_path / "work"), FakeClock(1000.0)
    work.root.mkdir(exist_ok=True)
    store = Store(work.history)
    controller = EvalController(model_dir=ModelDir(model.root), evaluator=evaluator or FakeEvaluator(),
                                store=store,
                                recorder=Recorder(store=store, work_root=work.root), pins=work.pins,
                                policy=policy, actions=actions or [], finish=finish, arrival_timeout=60.0,
                                sizes=sizes, clock=clock)
    controller.evaluator.clock, controller.evaluator.pins = clock, work.pins
    return controller, model, store, clock


def history(store: Store) -> list[tuple[int, str]]:
    return [(r.step, r.status) for r in sorted(store.after(-1), key=lambda r: r.rowid)]
