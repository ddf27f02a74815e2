"""The published Show-and-Tell model: an im2txt checkpoint, written under im2txt's names, imported
into a showtell model that predicts the very next-word distributions im2txt's own forward pass
does — checked against an independent reference written from im2txt's model code (slim
Inception v3 → ``image_embedding`` → ``BasicLSTMCell`` fed the image first, then words →
``logits``), which shares nothing with the mapping under test."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import tensorflow as tf

from showtell.captioning.data.vocab import Vocabulary, first_difference, read_word_counts, same_ids
from showtell.captioning.weights.im2txt import import_checkpoint
from showtell.common.errors import WeightsError
from tests import slim_reference
from tests.coco_layout import coco_args, write_layout
from tests.coco_layout import records as coco_records
from tests.helpers import error_lines

SIZE, E, U = 75, 16, 12  # embedding ≠ LSTM size: a transposed or mis-split kernel cannot fit
# word_counts.txt as im2txt writes it (most frequent first; <S> and </S> counted like words); one
# line in the b'…' form im2txt's Python 3 port wrote
WORD_COUNTS = ["a 40", "<S> 30", "</S> 30", "b'man' 12", "on 9", "dog 7", "the 6", "riding 5", "wave 4",
               "surfboard 3"]
UNUSED_ROWS = 3  # im2txt sizes the model for 12000 words and uses fewer: rows nobody owns


def _reference_log_probs(values: dict, images: np.ndarray, words: list[int]) -> list[np.ndarray]:
    """im2txt's inference, step by step, in float64 numpy over its own ids (``words``)."""
    features = slim_reference.features(tf.constant(images), slim_reference.Params(values)).numpy()
    kernel = values["lstm/basic_lstm_cell/kernel"].astype(np.float64)
    bias = values["lstm/basic_lstm_cell/bias"].astype(np.float64)

    def sigmoid(x):
        return 1 / (1 + np.exp(-x))

    def basic_lstm_cell(x, c, h):  # tf.contrib.rnn.BasicLSTMCell, forget_bias=1.0
        i, j, f, o = np.split(np.concatenate([x, h], 1) @ kernel + bias, 4, axis=1)
        c = c * sigmoid(f + 1.0) + sigmoid(i) * np.tanh(j)
        return c, np.tanh(c) * sigmoid(o)

    batch = images.shape[0]
    c, h = np.zeros((batch, U)), np.zeros((batch, U))
    c, h = basic_lstm_cell(features.astype(np.float64) @ values["image_embedding/weights"], c, h)
    out = []
    for word in words:
        x = np.repeat(values["seq_embedding/map"][word][None].astype(np.float64), batch, 0)
        c, h = basic_lstm_cell(x, c, h)
        logits = h @ values["logits/weights"] + values["logits/biases"]
        top = logits.max(1, keepdims=True)
        out.append(logits - top - np.log(np.exp(logits - top).sum(1, keepdims=True)))
    return out


@pytest.fixture(scope="module")
def im2txt(tmp_path_factory):
    rng = np.random.default_rng(11)
    rows = len(WORD_COUNTS) + 1 + UNUSED_ROWS
    values = dict(slim_reference.random_params(SIZE, seed=5))
    values.update({
        "image_embedding/weights": rng.normal(0, 0.05, (2048, E)),
        "seq_embedding/map": rng.normal(0, 0.5, (rows, E)),
        "lstm/basic_lstm_cell/kernel": rng.normal(0, 0.4, (E + U, 4 * U)),
        "lstm/basic_lstm_cell/bias": rng.normal(0, 0.5, (4 * U,)),
        "logits/weights": rng.normal(0, 0.8, (U, rows)),
        "logits/biases": rng.normal(0, 0.3, (rows,)),
    })
    values = {k: v.astype(np.float32) for k, v in values.items()}
    base = tmp_path_factory.mktemp("im2txt")
    prefix = str(base / "model.ckpt-3000000")
    slim_reference.save_slim_checkpoint(prefix, {**values, "global_step": np.int64(3000000)})
    counts = base / "word_counts.txt"
    counts.write_text("\n".join(WORD_COUNTS) + "\n")
    return {"prefix": prefix, "values": values, "word_counts": counts, "rows": rows, "base": base}


