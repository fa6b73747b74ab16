"""PyTorch, as its tutorials teach ("Optimizing Model Parameters"): an ``nn.Sequential``,
``torch.optim.SGD`` with its defaults, and ``zero_grad`` / ``backward`` / ``step`` per batch.
For torch-compile, the model is wrapped in ``torch.compile(model)`` (the tutorial's
"Introduction to torch.compile"); the optimiser step stays eager. The loss is read with ``.item()``."""

from __future__ import annotations

import os

import torch
from torch import nn

from fidelity import _loop

ADAPTERS = ("torch-eager", "torch-compile")

cell, out = _loop.cell()
spec, params, batches = _loop.workload(cell)
dev = torch.device(_loop.device(cell))
torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", torch.get_num_threads())))

sizes = spec.layer_sizes
layers: list[nn.Module] = [nn.Flatten()]
for i in range(len(sizes) - 1):
    layers += [nn.Linear(sizes[i], sizes[i + 1]), nn.ReLU()]
model = nn.Sequential(*layers[:-1])  # no ReLU after the logits
with torch.no_grad():  # the spec's weights: kernels are (in, out), torch's Linear is (out, in)
    for i, linear in enumerate(m for m in model if isinstance(m, nn.Linear)):
        linear.weight.copy_(torch.from_numpy(params[f"dense{i}/kernel"].T))
        linear.bias.copy_(torch.from_numpy(params[f"dense{i}/bias"]))
model.to(dev)
if cell["adapter"] == "torch-compile":
    model = torch.compile(model)
loss_fn = nn.CrossEntropyLoss()
optimizer = torch.optim.SGD(model.parameters(), lr=spec.learning_rate)
data = [(torch.from_numpy(b["x"]).to(dev), torch.from_numpy(b["y"]).long().to(dev)) for b in batches]


def train_step(batch):
    x, y = batch
    loss = loss_fn(model(x), y)
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    return loss


_loop.write(cell, out, {"torch": torch.__version__}, _loop.measure(train_step, lambda loss: loss.item(), data))
