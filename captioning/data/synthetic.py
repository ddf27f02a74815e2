"""The embedded default dataset: procedurally drawn scenes of coloured shapes.

Each image holds 1–3 shapes (circle, square, triangle) in one of five colours and two
sizes, laid out alone, side by side, one above the other, or three in a row; every image
comes with several true captions ("a small red circle left of a large blue square", …).
Everything is a pure function of ``(seed, split, index)``, so a dataset is reproducible
and a test can regenerate the scene any record came from.

It is learnable by design: colour, shape, size and arrangement are all visible, and the
captions differ between images, so a model that ignores the image cannot do well.
"""

from __future__ import annotations

import logging
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
from tqdm import tqdm

from showtell.captioning.config import MIN_IMAGE_SIZE, SyntheticConfig
from showtell.captioning.data.dataset import VOCAB, Manifest, SplitInfo, existing_build
from showtell.captioning.data.vocab import Vocabulary
from showtell.common import logs
from showtell.common.errors import DataError

log = logging.getLogger(__name__)

BUILDER = "synthetic"
KINDS = ("circle", "square", "triangle")
COLOURS = {
    "red": (220, 40, 40),
    "green": (40, 180, 60),
    "blue": (50, 90, 230),
    "yellow": (230, 210, 40),
    "purple": (150, 60, 200),
}
SIZES = {"small": 0.09, "large": 0.15}  # radius as a fraction of the image side
LAYOUTS = ("single", "horizontal", "vertical", "row")
_LAYOUT_P = (0.2, 0.3, 0.25, 0.25)
_SPLIT_CODE = {"train": 0, "val": 1, "test": 2}
_ID_OFFSET = 10_000_000  # image ids of split k start at k × this


@dataclass(frozen=True)
class Shape:
    kind: str
    colour: str
    size: str
    cx: float  # centre, pixels
    cy: float
    radius: float


@dataclass(frozen=True)
class Scene:
    """Shapes in reading order: left→right (horizontal, row) or top→bottom (vertical)."""

    layout: str
    shapes: tuple[Shape, ...]
    background: int


def image_id(split: str, index: int) -> int:
    return _SPLIT_CODE[split] * _ID_OFFSET + index


def make_scene(seed: int, split: str, index: int, image_size: int) -> Scene:
    """The scene of image ``index`` of ``split`` (deterministic)."""
    rng = np.random.default_rng([seed, _SPLIT_CODE[split], index])
    layout = LAYOUTS[rng.choice(len(LAYOUTS), p=_LAYOUT_P)]
    s = float(image_size)
    if layout == "single":
        centres = [(rng.uniform(0.3, 0.7) * s, rng.uniform(0.3, 0.7) * s)]
    elif layout == "horizontal":
        centres = [
            ((0.25 + rng.uniform(-0.05, 0.05)) * s, (0.5 + rng.uniform(-0.12, 0.12)) * s),
            ((0.75 + rng.uniform(-0.05, 0.05)) * s, (0.5 + rng.uniform(-0.12, 0.12)) * s),
        ]
    elif layout == "vertical":
        centres = [
            ((0.5 + rng.uniform(-0.12, 0.12)) * s, (0.25 + rng.uniform(-0.05, 0.05)) * s),
            ((0.5 + rng.uniform(-0.12, 0.12)) * s, (0.75 + rng.uniform(-0.05, 0.05)) * s),
        ]
    else:  # row of three
        y = (0.5 + rng.uniform(-0.1, 0.1)) * s
        centres = [((f + rng.uniform(-0.01, 0.01)) * s, y) for f in (1 / 6, 1 / 2, 5 / 6)]
    shapes = []
    for cx, cy in centres:
        size = ("small", "large")[rng.integers(2)]
        shapes.append(
            Shape(
                kind=KINDS[rng.integers(len(KINDS))],
                colour=list(COLOURS)[rng.integers(len(COLOURS))],
                size=size,
                cx=cx,
                cy=cy,
                radius=SIZES[size] * s,
            )
        )
    return Scene(layout=layout, shapes=tuple(shapes), background=int(rng.integers(20, 100)))


