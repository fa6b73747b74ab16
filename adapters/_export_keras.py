"""Keras's export paths (docs/export.md), the same for every backend: the in-process forward
(``predict_on_batch``, compiled as the adapter compiles its training step), the ``.keras`` file
(``model.save``, reloaded with ``keras.saving.load_model`` in the same backend),
``model.export(format="tf_saved_model")`` (served by ``tf.saved_model.load``) and
``model.export(format="onnx")`` (served by ONNX Runtime; on the JAX backend Keras converts
through jax2onnx, which is not installed here).

The model is the Keras adapters' own (adapters/_keras_common.py ``build_model``/``load_params``).
"""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any

import numpy as np

from adapters import _export_onnx
from adapters._keras_common import build_model, load_params
from adapters.exporting import Forward
from workloads import CNN, MLP, Params, Workload

PATHS = ("keras-file", "keras-saved-model", "onnx")
FILES = {"keras-file": "model.keras", "keras-saved-model": "saved_model", "onnx": _export_onnx.FILE}


def path_reason(path: str, backend: str) -> str | None:
    """Why ``path`` cannot run on ``backend`` here (a converter or runtime missing), or None."""
    if path == "keras-saved-model" and importlib.util.find_spec("tensorflow") is None:
        return "tensorflow not installed: Keras exports and serves SavedModels through it"
    if path == "keras-saved-model" and backend == "torch" and importlib.util.find_spec("torch_xla") is None:
        # Tried with Keras 3.15: a batch-polymorphic signature fails inside its torch.export call
        # (inputs and dynamic_shapes differ in structure); a fixed one asks for torch_xla.
        return (
            "Keras on torch converts a SavedModel through torch_xla, not installed here (and Keras 3.15's "
            "export with a dynamic batch fails in torch.export: its inputs and dynamic_shapes differ in structure)"
        )
    if path == "onnx":
        if backend == "jax" and importlib.util.find_spec("jax2onnx") is None:
            return "Keras on JAX exports ONNX through jax2onnx, not installed (docs/export.md)"
        return _export_onnx.runtime_reason()
    return None


def model(keras: Any, spec: Workload, params: Params, device: str, jit_compile: bool | str) -> Any:
    """The spec's Keras model from canonical ``params``, compiled for inference, called once
    (Keras exports only a model that has been called)."""
    with keras.device(device):
        m, layers = build_model(keras, spec)
        load_params(layers, params, spec)
        m.compile(jit_compile=jit_compile)
    assert isinstance(spec, (MLP, CNN))
    x = np.zeros((1, *spec.input_shape), np.float32)
    m.predict_on_batch(x)
    m(x)  # Keras's ONNX export on JAX asks that the model was called, not only predicted with
    return m


def forward_of(m: Any) -> Forward:
    """``predict_on_batch``: NumPy in, NumPy out (it converts its result to host memory)."""
    return lambda x: np.asarray(m.predict_on_batch(x))


def export(path: str, spec: Workload, params: Params, device: str, directory: Path, jit_compile: bool | str) -> Path:
    import keras

    m = model(keras, spec, params, device, jit_compile)
    out = directory / FILES[path]
    if path == "keras-file":
        m.save(str(out))
    else:
        m.export(str(out), format="tf_saved_model" if path == "keras-saved-model" else "onnx", verbose=False)
    return out


def serve(path: str, artifact: Path, device: str, threads: int) -> Forward:
    if path == "onnx":
        return _export_onnx.serve(artifact, device, threads)
    if path == "keras-saved-model":
        import tensorflow as tf

        loaded = tf.saved_model.load(str(artifact))
        return lambda x: loaded.serve(tf.constant(x)).numpy()
    import keras

    with keras.device(device):
        return forward_of(keras.saving.load_model(str(artifact)))
