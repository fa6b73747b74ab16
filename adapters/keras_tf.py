"""Keras 3 on the TensorFlow backend (``KERAS_BACKEND=tensorflow``, Keras's own default), timed
through the step ``fit`` runs.

The model, loss and canonical weight mapping are the other Keras adapters'
(adapters/_keras_common.py); each timed step is ``model.train_function`` on one batch, the step
``fit`` calls per batch (``keras/src/backend/tensorflow/trainer.py``: a ``tf.function`` around
``train_step``, ``reduce_retracing=True``). As on the torch backend, the loss tracker is reset
before every step (``train_on_batch`` does the same) so the logged loss is this step's, and the
loss stays a tensor until the harness syncs.

``jit_compile`` is Keras's ``"auto"``, what a user of ``fit`` gets: on this backend XLA where a
GPU is visible and every layer supports it, otherwise a plain ``tf.function`` graph (Keras turns
XLA off on CPU-only machines). ``settings()`` records what it resolved to. Either way the step
is a static graph traced per input signature, with ``reduce_retracing``: from the second new
shape on, the trace generalises the varying dimension, so the caption strategies trace at most
twice (tf-function traces once per length).

Adam is Keras's own update with epsilon corrected inside the graph (``algorithm1_adam``: a
Python float would be a constant of the trace), as on the JAX backend. Integer inputs are placed
as int64, as tf-function places them (TensorFlow keeps int32 tensors of a GPU in host memory).
Greedy decoding steps the GRU layer's cell in a Python loop, eagerly.

On GPU install variants the worker runs under the TensorFlow environment's interpreter
(``environment = "tensorflow"``: its .venv-tf holds Keras beside TensorFlow's CUDA 12 build).
"""

from __future__ import annotations

import inspect
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

from adapters import _export_keras, _keras_transformer, _tf_data, kit
from adapters._keras_common import (
    algorithm1_adam,
    build_model,
    compile_model,
    fit_data,
    load_params,
    model_file_reason,
    optimizer_kernel,
    save_params,
)
from adapters._keras_data import IMAGE_LOADER_KIND, image_batches
from adapters.base import Adapter, Options
from adapters.exporting import Exports, Forward
from workloads import Batch, Params, Workload
from workloads.optim import ADAMW_WEIGHT_DECAY
from workloads.rnn import BOS, EOS, PAD, RNNCaption

#: Keras's default, resolved per machine (see the module docstring).
JIT_COMPILE = "auto"


