"""``showtell pretrain``: Inception v3 trained on the synthetic train split's scene labels, written
as an ordinary weights file that the real ``--inception-weights`` path loads.  A pretraining stopped
by a signal (exit 143, the encoder so far saved) is checked where the demo stops one:
``tests/test_demo.py``."""

from __future__ import annotations

import hashlib
import json
import shutil
import signal
import threading
from pathlib import Path

import numpy as np
import pytest
import tensorflow as tf

from showtell.captioning.data import synthetic
from showtell.captioning.model.network import build_encoder, build_model
from showtell.captioning.model.restoring import read_model_config
from showtell.captioning.weights.encoder import load_encoder_weights
from showtell.common.model_dir import ModelDir
from tests.helpers import TINY_DATA, TINY_SIZES, error_lines

# One worker: three tests share the module's pretraining (`encoder_file`), ≈ 40 s a worker —
# spread over three workers it was built three times.
pytestmark = pytest.mark.xdist_group("pretrain")


def test_scene_labels_name_the_shapes_in_reading_order():
    """Left to right, top to bottom — what is where, whatever order a caption names them in (the
    larger first): the caption's words, reordered, are the labels' words."""
    reordered = 0
    for index in range(60):
        scene = synthetic.make_scene(5, "train", index, 75)
        labels = synthetic.scene_labels(scene)
        named = [(synthetic.LABEL_HEADS[f"shape{i}_size"][labels[f"shape{i}_size"]],
                  synthetic.LABEL_HEADS[f"shape{i}_colour"][labels[f"shape{i}_colour"]],
                  synthetic.LABEL_HEADS[f"shape{i}_kind"][labels[f"shape{i}_kind"]])
                 for i in range(1, synthetic.MAX_SHAPES + 1)]
        present = [n for n in named if n != ("none", "none", "none")]
        assert "none" not in {w for n in present for w in n}, named  # no half-absent shape
        assert present == [(s.size, s.colour, s.kind) for s in scene.shapes]
        assert [s.cx if scene.layout != "vertical" else s.cy for s in scene.shapes] == sorted(
            s.cx if scene.layout != "vertical" else s.cy for s in scene.shapes)  # reading order
        words = synthetic.captions(scene)[0].split()  # "a small red circle left of a large …"
        phrases = [tuple(words[i + 1:i + 4]) for i, w in enumerate(words) if w == "a"]
        assert sorted(present) == sorted(phrases), (named, words)
        reordered += present != phrases
        assert synthetic.LAYOUTS[labels["layout"]] == scene.layout
        assert synthetic.split_index(synthetic.image_id("train", index)) == ("train", index)
    assert reordered  # some captions name the larger shape first: not the labels' order


@pytest.fixture(scope="module")
def encoder_file(tiny_data: Path, tmp_path_factory) -> Path:
    from showtell.trainer.pretraining.pretrain import pretrain

    out = tmp_path_factory.mktemp("pretrained") / "encoder.weights.h5"
    assert threading.current_thread() is threading.main_thread()  # where its handlers are installed
    before = signal.getsignal(signal.SIGTERM)
    from prometheus_client import CollectorRegistry

    from showtell.trainer.loop.prometheus import TrainerFigures

    registry = CollectorRegistry()
    result = pretrain(data=tiny_data, out=out, steps=3, batch_size=4, report_every_secs=0,
                      figures=TrainerFigures(registry))
    assert (result.started_from, result.steps) == (0, 3)
    # the trainer's figures, from the same loop: the step, the images trained on, the run
    assert registry.get_sample_value("showtell_trainer_step") == 3
    assert registry.get_sample_value("showtell_trainer_examples_total") == 3 * 4
    assert registry.get_sample_value("showtell_trainer_run_info", {"run_id": "pretrain"}) == 1
    assert set(result.accuracy) == set(synthetic.LABEL_HEADS)
    assert result.exit_code == 0  # its --steps ran out: finished
    assert signal.getsignal(signal.SIGTERM) is before  # the handler given back
    return out


