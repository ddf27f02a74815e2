"""A tiny MSCOCO layout the COCO tests write — JPEGs made with TF, the two captions files, one
corrupt JPEG, one empty file and one missing file — with the CLI arguments that read it and the
records ``showtell data coco`` writes from it."""

from __future__ import annotations

import json
import random
from pathlib import Path

import numpy as np
import tensorflow as tf

from showtell.captioning.data.records import parse_example

WORDS = ["a", "dog", "cat", "runs", "on", "the", "grass", "sits", "near", "red", "ball", "in", "park"]
TRAIN, VAL = 20, 40  # val pool → 34 train / 2 val / 4 test
CORRUPT, EMPTY, MISSING = 100 + 3, 100 + 11, 7  # image ids


def captions(rng: random.Random, image_id: int) -> list[str]:
    rare = f"zebra{image_id}"  # seen once: below any min count
    return [" ".join(rng.choice(WORDS) for _ in range(rng.randint(4, 8))).capitalize() + "."
            for _ in range(4)] + [f"A {rare} in the park."]


def write_layout(root: Path) -> dict:
    """MSCOCO's layout in ``root``: captions files, image folders (with the broken images)."""
    root.mkdir(parents=True, exist_ok=True)
    rng = random.Random(1)
    files = {}
    for pool, first, count in (("train2014", 0, TRAIN), ("val2014", 100, VAL)):
        folder = root / pool
        folder.mkdir()
        entries, annotations = [], []
        for image_id in range(first, first + count):
            name = f"COCO_{pool}_{image_id:012d}.jpg"
            entries.append({"id": image_id, "file_name": name, "height": 90, "width": 120})
            annotations += [{"id": len(annotations), "image_id": image_id, "caption": c}
                            for c in captions(rng, image_id)]
            if image_id == MISSING:
                continue
            if image_id == CORRUPT:
                (folder / name).write_bytes(b"\xff\xd8\xff\xe0 definitely not a jpeg" * 10)
            elif image_id == EMPTY:
                (folder / name).write_bytes(b"")
            else:
                pixels = np.full((90, 120, 3), image_id % 255, np.uint8)
                (folder / name).write_bytes(tf.io.encode_jpeg(pixels).numpy())
        files[pool] = root / "annotations" / f"captions_{pool}.json"
        files[pool].parent.mkdir(exist_ok=True)
        files[pool].write_text(json.dumps({"images": entries, "annotations": annotations}))
    return {"root": root, "captions": [files["train2014"], files["val2014"]],
            "images": [root / "train2014", root / "val2014"]}


def coco_args(layout: dict, out: Path, *extra: str) -> list[str]:
    """``showtell data coco`` with the fixture's captions files and image folders."""
    args = ["data", "coco", "--out", str(out), "--min-word-count", "2", "--train-shards", "4",
            "--val-shards", "1", "--test-shards", "2", *extra]
    for captions in layout["captions"]:
        args += ["--captions", str(captions)]
    for images in layout["images"]:
        args += ["--images", str(images)]
    return args


def records(out: Path, split: str) -> list[tuple[int, list[int]]]:
    found = []
    for shard in sorted(out.glob(f"{split}-?????-of-?????")):
        for serialized in tf.data.TFRecordDataset(str(shard)):
            record = parse_example(serialized)
            found += [(int(record["image_id"]), c) for c in record["captions"].to_list()]
    return found
