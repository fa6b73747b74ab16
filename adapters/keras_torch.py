"""Keras 3 on the PyTorch backend (``KERAS_BACKEND=torch``), timed through the step ``fit`` runs.

Models are built from Keras layers (``Dense``, ``Conv2D``/``MaxPooling2D`` on channels-last
images, ``Embedding`` + ``GRU`` for the caption decoder) and compiled with a Keras optimiser
and ``SparseCategoricalCrossentropy(from_logits=True)``; each timed step is
``model.train_function``, the step ``fit`` calls per batch (``keras/src/backend/torch/trainer.py``;
the variables are torch parameters updated in place, so there is no state to carry). Unlike
``fit``, the loss tracker is reset every step (as ``train_on_batch`` does) so the logged loss is
this step's loss, not the epoch's running mean; unlike ``train_on_batch``, the loss stays a
tensor until the harness syncs. ``steps_per_execution`` must be 1 on this backend.
``jit_compile=False``: on this backend that is eager PyTorch, a dynamic graph
(``jit_compile=True`` would mean torch.compile).

The caption loss is the masked mean: the mask goes in as ``sample_weight`` with the loss's
``mean_with_sample_weight`` reduction. Keras orders GRU gates (z, r, n) and stacks the input
and recurrent biases into one (2, 3H) array; the adapter reorders to and from the canonical
(r, z, n). Greedy decoding steps the GRU layer's cell in a Python loop.

Keras's Adam adds epsilon before the bias correction (``eps_hat`` in Kingma & Ba); to run the
workloads' Algorithm-1 update, the adapter sets ``epsilon = eps * sqrt(1 - beta2^t)`` before
step t, which is algebraically identical. Keras reads ``epsilon`` as a Python float each step
in eager mode, so this costs nothing on the device. ``adamw`` is ``keras.optimizers.AdamW``
with the same correction, biases and LayerNorm parameters excluded from its decay.

The transformer (adapters/_keras_transformer.py) is Keras layers around ``MultiHeadAttention``:
``attention=fused`` is its default ``keras.ops.dot_product_attention`` path (here
``scaled_dot_product_attention``), ``naive`` its explicit-scores path; the sequence mask is the
sample weight, as for captions.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

from adapters import _export_keras, _keras_transformer, kit
from adapters._keras_common import (
    adam,
    build_model,
    compile_model,
    fit_data,
    load_params,
    model_file_reason,
    optimizer_kernel,
    save_params,
)
from adapters._keras_data import IMAGE_LOADER_KIND, image_batches
from adapters._torch_data import LOADER_KIND, data_loader
from adapters.base import Adapter, Options
from adapters.exporting import Exports, Forward
from workloads import Batch, Params, Workload
from workloads.rnn import BOS, EOS, PAD, RNNCaption


class KerasTorch(Exports, Adapter):
    name = "keras-torch"
    framework = "keras"
    graph = "dynamic"
    requires = ("keras", "torch")
    extra = "keras"
    loader_kind = LOADER_KIND + " (Keras on torch takes a torch DataLoader)"
    image_loader_kind = IMAGE_LOADER_KIND
    families = ("mlp", "cnn", "rnn-caption", "transformer", "keras-model")
    precisions = ("fp32", "tf32", "bf16")

    export_paths = _export_keras.PATHS
    in_process_forward = True

    def supports(self, spec: Workload) -> str | None:
        return super().supports(spec) or model_file_reason(spec, "torch")

    def export_reason(self, path: str, spec: Workload) -> str | None:
        return super().export_reason(path, spec) or _export_keras.path_reason(path, "torch")

    def forward(self, spec: Workload, params: Params, device: str, options: Options) -> Forward:
        import keras
        import torch

        torch.set_num_threads(options.threads)
        kit.torch_precision(torch, options.tf32)
        return _export_keras.forward_of(_export_keras.model(keras, spec, params, device, jit_compile=False))

    def export(self, path: str, spec: Workload, params: Params, device: str, directory: Path) -> Path:
        return _export_keras.export(path, spec, params, device, directory, jit_compile=False)

    @classmethod
    def serve(cls, path: str, artifact: Path, device: str, threads: int) -> Forward:
        return _export_keras.serve(path, artifact, device, threads)

    @classmethod
    def worker_env(cls, threads: int, device: str = "cpu") -> dict[str, str]:
        return {**super().worker_env(threads, device), **kit.keras_env("torch", threads, device)}

    def version(self) -> dict[str, str]:
        import keras
        import torch

        return {"keras": keras.__version__, "torch": torch.__version__, "keras_backend": keras.backend.backend()}

    def resolve_device(self, device: str) -> str:
        return kit.torch_resolve_device(device, "keras (torch backend)")

    def build_info(self) -> dict[str, Any]:
        return kit.torch_build_info()

    def setup(self, spec: Workload, params: Params, device: str, options: Options) -> None:
        import keras
        import torch

        if keras.backend.backend() != "torch":
            raise RuntimeError(f"Keras backend is {keras.backend.backend()!r}; KERAS_BACKEND=torch must be set first")
        torch.set_num_threads(options.threads)
        kit.torch_precision(torch, options.tf32)
        self._torch, self._keras = torch, keras
        self._device = device
        self.spec = spec
        self._mixed = kit.mixed_precision("keras", options)
        kit.keras_policy(keras, options.bf16)
        with keras.device(device):
            self.model, self._layers = build_model(keras, spec)
            load_params(self._layers, params, spec)
            self._adam = spec.optimizer in ("adam", "adamw")
            # Keras's own Adam keeps its fused torch path; epsilon is corrected per step instead.
            optimizer = adam(keras, spec) if self._adam else None
            compile_model(keras, self.model, spec, optimizer, jit_compile=False, layers=self._layers)
        self._t = 0

    def to_device(self, batch: Batch) -> Any:
        torch = self._torch
        placed = {k: torch.from_numpy(np.ascontiguousarray(v)).to(self._device) for k, v in batch.items()}
        if self._device == "cuda":
            torch.cuda.synchronize()  # placement is done when the copies are
        return placed

    def loader(self, batches: list[Batch]) -> Iterator[Any]:
        cuda = self._device == "cuda"
        stream = data_loader(self._torch, batches, cuda)
        return ({k: v.to(self._device, non_blocking=cuda) for k, v in b.items()} for b in stream)

    def image_loader(self, images: Any, settings: Any) -> tuple[Iterator[Any], dict[str, Any]]:
        torch = self._torch
        stream, knobs = image_batches(self._keras, images, settings)
        return ({k: torch.from_numpy(v).to(self._device) for k, v in b.items()} for b in stream), knobs

    def device_memory_peak(self) -> int | None:
        return kit.torch_peak_bytes(self._torch, self._device)

    def train_step(self, batch: Any) -> Any:
        self._t += 1
        if self._adam:
            self.model.optimizer.epsilon = kit.adam_eps_hat(self._t)
        data = fit_data(self.spec, batch)
        model = self.model
        with self._keras.device(self._device):
            if model.train_function is None:  # what fit does before its loop
                model._symbolic_build(data_batch=data)
                model.make_train_function()
            model.reset_metrics()
            return model.train_function([data])["loss"]

    def infer_step(self, batch: Any) -> Any:
        torch, layers, spec = self._torch, self._layers, self.spec
        assert isinstance(spec, RNNCaption)
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
        if handle.ndim:  # decoded tokens: mean caption length
            return float((handle != PAD).sum().item()) / len(handle)
        return float(handle)  # the loss

    def fetch(self, handle: Any) -> np.ndarray:
        return handle.cpu().numpy()

    def params(self) -> Params:
        return save_params(self._layers, self.spec)

    def settings(self) -> dict[str, Any]:
        attention = {}
        if self.spec.family == "transformer":
            attention = {"attention_kernel": _keras_transformer.attention_kernel(self.spec, "torch")}
        return {
            "jit_compile": False,
            "train_path": "fit's train_function",
            "steps_per_execution": self.model.steps_per_execution,
            "optimizer_kernel": optimizer_kernel(self.spec, "epsilon set per step from Python"),
            **attention,
            "mixed_precision": self._mixed,
            **kit.torch_settings(self._torch),
        }

    def device_busy(self) -> bool | None:
        return kit.torch_device_busy(self._torch, self._device)
