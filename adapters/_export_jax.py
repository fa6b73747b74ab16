"""JAX's export paths (docs/export.md): the in-process forward (jitted or op by op) and
``jax.export``: the jitted forward lowered to StableHLO for the cell's platform with a symbolic
batch dimension, serialised (``Exported.serialize``) with the parameters as constants, and in a
fresh process deserialised (``jax.export.deserialize``) and called through ``jax.jit``.

JAX has no ONNX exporter of its own: its ONNX path converts the same jitted forward with
jax2onnx (``to_onnx``, a symbolic batch dimension, the parameters as initializers), served by ONNX
Runtime; without jax2onnx installed it is a skipped cell naming the package.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any

import numpy as np

from adapters import _export_onnx
from adapters.exporting import Forward
from workloads import CNN, MLP, Params, Workload

PATHS = ("jax-export", "onnx")
FILES = {"jax-export": "model.jax_exported", "onnx": _export_onnx.FILE}


def onnx_reason() -> str | None:
    """Why JAX's ONNX path cannot run here (its converter or ONNX Runtime missing), or None."""
    if importlib.util.find_spec("jax2onnx") is None:
        return "no JAX-to-ONNX converter: jax2onnx not installed (pip install 'dlcompare[export]')"
    return _export_onnx.runtime_reason()


def _max_pool(jax: Any, h: Any) -> Any:
    """2x2 max pooling, stride 2, VALID: the adapters' ``reduce_window``."""
    lax, jnp = jax.lax, jax.numpy
    return lax.reduce_window(h, -jnp.inf, lax.max, (1, 2, 2, 1), (1, 2, 2, 1), "VALID")


def _max_pool_as_reshape(jax: Any, h: Any) -> Any:
    """The same pooling as a reshape and a max over each 2x2 block (VALID: odd edges dropped).
    jax2onnx 0.17 turns ``reduce_window`` over NHWC into an ONNX MaxPool that ONNX Runtime refuses
    ("Unsupported pooling size"); a reduction over the reshaped blocks it converts to ReduceMax."""
    _, height, width, c = h.shape
    h = h[:, : height // 2 * 2, : width // 2 * 2, :]
    return h.reshape(-1, height // 2, 2, width // 2, 2, c).max(axis=(2, 4))


def logits_fn(jax: Any, spec: Workload, for_onnx: bool = False) -> Any:
    """``logits(p, x)``: jax-jit's model code (adapters/jax_jit.py) without the loss; ``for_onnx``:
    its pooling written as jax2onnx converts it (the same values, ``_max_pool_as_reshape``)."""
    from adapters._jax_layers import dense as _dense

    lax = jax.lax
    pool = _max_pool_as_reshape if for_onnx else _max_pool

    def logits(p, x):
        if spec.family == "mlp":
            return _dense(jax, p, x.reshape(x.shape[0], -1), "dense", len(spec.layer_sizes) - 1)
        h = x
        for i in range(len(spec.channels)):
            h = lax.conv_general_dilated(
                h, p[f"conv{i}/kernel"], (1, 1), "SAME", dimension_numbers=("NHWC", "HWIO", "NHWC")
            )
            h = pool(jax, jax.nn.relu(h + p[f"conv{i}/bias"]))
        return _dense(jax, p, h.reshape(h.shape[0], -1), "dense", len(spec.dense_sizes) - 1)

    return logits


def forward_of(jax: Any, fn: Any, device: str) -> Forward:
    """NumPy in (placed with ``device_put``), NumPy out after ``block_until_ready``."""
    dev = jax.devices(device)[0]

    def forward(x: np.ndarray) -> np.ndarray:
        return np.asarray(jax.block_until_ready(fn(jax.device_put(x, dev))))

    return forward


def export(path: str, spec: Workload, params: Params, device: str, directory: Path) -> Path:
    import jax

    from adapters.kit import jax_place, jax_precision

    jax_precision(False)  # full float32 matmuls baked into the program, as the training cells' (no TF32)
    p = jax_place({k: jax.numpy.asarray(v) for k, v in params.items()}, jax.devices(device)[0])
    logits = logits_fn(jax, spec, for_onnx=path == "onnx")
    if path == "onnx":
        return write_onnx(lambda x: logits(p, x), spec, directory)
    return write(lambda x: logits(p, x), spec, device, directory)


def write_onnx(fn: Any, spec: Workload, directory: Path) -> Path:
    """jax2onnx's conversion of ``fn`` (inputs -> logits, parameters closed over) with a symbolic
    batch dimension ``B``, written as one ONNX file (ONNX Runtime serves it on any device)."""
    from jax2onnx import to_onnx

    out = directory / FILES["onnx"]
    assert isinstance(spec, (MLP, CNN))
    to_onnx(fn, [("B", *spec.input_shape)], model_name=spec.name, return_mode="file", output_path=str(out))
    return out


def write(fn: Any, spec: Workload, device: str, directory: Path) -> Path:
    """``jax.export`` of ``fn`` (inputs -> logits, parameters closed over: they become constants)
    jitted, for ``device``'s platform, with a symbolic batch dimension; serialised to a file."""
    import jax

    (batch,) = jax.export.symbolic_shape("batch")
    assert isinstance(spec, (MLP, CNN))
    shape = jax.ShapeDtypeStruct((batch, *spec.input_shape), jax.numpy.float32)
    exported = jax.export.export(jax.jit(fn), platforms=[device])(shape)
    out = directory / FILES["jax-export"]
    out.write_bytes(exported.serialize())
    return out


def serve(path: str, artifact: Path, device: str, threads: int) -> Forward:
    if path == "onnx":
        return _export_onnx.serve(artifact, device, threads)
    import jax

    from adapters.kit import jax_precision

    jax_precision(False)
    exported = jax.export.deserialize(bytearray(artifact.read_bytes()))
    return forward_of(jax, jax.jit(exported.call), device)
