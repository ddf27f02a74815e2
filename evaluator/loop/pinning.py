"""Pin a checkpoint before reading it, so the trainer's ``max_to_keep`` cannot pull it away.

A pin is a hard link of every file of the checkpoint (``.index`` and ``.data-*``) into the
evaluator's own work dir: the trainer may delete its names, the inodes live on until we
unpin.  Across filesystems (or on object stores) the files are copied instead.  A
checkpoint whose files are not all there raises ``Missing``: the caller tells "not arrived
yet" (a synced copy delivers the state file before the data) from "deleted by the trainer"
by whether the state file still names it.
"""

from __future__ import annotations

import errno
import logging
import os
import re
import shutil
from pathlib import Path

import tensorflow as tf

from showtell.common.files import is_url

log = logging.getLogger(__name__)
_DATA = re.compile(r"\.data-(\d+)-of-(\d+)$")


class Missing(Exception):
    """Some of the checkpoint's files are not there: not yet, or not any more."""


def _link_or_copy(src: str, dst: Path) -> None:
    if not is_url(src):
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
            raise Missing(f"{prefix}: its .index or .data files are not there")
        expected = {int(m.group(2)) for m in map(_DATA.search, data_files) if m}
        if len(expected) != 1 or len(data_files) != expected.pop():
            raise Missing(f"{prefix}: incomplete set of data shards {sorted(data_files)}")
        for src in [index, *data_files]:
            try:
                _link_or_copy(src, target / os.path.basename(src))
            except (FileNotFoundError, tf.errors.NotFoundError) as exc:
                raise Missing(f"{src}: gone before it could be pinned") from exc
    except BaseException:
        shutil.rmtree(target, ignore_errors=True)
        raise
    return str(target / name)


def files_state(prefix: str) -> tuple:
    """(name, size, mtime) of each file of checkpoint ``prefix`` — to tell whether they changed."""
    state = []
    for path in sorted(tf.io.gfile.glob(prefix + ".*")):
        try:
            stat = tf.io.gfile.stat(path)
        except tf.errors.NotFoundError:
            continue
        state.append((os.path.basename(path), stat.length, stat.mtime_nsec))
    return tuple(state)


def unpin(pinned_prefix: str) -> None:
    shutil.rmtree(Path(pinned_prefix).parent, ignore_errors=True)
