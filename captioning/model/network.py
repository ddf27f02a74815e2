"""The Show-and-Tell network (Vinyals et al.): Inception v3 encoder → LSTM decoder.

Image path: Inception v3 without its classifier → global average pool → dropout → linear
image embedding (no bias).  The embedding is the LSTM's first input (its output there is
ignored, as in im2txt); from then on the LSTM reads word embeddings and predicts the next
word.  Training uses teacher forcing over whole padded captions; inference steps the same
LSTM cell one word at a time (``initial_state`` / ``step``), which beam search drives.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import keras
import tensorflow as tf

from showtell.captioning.config import MIN_IMAGE_SIZE, ModelConfig
from showtell.common.options import PRECISIONS


def build_encoder(image_size: int, bn_momentum: float | None = None) -> keras.Model:
    """Inception v3 without its top, pooled to a 2048-vector; weights loaded separately."""
    if image_size < MIN_IMAGE_SIZE:
        raise ValueError(f"image size {image_size} < {MIN_IMAGE_SIZE}, Inception v3's minimum")
    encoder = keras.applications.InceptionV3(
        include_top=False, weights=None, pooling="avg", input_shape=(image_size, image_size, 3)
    )
    if bn_momentum is not None:
        for layer in encoder.layers:
            if isinstance(layer, keras.layers.BatchNormalization):
                layer.momentum = bn_momentum
    return encoder


class ShowAndTell(keras.Model):
    """Encoder, decoder and the per-step interface used by beam search."""

    def __init__(self, config: ModelConfig, **kwargs) -> None:
        super().__init__(name="show_and_tell", **kwargs)
        self.config = config
        init = keras.initializers.RandomUniform(-config.init_scale, config.init_scale)
        self.encoder = build_encoder(config.image_size, config.bn_momentum)
        self.encoder.trainable = config.train_inception
        self.image_dropout = keras.layers.Dropout(config.image_dropout)
        self.image_embedding = keras.layers.Dense(
            config.embedding_size, use_bias=False, kernel_initializer=init, name="image_embedding"
        )
        self.word_embedding = keras.layers.Embedding(
            config.vocab_size, config.embedding_size, embeddings_initializer=init, name="word_embedding"
        )
        self.input_dropout = keras.layers.Dropout(config.lstm_dropout)
        self.lstm = keras.layers.LSTM(
            config.lstm_units,
            return_sequences=True,
            return_state=True,
            kernel_initializer=init,
            recurrent_initializer=init,
            name="lstm",
        )
        self.output_dropout = keras.layers.Dropout(config.lstm_dropout)
        # float32 whatever the policy: the softmax and the loss need its range (a mixed-precision
        # model's logits in float16 would overflow; Keras' own guidance).
        self.logits = keras.layers.Dense(config.vocab_size, kernel_initializer=init, name="logits",
                                         dtype="float32")

    @property
    def decoder_weights(self) -> list:
        """Everything but Inception: image embedding, word embedding, LSTM, logits — in a fixed
        order, so the decoder optimizer's slots line up across both training phases."""
        layers = (self.image_embedding, self.word_embedding, self.lstm, self.logits)
        return [w for layer in layers for w in layer.weights]

    @property
    def encoder_weights(self) -> list:
        """Inception's variables, batch-norm statistics included."""
        return list(self.encoder.weights)

    def features(self, images: tf.Tensor, training: bool = False) -> tf.Tensor:
        """Images in [-1, 1] → pooled Inception features.  A frozen encoder keeps BN in
        inference mode, so its output depends on the image alone (what the feature cache stores)."""
        # float32 out under any policy: the feature cache stores them, and the embedding casts anyway
        return tf.cast(self.encoder(images, training=training and self.config.train_inception), tf.float32)

    def embed(self, features: tf.Tensor, training: bool = False) -> tf.Tensor:
        """Pooled features → the image embedding fed to the LSTM."""
        return self.image_embedding(self.image_dropout(features, training=training))

    def encode(self, images: tf.Tensor, training: bool = False) -> tf.Tensor:
        return self.embed(self.features(images, training), training)

    def start_state(self, image_embedding: tf.Tensor, training: bool = False) -> list[tf.Tensor]:
        """Feed the image embedding as the LSTM's first input; return its state (h, c)."""
        x = self.input_dropout(image_embedding[:, None, :], training=training)
        _, h, c = self.lstm(x, training=training)
        return [h, c]

    def decoder_outputs(self, image_embedding: tf.Tensor, input_ids: tf.Tensor, training: bool = False
                        ) -> tf.Tensor:
        """Teacher forcing: the LSTM's output for every input word (before the logits)."""
        state = self.start_state(image_embedding, training)
        words = self.input_dropout(self.word_embedding(input_ids), training=training)
        outputs, _, _ = self.lstm(words, initial_state=state, training=training)
        return self.output_dropout(outputs, training=training)

    def decode(self, image_embedding: tf.Tensor, input_ids: tf.Tensor, training: bool = False) -> tf.Tensor:
        """Teacher forcing: logits over the vocabulary for every input word."""
        return self.logits(self.decoder_outputs(image_embedding, input_ids, training))

    def call(self, inputs: tuple[tf.Tensor, tf.Tensor], training: bool = False) -> tf.Tensor:
        """(images, input word ids) → logits over the vocabulary for every position."""
        images, input_ids = inputs
        return self.decode(self.encode(images, training), input_ids, training)

    def batch_logits(self, batch: dict[str, tf.Tensor], training: bool = False) -> tf.Tensor:
        """Logits for a training batch of images or of cached ``features``."""
        if "features" in batch:
            embedding = self.embed(batch["features"], training)
        else:
            embedding = self.encode(batch["image"], training)
        return self.decode(embedding, batch["input_ids"], training)

    def initial_state(self, images: tf.Tensor) -> list[tf.Tensor]:
        """Inference: the decoder state after seeing the image."""
        return self.start_state(self.encode(images, training=False))

    def step(self, word_ids: tf.Tensor, state: list[tf.Tensor]) -> tuple[tf.Tensor, list[tf.Tensor]]:
        """Inference: one word in → log-probabilities of the next word, new state."""
        logits, state = self.step_logits(word_ids, state)
        return tf.nn.log_softmax(logits), state

    def step_logits(self, word_ids: tf.Tensor, state: list[tf.Tensor]) -> tuple[tf.Tensor, list[tf.Tensor]]:
        """``step`` before the softmax: what beam search takes (it normalises only its candidates)."""
        output, new_state = self.lstm.cell(self.word_embedding(word_ids), list(state), training=False)
        return self.logits(output), list(new_state)


