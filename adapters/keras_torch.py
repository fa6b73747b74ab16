"""Keras 3 on the PyTorch backend (``KERAS_BACKEND=torch``), timed through Keras's own step.

Models are built from Keras layers (``Dense``, ``Conv2D``/``MaxPooling2D`` on channels-last
images, ``Embedding`` + ``GRU`` for the caption decoder) and compiled with a Keras optimiser
and ``SparseCategoricalCrossentropy(from_logits=True)``; each timed step is
``model.train_on_batch``, Keras's public one-step API (its ``train_step`` without ``fit``'s
callbacks and progress bar). ``train_on_batch`` returns the loss as a host value, so the step
synchronises itself. ``jit_compile=False``: on this backend that is eager PyTorch, a dynamic
graph (``jit_compile=True`` would mean torch.compile).

The caption loss is the masked mean: the mask goes in as ``sample_weight`` with the loss's
``mean_with_sample_weight`` reduction. Keras orders GRU gates (z, r, n) and stacks the input
and recurrent biases into one (2, 3H) array; the adapter reorders to and from the canonical
(r, z, n). Greedy decoding steps the GRU layer's cell in a Python loop.

Keras's Adam adds epsilon before the bias correction (``eps_hat`` in Kingma & Ba); to run the
workloads' Algorithm-1 update, the adapter sets ``epsilon = eps * sqrt(1 - beta2^t)`` before
step t, which is algebraically identical. Keras reads ``epsilon`` as a Python float each step
in eager mode, so this costs nothing on the device.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from typing import Any

import numpy as np

from adapters._torch_data import LOADER_KIND, data_loader
from adapters.base import Adapter, Options, pick_device
from workloads import Batch, Params, Workload
from workloads.optim import ADAM_BETA1, ADAM_BETA2, ADAM_EPS
from workloads.rnn import BOS, EOS, PAD


class KerasTorch(Adapter):
    name = "keras-torch"
    framework = "keras"
    graph = "dynamic"
    requires = ("keras", "torch")
    extra = "keras"
    loader_kind = LOADER_KIND + " (Keras on torch takes a torch DataLoader)"

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

    def setup(self, spec: Workload, params: Params, device: str, options: Options) -> None:
        import keras
        import torch

        if keras.backend.backend() != "torch":
            raise RuntimeError(f"Keras backend is {keras.backend.backend()!r}; KERAS_BACKEND=torch must be set first")
        torch.set_num_threads(options.threads)
        # Equal footing: TF32 only where the run asks for it, in every framework at once.
        torch.backends.cuda.matmul.allow_tf32 = options.tf32
        torch.backends.cudnn.allow_tf32 = options.tf32
        self._torch, self._keras = torch, keras
        self._device = device
        self.spec = spec
        with keras.device(device):
            self.model, self._layers = _build(keras, spec)
            _load(self._layers, params, spec)
            self._adam = spec.optimizer == "adam"
            if self._adam:
                opt = keras.optimizers.Adam(spec.learning_rate, beta_1=ADAM_BETA1, beta_2=ADAM_BETA2, epsilon=ADAM_EPS)
            else:
                opt = keras.optimizers.SGD(spec.learning_rate)
            reduction = "mean_with_sample_weight" if spec.family == "rnn-caption" else "sum_over_batch_size"
            self.model.compile(
                optimizer=opt,
                loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True, reduction=reduction),
                jit_compile=False,
            )
        self._t = 0

    def to_device(self, batch: Batch) -> Any:
        torch = self._torch
        return {k: torch.from_numpy(np.ascontiguousarray(v)).to(self._device) for k, v in batch.items()}

    def loader(self, batches: list[Batch]) -> Iterator[Any]:
        cuda = self._device == "cuda"
        stream = data_loader(self._torch, batches, cuda)
        return ({k: v.to(self._device, non_blocking=cuda) for k, v in b.items()} for b in stream)

    def device_memory_peak(self) -> int | None:
        return self._torch.cuda.max_memory_allocated() if self._device == "cuda" else None

    def train_step(self, batch: Any) -> Any:
        self._t += 1
        if self._adam:
            self.model.optimizer.epsilon = ADAM_EPS * math.sqrt(1.0 - ADAM_BETA2**self._t)
        with self._keras.device(self._device):
            if self.spec.family == "rnn-caption":
                x = [batch["features"], batch["tokens"]]
                return self.model.train_on_batch(x, batch["targets"], sample_weight=batch["mask"])
            return self.model.train_on_batch(batch["x"], batch["y"])

    def infer_step(self, batch: Any) -> Any:
        torch, layers, spec = self._torch, self._layers, self.spec
        features = batch["features"]
        with torch.inference_mode(), self._keras.device(self._device):
            h = layers["img"](features)
            token = torch.full((len(features),), BOS, dtype=torch.int32, device=features.device)
            done = torch.zeros(len(features), dtype=torch.bool, device=features.device)
            out = torch.full((len(features), spec.max_len), PAD, dtype=torch.int32, device=features.device)
            for step in range(spec.max_len):
                h, _ = layers["gru"].cell(layers["embed"](token), [h])
                best = layers["out"](h).argmax(dim=1).to(torch.int32)
                token = torch.where(done, PAD, best)
                out[:, step] = token
                done |= token == EOS
                if bool(done.all()):  # the data-dependent exit: a host sync every step
                    break
        return out

    def sync(self, handle: Any) -> float:
        if self._device == "cuda":
            self._torch.cuda.synchronize()
        if isinstance(handle, self._torch.Tensor):  # decoded tokens: mean caption length
            return float((handle != PAD).sum().item()) / len(handle)
        return float(handle)

    def fetch(self, handle: Any) -> np.ndarray:
        return handle.cpu().numpy()

    def params(self) -> Params:
        return _save(self._layers, self.spec)

    def settings(self) -> dict[str, Any]:
        torch = self._torch
        return {
            "jit_compile": False,
            "tf32_matmul": torch.backends.cuda.matmul.allow_tf32,
            "cudnn_benchmark": torch.backends.cudnn.benchmark,
            "intra_op_threads": torch.get_num_threads(),
        }


def _build(keras, spec: Workload) -> tuple[Any, dict[str, Any]]:
    """The spec's model and its weighted layers by canonical prefix."""
    L = keras.layers
    layers: dict[str, Any] = {}
    if spec.family == "rnn-caption":
        features = keras.Input((spec.feature_dim,), name="features")
        tokens = keras.Input((None,), dtype="int32", name="tokens")
        layers["img"] = L.Dense(spec.hidden, activation="tanh")
        layers["embed"] = L.Embedding(spec.vocab, spec.embed_dim)
        layers["gru"] = L.GRU(spec.hidden, return_sequences=True, reset_after=True)
        layers["out"] = L.Dense(spec.vocab)
        seq = layers["gru"](layers["embed"](tokens), initial_state=[layers["img"](features)])
        return keras.Model([features, tokens], layers["out"](seq)), layers
    stack: list[Any] = [keras.Input(spec.input_shape)]
    if spec.family == "cnn":
        for i, width in enumerate(spec.channels):
            layers[f"conv{i}"] = L.Conv2D(width, 3, padding="same", activation="relu")
            stack += [layers[f"conv{i}"], L.MaxPooling2D(2)]
    sizes = spec.dense_sizes if spec.family == "cnn" else spec.layer_sizes
    stack.append(L.Flatten())
    for i, width in enumerate(sizes[1:]):
        layers[f"dense{i}"] = L.Dense(width, activation="relu" if i < len(sizes) - 2 else None)
        stack.append(layers[f"dense{i}"])
    return keras.Sequential(stack), layers


