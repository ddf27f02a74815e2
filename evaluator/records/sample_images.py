"""Pictures for TensorBoard: a validation image with the model's caption and a reference under it.

Scalars say how good a checkpoint is; these say what it gets wrong.  The images are the first
few of the validation split — the same ones every evaluation — read from the shards once, so a
TensorBoard card's step slider shows one picture's caption change as training goes on.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Sequence

import numpy as np
import tensorflow as tf
from PIL import Image, ImageDraw, ImageFont

from showtell.captioning.data.records import parse_example

log = logging.getLogger(__name__)

WIDTH = 320  # every panel is this wide; the image is scaled to it, keeping its aspect
LINES = 4  # caption and reference, wrapped, get this many lines
LINE_HEIGHT = 15
MARGIN = 4
FONT_SIZE = 12


def band_height() -> int:
    return LINES * LINE_HEIGHT + 2 * MARGIN


def panel_size(height: int, width: int) -> tuple[int, int]:
    """(height, width) of the panel for an image of ``height`` × ``width``."""
    return max(1, round(WIDTH * height / width)) + band_height(), WIDTH


def read_images(files: Sequence[str], image_ids: Iterable[int]) -> dict[int, np.ndarray]:
    """The decoded (uint8 RGB) images of ``image_ids`` from validation shards, one pass."""
    wanted, found = set(image_ids), {}
    for record in tf.data.TFRecordDataset(list(files)).map(parse_example):
        image_id = int(record["image_id"])
        if image_id in wanted and image_id not in found:
            found[image_id] = tf.io.decode_image(record["image_data"], channels=3,
                                                 expand_animations=False).numpy()
            if len(found) == len(wanted):
                break
    return found


def _wrap(draw: ImageDraw.ImageDraw, text: str, font, width: int) -> list[str]:
    lines, line = [], ""
    for word in text.split():
        candidate = f"{line} {word}".strip()
        if line and draw.textlength(candidate, font=font) > width:
            lines.append(line)
            line = word
        else:
            line = candidate
    return [*lines, line] if line else lines


def render(image: np.ndarray, caption: str, reference: str) -> np.ndarray:
    """``image`` scaled to ``WIDTH`` above a white band: the caption (black), a reference (grey)."""
    height, width = panel_size(*image.shape[:2])
    picture = Image.fromarray(image).resize((width, height - band_height()), Image.NEAREST)
    panel = Image.new("RGB", (width, height), "white")
    panel.paste(picture, (0, 0))
    draw = ImageDraw.Draw(panel)
    font = ImageFont.load_default(size=FONT_SIZE)
    text_width = width - 2 * MARGIN
    generated = _wrap(draw, f"model: {caption}", font, text_width)
    ref = _wrap(draw, f"ref: {reference}", font, text_width)
    keep = max(1, LINES - len(ref[:2]))  # the reference gets at most two lines, the model the rest
    rows = [(line, (0, 0, 0)) for line in generated[:keep]] + [(line, (110, 110, 110)) for line in ref]
    y = height - band_height() + MARGIN
    for line, colour in rows[:LINES]:
        draw.text((MARGIN, y), line, fill=colour, font=font)
        y += LINE_HEIGHT
    return np.asarray(panel)
