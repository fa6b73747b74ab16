"""TensorFlow's export paths (docs/export.md): the in-process forward, ``tf.saved_model.save`` of
a ``tf.Module`` whose ``serve`` is a ``tf.function`` with an input signature (reloaded with
``tf.saved_model.load``), and ONNX through tf2onnx (``tf2onnx.convert.from_function``), served
by ONNX Runtime.

The forward is tf-function's own model code (adapters/_tf_layers.py's ``dense`` and tf_function.py's conv
blocks of its loss) over ``tf.Variable``s, so the saved graph is the one tf-function trains.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any

import numpy as np

from adapters import _export_onnx
from adapters.exporting import Forward
from workloads import CNN, MLP, Params, Workload

PATHS = ("tf-saved-model", "onnx")
FILES = {"tf-saved-model": "saved_model", "onnx": _export_onnx.FILE}


def converter_reason() -> str | None:
    """None if tf2onnx and ONNX Runtime are installed, else why the ONNX path is skipped."""
    if importlib.util.find_spec("tf2onnx") is None:
        return "tf2onnx not installed: pip install 'dlcompare[export]'"
    return _export_onnx.runtime_reason()


def logits_fn(tf: Any, spec: Workload, v: dict[str, Any]) -> Any:
    """The forward of ``spec`` over variables ``v`` (canonical names): NHWC or flat inputs."""
    from adapters._tf_layers import dense as _dense

    def logits(x):
        if spec.family == "mlp":
            return _dense(tf, v, tf.reshape(x, [tf.shape(x)[0], -1]), len(spec.layer_sizes) - 1)
        h = x
        for i in range(len(spec.channels)):
            h = tf.nn.relu(tf.nn.conv2d(h, v[f"conv{i}/kernel"], 1, "SAME") + v[f"conv{i}/bias"])
            h = tf.nn.max_pool2d(h, 2, 2, "VALID")
        return _dense(tf, v, tf.reshape(h, [tf.shape(h)[0], -1]), len(spec.dense_sizes) - 1)

    return logits


def variables(tf: Any, params: Params, device: str) -> dict[str, Any]:
    with tf.device("/GPU:0" if device == "cuda" else "/CPU:0"):
        return {k: tf.Variable(v, name=k.replace("/", "_")) for k, v in params.items()}


def signature(tf: Any, spec: Workload) -> list[Any]:
    """Any batch size, the workload's input shape: one trace serves batch 1 and large batches."""
    assert isinstance(spec, (MLP, CNN))
    return [tf.TensorSpec([None, *spec.input_shape], tf.float32, name="x")]


def forward_of(tf: Any, fn: Any, device: str) -> Forward:
    """NumPy in, NumPy out; ``.numpy()`` waits for the device."""
    place = "/GPU:0" if device == "cuda" else "/CPU:0"

    def forward(x: np.ndarray) -> np.ndarray:
        with tf.device(place):
            return fn(tf.constant(x)).numpy()

    return forward


def export(path: str, spec: Workload, params: Params, device: str, directory: Path) -> Path:
    import tensorflow as tf

    v = variables(tf, params, device)
    out = directory / FILES[path]
    if path == "onnx":
        import tf2onnx

        # tf2onnx binds its own named signature: it takes the tf.function without one.
        tf2onnx.convert.from_function(
            tf.function(logits_fn(tf, spec, v)), input_signature=signature(tf, spec), output_path=str(out)
        )
        return out
    module = tf.Module()
    module.v = v  # tracked, so the variables are saved with the graph
    module.serve = tf.function(logits_fn(tf, spec, v), input_signature=signature(tf, spec))
    tf.saved_model.save(module, str(out), signatures={"serving_default": module.serve})
    return out


def serve(path: str, artifact: Path, device: str, threads: int) -> Forward:
    if path == "onnx":
        return _export_onnx.serve(artifact, device, threads)
    import tensorflow as tf

    from adapters.kit import tf_precision

    tf_precision(tf, False, threads)
    loaded = tf.saved_model.load(str(artifact))
    # The lambda keeps ``loaded`` alive: its variables die with it, and ``loaded.serve`` alone
    # does not hold them.
    return forward_of(tf, lambda x: loaded.serve(x), device)
