"""TensorFlow eager, without ``tf.function``: TensorFlow's dynamic-graph mode.

The same model code as tf-function (adapters/tf_function.py), executed op by op: no tracing,
no Grappler. Caption loops are Python loops over each batch's own length; greedy decoding's
``tf.while_loop`` runs as a Python loop in eager mode. There is no loop inside a graph, so
``graph-loop`` is skipped. The transformer runs its plain-TF model (adapters/_tf_transformer.py)
op by op, with tf-function's AdamW and the same skipped ``attention=fused`` cell.
"""

from __future__ import annotations

from typing import Any

from adapters.tf_function import TfFunction


class TfEager(TfFunction):
    name = "tf-eager"
    graph = "dynamic"
    graph_loop = None
    export_paths = ()  # TensorFlow's export paths are tf-function's: one artifact per framework

    def _compile(self, fn: Any, input_signature: Any = None) -> Any:
        return fn

    def compile_stats(self) -> dict[str, Any]:
        return {}

    def settings(self) -> dict[str, Any]:
        return {**super().settings(), "tf_function": False}
