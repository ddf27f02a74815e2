"""Notice new checkpoints: watch the ``checkpoint`` state file of a model dir.

TensorFlow publishes a checkpoint by *renaming* ``checkpoint.tmp<hex>`` onto ``checkpoint``
after the data files are complete, so the watcher reacts to moved events by their
destination, and to the state file being created or written (other writers, sync tools).
Only events that can mean new content wake the caller: watchdog 7 also reports a file being
opened and closed without a write, and the caller's own read of the state file produces
exactly those — reacting to them made an idle evaluator re-read the file in a loop, a whole
core for nothing.  The watcher only says "look again"; what to evaluate is decided from the
state file's contents by the caller.

Observers: inotify (watchdog's native observer, the default: ≈ms latency); watchdog's
polling observer with ``--poll-secs`` (NFS and other network filesystems where inotify
sees nothing); and a ``tf.io.gfile`` stat poller for URLs the OS cannot watch at all
(``gs://…``).  That poller is tested with ``file://`` URLs only: TensorFlow's GCS filesystem has its
endpoints compiled in, so no local server can stand in for a bucket, and none has been tried.
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
from collections.abc import Callable

import tensorflow as tf
from watchdog.events import (
    EVENT_TYPE_CLOSED,
    EVENT_TYPE_CREATED,
    EVENT_TYPE_MODIFIED,
    EVENT_TYPE_MOVED,
    FileClosedEvent,
    FileCreatedEvent,
    FileModifiedEvent,
    FileMovedEvent,
    FileSystemEvent,
    FileSystemEventHandler,
)
from watchdog.observers import Observer
from watchdog.observers.polling import PollingObserver

from showtell.common.files import is_url
from showtell.common.model_dir import ModelDir

log = logging.getLogger(__name__)
# Events that can carry new content.  Given to the observer as its filter too, so inotify
# is not even asked for open/close-no-write/access events (the kernel never wakes us).
CONTENT_EVENTS = (FileCreatedEvent, FileModifiedEvent, FileClosedEvent, FileMovedEvent)
_CONTENT_TYPES = frozenset({EVENT_TYPE_CREATED, EVENT_TYPE_MODIFIED, EVENT_TYPE_CLOSED, EVENT_TYPE_MOVED})


class _StateFileHandler(FileSystemEventHandler):
    def __init__(self, on_change: Callable[[], None], names: frozenset[str]) -> None:
        self.on_change = on_change
        self.names = names

    def on_any_event(self, event: FileSystemEvent) -> None:
        if event.event_type not in _CONTENT_TYPES or event.is_directory:
            return
        # A rename counts by its destination only: moving the state file away adds nothing.
        path = event.dest_path if event.event_type == EVENT_TYPE_MOVED else event.src_path
        if os.path.basename(os.fsdecode(path)) in self.names:
            self.on_change()


class CheckpointWatcher:
    """Calls ``on_change`` (from a background thread) whenever a watched file (the state file,
    and ``also`` — e.g. the trainer's finished marker) may have new content."""

    def __init__(self, model_dir: str, on_change: Callable[[], None], poll_secs: float | None = None,
                 also: tuple[str, ...] = ()) -> None:
        self.model_dir = model_dir
        self.on_change = on_change
        self.poll_secs = poll_secs
        self.names = frozenset((ModelDir.STATE_FILE, *also))
        self._stop = threading.Event()
        self.ready = threading.Event()  # the first look at the model dir is done
        self._observer = None
        self._thread: threading.Thread | None = None
        if is_url(model_dir):
            self.kind = "gfile-polling"
        else:
            self.kind = "polling" if poll_secs else "inotify"

    def start(self) -> None:
        """Watch from a thread of its own; ``ready`` is set once the first look is done."""
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
        """Watch the model dir — and keep watching it when it is removed and created again or
        replaced by a rename (a run started over): an inotify watch follows the old inode, so
        the directory's identity is checked every second (a ``stat``) and the watch renewed."""
        observer = PollingObserver(timeout=self.poll_secs) if self.poll_secs else Observer()
        observer.start()
        self._observer = observer
        handler = _StateFileHandler(self.on_change, self.names)
        identity: tuple[int, int] | None = None
        watch = None
        while not self._stop.is_set():
            current = _identity(self.model_dir)
            if current != identity:
                if watch is not None:
                    with contextlib.suppress(KeyError, OSError):  # its emitter may be gone already
                        observer.unschedule(watch)
                    watch = None
                if current is not None:
                    try:
                        watch = observer.schedule(handler, self.model_dir, recursive=False,
                                                  event_filter=list(CONTENT_EVENTS))
                    except OSError:
                        current = None  # gone again between the stat and the watch: look again
                    else:
                        log.info("%s %s (%s)", "watching" if identity is None else "the directory was "
                                 "replaced; watching the new", self.model_dir, self.kind)
                        self.on_change()  # whatever is there now
                elif identity is not None:
                    log.info("%s is gone; waiting for it to come back", self.model_dir)
                identity = current
            self.ready.set()
            self._stop.wait(min(self.poll_secs or 1.0, 1.0))

    def _gfile_poll(self) -> None:
        paths = [self.model_dir.rstrip("/") + "/" + name for name in sorted(self.names)]
        last: dict[str, tuple | None] = dict.fromkeys(paths)
        interval = self.poll_secs or 5.0
        log.info("polling %s every %.1f s (tf.io.gfile)", paths[0], interval)
        while not self._stop.is_set():
            changed = False
            for path in paths:
                try:
                    stat = tf.io.gfile.stat(path)
                    current = (stat.mtime_nsec, stat.length)
                except tf.errors.NotFoundError:
                    current = None
                except tf.errors.OpError as exc:
                    log.warning("cannot stat %s: %s", path, exc.message)
                    current = last[path]
                changed |= current != last[path] and current is not None
                last[path] = current
            if changed:
                self.on_change()
            self.ready.set()
            self._stop.wait(interval)


def _identity(path: str) -> tuple[int, int] | None:
    try:
        stat = os.stat(path)
    except OSError:
        return None
    return (stat.st_dev, stat.st_ino)
