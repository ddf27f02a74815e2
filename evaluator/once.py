"""Evaluate one checkpoint: restore, validation loss/perplexity, generated captions.

The standalone path (``showtell evaluate --once``); the watching service builds on it.
The model is rebuilt from the model dir's ``showtell-model.json``, so no model flags are
needed on the evaluating machine.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from pathlib import Path

import tensorflow as tf

from captioning import evaluation, inputs
from captioning.errors import ModelDirError
from captioning.manifest import load_dataset
from captioning.model import build_model
from captioning.modeldir import read_model_config, restore
from captioning.records import shard_files

log = logging.getLogger(__name__)


@dataclass
class EvalResult:
    step: int
    checkpoint: str
    metrics: dict[str, float]
    examples: int
    seconds: float
    samples: list[dict] = field(default_factory=list)


def latest_checkpoint(model_dir: Path) -> str:
    path = tf.train.latest_checkpoint(str(model_dir))
    if not path:
        raise ModelDirError(f"{model_dir}: no checkpoint yet (no 'checkpoint' state file naming one)")
    return path


def checkpoint_step(path: str) -> int:
    """``…/ckpt-1200`` → 1200 (CheckpointManager names checkpoints by global step)."""
    try:
        return int(path.rsplit("-", 1)[1])
    except (IndexError, ValueError):
        return -1


def evaluate_checkpoint(
    model_dir: Path,
    data_dir: Path,
    checkpoint: str | None = None,
    max_examples: int | None = None,
    beam_size: int = 3,
    samples: int = 5,
) -> EvalResult:
    started = time.monotonic()
    path = checkpoint or latest_checkpoint(model_dir)
    config = read_model_config(model_dir)
    manifest, vocab = load_dataset(data_dir)
    if manifest.vocab_size != config.vocab_size:
        raise ModelDirError(
            f"{model_dir} was trained with vocab {config.vocab_size}, {data_dir} has "
            f"{manifest.vocab_size}; evaluate with the dataset it was trained on"
        )
    files = shard_files(data_dir, "val")
    model = build_model(config)
    restore(tf.train.Checkpoint(model=model), path, "evaluate another checkpoint (--checkpoint)",
            partial=True)
    loss = evaluation.validation_loss(model, files, max_examples=max_examples)
    captions = evaluation.generate_captions(model, files, vocab, beam_size=beam_size, max_images=max_examples)
    references = inputs.load_references(files, vocab)
    metrics = {
        "loss": loss.loss,
        "perplexity": loss.perplexity,
        "exact_match": evaluation.exact_match(captions, references),
    }
    shown = [
        {"image_id": image_id, "caption": caption, "references": references.get(image_id, [])}
        for image_id, caption in list(captions.items())[:samples]
    ]
    return EvalResult(
        step=checkpoint_step(path), checkpoint=path, metrics=metrics, examples=loss.examples,
        seconds=time.monotonic() - started, samples=shown,
    )