class KerasTf(Exports, Adapter):
    name = "keras-tf"
    framework = "keras"
    environment = "tensorflow"
    graph = "static"
    requires = ("keras", "tensorflow")
    extra = "tensorflow"
    loader_kind = _tf_data.LOADER_KIND + " (Keras on TensorFlow reads a tf.data iterator)"
    image_loader_kind = IMAGE_LOADER_KIND
    families = ("mlp", "cnn", "rnn-caption", "transformer", "keras-model")
    precisions = ("fp32", "tf32", "bf16")

    export_paths = _export_keras.PATHS
    in_process_forward = True

    def supports(self, spec: Workload) -> str | None:
        return super().supports(spec) or model_file_reason(spec, "tensorflow")

    def export_reason(self, path: str, spec: Workload) -> str | None:
        return super().export_reason(path, spec) or _export_keras.path_reason(path, "tensorflow")

    def forward(self, spec: Workload, params: Params, device: str, options: Options) -> Forward:
        import keras
        import tensorflow as tf

        kit.tf_precision(tf, options.tf32, options.threads)
        return _export_keras.forward_of(_export_keras.model(keras, spec, params, device, jit_compile=JIT_COMPILE))

    def export(self, path: str, spec: Workload, params: Params, device: str, directory: Path) -> Path:
        return _export_keras.export(path, spec, params, device, directory, jit_compile=JIT_COMPILE)

    @classmethod
    def serve(cls, path: str, artifact: Path, device: str, threads: int) -> Forward:
        return _export_keras.serve(path, artifact, device, threads)

    @classmethod
    def worker_env(cls, threads: int, device: str = "cpu") -> dict[str, str]:
        return {**super().worker_env(threads, device), **kit.keras_env("tensorflow", threads, device)}

    def version(self) -> dict[str, str]:
        import keras
        import tensorflow as tf

        return {"keras": keras.__version__, "tensorflow": tf.__version__, "keras_backend": keras.backend.backend()}

    def resolve_device(self, device: str) -> str:
        return kit.tf_resolve_device(device, "keras (tensorflow backend)")

    def build_info(self) -> dict[str, Any]:
        return kit.tf_build_info()

    def setup(self, spec: Workload, params: Params, device: str, options: Options) -> None:
        import keras
        import tensorflow as tf

        if keras.backend.backend() != "tensorflow":
            raise RuntimeError(
                f"Keras backend is {keras.backend.backend()!r}; KERAS_BACKEND=tensorflow must be set first"
            )
        kit.tf_precision(tf, options.tf32, options.threads)
        self._tf, self._keras = tf, keras
        self._device = "/GPU:0" if device == "cuda" else "/CPU:0"
        self.spec = spec
        self._mixed = kit.mixed_precision("keras", options)
        kit.keras_policy(keras, options.bf16)
        with tf.device(self._device):
            self.model, self._layers = build_model(keras, spec)
            load_params(self._layers, params, spec)
            adam = None
            if spec.optimizer in ("adam", "adamw"):
                decay = ADAMW_WEIGHT_DECAY if spec.optimizer == "adamw" else None
                adam = algorithm1_adam(keras, spec.learning_rate, decay, densify=tf.convert_to_tensor)
            compile_model(keras, self.model, spec, adam, jit_compile=JIT_COMPILE, layers=self._layers)

    def to_device(self, batch: Batch) -> Any:
        return _tf_data.place(self._tf, batch, self._device)

    def loader(self, batches: list[Batch]) -> Iterator[Any]:
        return _tf_data.batch_iterator(self._tf, batches, self._device)

    def image_loader(self, images: Any, settings: Any) -> tuple[Iterator[Any], dict[str, Any]]:
        tf = self._tf
        stream, knobs = image_batches(self._keras, images, settings)

        def placed(batch: dict[str, Any]) -> dict[str, Any]:
            with tf.device(self._device):
                return {k: tf.identity(v) for k, v in _tf_data.widen(batch).items()}

        return (placed(b) for b in stream), knobs

    def device_memory_peak(self) -> int | None:
        return kit.tf_peak_bytes(self._tf, "cpu" if self._device == "/CPU:0" else "cuda")

    def train_step(self, batch: Any) -> Any:
        data = fit_data(self.spec, batch)
        model = self.model
        with self._tf.device(self._device):
            if model.train_function is None:  # what fit does before its loop
                model._symbolic_build(data_batch=data)
                model.make_train_function()
            model.reset_metrics()
            return model.train_function([data])["loss"]

    def infer_step(self, batch: Any) -> Any:
        tf, layers, spec = self._tf, self._layers, self.spec
        assert isinstance(spec, RNNCaption)
        features = batch["features"]
        n = int(features.shape[0])
        with tf.device(self._device):
            h = layers["img"](features)
            token = tf.fill([n], BOS)
            done = tf.zeros([n], tf.bool)
            columns = []
            for _ in range(spec.max_len):
                h, _ = layers["gru"].cell(layers["embed"](token), [h])
                best = tf.argmax(layers["out"](h), axis=1, output_type=tf.int32)
                token = tf.where(done, PAD, best)
                columns.append(token)
                done = tf.logical_or(done, token == EOS)
                if bool(tf.reduce_all(done)):  # the data-dependent exit: a host sync every step
                    break
            decoded = tf.stack(columns, axis=1)
            return tf.pad(decoded, [[0, 0], [0, spec.max_len - len(columns)]], constant_values=PAD)

    def sync(self, handle: Any) -> float:
        value = handle.numpy()  # waits for the step that computes it
        if value.ndim:  # decoded tokens: mean caption length
            return float((value != PAD).sum()) / len(value)
        return float(value)

    def fetch(self, handle: Any) -> np.ndarray:
        return handle.numpy()

    def params(self) -> Params:
        return save_params(self._layers, self.spec)

    def compile_stats(self) -> dict[str, Any]:
        if self.model.train_function is None:
            # no training step (fit makes its train function at the first), or a decode: the GRU
            # cell stepped eagerly, which traces nothing (``settings`` says which path ran)
            return {"traces": 0}
        step = _traced_step(self.model.train_function)
        return kit.tf_compile_stats([step]) if step is not None else {}

    def settings(self) -> dict[str, Any]:
        tf = self._tf
        attention = {}
        if self.spec.family == "transformer":
            attention = {"attention_kernel": _keras_transformer.attention_kernel(self.spec, "tensorflow")}
        return {
            "jit_compile": bool(self.model.jit_compile),
            "jit_compile_setting": f"{JIT_COMPILE!r} (Keras's default, resolved on this machine)",
            "train_path": "fit's train_function (a tf.function, reduce_retracing=True)",
            **({"decode_path": EAGER_DECODE} if getattr(self.spec, "task", "train") != "train" else {}),
            "steps_per_execution": self.model.steps_per_execution,
            "optimizer_kernel": optimizer_kernel(self.spec, "epsilon scaled per step inside the traced update"),
            **attention,
            "mixed_precision": self._mixed,
            "tf32": tf.config.experimental.tensor_float_32_execution_enabled(),
            "intra_op_threads": tf.config.threading.get_intra_op_parallelism_threads(),
            "cudnn_autotune": os.environ.get("TF_CUDNN_USE_AUTOTUNE", "on (default)"),
        }


#: How this adapter decodes, in its settings: op by op, so a decode cell traces nothing.
EAGER_DECODE = "eager: the GRU layer's cell stepped in a Python loop, no tf.function"


def _traced_step(train_function: Any) -> Any:
    """The ``tf.function`` inside Keras's train function (``one_step_on_data``, wrapped by
    ``functools.wraps``), whose tracing count ``compile_stats`` reports."""
    inner = inspect.getclosurevars(train_function).nonlocals.get("one_step_on_data")
    traced = getattr(inner, "__wrapped__", None)
    return traced if hasattr(traced, "experimental_get_tracing_count") else None
