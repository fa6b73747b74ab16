"""Flax NNX, as its "MNIST tutorial" teaches: an ``nnx.Module`` of ``nnx.Linear`` layers, an
``nnx.Optimizer`` over its ``nnx.Param`` state, and an ``@nnx.jit`` train step taking
``(model, optimizer, x, y)`` that calls ``nnx.value_and_grad`` and ``optimizer.update``. For
flax-nnx-cached the same step is called through ``nnx.cached_partial``, the Flax docs' remedy
for a step's graph traversal on every call. The loss is read with ``float()``, which waits."""

from __future__ import annotations

import flax
import jax
import jax.numpy as jnp
import optax
from flax import nnx

from fidelity import _loop

ADAPTERS = ("flax-nnx", "flax-nnx-cached")

cell, out = _loop.cell()
spec, params, batches = _loop.workload(cell)
dev = jax.devices(_loop.device(cell))[0]
sizes = spec.layer_sizes


class MLP(nnx.Module):
    def __init__(self, rngs: nnx.Rngs) -> None:
        self.layers = nnx.List([nnx.Linear(sizes[i], sizes[i + 1], rngs=rngs) for i in range(len(sizes) - 1)])

    def __call__(self, x):
        x = x.reshape(x.shape[0], -1)
        for i, layer in enumerate(self.layers):
            x = layer(x)
            if i < len(self.layers) - 1:
                x = nnx.relu(x)
        return x


with jax.default_device(dev):
    model = MLP(nnx.Rngs(0))
    for i, layer in enumerate(model.layers):  # the spec's weights, not Flax's initialisers
        layer.kernel.value = jnp.asarray(params[f"dense{i}/kernel"])
        layer.bias.value = jnp.asarray(params[f"dense{i}/bias"])
    optimizer = nnx.Optimizer(model, optax.sgd(spec.learning_rate), wrt=nnx.Param)


def loss_fn(model, x, y):
    return optax.softmax_cross_entropy_with_integer_labels(model(x), y).mean()


@nnx.jit
def train_step(model, optimizer, x, y):
    loss, grads = nnx.value_and_grad(loss_fn)(model, x, y)
    optimizer.update(model, grads)
    return loss


if cell["adapter"] == "flax-nnx-cached":
    cached = nnx.cached_partial(train_step, model, optimizer)

    def step(batch):
        return cached(*batch)
else:

    def step(batch):
        return train_step(model, optimizer, *batch)


data = [jax.device_put((jnp.asarray(b["x"]), jnp.asarray(b["y"])), dev) for b in batches]
versions = {"flax": flax.__version__, "jax": jax.__version__, "optax": optax.__version__}
_loop.write(cell, out, versions, _loop.measure(step, float, data))
