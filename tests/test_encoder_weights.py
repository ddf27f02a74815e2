"""Pretrained encoder weights: Keras .h5 (both layouts) and TF-slim checkpoints round-trip into the
captioner's encoder; bad files fail with one line naming the tensor and leave the encoder as it was."""

from __future__ import annotations

import shutil

import h5py
import numpy as np
import pytest
import tensorflow as tf

from showtell.captioning.config import ModelConfig
from showtell.captioning.model.network import build_model
from showtell.captioning.weights.encoder import load_encoder_weights
from showtell.common.errors import WeightsError
from tests import slim_reference, weights_files

SIZE = 75


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    """A random Inception v3 and its weights in both Keras layouts."""
    out = tmp_path_factory.mktemp("weights")
    encoder = weights_files.random_encoder(SIZE, seed=5)
    return {
        "values": weights_files.values(encoder),
        "weights.h5": weights_files.save_keras3(encoder, out / "inception.weights.h5"),
        "h5": weights_files.save_keras2_layout(encoder, out / "inception_notop.h5"),
    }


@pytest.fixture(scope="module")
def slim(tmp_path_factory):
    values = slim_reference.random_params(SIZE, seed=7)
    extra = {"InceptionV3/Logits/Conv2d_1c_1x1/weights": np.zeros((1, 1, 2048, 1001), np.float32),
             "global_step": np.array(1000, np.int64)}
    prefix = str(tmp_path_factory.mktemp("slim") / "inception_v3.ckpt")
    slim_reference.save_slim_checkpoint(prefix, {**values, **extra})
    return {"values": values, "prefix": prefix, "extra": sorted(extra)}


@pytest.fixture(scope="module")
def captioner():
    """The encoder inside a full captioner, frozen as phase 1 builds it — one for the module's
    loads (≈ 2.3 CPU-s a build): a load sets every encoder tensor or, refused, none, and each test
    compares with what the encoder held before its own loads."""
    return build_model(ModelConfig(vocab_size=20, image_size=SIZE, embedding_size=16, lstm_units=16))


@pytest.mark.parametrize("layout", ["weights.h5", "h5"])
def test_keras_file_round_trip(reference, layout, captioner):
    model = captioner
    init = load_encoder_weights(model.encoder, str(reference[layout]))
    got = weights_files.values(model.encoder)
    assert len(got) == len(reference["values"]) == len(init.loaded) == 376
    for mine, theirs, (name, _, shape) in zip(got, reference["values"], init.loaded, strict=True):
        assert mine.shape == tuple(shape)
        np.testing.assert_array_equal(mine, theirs, err_msg=name)
    assert init.kind == {"weights.h5": "keras-weights-h5", "h5": "keras-h5"}[layout]
    assert len(init.sha256) == 64 and init.ignored == []


def test_slim_checkpoint_computes_the_slim_network(slim, captioner):
    """Every slim tensor lands on its Keras layer: the encoder's features equal an independent
    slim-named forward pass (a swap of two same-shaped convolutions would not)."""
    model = captioner
    init = load_encoder_weights(model.encoder, slim["prefix"])
    assert init.kind == "slim-checkpoint"
    assert len(init.loaded) == 376 and {name for name, _, _ in init.loaded} == set(slim["values"])
    assert init.ignored == slim["extra"]
    for name, path, _ in init.loaded:  # each tensor equals the file's
        variable = next(v for v in model.encoder.weights if v.path == path)
        np.testing.assert_array_equal(variable.numpy(), slim["values"][name], err_msg=name)
    images = tf.random.uniform([2, SIZE, SIZE, 3], -1.0, 1.0, seed=3)
    expected = slim_reference.features(images, slim_reference.Params(slim["values"])).numpy()
    np.testing.assert_allclose(model.features(images).numpy(), expected, rtol=1e-4, atol=1e-4)

    swapped = dict(slim["values"])
    a, b = (f"InceptionV3/Mixed_6b/Branch_{i}/Conv2d_0a_1x1/weights" for i in (1, 2))
    swapped[a], swapped[b] = swapped[b], swapped[a]
    assert not np.allclose(slim_reference.features(images, slim_reference.Params(swapped)).numpy(),
                           expected, rtol=1e-3, atol=1e-3), "the comparison cannot see a misplaced tensor"


