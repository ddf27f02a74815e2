"""Why the pretrained encoder's colours trail its kinds: what kind of mistakes its heads make.

Loads the classifier a ``showtell pretrain --out E`` left in ``E.pretrain/`` and scores its shape
heads on the held-out train images, as ``showtell pretrain`` reports them, then splits them:

* by layout — one shape alone needs no binding of an attribute to a place; several do;
* each wrong answer: a value another shape of the same scene has (the right attribute, bound to
  the wrong shape) or one no shape has (not seen at all);
* inference mode (batch-norm's moving statistics, what a frozen encoder uses) against training
  mode (the batch's own statistics), and the images it fitted against the held-out ones;
* the photometric augmentation's worst case against the distances between ``COLOURS``;
* the scenes whose every head is right (layout, and each shape's colour, kind and size): what an
  exactly right caption needs of the encoder.

    .venv/bin/python bench/colour_errors.py --out runs/demo/encoder.weights.h5 --data runs/demo/data
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np
import tensorflow as tf

from showtell.captioning.config import InputConfig, pretrain_state
from showtell.captioning.data import synthetic
from showtell.captioning.data.inputs import preprocess_image
from showtell.trainer.pretraining import heads as pretrain
from showtell.trainer.pretraining.pretrain import PretrainState

ATTRS = ("colour", "kind")
ALL_ATTRS = ("colour", "kind", "size")


def predictions(model, images: np.ndarray, size: int, training: bool) -> dict[str, np.ndarray]:
    plain = tf.data.Dataset.from_tensor_slices(images).map(
        lambda image: preprocess_image(image, size, False, InputConfig())).batch(128)
    outputs = [model(x, training=training) for x in plain]
    return {h: np.concatenate([o[h].numpy().argmax(-1) for o in outputs]) for h in synthetic.LABEL_HEADS}


def breakdown(predicted: dict[str, np.ndarray], labels: dict[str, np.ndarray]) -> dict:
    """Per attribute and shape: accuracy alone / among others, and where the wrong answers come from."""
    single = labels["layout"] == synthetic.LAYOUTS.index("single")
    report = {}
    for attr, i in itertools.product(ATTRS, range(1, synthetic.MAX_SHAPES + 1)):
        head = f"shape{i}_{attr}"
        truth, guess = labels[head], predicted[head]
        present = truth > 0
        others = [labels[f"shape{k}_{attr}"] for k in range(1, synthetic.MAX_SHAPES + 1) if k != i]
        wrong = present & (guess != truth)
        elsewhere = wrong & np.any([(guess == o) & (o > 0) for o in others], axis=0)
        report[head] = {
            "accuracy": round(float(np.mean(guess[present] == truth[present])), 3),
            "alone": _rate(guess[present & single] == truth[present & single]),
            "with_others": _rate(guess[present & ~single] == truth[present & ~single]),
            "wrong": int(wrong.sum()),
            "wrong_is_another_shapes": _rate(elsewhere[wrong]),
            # what a wrong guess drawn at random among the other values would give
            "wrong_is_another_shapes_by_chance": _rate(_chance_elsewhere(truth, others, attr)[wrong]),
        }
    # what a caption needs: every shape's colour, kind and size (and the layout) right at once
    right = predicted["layout"] == labels["layout"]
    for attr, i in itertools.product(ALL_ATTRS, range(1, synthetic.MAX_SHAPES + 1)):
        head = f"shape{i}_{attr}"
        right &= (labels[head] == 0) | (predicted[head] == labels[head])
    report["scene_all_right"] = _rate(right)
    return report


def _chance_elsewhere(truth: np.ndarray, others: list[np.ndarray], attr: str) -> np.ndarray:
    values = len(synthetic.COLOURS if attr == "colour" else synthetic.KINDS)
    distinct = [len({int(o[n]) for o in others if o[n] > 0} - {int(truth[n])}) for n in range(len(truth))]
    return np.asarray(distinct, float) / (values - 1)


def _rate(values: np.ndarray) -> float | None:
    return round(float(np.mean(values)), 3) if values.size else None


def augmentation_margin(config: InputConfig) -> dict:
    """The closest two ``COLOURS`` are, and the most the brightness and contrast noise moves a pixel."""
    colours = {name: np.asarray(rgb, float) / 255 for name, rgb in synthetic.COLOURS.items()}
    closest = min((np.linalg.norm(colours[a] - colours[b]), a, b)
                  for a, b in itertools.combinations(colours, 2))
    # contrast scales each channel around the image's mean (mostly the grey background); brightness adds
    low, high = config.contrast_range
    shift = max(abs(c - m) * max(1 - low, high - 1) for rgb in colours.values() for c in rgb
                for m in (20 / 255, 100 / 255)) + config.brightness_delta
    return {"closest_colours": [closest[1], closest[2]], "distance": round(float(closest[0]), 3),
            "largest_shift": round(float(shift * np.sqrt(3)), 3)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, required=True, help="the weights file a pretraining wrote")
    ap.add_argument("--data", type=Path, required=True, help="the synthetic dataset it pretrained on")
    ap.add_argument("--fitted", type=int, default=400, help="fitted images scored beside the held-out ones")
    a = ap.parse_args()
    images, labels = pretrain.train_images(a.data)
    n_fit = round(len(images) * (1 - pretrain.HELD_OUT))
    size = images.shape[1]
    _, model = pretrain.classifier(size)
    state = PretrainState(pretrain_state(a.out), model, __import__("keras").optimizers.Adam())
    step = state.restore()
    held = {h: v[n_fit:] for h, v in labels.items()}
    fitted = {h: v[:a.fitted] for h, v in labels.items()}
    result = {"step": step, "augmentation": augmentation_margin(InputConfig())}
    # batch statistics last: a training-mode call moves the moving averages the others use
    for name, (x, y, training) in {"held_out": (images[n_fit:], held, False),
                                   "fitted": (images[:a.fitted], fitted, False),
                                   "held_out_batch_statistics": (images[n_fit:], held, True)}.items():
        result[name] = breakdown(predictions(model, x, size, training), y)
    print(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