def test_held_out_accuracy_scores_each_shape_head_on_the_images_that_have_that_shape():
    """A model that always answers "none" for the shapes scores 0 on them, not the share of
    scenes without that shape (0.74 for the third shape: how the old figure hid chance)."""
    from showtell.captioning.config import InputConfig
    from showtell.trainer.pretraining.heads import held_out_accuracy

    scenes = [synthetic.make_scene(0, "train", i, 75) for i in range(40)]
    labels = {h: np.array([synthetic.scene_labels(s)[h] for s in scenes]) for h in synthetic.LABEL_HEADS}
    images = np.stack([synthetic.draw(s, 75) for s in scenes]).astype("float32") / 255.0

    def answering(pick):
        def model(x, training):
            n = int(x.shape[0])
            return {h: tf.one_hot(pick(h)[:n], len(c)) for h, c in synthetic.LABEL_HEADS.items()}
        return model

    right = held_out_accuracy(answering(lambda h: labels[h]), images, labels, 75, InputConfig())
    assert right == dict.fromkeys(synthetic.LABEL_HEADS, 1.0)
    none = held_out_accuracy(answering(lambda h: np.zeros_like(labels[h])), images, labels, 75, InputConfig())
    assert none["shape3_kind"] == 0.0 and none["shape1_colour"] == 0.0
    assert (labels["shape3_kind"] == 0).mean() > 0.5  # most scenes have no third shape


@pytest.mark.slow
def test_pretrained_encoder_is_a_weights_file_the_trainer_loads(encoder_file: Path, tiny_data: Path,
                                                                 tmp_path: Path, showtell_main):
    # no temporary left: the weights file, and beside it the state a later pretraining resumes from
    assert sorted(p.name for p in encoder_file.parent.iterdir()) == ["encoder.pretrain", encoder_file.name]
    fresh = build_encoder(TINY_DATA.image_size)
    init = load_encoder_weights(fresh, str(encoder_file))
    assert init.kind == "keras-weights-h5" and len(init.loaded) == len(fresh.weights) and not init.ignored
    untrained = build_encoder(TINY_DATA.image_size)  # pretraining moved the weights off their init
    moved = [not np.allclose(a.numpy(), b.numpy())
             for a, b in zip(fresh.weights, untrained.weights, strict=True)]
    assert sum(moved) > len(moved) // 2

    model_dir = tmp_path / "model"
    trained = showtell_main("train", "--data", str(tiny_data), "--model-dir", str(model_dir), *TINY_SIZES,
                            "--steps", "1", "--inception-weights", str(encoder_file))
    assert trained.returncode == 0, trained.stderr[-3000:]
    model = build_model(read_model_config(ModelDir(model_dir)))  # phase 1: the encoder is the file's, frozen
    tf.train.Checkpoint(model=model).restore(str(model_dir / "ckpt-1")).expect_partial()
    for got, want in zip(model.encoder.weights, fresh.weights, strict=True):
        np.testing.assert_array_equal(got.numpy(), want.numpy())
    record = json.loads((model_dir / "showtell-model.json").read_text())["encoder_init"]
    assert record["sha256"] == hashlib.sha256(encoder_file.read_bytes()).hexdigest()
    assert record["kind"] == "keras-weights-h5" and record["tensors"] == len(fresh.weights)


def test_bad_pretrain_flags_and_data_are_one_line(tiny_data: Path, tmp_path: Path, showtell_main):
    def error(*argv: str) -> str:
        result = showtell_main("pretrain", *argv)
        assert result.returncode != 0
        return error_lines(result.stderr)[-1]

    out = str(tmp_path / "encoder.weights.h5")
    assert "--out" in error("--data", str(tiny_data), "--out", str(tmp_path / "encoder.h5"), "--steps", "1")
    assert "give --seconds or --steps" in error("--data", str(tiny_data), "--out", out)
    coco = tmp_path / "coco"
    shutil.copytree(tiny_data, coco)
    manifest = json.loads((coco / "dataset.json").read_text())
    (coco / "dataset.json").write_text(json.dumps({**manifest, "builder": "coco"}))
    line = error("--data", str(coco), "--out", out, "--steps", "1")
    assert line.startswith("showtell pretrain: error: --data ") and "no scene labels" in line
    assert "--inception-weights imagenet" in line
    assert "does not exist" in error("--data", str(tmp_path / "nowhere"), "--out", out, "--steps", "1")
    import socket

    with socket.socket() as taken:  # --prometheus-port, as the trainer's: a port in use is one line
        taken.bind(("127.0.0.1", 0))
        port = taken.getsockname()[1]
        line = error("--data", str(tiny_data), "--out", out, "--steps", "1", "--prometheus-port", str(port))
    assert line.startswith(f"showtell pretrain: error: --prometheus-host 127.0.0.1 --prometheus-port {port}: "
                           "cannot listen there"), line
    assert not (tmp_path / "encoder.weights.h5").exists()


