"""Reusing a frozen encoder's features across checkpoints (``--feature-cache-keep``).

While training keeps the encoder frozen (phase 1), every checkpoint holds the same Inception
weights, so each validation image's pooled features are the same at every checkpoint — and
computing them is ≈ 80 % of an evaluation.  So each evaluation set keeps, per distinct encoder,
the features of the images it has evaluated (the trainer's cache format and module,
``captioning/data/feature_cache.py``), under ``<work-dir>/features/``.

"The same encoder" is decided from the checkpoint alone: a digest of the encoder variables'
values as restored (``weights_digest``, batch-norm statistics included) — never from a phase flag,
a step number or a file name.  Another digest is another cache, computed anew.

A cache is checked when read (each part's sha256): a damaged one is named in one log line,
dropped and rebuilt from the images while the evaluation goes on.  A full disk stops the
appending (one line) and the evaluation goes on from the images; nothing else is written.  Only
the ``keep`` most recently used encoders' caches are kept.  The work dir is one evaluator's
(``DirectoryLock``): no two processes append to one cache.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import tensorflow as tf

from showtell.captioning.config import InputConfig
from showtell.captioning.data.feature_cache import INFO, Appender, CacheDamaged, FeatureCache, Part, cache_key
from showtell.evaluator.loop.protocol import COMPUTED, EXTENDED, OFF, REBUILT, REUSED

log = logging.getLogger(__name__)

PART_IMAGES = 1024  # images per appended part: what an interrupted evaluation keeps at most loses


@dataclass
class SetFeatures:
    """One evaluation set's features for one encoder: what ``Validator.run`` reads (``cached``,
    ``dataset``) and tells (``add``), and afterwards how it went (``result``, the counts)."""

    cache: FeatureCache | None
    rebuilt: bool = False
    full_disk: str = ""
    computed: int = 0
    parts: list[Part] = field(default_factory=list, repr=False)  # verified, in the set's order
    _appender: Appender | None = field(default=None, repr=False)

    @property
    def cached(self) -> int:
        """Images whose features are there to read: the verified parts' first ones."""
        return sum(p.images for p in self.parts)

    @classmethod
    def open(cls, cache: FeatureCache) -> SetFeatures:
        for torn in cache.dir.glob(".part-*"):  # a part an interrupted evaluation never listed
            torn.unlink(missing_ok=True)
        rebuilt = False
        try:
            parts = cache.verify()
        except CacheDamaged as exc:
            log.warning("feature cache: %s; dropped, its features are computed again from the images", exc)
            cache.discard()
            parts, rebuilt = [], True
        if parts:
            os.utime(cache.dir / INFO)  # most recently used: kept by ``FeatureStore.bound``
        found = cls(cache, rebuilt=rebuilt, parts=parts)
        found._appender = cache.appender(PART_IMAGES)
        return found

    def dataset(self, images: int, batch_size: int) -> tf.data.Dataset:
        return self.cache.eval_dataset(self.parts, images, batch_size)

    def add(self, image_ids, features, captions) -> None:
        self.computed += len(image_ids)
        if self._appender is None:
            return
        try:
            self._appender.add(image_ids, features, captions)
        except OSError as exc:
            self._give_up(exc)

    def close(self) -> None:
        """List the last computed images (a part of fewer than ``PART_IMAGES``)."""
        if self._appender is not None:
            try:
                self._appender.flush()
            except OSError as exc:
                self._give_up(exc)

    def _give_up(self, exc: OSError) -> None:
        self._appender, self.full_disk = None, f"{exc.strerror or exc}"
        log.warning("feature cache %s: cannot write (%s); this evaluation goes on from the images and "
                    "keeps what the cache already had — free space under the work dir to reuse features "
                    "again",
                    self.cache.dir if self.cache else "-", self.full_disk)

    def result(self, reused: int) -> str:
        """reused (no encoder pass), computed (every image's), extended (some of each: a larger
        evaluation than before), rebuilt (a damaged cache dropped) — or off."""
        if self.cache is None:
            return OFF
        if self.rebuilt:
            return REBUILT
        if not self.computed:
            return REUSED
        return EXTENDED if reused else COMPUTED


class FeatureStore:
    """``<work-dir>/features``: each (set, encoder)'s cache, at most ``keep`` encoders' (0: off)."""

    def __init__(self, root: Path | None, keep: int) -> None:
        self.root, self.keep = root, keep

    @property
    def enabled(self) -> bool:
        return self.root is not None and self.keep > 0

    def for_set(self, data: Path, files: Sequence[str], encoder_digest: str, image_size: int,
                shard: tuple[int, int] | None = None) -> SetFeatures:
        """The set's features for this encoder; a ``shard``'s part keeps its own images' (its own key)."""
        if not self.enabled:
            return SetFeatures(None)
        key = cache_key(data, files, encoder_digest, image_size, InputConfig(), 1)
        if shard is not None:
            key["shard"] = list(shard)
        return SetFeatures.open(FeatureCache(self.root, key))

    @staticmethod
    def digest(variables: list) -> tuple[str, float]:
        """The encoder's digest and the seconds it took (reported: it is paid at every checkpoint)."""
        from showtell.captioning.weights.encoder import weights_digest

        started = time.monotonic()
        digest = weights_digest(variables)
        return digest, time.monotonic() - started

    def bound(self) -> list[Path]:
        """Drop the caches of all but the ``keep`` most recently used encoders; what went."""
        if not self.enabled or not self.root.is_dir():
            return []
        used: dict[str, float] = {}
        caches: list[tuple[str, Path]] = []
        for directory in self.root.iterdir():
            cache_info = directory / INFO
            if directory.name.startswith(".") or not cache_info.is_file():
                continue
            try:
                digest = json.loads(cache_info.read_text())["key"]["encoder_weights_sha256"]
                mtime = cache_info.stat().st_mtime
            except (OSError, ValueError, KeyError, TypeError):
                continue
            caches.append((digest, directory))
            used[digest] = max(used.get(digest, 0.0), mtime)
        kept = set(sorted(used, key=used.__getitem__, reverse=True)[: self.keep])
        gone = [directory for digest, directory in caches if digest not in kept]
        for directory in gone:
            shutil.rmtree(directory, ignore_errors=True)
        if gone:
            log.info("feature cache: %d cache(s) of older encoders removed (--feature-cache-keep %d)",
                     len(gone), self.keep)
        return gone
