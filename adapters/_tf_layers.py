"""Layers tf-function's model and TensorFlow's export paths (adapters/_export_tf.py) share."""

from __future__ import annotations

from typing import Any


def dense(tf: Any, v: Any, h: Any, n_layers: int) -> Any:
    """``n_layers`` dense layers ``dense{i}`` of the variables ``v``, ReLU between them, none after the last."""
    for i in range(n_layers):
        h = tf.matmul(h, v[f"dense{i}/kernel"]) + v[f"dense{i}/bias"]
        if i < n_layers - 1:
            h = tf.nn.relu(h)
    return h
