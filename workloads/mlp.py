"""Multi-layer perceptrons from the seed articles (Keras Sequential Dense stacks).

Model: flatten the input, then Dense layers ``hidden`` with ReLU, then a Dense layer to
``num_classes`` logits; loss is softmax cross-entropy averaged over the batch.

Canonical parameter layout (every adapter converts to and from it):
    ``dense{i}/kernel``: float32 (fan_in, fan_out) so that ``y = x @ kernel + bias``
    ``dense{i}/bias``:   float32 (fan_out,)
Initialisation: Glorot-uniform kernels, biases uniform in [-0.05, 0.05] (non-zero on purpose,
so that a bias dropped or mis-mapped by an adapter shows in the step-0 loss).

Optimisers: see workloads/optim.py.

Data: inputs are standard normal; labels are the argmax of a fixed random teacher network, so
the task is learnable and a falling loss means real training.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from workloads.spec import Batch, FixedForward, Kernel, Params, SpecError, Workload, _positive, dense_kernels


@dataclasses.dataclass(frozen=True)
class MLP(Workload, FixedForward):
    family = "mlp"
    relu = True

    input_shape: tuple[int, ...] = (28, 28)
    hidden: tuple[int, ...] = (300, 100)
    num_classes: int = 10

    def validate(self) -> None:
        super().validate()
        _positive(self, "num_classes")
        if not self.input_shape or any(d <= 0 for d in self.input_shape):
            raise SpecError(f"input_shape must be positive sizes, got {self.input_shape!r}")
        if any(d <= 0 for d in self.hidden):
            raise SpecError(f"hidden widths must be > 0, got {self.hidden!r}")

    @property
    def layer_sizes(self) -> list[int]:
        return [int(np.prod(self.input_shape)), *self.hidden, self.num_classes]

    def init_params(self) -> Params:
        rng = np.random.default_rng([self.seed, 1])
        params: Params = {}
        sizes = self.layer_sizes
        for i, (fan_in, fan_out) in enumerate(zip(sizes[:-1], sizes[1:], strict=True)):
            limit = np.sqrt(6.0 / (fan_in + fan_out))
            params[f"dense{i}/kernel"] = rng.uniform(-limit, limit, (fan_in, fan_out)).astype(np.float32)
            params[f"dense{i}/bias"] = rng.uniform(-0.05, 0.05, (fan_out,)).astype(np.float32)
        return params

    def batches(self) -> list[Batch]:
        rng = np.random.default_rng([self.seed, 2])
        teacher = _teacher(self.layer_sizes[0], self.num_classes, self.seed)
        out = []
        for _ in range(self.num_batches):
            x = rng.standard_normal((self.batch_size, *self.input_shape), dtype=np.float32)
            out.append({"x": x, "y": teacher(x.reshape(self.batch_size, -1)).astype(np.int32)})
        return out

    def reference_loss_and_grads(self, params: Params, batch: Batch, relu_tie: float = 0.0) -> tuple[float, Params]:
        return mlp_loss_and_grads(params, batch, len(self.layer_sizes) - 1, relu_tie)

    def reference_logits(self, params: Params, x: np.ndarray) -> np.ndarray:
        h = x.reshape(len(x), -1).astype(params["dense0/kernel"].dtype)
        return dense_forward(params, h, len(self.layer_sizes) - 1)

    def flops(self, batch: Batch) -> int:
        return dense_training_flops(self.layer_sizes, len(batch["y"]))

    def kernels(self, batch: Batch) -> list[tuple[Kernel, int]]:
        return dense_kernels(self.layer_sizes, len(batch["y"]))

    def tiny(self) -> MLP:
        shape = (2,) * len(self.input_shape)
        return dataclasses.replace(self, batch_size=2, input_shape=shape, hidden=(2,) * len(self.hidden), num_classes=2)


def dense_training_flops(sizes: list[int], batch: int) -> int:
    """Forward (2 B in out) + weight gradient (2 B in out) for every layer, + input gradient
    (2 B in out) for every layer but the first, whose input needs none."""
    total = 0
    for i, (fan_in, fan_out) in enumerate(zip(sizes[:-1], sizes[1:], strict=True)):
        total += (4 if i == 0 else 6) * batch * fan_in * fan_out
    return total


def _teacher(fan_in: int, classes: int, seed: int):
    rng = np.random.default_rng([seed, 3])
    w1 = rng.standard_normal((fan_in, 64)) / np.sqrt(fan_in)
    w2 = rng.standard_normal((64, classes)) / np.sqrt(64)
    return lambda x: np.argmax(np.maximum(x @ w1, 0.0) @ w2, axis=1)


def softmax_cross_entropy(logits: np.ndarray, labels: np.ndarray, weights: np.ndarray) -> tuple[float, np.ndarray]:
    """Weighted mean cross-entropy over rows, ``sum(w * ce) / sum(w)``, and d loss / d logits."""
    shifted = logits - logits.max(axis=-1, keepdims=True)
    logsumexp = np.log(np.exp(shifted).sum(axis=-1))
    rows = np.arange(len(labels))
    total = weights.sum()
    loss = float(np.sum(weights * (logsumexp - shifted[rows, labels])) / total)
    grad = np.exp(shifted - logsumexp[:, None])
    grad[rows, labels] -= 1.0
    return loss, grad * (weights / total)[:, None]


def relu_slope(z: np.ndarray, tie: float = 0.0) -> np.ndarray:
    """ReLU's derivative at ``z``: 1 where z > tie * max|z|. ``tie`` (see
    Workload.reference_loss_and_grads) decides inputs within rounding of zero; 0 is the usual."""
    return z > tie * np.max(np.abs(z))


def dense_forward(p: Params, h: np.ndarray, n_layers: int) -> np.ndarray:
    """``dense{i}`` layers with ReLU between them, no activation after the last: the logits."""
    for i in range(n_layers):
        h = h @ p[f"dense{i}/kernel"] + p[f"dense{i}/bias"]
        if i < n_layers - 1:
            h = np.maximum(h, 0.0)
    return h


def mlp_loss_and_grads(p: Params, batch: Batch, n_layers: int, relu_tie: float = 0.0) -> tuple[float, Params]:
    """Forward and backward pass of the MLP in the parameters' dtype; mean softmax cross-entropy."""
    dtype = p["dense0/kernel"].dtype
    h = batch["x"].reshape(len(batch["y"]), -1).astype(dtype)
    y = batch["y"]
    acts, zs = [h], []
    for i in range(n_layers):
        z = acts[-1] @ p[f"dense{i}/kernel"] + p[f"dense{i}/bias"]
        zs.append(z)
        acts.append(np.maximum(z, 0.0) if i < n_layers - 1 else z)
    loss, dz = softmax_cross_entropy(acts[-1], y, np.ones(len(y), dtype))
    grads: Params = {}
    for i in reversed(range(n_layers)):
        grads[f"dense{i}/kernel"] = acts[i].T @ dz
        grads[f"dense{i}/bias"] = dz.sum(axis=0)
        if i:
            dz = (dz @ p[f"dense{i}/kernel"].T) * relu_slope(zs[i - 1], relu_tie)
    return loss, grads
