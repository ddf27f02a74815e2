"""Small file helpers every layer uses: whole-file writes that are never seen half-done, and
telling a local path from a URL (``gs://``, ``s3://``, ``file://``) that only TensorFlow's
``gfile`` can open."""

from __future__ import annotations

import os
from pathlib import Path


def write_atomic(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` through a temporary sibling and a rename, so a reader — or a
    crash — finds the old file or the new one, never half of one."""
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    try:
        tmp.write_text(text)
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def is_url(path: str | os.PathLike) -> bool:
    """A ``scheme://`` location (object store, ``file://``) rather than a local path."""
    return "://" in str(path)
