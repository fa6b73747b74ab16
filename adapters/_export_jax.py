"""JAX's export paths (docs/export.md): the in-process forward (jitted or op by op) and
``jax.export``: the jitted forward lowered to StableHLO for the cell's platform with a symbolic
batch dimension, serialised (``Exported.serialize``) with the parameters as constants, and in a
fresh process deserialised (``jax.export.deserialize``) and called through ``jax.jit``.

JAX has no ONNX exporter of its own; the converter (jax2onnx) is not installed here, so JAX's
ONNX path is a skipped cell with that reason (docs/export.md).
"""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any

import numpy as np

from adapters.base import Forward
from workloads import Params, Workload

PATHS = ("jax-export", "onnx")
FILES = {"jax-export": "model.jax_exported"}
ONNX_REASON = (
    "no JAX-to-ONNX converter installed: jax2onnx 0.17 would add 21 packages (orbax-checkpoint, "
    "equinox, huggingface_hub, ...) to the locks, not taken in (docs/export.md)"
)


def onnx_reason() -> str:
    """Why JAX's ONNX path is skipped (always: no converter is wired in, see ONNX_REASON)."""
    if importlib.util.find_spec("jax2onnx") is None:
        return ONNX_REASON
    return "jax2onnx is installed but not wired in: dlcompare has no JAX-to-ONNX export yet"


def logits_fn(jax: Any, spec: Workload) -> Any:
    """``logits(p, x)``: jax-jit's model code (adapters/jax_jit.py) without the loss."""
    from adapters.jax_jit import _dense

    lax, jnp = jax.lax, jax.numpy

    def logits(p, x):
        if spec.family == "mlp":
            return _dense(jax, p, x.reshape(x.shape[0], -1), "dense", len(spec.layer_sizes) - 1)
        h = x
        for i in range(len(spec.channels)):
            h = lax.conv_general_dilated(
                h, p[f"conv{i}/kernel"], (1, 1), "SAME", dimension_numbers=("NHWC", "HWIO", "NHWC")
            )
            h = jax.nn.relu(h + p[f"conv{i}/bias"])
            h = lax.reduce_window(h, -jnp.inf, lax.max, (1, 2, 2, 1), (1, 2, 2, 1), "VALID")
        return _dense(jax, p, h.reshape(h.shape[0], -1), "dense", len(spec.dense_sizes) - 1)

    return logits


def forward_of(jax: Any, fn: Any, device: str) -> Forward:
    """NumPy in (placed with ``device_put``), NumPy out after ``block_until_ready``."""
    dev = jax.devices(device)[0]

    def forward(x: np.ndarray) -> np.ndarray:
        return np.asarray(jax.block_until_ready(fn(jax.device_put(x, dev))))

    return forward


def export(spec: Workload, params: Params, device: str, directory: Path) -> Path:
    import jax

    from adapters.kit import jax_place

    p = jax_place({k: jax.numpy.asarray(v) for k, v in params.items()}, jax.devices(device)[0])
    logits = logits_fn(jax, spec)
    return write(lambda x: logits(p, x), spec, device, directory)


def write(fn: Any, spec: Workload, device: str, directory: Path) -> Path:
    """``jax.export`` of ``fn`` (inputs -> logits, parameters closed over: they become constants)
    jitted, for ``device``'s platform, with a symbolic batch dimension; serialised to a file."""
    import jax

    (batch,) = jax.export.symbolic_shape("batch")
    shape = jax.ShapeDtypeStruct((batch, *spec.input_shape), jax.numpy.float32)
    exported = jax.export.export(jax.jit(fn), platforms=[device])(shape)
    out = directory / FILES["jax-export"]
    out.write_bytes(exported.serialize())
    return out


def serve(artifact: Path, device: str) -> Forward:
    import jax

    exported = jax.export.deserialize(bytearray(artifact.read_bytes()))
    return forward_of(jax, jax.jit(exported.call), device)
