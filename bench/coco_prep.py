"""COCO preparation rate vs. its limit: ``showtell data coco`` images/s on a generated
MSCOCO-layout set (640×480 JPEGs, 5 captions each, train2014 + val2014 pools) ÷ the rate of
plainly reading and decoding the same JPEGs with the same number of threads, with ``rounds.py``'s
method (a warm pass of each, then ``--rounds`` rounds, each build into a fresh directory); and the
bytes of shards written ÷ the bytes of the JPEGs (one record per image: ≈1).

    .venv/bin/python bench/coco_prep.py [--images 2000] [--workers 2] [--rounds 5]
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import shutil
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np
import tensorflow as tf
from rounds import add_out, alternate, publish, ratio, spread

from showtell.captioning.config import CocoConfig
from showtell.captioning.data import coco

WORDS = ["a", "man", "woman", "dog", "cat", "sits", "stands", "on", "near", "the", "red", "blue",
         "table", "street", "with", "grass", "ball"]


def make_layout(root: Path, images: int, seed: int = 0) -> tuple[list[Path], list[Path], list[Path]]:
    """JPEGs with smooth content (realistic sizes, not noise) and captions files."""
    rng = np.random.default_rng(seed)
    y, x = np.mgrid[0:480, 0:640]
    captions, dirs, files = [], [], []
    pools = (("train2014", 0, images * 3 // 4), ("val2014", 10**6, images - images * 3 // 4))
    for pool, first, count in pools:
        folder = root / pool
        folder.mkdir(parents=True)
        dirs.append(folder)
        entries, annotations = [], []
        for image_id in range(first, first + count):
            base = (np.sin(x / rng.uniform(20, 80)) + np.cos(y / rng.uniform(20, 80))) * 60 + 128
            pixels = np.stack([base, base[::-1], base[:, ::-1]], -1)
            x0, y0 = rng.integers(0, 500), rng.integers(0, 350)
            pixels[y0:y0 + 120, x0:x0 + 130] = rng.integers(0, 255, 3)
            name = f"COCO_{pool}_{image_id:012d}.jpg"
            (folder / name).write_bytes(tf.io.encode_jpeg(pixels.astype(np.uint8), quality=90).numpy())
            files.append(folder / name)
            entries.append({"id": image_id, "file_name": name})
            annotations += [{"id": len(annotations), "image_id": image_id,
                             "caption": " ".join(rng.choice(WORDS, rng.integers(6, 12)))} for _ in range(5)]
        path = root / f"captions_{pool}.json"
        path.write_text(json.dumps({"images": entries, "annotations": annotations}))
        captions.append(path)
    return captions, dirs, files


def read_decode_rate(files: list[Path], workers: int) -> float:
    def one(path: Path) -> None:
        tf.io.decode_image(path.read_bytes(), channels=3, expand_animations=False)

    started = time.perf_counter()
    with ThreadPoolExecutor(workers) as pool:
        list(pool.map(one, files))
    return len(files) / (time.perf_counter() - started)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--images", type=int, default=2000)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=5)
    add_out(parser, "coco_prep")
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)
    with tempfile.TemporaryDirectory() as tmp:
        captions, dirs, files = make_layout(Path(tmp) / "mscoco", args.images)
        mb = sum(f.stat().st_size for f in files) / 2**20
        config = CocoConfig(captions=tuple(captions), images=tuple(dirs), workers=args.workers,
                            train_shards=16, val_shards=2, test_shards=2)
        builds = iter(range(1_000_000))
        written: list[float] = []

        def prepare() -> float:
            out = Path(tmp) / f"out-{next(builds)}"
            started = time.perf_counter()
            coco.build(out, config)
            rate = args.images / (time.perf_counter() - started)
            written.append(sum(p.stat().st_size for p in out.glob("*-?????-of-?????")) / 2**20)
            shutil.rmtree(out)
            return rate

        rates = alternate({"read_decode": lambda: read_decode_rate(files, args.workers),
                           "coco_prep": prepare}, rounds=args.rounds)
    publish({
        "images": args.images, "jpeg_mb": round(mb, 1), "workers": args.workers, "rounds": args.rounds,
        "images_per_sec": {name: spread(r, 1) for name, r in rates.items()},
        "ratio_prep_over_read_decode": ratio(rates["coco_prep"], rates["read_decode"]),
        "goal": 0.8,
        "shards_mb": round(written[-1], 1),
        "ratio_shard_bytes_over_jpeg_bytes": round(written[-1] / mb, 3),
    }, args.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