def test_next_word_log_probabilities_equal_im2txts_own(im2txt):
    imported = import_checkpoint(im2txt["prefix"], im2txt["word_counts"], image_size=SIZE)
    vocab, model = imported.vocab, imported.model
    assert imported.step == 3000000 and (model.config.embedding_size, model.config.lstm_units) == (E, U)
    entries = [w for w, _ in read_word_counts(im2txt["word_counts"], "--im2txt-vocab")]
    assert entries[3] == "man"  # b'man' read as the word
    im2txt_id = {w: i for i, w in enumerate(entries)} | {"<UNK>": len(entries)}
    assert len(vocab) == im2txt["rows"]  # every row kept: the softmax is over im2txt's logits
    # showtell's id k is im2txt's row `order[k]`
    order = [im2txt_id.get(w, int(w[len("<unused-"):-1]) if w.startswith("<unused-") else None)
             for w in vocab.words]
    assert sorted(order) == list(range(im2txt["rows"]))

    sentence = ["<S>", "a", "man", "riding", "a", "wave"]
    images = np.random.default_rng(2).uniform(-1, 1, (2, SIZE, SIZE, 3)).astype(np.float32)
    expected = _reference_log_probs(im2txt["values"], images, [im2txt_id[w] for w in sentence])
    state = model.initial_state(tf.constant(images))
    for word, reference in zip(sentence, expected, strict=True):
        ids = tf.constant([vocab.word_to_id(word)] * 2, tf.int32)
        log_probs, state = model.step(ids, state)
        np.testing.assert_allclose(log_probs.numpy(), reference[:, order], atol=2e-4, err_msg=word)
    # …and the reference is sensitive to what the mapping must get right: im2txt's gates taken in
    # Keras' order (no reordering) give other probabilities
    kernel = im2txt["values"]["lstm/basic_lstm_cell/kernel"]
    swapped = dict(im2txt["values"])
    swapped["lstm/basic_lstm_cell/kernel"] = np.concatenate(np.split(kernel, 4, axis=1)[::-1], axis=1)
    other = _reference_log_probs(swapped, images, [im2txt_id["<S>"]])[0]
    assert np.abs(other - expected[0]).max() > 1e-2


@pytest.mark.slow
def test_a_checkpoint_with_tf_1_0_lstm_names_imports_the_same_weights(im2txt, tmp_path: Path):
    """im2txt trained under TF ≤ 1.0 wrote the LSTM as ``lstm/BasicLSTMCell/Linear/{Matrix,Bias}``."""
    renamed = {("lstm/BasicLSTMCell/Linear/Matrix" if k == "lstm/basic_lstm_cell/kernel" else
                "lstm/BasicLSTMCell/Linear/Bias" if k == "lstm/basic_lstm_cell/bias" else k): v
               for k, v in im2txt["values"].items()}
    assert "lstm/basic_lstm_cell/kernel" not in renamed
    prefix = str(tmp_path / "model.ckpt-1000")
    slim_reference.save_slim_checkpoint(prefix, {**renamed, "global_step": np.int64(1000)})
    old = import_checkpoint(prefix, im2txt["word_counts"], image_size=SIZE).model
    new = import_checkpoint(im2txt["prefix"], im2txt["word_counts"], image_size=SIZE).model
    assert [w.name for w in old.lstm.weights] == [w.name for w in new.lstm.weights]
    for a, b in zip(old.lstm.weights, new.lstm.weights, strict=True):
        np.testing.assert_array_equal(a.numpy(), b.numpy())


def test_missing_or_misshapen_tensors_are_named_in_one_line(im2txt, tmp_path: Path):
    values = dict(im2txt["values"])
    del values["logits/biases"]
    slim_reference.save_slim_checkpoint(str(tmp_path / "a"), values)
    with pytest.raises(WeightsError, match=r"a: no tensor logits/biases; is it an im2txt"):
        import_checkpoint(str(tmp_path / "a"), im2txt["word_counts"], image_size=SIZE)
    values = dict(im2txt["values"])
    values["lstm/basic_lstm_cell/kernel"] = values["lstm/basic_lstm_cell/kernel"][:, : 4 * U - 4]
    slim_reference.save_slim_checkpoint(str(tmp_path / "b"), values)
    with pytest.raises(WeightsError, match=r"lstm/basic_lstm_cell/kernel has shape \[28, 44\], expected "
                                           r"\[28, 48\]"):
        import_checkpoint(str(tmp_path / "b"), im2txt["word_counts"], image_size=SIZE)
    (tmp_path / "bad.txt").write_text("a 4\nnot-a-count-line\n")
    with pytest.raises(WeightsError, match=r"bad.txt: line 2 is not 'word count'"):
        import_checkpoint(im2txt["prefix"], tmp_path / "bad.txt", image_size=SIZE)


