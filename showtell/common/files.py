"""Small file helpers every layer uses: whole-file writes that are never seen half-done, the
sha256 that names a file's bytes, and telling a local path from a URL (``gs://``, ``s3://``,
``file://``) that only TensorFlow's ``gfile`` can open."""

from __future__ import annotations

import hashlib
import os
from collections.abc import Iterable
from pathlib import Path


def write_atomic(path: Path, text: str | bytes) -> None:
    """Write ``text`` (or bytes) to ``path`` through a temporary sibling and a rename, so a reader
    — or a crash — finds the old file or the new one, never half of one."""
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    try:
        if isinstance(text, bytes):
            tmp.write_bytes(text)
        else:
            tmp.write_text(text)
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def is_url(path: str | os.PathLike) -> bool:
    """A ``scheme://`` location (object store, ``file://``) rather than a local path."""
    return "://" in str(path)


def sha256_of(files: Iterable[Path]) -> str:
    """The sha256 of the files' bytes, in order, read in 4 MB chunks (an encoder is ≈ 90 MB)."""
    digest = hashlib.sha256()
    for path in files:
        with open(path, "rb") as f:
            while chunk := f.read(1 << 22):
                digest.update(chunk)
    return digest.hexdigest()
