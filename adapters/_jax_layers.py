"""Layers jax-jit's model and JAX's export paths (adapters/_export_jax.py) share."""

from __future__ import annotations

from typing import Any

from workloads import Params


def dense(jax: Any, p: Params, h: Any, prefix: str, n_layers: int) -> Any:
    """``n_layers`` dense layers ``{prefix}{i}``, ReLU between them, none after the last."""
    for i in range(n_layers):
        h = h @ p[f"{prefix}{i}/kernel"] + p[f"{prefix}{i}/bias"]
        if i < n_layers - 1:
            h = jax.nn.relu(h)
    return h
