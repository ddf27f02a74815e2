"""A trained captioner as a SavedModel: encoded image bytes in, captions and scores out.

The serving signature decodes and resizes each image exactly as evaluation does, runs the same
batched beam search and turns word ids into text in the graph, so a server needs TensorFlow and
the SavedModel — no showtell code, vocabulary file or checkpoint::

    serve = tf.saved_model.load(path).signatures["serving_default"]
    out = serve(images=tf.constant([jpeg_bytes]))  # {"captions": [B, k] str, "scores": [B, k]}

Exports are written to a temporary directory and then published by renaming, so a reader never
sees a half-written model.  The evaluator's best exports are versions under one base directory,
``<base>/<global step>/``, the layout TensorFlow Serving (and every server that follows it)
watches: numeric directories, the largest serves.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import tensorflow as tf

from showtell.captioning.config import InputConfig
from showtell.captioning.data import inputs
from showtell.captioning.data.vocab import Vocabulary
from showtell.captioning.model.inference import caption_images
from showtell.captioning.model.network import ShowAndTell

INFO = "showtell-export.json"
SIGNATURE = "serving_default"


class Captioner(tf.Module):
    """The model, its vocabulary and the decoding settings, with one serving function."""

    def __init__(self, model: ShowAndTell, vocab: Vocabulary, beam_size: int = 3, max_length: int = 20):
        super().__init__(name="showtell_captioner")
        self.model = model
        self.words = tf.constant(list(vocab.words))
        self.start_id, self.end_id = vocab.start_id, vocab.end_id
        self.image_size = model.config.image_size
        self.beam_size, self.max_length = beam_size, max_length

    @tf.function(input_signature=[tf.TensorSpec([None], tf.string, name="images")], autograph=False)
    def serve(self, images: tf.Tensor) -> dict[str, tf.Tensor]:
        size, config = self.image_size, InputConfig()
        pixels = tf.map_fn(
            lambda data: inputs.preprocess_image(inputs.decode_image(data), size, False, config),
            images, fn_output_signature=tf.TensorSpec([size, size, 3], tf.float32),
        )
        ids, scores = caption_images(self.model, pixels, self.start_id, self.end_id, self.beam_size,
                                     self.max_length)
        return {"captions": self.text(ids), "scores": scores}

    def text(self, ids: tf.Tensor) -> tf.Tensor:
        """[B, k, T] word ids → [B, k] strings: words up to the first ``</S>``, space-joined."""
        before_end = tf.equal(tf.cumsum(tf.cast(tf.equal(ids, self.end_id), tf.int32), axis=-1), 0)
        words = tf.ragged.boolean_mask(tf.gather(self.words, ids), before_end)
        return tf.strings.reduce_join(words, axis=-1, separator=" ")


def export(model: ShowAndTell, vocab: Vocabulary, destination: Path, info: dict, beam_size: int = 3) -> Path:
    """Write a SavedModel (+ ``showtell-export.json``) to ``destination``, replacing what is there
    only once the new one is complete."""
    destination = Path(destination)
    destination.parent.mkdir(parents=True, exist_ok=True)
    tmp = destination.with_name(f".{destination.name}.tmp-{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    module = Captioner(model, vocab, beam_size)
    tf.saved_model.save(module, str(tmp), signatures={SIGNATURE: module.serve})
    (tmp / INFO).write_text(json.dumps({**info, "beam_size": beam_size}, indent=2, sort_keys=True) + "\n")
    old = destination.with_name(f".{destination.name}.old-{os.getpid()}")
    if destination.exists():
        destination.rename(old)  # the two renames are the only moment without an export
    tmp.rename(destination)
    shutil.rmtree(old, ignore_errors=True)
    return destination


def versions(base: Path) -> list[int]:
    """The complete versions under ``base``, oldest first: numeric directories holding an export
    (temporary ``.N.tmp-PID`` names are not numbers, so servers skip them too)."""
    try:
        names = [entry.name for entry in Path(base).iterdir() if entry.name.isdigit()]
    except OSError:
        return []
    return sorted(int(name) for name in names if (Path(base) / name / INFO).is_file())


def resolve(path: Path) -> Path:
    """An export directory as given, or a versioned base's newest version (TensorFlow Serving's
    default policy), so ``--saved-model <work-dir>/export/best`` captions with the best so far."""
    path = Path(path)
    if (path / INFO).is_file():
        return path
    found = versions(path)
    return path / str(found[-1]) if found else path


def load(path: Path):
    """The serving function of an exported captioner, and its ``showtell-export.json``."""
    loaded = tf.saved_model.load(str(path))
    return loaded.signatures[SIGNATURE], json.loads((Path(path) / INFO).read_text())
