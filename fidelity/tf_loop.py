"""TensorFlow, as its guide "Basic training loops" teaches: a ``tf.Module`` holding
``tf.Variable`` weights, a ``tf.GradientTape`` step, SGD as ``assign_sub``. For tf-function the
step is decorated with ``tf.function`` (the guide "Better performance with tf.function"); for
tf-eager it runs as written. The loss is read with ``.numpy()``."""

from __future__ import annotations

import tensorflow as tf

from fidelity import _loop

ADAPTERS = ("tf-function", "tf-eager")

cell, out = _loop.cell()
spec, params, batches = _loop.workload(cell)
n_layers = len(spec.layer_sizes) - 1


class MLP(tf.Module):
    def __init__(self) -> None:
        super().__init__()
        self.kernels = [tf.Variable(params[f"dense{i}/kernel"]) for i in range(n_layers)]
        self.biases = [tf.Variable(params[f"dense{i}/bias"]) for i in range(n_layers)]

    def __call__(self, x):
        x = tf.reshape(x, [tf.shape(x)[0], -1])
        for i, (w, b) in enumerate(zip(self.kernels, self.biases, strict=True)):
            x = x @ w + b
            if i < n_layers - 1:
                x = tf.nn.relu(x)
        return x


with tf.device("/GPU:0" if _loop.device(cell) == "cuda" else "/CPU:0"):
    model = MLP()
    data = [(tf.constant(b["x"]), tf.constant(b["y"])) for b in batches]

    def train_step(batch):
        x, y = batch
        with tf.GradientTape() as tape:
            logits = model(x)
            loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(labels=y, logits=logits))
        grads = tape.gradient(loss, model.trainable_variables)
        for v, g in zip(model.trainable_variables, grads, strict=True):
            v.assign_sub(spec.learning_rate * g)
        return loss

    if cell["adapter"] == "tf-function":
        train_step = tf.function(train_step)
    measured = _loop.measure(train_step, lambda loss: float(loss.numpy()), data)

_loop.write(cell, out, {"tensorflow": tf.__version__}, measured)