@pytest.mark.slow
def test_import_then_caption_and_evaluate(im2txt, tmp_path: Path, showtell_main, tiny_data: Path):
    model_dir = tmp_path / "imported"
    result = showtell_main("import-im2txt", "--im2txt-checkpoint", im2txt["prefix"], "--im2txt-vocab",
                           str(im2txt["word_counts"]), "--model-dir", str(model_dir),
                           "--image-size", str(SIZE))
    assert result.returncode == 0, result.stderr[-3000:]
    assert (model_dir / "ckpt-3000000.index").exists() and (model_dir / "vocab.txt").exists()
    assert "lstm bias, gates reordered, forget gate + 1" in result.stdout  # the mapping table is shown
    picture = tmp_path / "picture.png"
    picture.write_bytes(tf.io.encode_png(np.full((90, 120, 3), 128, np.uint8)).numpy())
    result = showtell_main("caption", "--model-dir", str(model_dir), str(picture))
    assert result.returncode == 0, result.stderr[-3000:]
    caption = result.stdout.strip().split("\t")[1].split()  # "<path>\t<caption>"
    known = {w for w, _ in read_word_counts(im2txt["word_counts"], "--im2txt-vocab")} | {"<UNK>"}
    assert caption and all(w in known or w.startswith("<unused-") for w in caption), result.stdout
    # the evaluator scores it on a dataset of another vocabulary (references re-encoded into its own)
    result = showtell_main("evaluate", "--once", "--json", "--model-dir", str(model_dir),
                           "--data", str(tiny_data), "--meteor", "false", "--tokenizer", "regex")
    assert result.returncode == 0, result.stderr[-3000:]
    report = json.loads(result.stdout)
    assert report["step"] == 3000000 and report["metrics"]["unknown_reference_words"] > 0
    again = showtell_main("import-im2txt", "--im2txt-checkpoint", im2txt["prefix"], "--im2txt-vocab",
                          str(im2txt["word_counts"]), "--model-dir", str(model_dir))
    assert again.returncode == 1
    assert error_lines(again.stderr) == [
        f"showtell import-im2txt: error: --model-dir {model_dir}: not empty; import into a new directory"]


@pytest.mark.slow
def test_data_built_in_the_imported_vocabulary_continues_its_training(im2txt, tmp_path: Path,
                                                                      showtell_main, caplog):
    model_dir = tmp_path / "imported"
    result = showtell_main("import-im2txt", "--im2txt-checkpoint", im2txt["prefix"], "--im2txt-vocab",
                           str(im2txt["word_counts"]), "--model-dir", str(model_dir),
                           "--image-size", str(SIZE))
    assert result.returncode == 0, result.stderr[-3000:]
    layout = write_layout(tmp_path / "mscoco")

    # im2txt's word list: the imported model's words at its ids (less the rows no word owns).
    data = tmp_path / "data"
    with caplog.at_level("INFO", logger="showtell.captioning.data.coco"):
        result = showtell_main(*coco_args(layout, data, "--vocab", str(im2txt["word_counts"])))
    assert result.returncode == 0, result.stderr[-3000:]
    built, imported = Vocabulary.load(data / "vocab.txt"), Vocabulary.load(model_dir / "vocab.txt")
    assert same_ids(built, imported) and len(imported) == len(built) + UNUSED_ROWS
    assert "--min-word-count not used); it covers " in caplog.text, caplog.text
    captions = [imported.decode(ids) for _, ids in coco_records(data, "train")]
    assert {w for c in captions for w in c.split()} <= {"a", "dog", "on", "the", "<UNK>"}  # in both
    assert any("dog" in c for c in captions) and any("<UNK>" in c for c in captions)
    # The model dir's own vocab.txt gives the same data.
    again = tmp_path / "again"
    assert showtell_main(*coco_args(layout, again, "--vocab", str(model_dir / "vocab.txt"))).returncode == 0
    assert Vocabulary.load(again / "vocab.txt") == imported
    # A file that is no word list: one line.
    bad = tmp_path / "bad.txt"
    bad.write_text("a 4\nnot-a-count-line\n")
    result = showtell_main(*coco_args(layout, tmp_path / "nothing", "--vocab", str(bad)))
    assert result.returncode == 1 and error_lines(result.stderr) == [
        f"showtell data: error: --vocab {bad}: line 2 is not 'word count' ('not-a-count-line'); "
        "pass im2txt's word_counts.txt"]

    # Training goes on from the imported step on that data ...
    train = ["train", "--model-dir", str(model_dir), "--image-size", str(SIZE), "--embedding-size", str(E),
             "--lstm-units", str(U), "--batch-size", "4", "--save-every-secs", "0", "--optimizer", "adam"]
    result = showtell_main(*train, "--data", str(data), "--steps", "3000002")
    assert result.returncode == 0, result.stderr[-3000:]
    assert (model_dir / "ckpt-3000002.index").exists()
    assert Vocabulary.load(model_dir / "vocab.txt") == imported  # its own, rows and all
    # ... and is refused, in one line, on data in a vocabulary of its own.
    own = tmp_path / "own"
    assert showtell_main(*coco_args(layout, own)).returncode == 0
    result = showtell_main(*train, "--data", str(own), "--steps", "3000003")
    assert result.returncode == 1
    assert error_lines(result.stderr) == [
        f"showtell train: error: --data {own}: not in the vocabulary {model_dir} was trained with "
        f"({first_difference(imported, Vocabulary.load(own / 'vocab.txt'))}); build the data in it "
        f"(showtell data coco … --vocab {model_dir / 'vocab.txt'}) or use a new --model-dir"]