def shape_mask(shape: Shape, image_size: int) -> np.ndarray:
    """Boolean mask of the pixels a shape covers."""
    yy, xx = np.mgrid[0:image_size, 0:image_size].astype(np.float32) + 0.5
    dx, dy, r = xx - shape.cx, yy - shape.cy, shape.radius
    if shape.kind == "circle":
        return dx * dx + dy * dy <= r * r
    if shape.kind == "square":
        half = 0.85 * r  # about the circle's area
        return (np.abs(dx) <= half) & (np.abs(dy) <= half)
    # triangle pointing up: apex at cy - r, base at cy + 0.7 r
    top, bottom = -r, 0.7 * r
    depth = (dy - top) / (bottom - top)
    return (dy >= top) & (dy <= bottom) & (np.abs(dx) <= depth * r)


def draw(scene: Scene, image_size: int) -> np.ndarray:
    """Render a scene as a uint8 RGB array."""
    image = np.full((image_size, image_size, 3), scene.background, dtype=np.uint8)
    for shape in scene.shapes:
        image[shape_mask(shape, image_size)] = COLOURS[shape.colour]
    return image


def _phrase(shape: Shape, with_size: bool) -> str:
    size = f"{shape.size} " if with_size else ""
    return f"a {size}{shape.colour} {shape.kind}"


def _ordered(scene: Scene) -> tuple[Shape, ...]:
    """The order a caption names the shapes in: decided by the image alone.

    The larger shape comes first (ties: reading order).  A caption whose first shape could
    be either one ("A left of B" and "B right of A" both as references) makes the first
    colour word a coin toss the image cannot settle, and the decoder must then remember
    which toss it made; a visible rule keeps every word predictable from the image.
    """
    shapes = scene.shapes
    if scene.layout in ("horizontal", "vertical"):
        first, second = shapes
        return (second, first) if (first.size, second.size) == ("small", "large") else shapes
    if scene.layout == "row" and (shapes[0].size, shapes[2].size) == ("small", "large"):
        return shapes[::-1]
    return shapes


def captions(scene: Scene) -> list[str]:
    """Every reference caption of a scene; all of them are true of its image."""
    shapes = _ordered(scene)
    forward = shapes == scene.shapes
    refs = []
    for with_size in (True, False):
        p = [_phrase(s, with_size) for s in shapes]
        if scene.layout == "single":
            refs.append(p[0])
        elif scene.layout == "horizontal":
            refs.append(f"{p[0]} {'left of' if forward else 'right of'} {p[1]}")
        elif scene.layout == "vertical":
            refs.append(f"{p[0]} {'above' if forward else 'below'} {p[1]}")
        else:
            direction = "from left to right" if forward else "from right to left"
            refs.append(f"{p[0]} , {p[1]} and {p[2]} {direction}")
    if scene.layout == "single":
        refs.append(f"one {scene.shapes[0].size} {scene.shapes[0].colour} {scene.shapes[0].kind}")
    else:
        refs.append(" and ".join(_phrase(s, True) for s in shapes[:-1]) + f" and {_phrase(shapes[-1], True)}"
                    if len(shapes) == 2 else
                    f"{_phrase(shapes[0], True)} , {_phrase(shapes[1], True)} and {_phrase(shapes[2], True)}")
    return refs


# What the generator knows about a scene, as classification targets: the stand-in for ImageNet's
# labels when ``showtell pretrain`` makes the demo's "pretrained" encoder.  Shapes are taken in
# reading order (left→right, top→bottom): what is where, a place's colour a local feature.  In
# caption order (the larger first) the encoder had to compare sizes before it could bind a colour
# to its shape, and mostly did not — 64–72 % of its wrong colours were another shape's; in reading
# order 0.62 of held-out scenes have every head right at ≈ 930 steps, against 0.35 (BENCHMARKS.md).
# Ordering them as a caption does is the decoder's part.  Class 0 of a shape head: "no such shape".
MAX_SHAPES = 3
LABEL_HEADS: dict[str, tuple[str, ...]] = {
    "layout": LAYOUTS,
    **{f"shape{i}_{attr}": ("none", *values) for i in range(1, MAX_SHAPES + 1)
       for attr, values in (("colour", tuple(COLOURS)), ("kind", KINDS), ("size", tuple(SIZES)))},
}


