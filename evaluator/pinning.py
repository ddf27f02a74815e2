"""Pin a checkpoint before reading it, so the trainer's ``max_to_keep`` cannot pull it away.

A pin is a hard link of every file of the checkpoint (``.index`` and ``.data-*``) into the
evaluator's own work dir: the trainer may delete its names, the inodes live on until we
unpin.  Across filesystems (or on object stores) the files are copied instead.  A
checkpoint that vanished before all its files were pinned raises ``Vanished``; the
caller records it as skipped.
"""

from __future__ import annotations

import errno
import logging
import os
import re
import shutil
from pathlib import Path

import tensorflow as tf

log = logging.getLogger(__name__)
_DATA = re.compile(r"\.data-(\d+)-of-(\d+)$")


class Vanished(Exception):
    """The checkpoint's files disappeared before they could all be pinned."""


def _is_local(path: str) -> bool:
    return "://" not in path


def _link_or_copy(src: str, dst: Path) -> None:
    if _is_local(src):
        try:
            os.link(src, dst)
            return
        except FileNotFoundError:
            raise
        except OSError as exc:
            if exc.errno not in (errno.EXDEV, errno.EPERM, errno.EACCES, errno.EMLINK, errno.ENOTSUP):
                raise
            shutil.copy2(src, dst)
            return
    tf.io.gfile.copy(src, str(dst), overwrite=True)


def pin(prefix: str, pin_root: Path) -> str:
    """Pin checkpoint ``prefix`` (``…/ckpt-120``) under ``pin_root``; return the pinned prefix."""
    name = os.path.basename(prefix)
    target = pin_root / name
    if target.exists():
        shutil.rmtree(target)
    target.mkdir(parents=True)
    try:
        data_files = tf.io.gfile.glob(prefix + ".data-*")
        index = prefix + ".index"
        if not data_files or not tf.io.gfile.exists(index):
            raise Vanished(f"{prefix}: files no longer there")
        expected = {int(m.group(2)) for m in map(_DATA.search, data_files) if m}
        if len(expected) != 1 or len(data_files) != expected.pop():
            raise Vanished(f"{prefix}: incomplete set of data shards {sorted(data_files)}")
        for src in [index, *data_files]:
            try:
                _link_or_copy(src, target / os.path.basename(src))
            except (FileNotFoundError, tf.errors.NotFoundError) as exc:
                raise Vanished(f"{src}: deleted before it could be pinned") from exc
    except BaseException:
        shutil.rmtree(target, ignore_errors=True)
        raise
    return str(target / name)


def unpin(pinned_prefix: str) -> None:
    shutil.rmtree(Path(pinned_prefix).parent, ignore_errors=True)
