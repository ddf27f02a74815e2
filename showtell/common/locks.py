"""One writer per directory: a trainer per model dir, an evaluator per work dir.

Two trainers on one model dir interleave checkpoints and delete each other's (``--keep``); two
evaluators on one work dir race on the history and the exports.  An advisory ``flock`` on a
file in the directory says who holds it: the kernel releases it when the holder exits, however it
exits (a SIGKILL, a crash, a container stop), so a stale lock cannot keep a restart out.  The file
names the holder (PID, host, role) for the one-line refusal.  ``gs://``-style directories cannot be
locked this way (no POSIX locks in object stores): there the lock is skipped, as
``docs/guide.md`` says (tested with a ``file://`` URL; no real bucket has been tried).
"""

from __future__ import annotations

import fcntl
import json
import logging
import os
import socket
import time
from pathlib import Path

from showtell.common.errors import ShowtellError
from showtell.common.files import is_url

log = logging.getLogger(__name__)

LOCK_FILE = ".showtell-{role}.lock"


class DirectoryBusy(ShowtellError):
    """Another live process holds the directory."""


class DirectoryLock:
    """Held from ``acquire`` until ``release`` or the process's end.

    Args:
      directory: the directory written (created if missing).
      role: ``trainer`` or ``evaluator``: the lock file's name and the refusal's words.
      flag: the flag that chose the directory, for the refusal (``--model-dir``).
    """

    def __init__(self, *, directory: str | os.PathLike, role: str, flag: str) -> None:
        self.directory, self.role, self.flag = directory, role, flag
        self._fd: int | None = None
        self._path: Path | None = None
        self._created = False  # the directory did not exist: a start that fails leaves none

    def acquire(self) -> DirectoryLock:
        if is_url(self.directory):
            log.info("%s %s: no lock on an object store; run one %s per directory", self.flag,
                     self.directory, self.role)
            return self
        directory = Path(self.directory)
        self._created = not directory.exists()
        directory.mkdir(parents=True, exist_ok=True)
        path = directory / LOCK_FILE.format(role=self.role)
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            holder = _read_holder(fd)
            os.close(fd)
            raise DirectoryBusy(
                f"{self.flag} {directory} is in use by another {self.role} ({holder}); stop it first, "
                f"or give this one another {self.flag}") from None
        record = json.dumps({"pid": os.getpid(), "host": socket.gethostname(), "role": self.role,
                             "since": time.time()})
        os.ftruncate(fd, 0)
        os.pwrite(fd, (record + "\n").encode(), 0)
        self._fd, self._path = fd, path
        return self

    def release(self) -> None:
        """Drop the lock.  The file stays (its name is reused) — unless this process created the
        directory and nothing else was written there: a start that failed leaves no directory."""
        if self._fd is None:
            return
        try:
            if self._created and [p.name for p in self._path.parent.iterdir()] == [self._path.name]:
                self._path.unlink()
                self._path.parent.rmdir()
        except OSError:
            pass  # something appeared meanwhile: keep it all
        os.close(self._fd)  # closing drops the lock
        self._fd = None

    def __enter__(self) -> DirectoryLock:
        return self.acquire()

    def __exit__(self, *exc) -> None:
        self.release()


def held(directory: str | os.PathLike, role: str) -> bool:
    """Whether a live process holds ``directory`` as ``role`` (a shared lock cannot be had beside
    its exclusive one); takes nothing."""
    try:
        fd = os.open(Path(directory) / LOCK_FILE.format(role=role), os.O_RDONLY)
    except OSError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        return False
    except OSError:
        return True
    finally:
        os.close(fd)


def _read_holder(fd: int) -> str:
    try:
        record = json.loads(os.pread(fd, 4096, 0).decode() or "{}")
        return f"pid {record['pid']} on host {record['host']}"
    except (OSError, ValueError, KeyError):
        return "its pid not yet written"
