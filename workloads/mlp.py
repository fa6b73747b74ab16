"""Multi-layer perceptrons from the seed articles (Keras Sequential Dense stacks).

Model: flatten the input, then Dense layers ``hidden`` with ReLU, then a Dense layer to
``num_classes`` logits; loss is softmax cross-entropy averaged over the batch.

Canonical parameter layout (every adapter converts to and from it):
    ``dense{i}/kernel``: float32 (fan_in, fan_out) so that ``y = x @ kernel + bias``
    ``dense{i}/bias``:   float32 (fan_out,)
Initialisation: Glorot-uniform kernels, biases uniform in [-0.05, 0.05] (non-zero on purpose,
so that a bias dropped or mis-mapped by an adapter shows in the step-0 loss).

Optimisers, written out so every framework runs the same arithmetic:
    ``sgd``:  p -= lr * g
    ``adam``: Kingma & Ba (2015) Algorithm 1, as torch.optim.Adam and optax.adam do it:
              m = b1 m + (1-b1) g;  v = b2 v + (1-b2) g^2;
              p -= lr * (m / (1-b1^t)) / (sqrt(v / (1-b2^t)) + eps)
              with b1=0.9, b2=0.999, eps=1e-8. (Keras puts eps before the bias correction;
              its adapter compensates, see adapters/keras_torch.py.)

Data: inputs are standard normal; labels are the argmax of a fixed random teacher network, so
the task is learnable and a falling loss means real training.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from workloads.spec import Batch, Params, SpecError, Workload, _positive

ADAM_BETA1 = 0.9
ADAM_BETA2 = 0.999
ADAM_EPS = 1e-8
OPTIMIZERS = ("sgd", "adam")


@dataclasses.dataclass(frozen=True)
class MLP(Workload):
    family = "mlp"

    input_shape: tuple[int, ...] = (28, 28)
    hidden: tuple[int, ...] = (300, 100)
    num_classes: int = 10
    optimizer: str = "sgd"
    learning_rate: float = 0.01
    num_batches: int = 16

    def validate(self) -> None:
        super().validate()
        for field in ("num_classes", "num_batches"):
            _positive(self, field)
        if self.learning_rate <= 0:
            raise SpecError(f"learning_rate must be > 0, got {self.learning_rate!r}")
        if self.optimizer not in OPTIMIZERS:
            raise SpecError(f"optimizer {self.optimizer!r} is not one of: {', '.join(OPTIMIZERS)}")
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

    def reference_train(self, params: Params, steps: int) -> tuple[list[float], Params]:
        p = {k: v.astype(np.float64) for k, v in params.items()}
        data = self.batches()
        opt = _SGD(self.learning_rate) if self.optimizer == "sgd" else _Adam(self.learning_rate, p)
        losses = []
        for step in range(steps):
            loss, grads = mlp_loss_and_grads(p, data[step % len(data)], len(self.layer_sizes) - 1)
            losses.append(loss)
            opt.apply(p, grads)
        return losses, p


def _teacher(fan_in: int, classes: int, seed: int):
    rng = np.random.default_rng([seed, 3])
    w1 = rng.standard_normal((fan_in, 64)) / np.sqrt(fan_in)
    w2 = rng.standard_normal((64, classes)) / np.sqrt(64)
    return lambda x: np.argmax(np.maximum(x @ w1, 0.0) @ w2, axis=1)


def mlp_loss_and_grads(p: Params, batch: Batch, n_layers: int) -> tuple[float, Params]:
    """Float64 forward and backward pass of the MLP; mean softmax cross-entropy."""
    h = batch["x"].reshape(len(batch["y"]), -1).astype(np.float64)
    y = batch["y"]
    acts = [h]
    for i in range(n_layers):
        z = acts[-1] @ p[f"dense{i}/kernel"] + p[f"dense{i}/bias"]
        acts.append(np.maximum(z, 0.0) if i < n_layers - 1 else z)
    logits = acts[-1]
    shifted = logits - logits.max(axis=1, keepdims=True)
    logsumexp = np.log(np.exp(shifted).sum(axis=1))
    rows = np.arange(len(y))
    loss = float(np.mean(logsumexp - shifted[rows, y]))

    dz = np.exp(shifted - logsumexp[:, None])
    dz[rows, y] -= 1.0
    dz /= len(y)
    grads: Params = {}
    for i in reversed(range(n_layers)):
        grads[f"dense{i}/kernel"] = acts[i].T @ dz
        grads[f"dense{i}/bias"] = dz.sum(axis=0)
        if i:
            dz = (dz @ p[f"dense{i}/kernel"].T) * (acts[i] > 0)
    return loss, grads


class _SGD:
    def __init__(self, lr: float) -> None:
        self.lr = lr

    def apply(self, p: Params, g: Params) -> None:
        for k in p:
            p[k] -= self.lr * g[k]


class _Adam:
    def __init__(self, lr: float, p: Params) -> None:
        self.lr, self.t = lr, 0
        self.m = {k: np.zeros_like(v) for k, v in p.items()}
        self.v = {k: np.zeros_like(v) for k, v in p.items()}

    def apply(self, p: Params, g: Params) -> None:
        self.t += 1
        for k in p:
            self.m[k] = ADAM_BETA1 * self.m[k] + (1 - ADAM_BETA1) * g[k]
            self.v[k] = ADAM_BETA2 * self.v[k] + (1 - ADAM_BETA2) * g[k] ** 2
            m_hat = self.m[k] / (1 - ADAM_BETA1**self.t)
            v_hat = self.v[k] / (1 - ADAM_BETA2**self.t)
            p[k] -= self.lr * m_hat / (np.sqrt(v_hat) + ADAM_EPS)