def test_if_missing_keeps_an_encoder_that_is_there_and_skips_keywords(tmp_path: Path, showtell_main):
    """What the compose stack's pretrain service relies on: a second `up` does not pretrain again,
    and an --inception-weights of none/imagenet (passed as --out) means nothing to pretrain."""
    out = tmp_path / "encoder.weights.h5"
    out.write_bytes(b"an encoder written before")
    for target in (str(out), "none", "imagenet"):
        result = showtell_main("pretrain", "--data", str(tmp_path / "no-data-needed"), "--out", target,
                               "--if-missing", "--seconds", "5")
        assert result.returncode == 0, result.stderr
    assert out.read_bytes() == b"an encoder written before"
    assert not (tmp_path / "none").exists() and not Path("none").exists()


@pytest.mark.slow  # encoder_file pretrains (≈ 45 s here): not for `make check`
def test_if_missing_goes_on_with_a_pretraining_whose_encoder_is_a_first_one(encoder_file: Path,
                                                                          tmp_path: Path, showtell_main):
    """A stack stopped after the pretraining's first encoder: the next `up` must finish the
    pretraining, not keep the first encoder as if it were the pretrained one."""
    from showtell.captioning.config import (
        pretrain_progress,
        pretrain_state,
        pretrained_encoder,
        pretraining_done,
    )
    from showtell.common.files import sha256_of

    progress = pretrain_progress(pretrain_state(encoder_file))
    sha = sha256_of([encoder_file])
    assert progress["encoder"] == {"step": 3, "final": True, "sha256": sha} and progress["step"] == 3
    assert pretraining_done(encoder_file) and pretrained_encoder(encoder_file)["final"]
    out = tmp_path / "encoder.weights.h5"
    shutil.copy(encoder_file, out)
    shutil.copytree(pretrain_state(encoder_file), pretrain_state(out))
    for record, done in (({"step": 3, "final": False, "sha256": sha}, False),  # a first encoder
                         ({"step": 3, "final": True, "sha256": "other bytes"}, False),  # not this file's
                         ({"step": 3, "final": True, "sha256": sha}, True)):
        (pretrain_state(out) / "progress.json").write_text(json.dumps({**progress, "encoder": record}))
        assert pretraining_done(out) is done, record
    (pretrain_state(out) / "progress.json").write_text(json.dumps({**progress, "encoder": {
        "step": 3, "final": False, "sha256": sha}}))
    # --data names no dataset: a pretraining that goes on fails there, one that skips returns 0
    result = showtell_main("pretrain", "--data", str(tmp_path / "no-data"), "--out", str(out), "--if-missing",
                           "--steps", "1")
    assert result.returncode == 1, result.stderr
    assert "no-data: data directory does not exist" in error_lines(result.stderr)[-1]


