"""Pretrained Inception v3 weights for the encoder: Keras ``.h5`` files, TF-slim checkpoints,
``imagenet`` (Keras' download) or ``none``.

Every source is turned into one plan — (encoder variable, name in the file, value or missing) —
that is checked as a whole before anything is assigned, so a bad file fails with one line naming
the tensor, the shape the encoder expects and the shape the file holds, and leaves the encoder
untouched.  Keras' own ``load_weights`` is not used for ``.h5`` files because its errors name the
*loading* model's auto-numbered layers (``conv2d_290``), which mean nothing to the user; the two
Keras layouts are read with h5py in the same layer order Keras itself uses.
"""

from __future__ import annotations

import hashlib
import logging
import re
import socket
from dataclasses import dataclass, field
from pathlib import Path

import h5py
import keras
import numpy as np
import tensorflow as tf

from showtell.captioning.config import WEIGHTS_IMAGENET, WEIGHTS_NONE
from showtell.captioning.internals import keras_layer_name
from showtell.captioning.weights import slim_names
from showtell.common.errors import WeightsError, first_line
from showtell.common.files import sha256_of

log = logging.getLogger(__name__)

NONE, IMAGENET = WEIGHTS_NONE, WEIGHTS_IMAGENET
KERAS_SUFFIXES = (".h5", ".hdf5")
IMAGENET_FILE = "inception_v3_weights_tf_dim_ordering_tf_kernels_notop.h5"
IMAGENET_URL = "https://storage.googleapis.com/tensorflow/keras-applications/inception_v3/" + IMAGENET_FILE
IMAGENET_MD5 = "bcbd6486424b2319ff4ef7d526e38f63"  # as keras.applications.InceptionV3
DOWNLOAD_TIMEOUT_SECS = 30.0
FLAG = "--inception-weights"


@dataclass(frozen=True)
class EncoderInit:
    """Where the encoder's starting weights came from, and exactly which tensors were loaded."""

    source: str  # as given: a path, "imagenet" or "none"
    kind: str  # none | keras-h5 | keras-weights-h5 | slim-checkpoint (imagenet is a keras-h5)
    sha256: str | None = None
    loaded: list[tuple[str, str, tuple[int, ...]]] = field(default_factory=list)  # file name, variable
    ignored: list[str] = field(default_factory=list)  # tensors in the file the encoder has no use for

    @property
    def pretrained(self) -> bool:
        return self.kind != NONE

    def metadata(self) -> dict:
        """What the model dir records (``showtell-model.json``)."""
        return {"source": self.source, "kind": self.kind, "sha256": self.sha256,
                "tensors": len(self.loaded), "ignored": len(self.ignored)}

    def report(self) -> str:
        """Tab-separated: tensor in the file → encoder variable, shape; then the ignored ones."""
        lines = ["# file tensor\tencoder variable\tshape"]
        lines += [f"{name}\t{path}\t{list(shape)}" for name, path, shape in self.loaded]
        lines += [f"{name}\t(ignored)\t" for name in self.ignored]
        return "\n".join(lines) + "\n"


def load_encoder_weights(encoder: keras.Model, source: str) -> EncoderInit:
    """Load ``source`` into ``encoder`` (all or nothing); raise ``WeightsError`` on any mismatch."""
    if source == NONE:
        return EncoderInit(NONE, NONE)
    if source == IMAGENET:
        path, kind = imagenet_file(), "keras-h5"
    else:
        path, kind = Path(source), _kind(source)
    if kind == "slim-checkpoint":
        plan, ignored = _slim_plan(encoder, str(path))
        files = _checkpoint_files(str(path))
    else:
        plan, ignored, kind = _keras_plan(encoder, path)
        files = [path]
    _check(plan, source)
    for variable, _, value in plan:
        variable.assign(value)
    init = EncoderInit(source, kind, sha256_of(files),
                       [(name, v.path, tuple(v.shape)) for v, name, _ in plan], ignored)
    log.info("encoder initialised from %s (%s, sha256 %s…): %d tensors loaded, %d ignored%s",
             source, kind, init.sha256[:12], len(init.loaded), len(ignored),
             f" ({_summarise(ignored)})" if ignored else "")
    return init


def _kind(source: str) -> str:
    path = Path(source)
    if source.endswith(KERAS_SUFFIXES):
        if not path.is_file():
            raise WeightsError(f"{FLAG} {source}: no such file")
        return "keras"
    if path.is_file() or Path(source + ".index").is_file():
        return "slim-checkpoint"
    raise WeightsError(
        f"{FLAG} {source}: no such file or checkpoint; pass a Keras .h5/.weights.h5 file, a TF-slim "
        f"checkpoint (inception_v3.ckpt), {IMAGENET} or {NONE}"
    )


