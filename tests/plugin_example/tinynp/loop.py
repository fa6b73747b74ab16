"""tinynp's idiomatic training loop for the ``mlp`` workload (fidelity/, docs/adding-an-adapter.md
section 7): the spec's weights, its batches in order, and the workloads' own update, as tinynp's
users would write it without the adapter."""

from __future__ import annotations

import numpy as np

import tinynp
from fidelity import _loop
from workloads import optim

ADAPTERS = ("tinynp-eager",)

cell, out = _loop.cell()
spec, params, batches = _loop.workload(cell)
p = {k: v.astype(np.float64) for k, v in params.items()}
opt = optim.make(spec.optimizer, spec.learning_rate, p)


def train_step(batch):
    loss, grads = spec.reference_loss_and_grads(p, batch)
    opt.apply(p, grads)
    return loss


_loop.write(cell, out, {"tinynp": tinynp.__version__}, _loop.measure(train_step, float, batches))
