"""The matmuls and convolutions of a model file's training step, counted from one forward pass.

Run in the describing child on Keras's NumPy backend (workloads.model_file_child): every product the
forward pass asks of ``keras.ops`` (``matmul``, ``dot``, ``tensordot``, ``einsum`` of two
operands, ``conv``) is recorded with its shapes while the model runs on a whole batch. A
training step does each of them again in the backward pass, once per operand that needs a
gradient, at the forward's size: ``A @ B`` adds ``dC @ B^T`` (unless ``A`` is one of the model's
input arrays, which need none) and ``A^T @ dC``. The kernels use ``workloads.spec``'s forms, so
the kernel floor and GFLOP/s treat a model file as they treat the built-in workloads: a 3x3,
stride-1 'same' convolution is a ``conv3x3`` kernel (forward, input_grad, kernel_grad); any other
convolution is its im2col matmul (the same multiply-adds).

As for the built-in workloads, element-wise work is not counted (a slight lower bound), and
neither is a product Keras's NumPy backend computes outside those entry points (its fused
``dot_product_attention``, a layer calling NumPy itself): such a model's FLOP/s read low, never
high.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Iterator
from typing import Any

import numpy as np

from workloads.spec import Kernel


class Counter:
    """The forward products seen, each as (kind, shapes, which operands need a gradient)."""

    def __init__(self, inputs: list[np.ndarray]) -> None:
        self.inputs = inputs
        self.kernels: dict[Kernel, int] = {}

    def _needs_grad(self, x: Any) -> bool:
        """False for one of the model's input arrays (Keras may have copied or cast it on the way)."""
        x = np.asarray(x)
        return not any(x.shape == i.shape and np.array_equal(x, i) for i in self.inputs)

    def _add(self, kernel: Kernel, count: int = 1) -> None:
        if count and all(d > 0 for d in kernel[1:] if isinstance(d, int)):
            self.kernels[kernel] = self.kernels.get(kernel, 0) + count

    def product(self, m: int, k: int, n: int, count: int, a: Any, b: Any) -> None:
        """``count`` products of (m, k) @ (k, n), with their backward products."""
        self._add(("matmul", m, k, n), count)
        if self._needs_grad(a):
            self._add(("matmul", m, n, k), count)
        if self._needs_grad(b):
            self._add(("matmul", k, m, n), count)

    def matmul(self, x1: Any, x2: Any) -> None:
        s1, s2 = np.shape(x1), np.shape(x2)
        m, k = (1, s1[0]) if len(s1) == 1 else s1[-2:]
        n = 1 if len(s2) == 1 else s2[-1]
        batch = np.broadcast_shapes(s1[:-2], s2[:-2]) if len(s1) > 2 or len(s2) > 2 else ()
        self.product(int(m), int(k), int(n), math.prod(batch), x1, x2)

    def tensordot(self, x1: Any, x2: Any, axes: Any) -> None:
        s1, s2 = np.shape(x1), np.shape(x2)
        if isinstance(axes, int):
            a1, a2 = list(range(len(s1) - axes, len(s1))), list(range(axes))
        else:
            a1, a2 = ([a] if isinstance(a, int) else list(a) for a in axes)
        k = math.prod(s1[a] for a in a1)
        m = math.prod(s1) // max(k, 1)
        n = math.prod(s2) // max(k, 1)
        self.product(m, k, n, 1, x1, x2)

    def einsum(self, subscripts: str, *operands: Any) -> None:
        if len(operands) != 2 or "..." in subscripts or "->" not in subscripts:
            return  # not a product of two (an implicit or broadcast einsum is left uncounted)
        ins, out = subscripts.replace(" ", "").split("->")
        left, right = ins.split(",")
        size = dict(zip(left, np.shape(operands[0]), strict=False)) | dict(
            zip(right, np.shape(operands[1]), strict=False)
        )
        batch = [c for c in left if c in right and c in out]
        summed = [c for c in left if c in right and c not in out]
        m = math.prod(size[c] for c in left if c not in right)
        n = math.prod(size[c] for c in right if c not in left)
        self.product(m, math.prod(size[c] for c in summed), n, math.prod(size[c] for c in batch), *operands)

    def conv(
        self, inputs: Any, kernel: Any, result: Any, strides: Any, padding: str, data_format: str, dilation: Any
    ) -> None:
        x, w, y = np.shape(inputs), np.shape(kernel), np.shape(result)
        spatial_in: tuple[int, ...] = x[1:-1] if data_format == "channels_last" else x[2:]
        spatial_out = y[1:-1] if data_format == "channels_last" else y[2:]
        cin_group, cout = w[-2], w[-1]
        groups = (x[-1] if data_format == "channels_last" else x[1]) // cin_group
        simple = (
            w[:-2] == (3, 3)
            and data_format == "channels_last"
            and groups == 1
            and str(padding).lower() == "same"
            and set(np.atleast_1d(strides)) == {1}
            and set(np.atleast_1d(dilation)) == {1}
        )
        if simple:
            b, h, wd = x[0], *spatial_in
            self._add(("conv3x3", b, h, wd, cin_group, cout, "forward"))
            if self._needs_grad(inputs):
                self._add(("conv3x3", b, h, wd, cin_group, cout, "input_grad"))
            self._add(("conv3x3", b, h, wd, cin_group, cout, "kernel_grad"))
            return
        rows = x[0] * math.prod(spatial_out)
        self.product(rows, math.prod(w[:-2]) * cin_group, cout // groups, groups, inputs, kernel)


def _leaves(inputs: Any) -> list[np.ndarray]:
    if isinstance(inputs, dict):
        return list(inputs.values())
    return list(inputs) if isinstance(inputs, (list, tuple)) else [inputs]


@contextlib.contextmanager
def counting(inputs: Any) -> Iterator[Counter]:
    """Count the products of the Keras NumPy backend's calls inside the block (this process's
    backend must be NumPy); ``inputs``: the model's input arrays (an array, list or dict)."""
    from keras.src.backend.numpy import nn as backend_nn
    from keras.src.backend.numpy import numpy as backend_np

    counter = Counter([np.asarray(v) for v in _leaves(inputs)])
    saved = {
        (backend_np, "matmul"): backend_np.matmul,
        (backend_np, "dot"): backend_np.dot,
        (backend_np, "tensordot"): backend_np.tensordot,
        (backend_np, "einsum"): backend_np.einsum,
        (backend_nn, "conv"): backend_nn.conv,
    }

    def matmul(x1: Any, x2: Any) -> Any:
        counter.matmul(x1, x2)
        return saved[backend_np, "matmul"](x1, x2)

    def dot(x1: Any, x2: Any) -> Any:
        if np.ndim(x1) and np.ndim(x2):
            counter.matmul(x1, x2)
        return saved[backend_np, "dot"](x1, x2)

    def tensordot(x1: Any, x2: Any, axes: Any = 2) -> Any:
        counter.tensordot(x1, x2, axes)
        return saved[backend_np, "tensordot"](x1, x2, axes)

    def einsum(subscripts: str, *operands: Any, **kwargs: Any) -> Any:
        counter.einsum(subscripts, *operands)
        return saved[backend_np, "einsum"](subscripts, *operands, **kwargs)

    def conv(
        inputs: Any,
        kernel: Any,
        strides: Any = 1,
        padding: str = "valid",
        data_format: Any = None,
        dilation_rate: Any = 1,
    ) -> Any:
        result = saved[backend_nn, "conv"](inputs, kernel, strides, padding, data_format, dilation_rate)
        fmt = data_format or "channels_last"
        counter.conv(inputs, kernel, result, strides, padding, fmt, dilation_rate)
        return result

    replacements = {"matmul": matmul, "dot": dot, "tensordot": tensordot, "einsum": einsum, "conv": conv}
    for module, name in saved:
        setattr(module, name, replacements[name])
    try:
        yield counter
    finally:
        for (module, name), fn in saved.items():
            setattr(module, name, fn)


def step_kernels(model: Any, inputs: Any) -> list[list[Any]]:
    """The training step's kernels on ``inputs`` (one whole batch), as JSON-able ``[kernel, count]``
    pairs: one forward pass of ``model`` on Keras's NumPy backend, counted."""
    with counting(inputs) as counter:
        model(inputs, training=True)
    return [[list(kernel), count] for kernel, count in sorted(counter.kernels.items(), key=str)]