# -- the plan and its check -------------------------------------------------------------------

Plan = list[tuple[keras.Variable, str, np.ndarray | None]]


def _check(plan: Plan, source: str) -> None:
    problems = []
    for variable, name, value in plan:
        expected = tuple(variable.shape)
        if value is None:
            problems.append(f"tensor {name} is missing (expected shape {list(expected)})")
        elif tuple(value.shape) != expected:
            problems.append(f"tensor {name} has shape {list(value.shape)}, expected {list(expected)}")
    if problems:
        more = f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
        raise WeightsError(f"{FLAG} {source}: {problems[0]}{more}; is it Inception v3 without its top?")


# -- Keras .h5 (Keras 2 layout) and .weights.h5 (Keras 3 layout) -------------------------------

def weighted_layers(encoder: keras.Model) -> list[keras.layers.Layer]:
    """The encoder's layers that own variables, in ``encoder.layers`` order (Keras' save order)."""
    return [layer for layer in encoder.layers if layer.weights]


def _keras_plan(encoder: keras.Model, path: Path) -> tuple[Plan, list[str], str]:
    try:
        with h5py.File(path, "r") as f:
            root = f.get("model_weights", f)
            if "layer_names" in root.attrs:
                plan, ignored = _legacy_plan(encoder, root)
                return plan, ignored, "keras-h5"
            if "layers" in root:
                plan, ignored = _keras3_plan(encoder, root["layers"])
                return plan, ignored, "keras-weights-h5"
    except OSError as exc:
        raise WeightsError(f"{FLAG} {path}: not a readable HDF5 file ({exc})") from exc
    raise WeightsError(f"{FLAG} {path}: not a Keras weights file (neither 'layer_names' nor 'layers' inside)")


def _text(value) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _legacy_plan(encoder: keras.Model, root: h5py.Group) -> tuple[Plan, list[str]]:
    """Keras 2 layout (the published ``…_notop.h5``): one group per layer, in layer order;
    each lists its ``weight_names`` (``conv2d_1/kernel:0``).  Paired by order, as Keras does."""
    groups = [_text(n) for n in root.attrs["layer_names"]]
    groups = [g for g in groups if len(root[g].attrs.get("weight_names", ())) > 0]
    layers = weighted_layers(encoder)
    ignored: list[str] = []
    if len(groups) > len(layers):  # a file with the classifier: use the backbone, ignore the top
        ignored = [f"{g}/{_text(w)}" for g in groups[len(layers):] for w in root[g].attrs["weight_names"]]
        groups = groups[:len(layers)]
    if len(groups) < len(layers):
        raise WeightsError(
            f"{FLAG} {root.file.filename}: weights for {len(groups)} layers, Inception v3 has "
            f"{len(layers)}; pass weights saved from keras.applications.InceptionV3(include_top=False)"
        )
    plan: Plan = []
    for group_name, layer in zip(groups, layers, strict=True):
        group = root[group_name]
        by_key = {_text(w).split("/")[-1].split(":")[0]: _text(w) for w in group.attrs["weight_names"]}
        for variable in layer.weights:
            stored = by_key.get(variable.name)  # the dataset name inside the layer's group
            value = group[stored][()] if stored is not None and stored in group else None
            plan.append((variable, f"{group_name}/{stored or variable.name}", value))
    return plan, ignored


def _keras3_plan(encoder: keras.Model, layers_group: h5py.Group) -> tuple[Plan, list[str]]:
    """Keras 3 layout: ``layers/<class_in_snake_case>[_N]/vars/<i>``, N counting each class in
    ``model.layers`` order (names are class-based so files load into differently named models)."""
    plan: Plan = []
    used: set[str] = set()
    seen: dict[str, int] = {}
    for layer in encoder.layers:
        base = keras_layer_name(type(layer).__name__)
        seen[base] = seen.get(base, -1) + 1
        key = base if seen[base] == 0 else f"{base}_{seen[base]}"
        for i, variable in enumerate(layer.weights):
            name = f"layers/{key}/vars/{i}"
            dataset = layers_group.get(f"{key}/vars/{i}")
            plan.append((variable, name, None if dataset is None else dataset[()]))
            used.add(name)
    found: list[str] = []
    layers_group.visititems(
        lambda n, obj: found.append(f"layers/{n}") if isinstance(obj, h5py.Dataset) else None
    )
    return plan, sorted(set(found) - used)


# -- TF-slim checkpoints ------------------------------------------------------------------------

def _creation_index(layer: keras.layers.Layer) -> int:
    match = re.search(r"_(\d+)$", layer.name)
    return int(match.group(1)) if match else 0