def _gates_to_keras(a: np.ndarray) -> np.ndarray:
    """Canonical (r, z, n) column blocks -> Keras (z, r, n); the swap is its own inverse."""
    r, z, n = np.split(a, 3, axis=-1)
    return np.concatenate([z, r, n], axis=-1)


def _load(layers: dict[str, Any], p: Params, spec: Workload) -> None:
    if spec.family == "rnn-caption":
        layers["img"].set_weights([p["img/kernel"], p["img/bias"]])
        layers["embed"].set_weights([p["embed/table"]])
        bias = np.stack([p["gru/bias"], p["gru/recurrent_bias"]])
        layers["gru"].set_weights(
            [_gates_to_keras(p["gru/kernel"]), _gates_to_keras(p["gru/recurrent_kernel"]), _gates_to_keras(bias)]
        )
        layers["out"].set_weights([p["out/kernel"], p["out/bias"]])
        return
    for prefix, layer in layers.items():
        layer.set_weights([p[f"{prefix}/kernel"], p[f"{prefix}/bias"]])


def _save(layers: dict[str, Any], spec: Workload) -> Params:
    def w(name: str) -> list[np.ndarray]:
        return [np.asarray(a, dtype=np.float32) for a in layers[name].get_weights()]

    if spec.family == "rnn-caption":
        kernel, recurrent, bias = (_gates_to_keras(a) for a in w("gru"))
        (img_k, img_b), (table,), (out_k, out_b) = w("img"), w("embed"), w("out")
        return {
            "img/kernel": img_k,
            "img/bias": img_b,
            "embed/table": table,
            "gru/kernel": kernel,
            "gru/recurrent_kernel": recurrent,
            "gru/bias": bias[0],
            "gru/recurrent_bias": bias[1],
            "out/kernel": out_k,
            "out/bias": out_b,
        }
    out: Params = {}
    for prefix in layers:
        out[f"{prefix}/kernel"], out[f"{prefix}/bias"] = w(prefix)
    return out
