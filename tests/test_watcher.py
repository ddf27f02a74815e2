"""The checkpoint watcher in-process: what wakes it, and what must not."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

from showtell.captioning.model.restoring import read_state
from showtell.common.errors import ShowtellError
from showtell.common.model_dir import ModelDir
from showtell.evaluator.loop.watcher import CheckpointWatcher

STATE = 'model_checkpoint_path: "ckpt-2"\nall_model_checkpoint_paths: "ckpt-2"\n'


class Counter:
    def __init__(self) -> None:
        self.calls = 0
        self.event = threading.Event()

    def __call__(self) -> None:
        self.calls += 1
        self.event.set()

    def settle(self, seconds: float = 0.5) -> int:
        time.sleep(seconds)
        return self.calls


@pytest.mark.parametrize("poll_secs", [None, 0.2], ids=["inotify", "polling"])
def test_reading_the_state_file_wakes_nobody_and_a_rename_onto_it_does(tmp_path: Path, poll_secs):
    (tmp_path / "checkpoint").write_text(STATE)
    counter = Counter()
    watcher = CheckpointWatcher(str(tmp_path), counter, poll_secs)
    watcher.start()
    try:
        assert counter.event.wait(10)  # the initial look at what is already there
        baseline = counter.settle()
        for _ in range(200):  # the evaluator's own reads (open, read, close-no-write)
            assert read_state(ModelDir(tmp_path)) == [str(tmp_path / "ckpt-2")]
        (tmp_path / "ckpt-2.index").write_bytes(b"x")  # other files: not the state file
        assert counter.settle(1.0) == baseline

        tmp = tmp_path / "checkpoint.tmp1234"  # how TensorFlow publishes a checkpoint
        tmp.write_text(STATE.replace("ckpt-2", "ckpt-4"))
        counter.event.clear()
        tmp.replace(tmp_path / "checkpoint")
        assert counter.event.wait(5)
        assert counter.calls > baseline
    finally:
        watcher.stop()


def test_also_watched_names_wake_it(tmp_path: Path):
    counter = Counter()
    watcher = CheckpointWatcher(str(tmp_path), counter, also=("showtell-finished.json",))
    watcher.start()
    try:
        assert counter.event.wait(10)
        baseline = counter.settle()
        counter.event.clear()
        (tmp_path / "showtell-finished.json.tmp").write_text("{}")
        (tmp_path / "showtell-finished.json.tmp").replace(tmp_path / "showtell-finished.json")
        assert counter.event.wait(5) and counter.calls > baseline
    finally:
        watcher.stop()


def test_an_empty_state_file_is_being_written_not_a_model_dir_without_checkpoints(tmp_path: Path):
    """A copy written in place is empty for a moment: read as naming nothing, every checkpoint the
    evaluator saw would be recorded deleted (the synced-copy test caught that)."""
    (tmp_path / "checkpoint").write_text("")
    with pytest.raises(ShowtellError, match="empty checkpoint state file"):
        read_state(ModelDir(tmp_path))
    (tmp_path / "checkpoint").write_text(STATE)
    assert read_state(ModelDir(tmp_path)) == [str(tmp_path / "ckpt-2")]