def conv_bn_pairs(encoder: keras.Model) -> list[tuple[keras.layers.Layer, keras.layers.Layer]]:
    """(Conv2D, its BatchNormalization) in creation order — the order of ``slim_names``.

    ``encoder.layers`` is in graph order, which interleaves branches differently; auto-generated
    names (``conv2d``, ``conv2d_1``…) carry the creation counter.  Each pair is checked to be
    wired conv → batch norm, so a future Keras that builds the network differently fails here.
    """
    convs = sorted((la for la in encoder.layers if isinstance(la, keras.layers.Conv2D)), key=_creation_index)
    bns = sorted((la for la in encoder.layers if isinstance(la, keras.layers.BatchNormalization)),
                 key=_creation_index)
    pairs = list(zip(convs, bns, strict=True))
    if len(pairs) != len(slim_names.CONV_SCOPES) or any(bn.input is not conv.output for conv, bn in pairs):
        raise RuntimeError("keras.applications.InceptionV3 is not laid out as "
                           "showtell.captioning.weights.slim_names expects")
    return pairs


def _slim_plan(encoder: keras.Model, path: str) -> tuple[Plan, list[str]]:
    try:
        reader = tf.train.load_checkpoint(path)
        shapes = reader.get_variable_to_shape_map()
    except (tf.errors.OpError, ValueError) as exc:
        reason = first_line(exc, 200)
        raise WeightsError(f"{FLAG} {path}: not a readable TensorFlow checkpoint ({reason})") from exc
    plan: Plan = []
    for scope, (conv, bn) in zip(slim_names.CONV_SCOPES, conv_bn_pairs(encoder), strict=True):
        for layer, names in ((conv, slim_names.CONV_TENSORS), (bn, slim_names.BN_TENSORS)):
            for variable in layer.weights:
                name = f"{scope}/{names[variable.name]}"
                plan.append((variable, name, reader.get_tensor(name) if name in shapes else None))
    used = {name for _, name, _ in plan}
    return plan, sorted(set(shapes) - used)


def _checkpoint_files(prefix: str) -> list[Path]:
    """A V1 checkpoint is one file; a V2 one is ``prefix.index`` plus its data shards."""
    path = Path(prefix)
    if path.is_file():
        return [path]
    return [Path(prefix + ".index"), *sorted(path.parent.glob(path.name + ".data-*"))]


# -- imagenet, fingerprints ---------------------------------------------------------------------

def imagenet_file() -> Path:
    """Keras' published notop weights: from Keras' cache, else downloaded (bounded wait)."""
    previous = socket.getdefaulttimeout()
    socket.setdefaulttimeout(DOWNLOAD_TIMEOUT_SECS)  # urlretrieve has no timeout of its own
    try:
        return Path(keras.utils.get_file(IMAGENET_FILE, IMAGENET_URL, cache_subdir="models",
                                         file_hash=IMAGENET_MD5))
    except Exception as exc:  # get_file raises a bare Exception on network failure
        reason = first_line(exc, 200)
        raise WeightsError(
            f"{FLAG} {IMAGENET}: cannot download {IMAGENET_FILE} ({reason}); on a machine without "
            f"network, fetch {IMAGENET_URL} elsewhere and pass {FLAG} /path/to/{IMAGENET_FILE}"
        ) from exc
    finally:
        socket.setdefaulttimeout(previous)


def weights_digest(variables: list) -> str:
    """A fingerprint of the values of ``variables`` (the feature caches' notion of "same encoder":
    the trainer's and the evaluator's, which takes it at every checkpoint): sha256 over each
    variable's position, dtype, shape and the farmhash64 of its bytes (``tf.fingerprint``, taken
    where the values are — no copy of Inception's 90 MB into Python: 0.10–0.16 s for its 376
    variables here, against 0.19–0.25 s hashing the bytes in Python).  Positions, not names: Keras
    numbers layer names per process (``conv2d_94`` in a second build), and the same encoder built
    twice in one process must not miss its cache."""
    import tensorflow as tf

    digest = hashlib.sha256()
    for position, variable in enumerate(variables):
        value = tf.convert_to_tensor(variable)
        fingerprint = tf.fingerprint(tf.reshape(value, [1, -1])).numpy().tobytes()
        digest.update(f"{position}:{value.dtype.name}:{value.shape.as_list()};".encode())
        digest.update(fingerprint)
    return digest.hexdigest()


def _summarise(names: list[str]) -> str:
    heads = sorted({"/".join(n.split("/")[:2]) for n in names})
    return ", ".join(h + "/…" for h in heads[:4]) + (" …" if len(heads) > 4 else "")
