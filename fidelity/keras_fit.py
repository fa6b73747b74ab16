"""Keras 3, as its guides teach: a ``Sequential`` model, ``compile`` with ``SGD`` and
``SparseCategoricalCrossentropy(from_logits=True)``, then ``model.fit`` on NumPy arrays
(``shuffle=False``, so the batches are the spec's, in order). The backend is the adapter's
(``KERAS_BACKEND`` from its worker environment); ``jit_compile`` is Keras's default for it.

fit owns the loop, so the clock is a callback: latency is the time between the ends of
consecutive batches while a callback reads each batch's loss (as a per-batch logging callback
does); throughput is the time of an epoch, read at its end, divided by its steps.
"""

from __future__ import annotations

import time

import keras
import numpy as np

from fidelity import _loop

ADAPTERS = ("keras-jax", "keras-tf", "keras-torch")

cell, out = _loop.cell()
spec, params, batches = _loop.workload(cell)
n_layers = len(spec.layer_sizes) - 1

model = keras.Sequential(
    [keras.Input(spec.input_shape), keras.layers.Flatten()]
    + [keras.layers.Dense(n, activation="relu") for n in spec.hidden]
    + [keras.layers.Dense(spec.num_classes)]
)
model.compile(
    optimizer=keras.optimizers.SGD(learning_rate=spec.learning_rate),
    loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
)
model.set_weights([params[f"dense{i}/{kind}"] for i in range(n_layers) for kind in ("kernel", "bias")])
x = np.concatenate([b["x"] for b in batches])
y = np.concatenate([b["y"] for b in batches])


class Clock(keras.callbacks.Callback):
    """Timestamps at the end of each batch (reading its loss, which waits for it) and epoch."""

    def __init__(self, per_batch: bool) -> None:
        super().__init__()
        self.per_batch, self.batch_ends, self.epochs, self.losses = per_batch, [], [], []

    def on_epoch_begin(self, epoch, logs=None):
        self.epoch_start = time.perf_counter()

    def on_train_batch_end(self, batch, logs=None):
        if self.per_batch:
            self.losses.append(float(logs["loss"]))
            self.batch_ends.append(time.perf_counter())

    def on_epoch_end(self, epoch, logs=None):
        float(logs["loss"])
        self.epochs.append(time.perf_counter() - self.epoch_start)


def fit(reps: int, epochs: int, per_batch: bool) -> Clock:
    clock = Clock(per_batch)
    xs, ys = np.concatenate([x] * reps), np.concatenate([y] * reps)
    model.fit(xs, ys, batch_size=spec.batch_size, epochs=epochs, shuffle=False, verbose=0, callbacks=[clock])
    return clock


warm = fit(1, 1, per_batch=True)  # the first pass: compiles, and the first batch's loss
step_s = float(np.median(np.diff(warm.batch_ends)))
n = len(batches)
reps = max(1, -(-max(_loop.MIN_STEPS + 1, round(_loop.LATENCY_S / step_s)) // n))
latency = fit(reps, 1, per_batch=True)
steps_s = list(np.diff(latency.batch_ends))
reps = max(1, round(_loop.BLOCK_S / float(np.median(steps_s)) / n))
blocks = fit(reps, _loop.MIN_BLOCKS, per_batch=False)
measured = _loop.result(steps_s, [t / (reps * n) for t in blocks.epochs], reps * n, warm.losses[0])
versions = {"keras": keras.__version__, "keras_backend": keras.backend.backend()}
_loop.write(cell, out, versions, measured)
