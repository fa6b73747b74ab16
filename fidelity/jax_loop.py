"""JAX with optax, as optax's "Getting started" teaches: parameters as a pytree, a loss
function, ``jax.value_and_grad``, ``optimizer.update`` and ``optax.apply_updates`` in one
``@jax.jit`` train step that returns the new state. For jax-eager the same step runs unjitted.
The loss is read with ``float()``, which waits for the computation."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import optax

from fidelity import _loop

ADAPTERS = ("jax-jit", "jax-eager")

cell, out = _loop.cell()
spec, params, batches = _loop.workload(cell)
dev = jax.devices(_loop.device(cell))[0]
n_layers = len(spec.layer_sizes) - 1
state = jax.device_put({k: jnp.asarray(v) for k, v in params.items()}, dev)


def loss_fn(p, x, y):
    x = x.reshape(x.shape[0], -1)
    for i in range(n_layers):
        x = x @ p[f"dense{i}/kernel"] + p[f"dense{i}/bias"]
        if i < n_layers - 1:
            x = jax.nn.relu(x)
    return optax.softmax_cross_entropy_with_integer_labels(x, y).mean()


optimizer = optax.sgd(spec.learning_rate)
opt_state = optimizer.init(state)


def update(p, s, x, y):
    loss, grads = jax.value_and_grad(loss_fn)(p, x, y)
    updates, s = optimizer.update(grads, s, p)
    return optax.apply_updates(p, updates), s, loss


if cell["adapter"] == "jax-jit":
    update = jax.jit(update)
data = [jax.device_put((jnp.asarray(b["x"]), jnp.asarray(b["y"])), dev) for b in batches]


def train_step(batch):
    global state, opt_state
    state, opt_state, loss = update(state, opt_state, *batch)
    return loss


versions = {"jax": jax.__version__, "optax": optax.__version__}
_loop.write(cell, out, versions, _loop.measure(train_step, float, data))