@pytest.mark.slow
def test_pretraining_resumes_where_it_ended_as_one_longer_run(encoder_file: Path, tiny_data: Path,
                                                              tmp_path: Path, monkeypatch):
    """Two runs of 3 steps (the second resuming from the state beside the weights file) end as one
    run of 6: the same step count, Adam's step count carried over, the same batches (the resumed
    run skips to where the first stopped — seen in what ``pretrain()`` feeds its train step), so
    the same loss and weights; ``fresh`` starts over."""
    from showtell.captioning.config import pretrain_state as state_dir
    from showtell.trainer.pretraining import pretrain as pretraining
    from showtell.trainer.pretraining.pretrain import pretrain

    fed: list[np.ndarray] = []  # the images of every batch pretrain() trains on, in order
    real_step = pretraining.make_train_step
    # The runs after the resumed one are read for the batches pretrain() feeds them and what they
    # report, never for what they learn: their steps take the batch and skip the training (each
    # real one traces Inception's gradient, ≈ 25 CPU-s a run).
    training = [True]

    def recording(model, optimizer):
        step = real_step(model, optimizer)

        def train(x, y):
            fed.append(x.numpy())
            return step(x, y) if training[0] else tf.constant(0.0)

        return train

    monkeypatch.setattr(pretraining, "make_train_step", recording)
    out = tmp_path / "encoder.weights.h5"  # the fixture's 3-step run, copied: its state goes on
    shutil.copy2(encoder_file, out)
    shutil.copytree(state_dir(encoder_file), state_dir(out))
    resumed = pretrain(data=tiny_data, out=out, steps=3, batch_size=4)
    assert (resumed.started_from, resumed.steps) == (3, 6)
    saved = tf.train.latest_checkpoint(str(state_dir(out)))
    assert saved.endswith("ckpt-6")
    iterations = [name for name, _ in tf.train.list_variables(saved) if "optimizer" in name
                  and "iteration" in name]
    assert [int(tf.train.load_variable(saved, name)) for name in iterations] == [6], iterations
    assert json.loads((state_dir(out) / "progress.json").read_text())["step"] == 6

    # One run of 6 from nothing: its last 3 batches are the ones the resumed run trained on.
    # The losses and weights after training are not compared: TensorFlow's CPU kernels are not
    # bit-reproducible, and on a loaded machine two such runs ended 8 % apart in loss, 4.5 % in
    # weights — as far apart as a planted resume that restored no weights.  What is exact: the
    # batches a resume takes (here) and the weights it starts from (below).
    taken_up, fed[:], training[0] = list(fed), [], False
    longer = pretrain(data=tiny_data, out=tmp_path / "longer.weights.h5", steps=6, batch_size=4, fresh=True)
    assert (longer.started_from, longer.steps, len(fed), len(taken_up)) == (0, 6, 6, 3)
    for x_long, x_resumed in zip(fed[3:], taken_up, strict=True):
        np.testing.assert_array_equal(x_long, x_resumed)
    assert not np.array_equal(fed[0], taken_up[0])  # not the first batches again

    # What a resume starts from is exactly what the last run ended with: the fixture's state (step
    # 3) restored into a classifier initialised otherwise holds the weights its encoder file holds.
    import keras

    from showtell.trainer.pretraining.heads import classifier, make_train_step
    from showtell.trainer.pretraining.pretrain import PretrainState

    keras.utils.set_random_seed(1)
    encoder, model = classifier(75)
    optimizer = keras.optimizers.Adam()
    make_train_step(model, optimizer)  # builds its slots, as a run does before restoring
    assert PretrainState(state_dir(encoder_file), model, optimizer).restore() == 3
    saved = build_encoder(75)
    saved.load_weights(str(encoder_file))
    for restored, written in zip(encoder.weights, saved.weights, strict=True):
        np.testing.assert_array_equal(restored.numpy(), written.numpy())
    # fresh, and with a budget spent before its first step (loading, building): it still trains
    # one, and ends on its own terms (the demo's short pretraining on a loaded machine)
    again = pretrain(data=tiny_data, out=out, seconds=0.01, batch_size=4, fresh=True)
    assert (again.started_from, again.steps, again.exit_code) == (0, 1, 0)
    # and with a first encoder asked for too, the time limit falls on the first encoder's step: one
    # step more, so the final encoder is not the first one again (a follower waits for a newer one)
    saves: list[int] = []
    real_save = pretraining.EncoderPreview.save
    monkeypatch.setattr(pretraining.EncoderPreview, "save",
                        lambda preview: (saves.append(preview.runner.step), real_save(preview))[1])
    both = pretrain(data=tiny_data, out=out, seconds=0.01, first_save_after=0.001, batch_size=4, fresh=True)
    assert (saves, both.steps, both.exit_code) == ([1], 2, 0)
    assert json.loads((state_dir(out) / "progress.json").read_text())["encoder"]["step"] == 2