@contextlib.contextmanager
def dtype_policy(precision: str) -> Iterator[None]:
    """Layers built inside compute in ``precision`` (``--mixed-precision``), variables float32.
    Keras' policy is process-wide, so it is set for the build only and put back after."""
    previous = keras.config.dtype_policy()
    keras.config.set_dtype_policy(PRECISIONS[precision])
    try:
        yield
    finally:
        keras.config.set_dtype_policy(previous)


def build_model(config: ModelConfig, precision: str = "off") -> ShowAndTell:
    """A ``ShowAndTell`` with all variables created (so checkpoints can restore into it),
    computing in ``precision`` (``off``: float32; ``bf16``/``fp16``: mixed).

    Inception, a functional model, has its variables from construction; only the decoder's
    layers are built, on zero features — an eager pass of an image through Inception to get
    there cost every trainer, evaluator and caption command a CPU second."""
    with dtype_policy(precision):
        model = ShowAndTell(config)
        features = tf.zeros([1, model.encoder.output_shape[-1]])
        model.decode(model.embed(features), tf.zeros([1, 2], tf.int32))
        model.built = True
    return model


def word_losses(logits: tf.Tensor, targets: tf.Tensor) -> tf.Tensor:
    """Each word's cross-entropy (the loss before any sum)."""
    return tf.nn.sparse_softmax_cross_entropy_with_logits(labels=targets, logits=logits)


def masked_loss_sum(logits: tf.Tensor, targets: tf.Tensor, mask: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
    """Sum of per-word cross-entropy over real (unpadded) words, and the number of words.

    Returned as a (sum, count) pair rather than a mean so that callers can average over
    the *global* batch — across replicas and across validation batches of different
    lengths — exactly.
    """
    losses = word_losses(logits, targets)
    mask = tf.cast(mask, losses.dtype)
    return tf.reduce_sum(losses * mask), tf.reduce_sum(mask)
