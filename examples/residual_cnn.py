"""A small residual CNN for 32x32 RGB images and 10 classes, for `make bench MODEL=examples/residual_cnn.py`.

Two residual blocks (3x3 convolutions, a 1x1 projection where the width changes), max pooling,
global average pooling and a Dense classifier: Keras layers only, so it runs on every backend.
The data are random images whose label is the sign pattern of a fixed projection of their mean
colour, so the loss can fall.
"""

import keras
import numpy as np
from keras import layers

OPTIMIZER = "adam"
LEARNING_RATE = 1e-3
BATCH_SIZE = 32
LOSS = keras.losses.SparseCategoricalCrossentropy(from_logits=True)

CLASSES = 10


def _block(x, width):
    y = layers.Conv2D(width, 3, padding="same", activation="relu")(x)
    y = layers.Conv2D(width, 3, padding="same")(y)
    if x.shape[-1] != width:
        x = layers.Conv2D(width, 1)(x)  # the projection shortcut
    return layers.Activation("relu")(layers.Add()([x, y]))


def build():
    inputs = keras.Input((32, 32, 3))
    x = layers.Conv2D(16, 3, padding="same", activation="relu")(inputs)
    x = _block(x, 16)
    x = layers.MaxPooling2D(2)(x)
    x = _block(x, 32)
    x = layers.GlobalAveragePooling2D()(x)
    return keras.Model(inputs, layers.Dense(CLASSES)(x), name="residual_cnn")


def data(batch_size, seed):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((batch_size, 32, 32, 3)).astype("float32")
    teacher = np.random.default_rng(1234).standard_normal((3, CLASSES))
    y = np.argmax(x.mean(axis=(1, 2)) @ teacher, axis=1).astype("int32")
    return x, y
