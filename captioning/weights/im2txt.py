"""A trained im2txt model (TensorFlow Models' Show and Tell) as a showtell model.

im2txt's checkpoints are name-based TF1 checkpoints (``model.ckpt-3000000``)::

    InceptionV3/…                       slim Inception v3 (``slim_names``, as --inception-weights)
    image_embedding/weights             [2048, E]  fully_connected, no bias
    seq_embedding/map                   [V, E]     word embedding, rows in word_counts.txt order
    lstm/basic_lstm_cell/kernel, bias   [E + U, 4U], [4U]  (TF ≤ 1.0: lstm/BasicLSTMCell/Linear/
                                                            Matrix, Bias)
    logits/weights, logits/biases       [U, V], [V]
    global_step

Two things do not carry over by name.  ``BasicLSTMCell`` computes its gates from one kernel
over ``[input, h]`` in the order *i, j (candidate), f, o* and adds ``forget_bias`` (1.0) to *f*
at run time; Keras' ``LSTM`` has separate input and recurrent kernels, gate order *i, f, c, o*
and no run-time forget bias — so the kernel is split, its gate blocks reordered and 1.0 folded
into the forget gate's bias.  And im2txt's vocabulary is ``word_counts.txt`` in file order with
``<UNK>`` after the last line, where showtell's puts ``<S>``, ``</S>``, ``<UNK>`` first: the
embedding rows and the logits' columns are gathered into showtell's order.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import tensorflow as tf

from showtell.captioning.config import ModelConfig
from showtell.captioning.data.vocab import (
    END,
    SPECIALS,
    START,
    UNUSED,
    Vocabulary,
    from_word_counts,
    read_word_counts,
)
from showtell.captioning.model.network import ShowAndTell, build_model
from showtell.captioning.weights.encoder import EncoderInit, load_encoder_weights
from showtell.common.errors import DataError, WeightsError, first_line

log = logging.getLogger(__name__)

IMAGE_EMBEDDING = "image_embedding/weights"
SEQ_EMBEDDING = "seq_embedding/map"
LSTM_KERNEL = ("lstm/basic_lstm_cell/kernel", "lstm/BasicLSTMCell/Linear/Matrix")
LSTM_BIAS = ("lstm/basic_lstm_cell/bias", "lstm/BasicLSTMCell/Linear/Bias")
LOGITS_WEIGHTS, LOGITS_BIASES = "logits/weights", "logits/biases"
GLOBAL_STEP = "global_step"
FORGET_BIAS = 1.0  # BasicLSTMCell's default; im2txt does not change it
FLAG = "--im2txt-checkpoint"


@dataclass(frozen=True)
class Imported:
    model: ShowAndTell
    vocab: Vocabulary
    step: int
    encoder_init: EncoderInit
    mapping: list[tuple[str, str]]  # (im2txt tensor, showtell variable: how it was transformed)


def vocabulary(entries: list[tuple[str, int]], rows: int) -> tuple[Vocabulary, list[int]]:
    """showtell's vocabulary of the same words, and for each of its ids the im2txt row.

    im2txt's model has ``vocab_size`` rows (12000) for fewer words (11519 + ``<UNK>``); the rows
    no word uses are kept, as ``<unused-N>``, so the softmax is over exactly im2txt's logits.
    """
    index = {w: i for i, (w, _) in enumerate(entries)}
    words = from_word_counts(entries)
    order = [index[START], index[END], len(entries), *(index[w] for w in words.words[len(SPECIALS):])]
    unused = sorted(set(range(rows)) - set(order))  # <UNK>'s row is the one after the last word
    vocab = Vocabulary((*words.words, *(f"{UNUSED}{r}>" for r in unused)),
                       (*words.counts, *(0 for _ in unused)))
    return vocab, order + unused


def lstm_weights(kernel: np.ndarray, bias: np.ndarray, input_size: int, units: int
                 ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """BasicLSTMCell (kernel over [x, h], gates i j f o, run-time forget bias) → Keras LSTM
    (kernel, recurrent kernel, bias; gates i f c o)."""
    i, j, f, o = (slice(k * units, (k + 1) * units) for k in range(4))

    def reorder(m: np.ndarray) -> np.ndarray:
        return np.concatenate([m[..., i], m[..., f], m[..., j], m[..., o]], axis=-1)

    keras_bias = reorder(bias).copy()
    keras_bias[units:2 * units] += FORGET_BIAS
    return reorder(kernel[:input_size]), reorder(kernel[input_size:]), keras_bias


def import_checkpoint(prefix: str, word_counts: Path, image_size: int = 299) -> Imported:
    """Build a showtell model holding an im2txt checkpoint's weights."""
    try:
        reader = tf.train.load_checkpoint(prefix)
        shapes = reader.get_variable_to_shape_map()
    except (tf.errors.OpError, ValueError) as exc:
        raise WeightsError(f"{FLAG} {prefix}: not a readable TensorFlow checkpoint "
                           f"({first_line(exc, 200)}); pass the prefix, e.g. model.ckpt-3000000") from exc

    def tensor(*names: str) -> np.ndarray:
        for name in names:
            if name in shapes:
                return reader.get_tensor(name)
        raise WeightsError(f"{FLAG} {prefix}: no tensor {names[0]}; is it an im2txt (Show and Tell) "
                           "checkpoint?")

    try:
        entries = read_word_counts(word_counts, "--im2txt-vocab")
    except DataError as exc:
        raise WeightsError(str(exc)) from exc
    embedding_map, image_weights = tensor(SEQ_EMBEDDING), tensor(IMAGE_EMBEDDING)
    kernel, bias = tensor(*LSTM_KERNEL), tensor(*LSTM_BIAS)
    logits_w, logits_b = tensor(LOGITS_WEIGHTS), tensor(LOGITS_BIASES)
    embedding, units = embedding_map.shape[1], logits_w.shape[0]
    expected = {SEQ_EMBEDDING: (None, embedding), IMAGE_EMBEDDING: (2048, embedding),
                LSTM_KERNEL[0]: (embedding + units, 4 * units), LSTM_BIAS[0]: (4 * units,),
                LOGITS_WEIGHTS: (units, embedding_map.shape[0]), LOGITS_BIASES: (embedding_map.shape[0],)}
    for (name, want), got in zip(expected.items(), (embedding_map, image_weights, kernel, bias, logits_w,
                                                    logits_b), strict=True):
        if len(want) != got.ndim or any(w not in (None, g) for w, g in zip(want, got.shape, strict=True)):
            raise WeightsError(f"{FLAG} {prefix}: {name} has shape {list(got.shape)}, expected "
                               f"{[w if w is not None else 'V' for w in want]} (embedding {embedding}, "
                               f"LSTM {units}); the checkpoint is damaged or not im2txt's")
    if len(entries) + 1 > embedding_map.shape[0]:
        raise WeightsError(f"--im2txt-vocab {word_counts}: {len(entries)} words (+<UNK>) but the "
                           f"checkpoint's vocabulary has {embedding_map.shape[0]} rows; pass the "
                           "word_counts.txt it was trained with")

    vocab, rows = vocabulary(entries, embedding_map.shape[0])
    config = ModelConfig(vocab_size=len(vocab), image_size=image_size, embedding_size=int(embedding),
                         lstm_units=int(units), train_inception=False)
    model = build_model(config)
    init = load_encoder_weights(model.encoder, prefix)
    model.image_embedding.kernel.assign(image_weights)
    model.word_embedding.embeddings.assign(embedding_map[rows])
    cell = model.lstm.cell
    w, u, b = lstm_weights(kernel, bias, embedding, units)
    cell.kernel.assign(w)
    cell.recurrent_kernel.assign(u)
    cell.bias.assign(b)
    model.logits.kernel.assign(logits_w[:, rows])
    model.logits.bias.assign(logits_b[rows])
    step = int(reader.get_tensor(GLOBAL_STEP)) if GLOBAL_STEP in shapes else 0
    mapping = [
        ("InceptionV3/* (376 tensors)", f"encoder ({len(init.loaded)} variables, as --inception-weights)"),
        (IMAGE_EMBEDDING, "image_embedding/kernel"),
        (SEQ_EMBEDDING, "word_embedding/embeddings, rows gathered into showtell's word order"),
        (f"{LSTM_KERNEL[0]}[:E]", "lstm kernel, gate blocks i j f o → i f c o"),
        (f"{LSTM_KERNEL[0]}[E:]", "lstm recurrent_kernel, gate blocks i j f o → i f c o"),
        (LSTM_BIAS[0], f"lstm bias, gates reordered, forget gate + {FORGET_BIAS:g} (BasicLSTMCell's "
                       "forget_bias)"),
        (LOGITS_WEIGHTS, "logits/kernel, columns gathered into showtell's word order"),
        (LOGITS_BIASES, "logits/bias, gathered likewise"),
        (GLOBAL_STEP, f"the model dir's checkpoint number ({step})"),
    ]
    return Imported(model=model, vocab=vocab, step=step, encoder_init=init, mapping=mapping)
