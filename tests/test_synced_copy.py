"""The evaluator on "another machine" that sees the model dir through a sync: the state file
arrives before the checkpoint files it names (rsync's alphabetical order), and files land
while being written.  Every checkpoint must still be evaluated, under every observer."""

from __future__ import annotations

import shutil
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from showtell.v1 import metrics_pb2 as pb
from tests.helpers import TINY_MODEL, metrics_stub, start_evaluator, wait_for

pytestmark = pytest.mark.e2e
LAG_SECONDS = 2.0
HOLD_SECONDS = 120.0
RETRYING = "not arrived yet: retrying"


class BadOrderCopier(threading.Thread):
    """Mirrors ``src`` into ``dst`` the way ``rsync -a`` on a timer would, only slower: files in
    sorted order (``checkpoint`` before ``ckpt-*``, ``showtell-model.json`` after them), a lag
    after the state file, and data written straight onto the final name (not atomically).

    ``hold`` makes the first lag certain to be seen: after the first state file, the files it
    names wait until ``hold()`` is true (at most ``HOLD_SECONDS``) -- a busy machine could
    otherwise start an evaluator so late that every file is there when it first looks."""

    def __init__(self, src: Path, dst: Path, hold: Callable[[], bool] = lambda: True) -> None:
        super().__init__(daemon=True)
        self.src, self.dst, self.hold = src, dst, hold
        self.held = False
        self.stop = threading.Event()
        self.copied: dict[str, tuple[int, int]] = {}
        self.rounds = 0

    def run(self) -> None:
        while not self.stop.wait(0.5):
            if not self.src.is_dir():
                continue
            for path in sorted(self.src.iterdir()):  # by name, as rsync sends them
                if not path.is_file() or ".tmp" in path.name or "_temp" in path.name:
                    continue  # directories and the trainer's own temp files
                try:
                    stat = path.stat()
                except FileNotFoundError:
                    continue
                key = (stat.st_size, stat.st_mtime_ns)
                if self.copied.get(path.name) == key:
                    continue
                self.dst.mkdir(exist_ok=True)
                try:
                    shutil.copyfile(path, self.dst / path.name)
                except FileNotFoundError:
                    continue
                self.copied[path.name] = key
                if path.name == "checkpoint":
                    time.sleep(LAG_SECONDS)  # the files it names arrive later
                    if not self.held:
                        self.held = True
                        deadline = time.monotonic() + HOLD_SECONDS
                        while not self.hold() and time.monotonic() < deadline and not self.stop.wait(0.2):
                            pass
            self.rounds += 1


def test_a_synced_copy_gets_every_checkpoint_evaluated(tiny_data: Path, tmp_path: Path, procs):
    source, copy = tmp_path / "model", tmp_path / "copy"
    logs = [tmp_path / f"{name}.log" for name in ("inotify", "polling", "gfile-polling")]
    copier = BadOrderCopier(source, copy,
                            hold=lambda: all(log.is_file() and RETRYING in log.read_text() for log in logs))
    copier.start()
    evaluators = {}
    for name, location, extra in (("inotify", str(copy), ()), ("polling", str(copy), ("--poll-secs", "1")),
                                  ("gfile-polling", f"file://{copy}", ("--poll-secs", "1"))):
        evaluators[name] = start_evaluator(procs, location, tiny_data, tmp_path / f"w-{name}",
                                           tmp_path / f"{name}.log", "--policy", "all",
                                           "--max-eval-examples", "4", *extra)
    trainer = procs.start("train", "--data", str(tiny_data), "--model-dir", str(source), *TINY_MODEL,
                          "--steps", "8", "--save-every-steps", "2", "--save-every-secs", "0", "--keep", "10",
                          log=tmp_path / "train.log")
    try:
        assert trainer.wait(timeout=300) == 0, (tmp_path / "train.log").read_text()[-3000:]
        for name, (proc, port) in evaluators.items():
            channel, stub = metrics_stub(port)
            with channel:
                listed = lambda stub=stub: list(  # noqa: E731
                    stub.ListEvaluations(pb.ListEvaluationsRequest(), timeout=10).evaluations)
                wait_for(lambda listed=listed: len(listed()) >= 4, 300, f"{name}: four evaluations")
                records = listed()
            outcomes = [(e.global_step, pb.Evaluation.Status.Name(e.status).removeprefix("STATUS_"), e.reason)
                        for e in records]
            assert [o[:2] for o in outcomes] == [(2, "OK"), (4, "OK"), (6, "OK"), (8, "OK")], (name, outcomes)
            log = (tmp_path / f"{name}.log").read_text()
            assert RETRYING in log, name  # the lag was real and was waited out
            assert proc.poll() is None
    finally:
        copier.stop.set()
        copier.join(timeout=10)
