"""Keras 3 on the PyTorch backend (``KERAS_BACKEND=torch``), timed through Keras's own step.

The model is a ``keras.Sequential`` of ``Dense`` layers compiled with a Keras optimiser and
``SparseCategoricalCrossentropy(from_logits=True)``; each timed step is
``model.train_on_batch``, Keras's public one-step API (its ``train_step`` without ``fit``'s
callbacks and progress bar). ``train_on_batch`` already returns the loss as a host value,
so the step itself synchronises. ``jit_compile=False``: on this backend that is eager PyTorch,
a dynamic graph (``jit_compile=True`` would mean torch.compile).

Keras's Adam adds epsilon before the bias correction (``eps_hat`` in Kingma & Ba); to run the
workload's Algorithm-1 update, the adapter sets ``epsilon = eps * sqrt(1 - beta2^t)`` before
step t, which is algebraically identical. Keras reads ``epsilon`` as a Python float each step
in eager mode, so this costs nothing on the device.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from adapters.base import Adapter, pick_device
from workloads import Batch, Params, Workload
from workloads.mlp import ADAM_BETA1, ADAM_BETA2, ADAM_EPS


class KerasTorch(Adapter):
    name = "keras-torch"
    framework = "keras"
    graph = "dynamic"
    requires = ("keras", "torch")
    extra = "keras"

    @classmethod
    def worker_env(cls, threads: int) -> dict[str, str]:
        return {**super().worker_env(threads), "KERAS_BACKEND": "torch"}

    def version(self) -> dict[str, str]:
        import keras
        import torch

        return {"keras": keras.__version__, "torch": torch.__version__, "keras_backend": keras.backend.backend()}

    def resolve_device(self, device: str) -> str:
        import torch

        return pick_device(device, torch.cuda.is_available(), "keras (torch backend)")

    def setup(self, spec: Workload, params: Params, device: str, threads: int) -> None:
        import keras
        import torch

        if keras.backend.backend() != "torch":
            raise RuntimeError(f"Keras backend is {keras.backend.backend()!r}; KERAS_BACKEND=torch must be set first")
        torch.set_num_threads(threads)
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False
        self._torch = torch
        self._device = device
        self._keras = keras
        n_layers = len(spec.layer_sizes) - 1
        with self._keras.device(self._device):
            layers: list[Any] = [keras.Input(shape=spec.input_shape), keras.layers.Flatten()]
            for i in range(n_layers):
                width = spec.layer_sizes[i + 1]
                layers.append(keras.layers.Dense(width, activation="relu" if i < n_layers - 1 else None))
            self.model = keras.Sequential(layers)
            self._dense = [layer for layer in self.model.layers if isinstance(layer, keras.layers.Dense)]
            for i, layer in enumerate(self._dense):
                layer.kernel.assign(params[f"dense{i}/kernel"])
                layer.bias.assign(params[f"dense{i}/bias"])
            self._adam = spec.optimizer == "adam"
            if self._adam:
                opt = keras.optimizers.Adam(spec.learning_rate, beta_1=ADAM_BETA1, beta_2=ADAM_BETA2, epsilon=ADAM_EPS)
            else:
                opt = keras.optimizers.SGD(spec.learning_rate)
            self.model.compile(
                optimizer=opt,
                loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                jit_compile=False,
            )
        self._t = 0

    def to_device(self, batch: Batch) -> Any:
        torch = self._torch
        return (torch.from_numpy(batch["x"]).to(self._device), torch.from_numpy(batch["y"]).to(self._device))

    def train_step(self, batch: Any) -> Any:
        self._t += 1
        if self._adam:
            self.model.optimizer.epsilon = ADAM_EPS * math.sqrt(1.0 - ADAM_BETA2**self._t)
        with self._keras.device(self._device):
            return self.model.train_on_batch(*batch)

    def sync(self, handle: Any) -> float:
        if self._device == "cuda":
            self._torch.cuda.synchronize()
        return float(handle)

    def params(self) -> Params:
        out: Params = {}
        for i, layer in enumerate(self._dense):
            out[f"dense{i}/kernel"] = np.asarray(layer.kernel.numpy(), dtype=np.float32)
            out[f"dense{i}/bias"] = np.asarray(layer.bias.numpy(), dtype=np.float32)
        return out

    def settings(self) -> dict[str, Any]:
        torch = self._torch
        return {
            "jit_compile": False,
            "tf32_matmul": torch.backends.cuda.matmul.allow_tf32,
            "intra_op_threads": torch.get_num_threads(),
        }
