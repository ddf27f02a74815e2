"""TensorFlow's native start-up notices, kept off the screen unless asked for (``-v``).

Importing TensorFlow 2.21 prints, from C++, before absl's logging is initialised:
``WARNING: All log messages before absl::InitializeLog() is called are written to STDERR`` and
``I0000 … port.cc:153] oneDNN custom operations are on …`` — twice (two shared libraries), and
``TF_CPP_MIN_LOG_LEVEL`` no longer hides them.  Four lines of notices above a one-line error
bury it.  So the import runs with file descriptor 2 on a pipe; a thread passes every other line
through at once (a real error during the import, or a crash, still shows) and drops the
notices.  Only the import is covered: after it, stderr is the process's own again.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import os
import re
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager

# absl's pre-initialisation banner, glog-style INFO/WARNING lines ("I0000 00:00:17… file.cc:1] …")
# and the CPU-feature notice's second line.  Errors (E…, F…) always pass.
_NOTICE = re.compile(rb"^(WARNING: All log messages before absl::InitializeLog\(\)|[IW]\d{4} \d\d:\d\d:\d\d"
                     rb"|To enable the following instructions:)")


def quiet_tensorflow(verbose: bool = False) -> None:
    """From now on, the first ``import tensorflow`` (wherever it happens) hides the start-up
    notices, and TensorFlow's later C++ INFO/WARNING lines are off; ``verbose``: all shown.
    Installed as an import hook so commands still import TensorFlow only when they need it
    (``--help`` and flag errors stay instant)."""
    if verbose:
        return
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    if "tensorflow" not in sys.modules and not any(isinstance(f, _QuietFinder) for f in sys.meta_path):
        sys.meta_path.insert(0, _QuietFinder())


class _QuietFinder(importlib.abc.MetaPathFinder):
    """Finds ``tensorflow`` as the path finder would and runs its ``__init__`` with the notices
    hidden; leaves ``sys.meta_path`` once TensorFlow is imported (a mere ``find_spec`` lookup,
    such as the check that TensorFlow is installed, leaves it in place)."""

    def find_spec(self, name, path, target=None):
        if name != "tensorflow":
            return None
        spec = importlib.machinery.PathFinder.find_spec(name, path)
        if spec is None or spec.loader is None:
            return spec
        execute = spec.loader.exec_module

        def exec_module(module) -> None:
            if self in sys.meta_path:
                sys.meta_path.remove(self)
            with _notices_hidden():
                execute(module)

        spec.loader.exec_module = exec_module  # this spec's own loader instance
        return spec


@contextmanager
def _notices_hidden() -> Iterator[None]:
    sys.stderr.flush()
    saved = os.dup(2)
    read_end, write_end = os.pipe()
    os.dup2(write_end, 2)
    os.close(write_end)
    forwarder = threading.Thread(target=_forward, args=(read_end, saved), name="native-stderr", daemon=True)
    forwarder.start()
    try:
        yield
    finally:
        sys.stderr.flush()
        os.dup2(saved, 2)  # closes the pipe's last write end: the forwarder reads EOF
        forwarder.join(timeout=5)
        os.close(saved)


def _forward(read_end: int, to: int) -> None:
    with os.fdopen(read_end, "rb") as lines:
        for line in lines:
            if not _NOTICE.match(line):
                os.write(to, line)
