"""Notice new checkpoints: watch the ``checkpoint`` state file of a model dir.

TensorFlow publishes a checkpoint by *renaming* ``checkpoint.tmp<hex>`` onto ``checkpoint``
after the data files are complete, so the watcher reacts to any event whose source or
destination is that file — moved events by their destination.  The watcher only says
"look again"; what to evaluate is decided from the state file's contents by the caller.

Observers: inotify (watchdog's native observer, the default: ≈ms latency); watchdog's
polling observer with ``--poll-secs`` (NFS and other network filesystems where inotify
sees nothing); and a ``tf.io.gfile`` stat poller for paths the OS cannot watch at all
(``gs://…``).
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Callable

import tensorflow as tf
from watchdog.events import FileSystemEvent, FileSystemEventHandler
from watchdog.observers import Observer
from watchdog.observers.polling import PollingObserver

log = logging.getLogger(__name__)
STATE_FILE = "checkpoint"


class _StateFileHandler(FileSystemEventHandler):
    def __init__(self, on_change: Callable[[], None]) -> None:
        self.on_change = on_change

    def on_any_event(self, event: FileSystemEvent) -> None:
        paths = [event.src_path, getattr(event, "dest_path", "")]
        if any(os.path.basename(os.fsdecode(p)) == STATE_FILE for p in paths if p):
            self.on_change()


class CheckpointWatcher:
    """Calls ``on_change`` (from a background thread) whenever the state file may have changed."""

    def __init__(self, model_dir: str, on_change: Callable[[], None], poll_secs: float | None = None):
        self.model_dir = model_dir
        self.on_change = on_change
        self.poll_secs = poll_secs
        self._stop = threading.Event()
        self._observer = None
        self._thread: threading.Thread | None = None
        if "://" in model_dir:
            self.kind = "gfile-polling"
        else:
            self.kind = "polling" if poll_secs else "inotify"

    def start(self) -> None:
        target = self._gfile_poll if self.kind == "gfile-polling" else self._watch_local
        self._thread = threading.Thread(target=target, name="checkpoint-watcher", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._observer is not None:
            self._observer.stop()
            self._observer.join(timeout=5)
        if self._thread is not None:
            self._thread.join(timeout=5)

    def _watch_local(self) -> None:
        # inotify needs the directory to exist: wait for the trainer to create it.
        while not os.path.isdir(self.model_dir):
            if self._stop.wait(0.5):
                return
        observer = PollingObserver(timeout=self.poll_secs) if self.poll_secs else Observer()
        observer.schedule(_StateFileHandler(self.on_change), self.model_dir, recursive=False)
        observer.start()
        self._observer = observer
        log.info("watching %s (%s)", self.model_dir, self.kind)
        self.on_change()  # checkpoints that were there before the watch started

    def _gfile_poll(self) -> None:
        path = self.model_dir.rstrip("/") + "/" + STATE_FILE
        last = None
        interval = self.poll_secs or 5.0
        log.info("polling %s every %.1f s (tf.io.gfile)", path, interval)
        while not self._stop.is_set():
            try:
                stat = tf.io.gfile.stat(path)
                current = (stat.mtime_nsec, stat.length)
            except tf.errors.NotFoundError:
                current = None
            except tf.errors.OpError as exc:
                log.warning("cannot stat %s: %s", path, exc.message)
                current = last
            if current != last and current is not None:
                self.on_change()
            last = current
            self._stop.wait(interval)
