"""A small transformer classifier over token sequences, for `make bench MODEL=examples/transformer_classifier.py`.

Token and learned position embeddings (a subclassed layer written with `keras.ops`), two
pre-LayerNorm blocks of `MultiHeadAttention` and a ReLU MLP, mean pooling over the sequence and a
Dense classifier: `keras.layers` and `keras.ops` only, so it runs on every backend. The label of
a sequence is which of 4 token ranges occurs most often in it, so the loss can fall.
"""

import keras
import numpy as np
from keras import layers, ops

OPTIMIZER = "adamw"
LEARNING_RATE = 1e-3
BATCH_SIZE = 32
LOSS = keras.losses.SparseCategoricalCrossentropy(from_logits=True)

VOCAB, LENGTH, WIDTH, HEADS, CLASSES = 256, 32, 64, 4, 4


class TokenAndPosition(layers.Layer):
    """Token embedding plus a learned position embedding."""

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.tokens = layers.Embedding(VOCAB, WIDTH)
        self.positions = layers.Embedding(LENGTH, WIDTH)

    def build(self, input_shape):
        self.tokens.build(input_shape)
        self.positions.build((input_shape[-1],))

    def compute_output_shape(self, input_shape):
        return (*input_shape, WIDTH)

    def call(self, x):
        where = ops.arange(ops.shape(x)[-1])
        return self.tokens(x) + self.positions(where)[None, :, :]


def _block(x):
    y = layers.LayerNormalization(epsilon=1e-5)(x)
    y = layers.MultiHeadAttention(HEADS, WIDTH // HEADS)(y, y)
    x = layers.Add()([x, y])
    y = layers.LayerNormalization(epsilon=1e-5)(x)
    y = layers.Dense(4 * WIDTH, activation="relu")(y)
    return layers.Add()([x, layers.Dense(WIDTH)(y)])


def build():
    inputs = keras.Input((LENGTH,), dtype="int32")
    x = TokenAndPosition()(inputs)
    for _ in range(2):
        x = _block(x)
    x = layers.GlobalAveragePooling1D()(layers.LayerNormalization(epsilon=1e-5)(x))
    return keras.Model(inputs, layers.Dense(CLASSES)(x), name="transformer_classifier")


def data(batch_size, seed):
    rng = np.random.default_rng(seed)
    x = rng.integers(0, VOCAB, (batch_size, LENGTH)).astype("int32")
    counts = np.stack([((x // (VOCAB // CLASSES)) == c).sum(axis=1) for c in range(CLASSES)], axis=1)
    return x, np.argmax(counts, axis=1).astype("int32")