def scene_labels(scene: Scene) -> dict[str, int]:
    """The class index of every ``LABEL_HEADS`` head for ``scene``."""
    labels = {"layout": LAYOUTS.index(scene.layout)}
    shapes = scene.shapes
    for i in range(1, MAX_SHAPES + 1):
        shape = shapes[i - 1] if i <= len(shapes) else None
        for attr in ("colour", "kind", "size"):
            head = f"shape{i}_{attr}"
            labels[head] = 0 if shape is None else LABEL_HEADS[head].index(getattr(shape, attr))
    return labels


# How many shapes of each kind a scene has (0–3), whatever their order or place: heads that
# ``showtell pretrain`` adds because they make the kinds learnable sooner — alone, the per-shape
# kind heads sat at chance for ≈ 600 steps while colour, size and layout were learnt (BENCHMARKS.md).
COUNT_HEADS: dict[str, tuple[int, ...]] = {f"{kind}s": tuple(range(MAX_SHAPES + 1)) for kind in KINDS}


def scene_counts(scene: Scene) -> dict[str, int]:
    """The class index (= the count) of every ``COUNT_HEADS`` head for ``scene``."""
    return {f"{kind}s": sum(shape.kind == kind for shape in scene.shapes) for kind in KINDS}


def split_index(image_id_: int) -> tuple[str, int]:
    """Inverse of ``image_id``."""
    code, index = divmod(int(image_id_), _ID_OFFSET)
    return {v: k for k, v in _SPLIT_CODE.items()}[code], index


def encode_png(image: np.ndarray) -> bytes:
    import tensorflow as tf

    return tf.io.encode_png(image).numpy()


def build(out_dir: Path, config: SyntheticConfig) -> Manifest:
    """Write train/val shards, ``vocab.txt`` and ``dataset.json`` into ``out_dir``.

    Idempotent: an existing identical build is kept; a different one is refused rather
    than overwritten.
    """
    if config.image_size < MIN_IMAGE_SIZE:
        raise DataError(f"--image-size {config.image_size}: Inception v3 needs at least {MIN_IMAGE_SIZE} px")
    source = {"config": asdict(config)}
    existing = existing_build(out_dir, BUILDER)
    if existing is not None:
        if existing.builder == BUILDER and existing.source == source:
            log.info("%s already holds this synthetic dataset; nothing to do", out_dir)
            return existing
        raise DataError(
            f"{out_dir}: already holds a different dataset ({existing.builder}); "
            "choose another --out or delete that directory"
        )
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise DataError(f"--out {out_dir}: cannot create it ({exc.strerror}); choose a writable "
                        "directory") from exc
    from showtell.captioning.data.records import ShardedWriter  # TensorFlow: only to write shards

    counts = {"train": config.train_images, "val": config.val_images}
    shards = {"train": config.train_shards, "val": config.val_shards}
    scenes = {
        split: [make_scene(config.seed, split, i, config.image_size) for i in range(n)]
        for split, n in counts.items()
    }
    vocab = Vocabulary.build(c for scene in scenes["train"] for c in captions(scene))
    splits = {}
    for split, split_scenes in scenes.items():
        with ShardedWriter(out_dir, split, shards[split]) as writer:
            for index, scene in enumerate(tqdm(split_scenes, desc=f"synthetic {split}", unit="img",
                                                     disable=not logs.progress_bars())):
                data = encode_png(draw(scene, config.image_size))
                writer.write_image(data, image_id(split, index), [vocab.encode(c) for c in captions(scene)])
        splits[split] = SplitInfo(images=writer.images, captions=writer.captions, shards=shards[split])
    vocab.save(out_dir / VOCAB)
    manifest = Manifest(
        builder=BUILDER,
        image_size=config.image_size,
        vocab_size=len(vocab),
        splits=splits,
        source=source,
    )
    manifest.save(out_dir)
    log.info(
        "wrote %s: %d train / %d val images, %d words",
        out_dir, splits["train"].images, splits["val"].images, len(vocab),
    )
    return manifest