def _assert_untouched(model, before):
    for now, then in zip(weights_files.values(model.encoder), before, strict=True):
        np.testing.assert_array_equal(now, then)


def test_slim_missing_and_misshaped_tensors(slim, tmp_path, captioner):
    name = "InceptionV3/Mixed_6b/Branch_1/Conv2d_0b_1x7/weights"
    missing = {k: v for k, v in slim["values"].items() if k != name}
    slim_reference.save_slim_checkpoint(str(tmp_path / "missing.ckpt"), missing)
    model = captioner
    before = weights_files.values(model.encoder)
    with pytest.raises(WeightsError) as err:
        load_encoder_weights(model.encoder, str(tmp_path / "missing.ckpt"))
    assert f"tensor {name} is missing (expected shape [1, 7, 128, 128])" in str(err.value)
    assert "\n" not in str(err.value)
    _assert_untouched(model, before)

    bad = "InceptionV3/Mixed_7c/Branch_3/Conv2d_0b_1x1/BatchNorm/moving_mean"
    misshaped = {**slim["values"], bad: np.zeros(191, np.float32)}
    slim_reference.save_slim_checkpoint(str(tmp_path / "misshaped.ckpt"), misshaped)
    with pytest.raises(WeightsError, match=rf"tensor {bad} has shape \[191\], expected \[192\]"):
        load_encoder_weights(model.encoder, str(tmp_path / "misshaped.ckpt"))
    _assert_untouched(model, before)


@pytest.mark.parametrize("layout", ["weights.h5", "h5"])
def test_keras_file_missing_and_misshaped_tensors(reference, layout, tmp_path, captioner):
    model = captioner
    before = weights_files.values(model.encoder)
    path = tmp_path / reference[layout].name
    shutil.copy(reference[layout], path)
    with h5py.File(path, "a") as f:
        datasets = []
        f.visititems(lambda n, obj: datasets.append(n) if isinstance(obj, h5py.Dataset) else None)
        victim = sorted(datasets)[7]
        shape = f[victim].shape
        del f[victim]
    with pytest.raises(WeightsError) as err:
        load_encoder_weights(model.encoder, str(path))
    message = str(err.value)
    assert victim in message and f"is missing (expected shape {list(shape)})" in message, message
    _assert_untouched(model, before)

    with h5py.File(path, "a") as f:
        f.create_dataset(victim, data=np.zeros((3, *shape[1:]), np.float32))
    with pytest.raises(WeightsError, match=rf"{victim} has shape \[3[,\]].*expected \[{shape[0]}"):
        load_encoder_weights(model.encoder, str(path))
    _assert_untouched(model, before)


def test_not_weights_at_all(tmp_path, captioner):
    model = captioner
    garbage = tmp_path / "garbage.h5"
    garbage.write_bytes(b"not hdf5" * 100)
    with pytest.raises(WeightsError, match=r"garbage\.h5: not a readable HDF5 file"):
        load_encoder_weights(model.encoder, str(garbage))
    with pytest.raises(WeightsError, match=r"nothing\.ckpt: no such file or checkpoint"):
        load_encoder_weights(model.encoder, str(tmp_path / "nothing.ckpt"))
    not_ckpt = tmp_path / "inception_v3.ckpt"
    not_ckpt.write_bytes(b"\x00" * 64)
    with pytest.raises(WeightsError, match=r"inception_v3\.ckpt: not a readable TensorFlow checkpoint"):
        load_encoder_weights(model.encoder, str(not_ckpt))
