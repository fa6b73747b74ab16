"""A CIFAR-shaped convnet: conv blocks then dense layers.

Model, on NHWC inputs of shape ``input_shape`` (H, W, C):
    for each width in ``channels``: Conv2D 3x3, stride 1, 'same' zero padding, + bias, ReLU,
                                    then MaxPool 2x2, stride 2 (H and W must stay even)
    flatten in (H, W, C) order, then Dense ``hidden`` with ReLU, then Dense to ``num_classes``
    logits; softmax cross-entropy averaged over the batch.

Canonical parameter layout:
    ``conv{i}/kernel``: float32 HWIO (3, 3, in, out), applied as cross-correlation
    ``conv{i}/bias``:   float32 (out,)
    ``dense{j}/kernel``: float32 (in, out); the first dense layer's rows follow the (H, W, C)
                         flatten order, so an NCHW framework must flatten in NHWC order
    ``dense{j}/bias``:  float32 (out,)
Initialisation: Glorot-uniform kernels (fan = 9*in and 9*out for convs), biases uniform in
[-0.05, 0.05]. Data: standard-normal images; labels from a fixed random convolutional teacher
(one 3x3 filter per class, ReLU, global average, standardised per class, argmax), so they
are learnable and every class occurs.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from workloads.mlp import dense_forward, dense_training_flops, relu_slope, softmax_cross_entropy
from workloads.spec import Batch, FixedForward, Kernel, Params, SpecError, Workload, _positive, dense_kernels


@dataclasses.dataclass(frozen=True)
class CNN(Workload, FixedForward):
    family = "cnn"
    relu = True

    input_shape: tuple[int, ...] = (32, 32, 3)
    channels: tuple[int, ...] = (32, 64)
    hidden: tuple[int, ...] = (128,)
    num_classes: int = 10

    def validate(self) -> None:
        super().validate()
        _positive(self, "num_classes")
        if len(self.input_shape) != 3 or any(d <= 0 for d in self.input_shape):
            raise SpecError(f"input_shape must be (height, width, channels), got {self.input_shape!r}")
        if not self.channels or any(c <= 0 for c in self.channels):
            raise SpecError(f"channels must be one or more positive widths, got {self.channels!r}")
        h, w, _ = self.input_shape
        factor = 2 ** len(self.channels)
        if h % factor or w % factor:
            raise SpecError(f"input_shape {self.input_shape!r}: height and width must divide by {factor}")
        if any(d <= 0 for d in self.hidden):
            raise SpecError(f"hidden widths must be > 0, got {self.hidden!r}")

    @property
    def flat_size(self) -> int:
        h, w, _ = self.input_shape
        factor = 2 ** len(self.channels)
        return (h // factor) * (w // factor) * self.channels[-1]

    @property
    def dense_sizes(self) -> list[int]:
        return [self.flat_size, *self.hidden, self.num_classes]

    def init_params(self) -> Params:
        rng = np.random.default_rng([self.seed, 1])
        params: Params = {}
        cin = self.input_shape[2]
        for i, cout in enumerate(self.channels):
            limit = np.sqrt(6.0 / (9 * cin + 9 * cout))
            params[f"conv{i}/kernel"] = rng.uniform(-limit, limit, (3, 3, cin, cout)).astype(np.float32)
            params[f"conv{i}/bias"] = rng.uniform(-0.05, 0.05, (cout,)).astype(np.float32)
            cin = cout
        sizes = self.dense_sizes
        for j, (fan_in, fan_out) in enumerate(zip(sizes[:-1], sizes[1:], strict=True)):
            limit = np.sqrt(6.0 / (fan_in + fan_out))
            params[f"dense{j}/kernel"] = rng.uniform(-limit, limit, (fan_in, fan_out)).astype(np.float32)
            params[f"dense{j}/bias"] = rng.uniform(-0.05, 0.05, (fan_out,)).astype(np.float32)
        return params

    def batches(self) -> list[Batch]:
        rng = np.random.default_rng([self.seed, 2])
        # A convolutional teacher (one 3x3 filter per class, ReLU, global average), so the labels
        # are local-pattern statistics that a convnet can learn quickly.
        # Scores are standardised per class on a calibration set so that every class occurs.
        teacher_rng = np.random.default_rng([self.seed, 3])
        filters = teacher_rng.standard_normal((3, 3, self.input_shape[2], self.num_classes))

        def scores(x: np.ndarray) -> np.ndarray:
            return np.maximum(conv3x3_same(x.astype(np.float64), filters), 0.0).mean(axis=(1, 2))

        calib = scores(teacher_rng.standard_normal((256, *self.input_shape)))
        mean, std = calib.mean(axis=0), calib.std(axis=0)
        out = []
        for _ in range(self.num_batches):
            x = rng.standard_normal((self.batch_size, *self.input_shape), dtype=np.float32)
            out.append({"x": x, "y": ((scores(x) - mean) / std).argmax(axis=1).astype(np.int32)})
        return out

    def flops(self, batch: Batch) -> int:
        b = len(batch["y"])
        h, w, cin = self.input_shape
        total = 0
        for i, cout in enumerate(self.channels):
            per_pass = 2 * b * h * w * 9 * cin * cout
            total += per_pass * (2 if i == 0 else 3)  # forward, kernel gradient, input gradient
            h, w, cin = h // 2, w // 2, cout
        # the first dense layer's input is a conv output, so it does need an input gradient
        sizes = self.dense_sizes
        return total + dense_training_flops(sizes, b) + 2 * b * sizes[0] * sizes[1]

    def kernels(self, batch: Batch) -> list[tuple[Kernel, int]]:
        b = len(batch["y"])
        h, w, cin = self.input_shape
        out = []
        for i, cout in enumerate(self.channels):
            roles = ("forward", "kernel_grad") if i == 0 else ("forward", "kernel_grad", "input_grad")
            out += [(("conv3x3", b, h, w, cin, cout, role), 1) for role in roles]
            h, w, cin = h // 2, w // 2, cout
        return out + dense_kernels(self.dense_sizes, b, first_input_grad=True)

    def tiny(self) -> CNN:
        return dataclasses.replace(
            self,
            batch_size=2,
            input_shape=(4, 4, 1),
            channels=(1,) * len(self.channels),
            hidden=(2,) * len(self.hidden),
            num_classes=2,
        )

    def reference_logits(self, params: Params, x: np.ndarray) -> np.ndarray:
        h = x.astype(params["conv0/kernel"].dtype)
        for i in range(len(self.channels)):
            h = maxpool2x2(np.maximum(conv3x3_same(h, params[f"conv{i}/kernel"]) + params[f"conv{i}/bias"], 0.0))[0]
        return dense_forward(params, h.reshape(len(h), -1), len(self.dense_sizes) - 1)

    def reference_loss_and_grads(self, params: Params, batch: Batch, relu_tie: float = 0.0) -> tuple[float, Params]:
        h = batch["x"].astype(params["conv0/kernel"].dtype)
        grads: Params = {}
        tape = []
        for i in range(len(self.channels)):
            z = conv3x3_same(h, params[f"conv{i}/kernel"]) + params[f"conv{i}/bias"]
            a = np.maximum(z, 0.0)
            pooled, argmax = maxpool2x2(a)
            tape.append((h, z, a.shape, argmax))
            h = pooled
        flat = h.reshape(len(h), -1)
        n_dense = len(self.dense_sizes) - 1
        acts, zs = [flat], []
        for j in range(n_dense):
            z = acts[-1] @ params[f"dense{j}/kernel"] + params[f"dense{j}/bias"]
            zs.append(z)
            acts.append(np.maximum(z, 0.0) if j < n_dense - 1 else z)
        loss, dz = softmax_cross_entropy(acts[-1], batch["y"], np.ones(len(flat), flat.dtype))
        for j in reversed(range(n_dense)):
            grads[f"dense{j}/kernel"] = acts[j].T @ dz
            grads[f"dense{j}/bias"] = dz.sum(axis=0)
            dz = dz @ params[f"dense{j}/kernel"].T
            if j:
                dz = dz * relu_slope(zs[j - 1], relu_tie)
        dh = dz.reshape(h.shape)
        for i in reversed(range(len(self.channels))):
            x, z, a_shape, argmax = tape[i]
            da = maxpool2x2_backward(dh, argmax, a_shape)
            dz = da * relu_slope(z, relu_tie)
            grads[f"conv{i}/bias"] = dz.sum(axis=(0, 1, 2))
            grads[f"conv{i}/kernel"], dh = conv3x3_same_backward(x, params[f"conv{i}/kernel"], dz)
        return loss, grads


def conv3x3_same(x: np.ndarray, k: np.ndarray) -> np.ndarray:
    """NHWC cross-correlation with a (3, 3, in, out) kernel, stride 1, zero padding 1."""
    n, h, w, _ = x.shape
    xp = np.pad(x, ((0, 0), (1, 1), (1, 1), (0, 0)))
    out = np.zeros((n, h, w, k.shape[3]), np.result_type(x, k))
    for dy in range(3):
        for dx in range(3):
            out += xp[:, dy : dy + h, dx : dx + w, :] @ k[dy, dx]
    return out


def conv3x3_same_backward(x: np.ndarray, k: np.ndarray, dout: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Gradients of conv3x3_same with respect to the kernel and the input."""
    n, h, w, cin = x.shape
    xp = np.pad(x, ((0, 0), (1, 1), (1, 1), (0, 0)))
    dk = np.zeros_like(k, dtype=np.result_type(x, k))
    dxp = np.zeros_like(xp)
    d2 = dout.reshape(-1, dout.shape[3])
    for dy in range(3):
        for dx in range(3):
            dk[dy, dx] = xp[:, dy : dy + h, dx : dx + w, :].reshape(-1, cin).T @ d2
            dxp[:, dy : dy + h, dx : dx + w, :] += dout @ k[dy, dx].T
    return dk, dxp[:, 1:-1, 1:-1, :]


def maxpool2x2(a: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """2x2 max pool, stride 2, NHWC; also the index (0..3) of the winner in each window."""
    n, h, w, c = a.shape
    windows = a.reshape(n, h // 2, 2, w // 2, 2, c).transpose(0, 1, 3, 5, 2, 4).reshape(n, h // 2, w // 2, c, 4)
    argmax = windows.argmax(axis=-1)
    return np.take_along_axis(windows, argmax[..., None], axis=-1)[..., 0], argmax


def maxpool2x2_backward(dout: np.ndarray, argmax: np.ndarray, shape: tuple[int, ...]) -> np.ndarray:
    n, h, w, c = shape
    grad = np.zeros((n, h // 2, w // 2, c, 4), dout.dtype)
    np.put_along_axis(grad, argmax[..., None], dout[..., None], axis=-1)
    return grad.reshape(n, h // 2, w // 2, c, 2, 2).transpose(0, 1, 4, 2, 5, 3).reshape(shape)
