"""JAX op by op, without ``jax.jit``: the honest eager baseline for JAX.

The same model code as jax-jit (adapters/jax_jit.py), but the training step and the greedy
decoder run without ``jax.jit``: every ``jax.numpy`` operation dispatches on its own (each op
is compiled once per shape and cached by JAX, as in any eager JAX program), and the caption
loops are Python loops rather than ``lax.scan`` / ``lax.while_loop``, so each batch runs exactly
its length with no retracing. There is no loop inside a graph, so ``graph-loop`` is skipped.
"""

from __future__ import annotations

from typing import Any

from adapters.jax_jit import JaxJit


class JaxEager(JaxJit):
    name = "jax-eager"
    graph = "dynamic"
    graph_loop = None
    python_loop = True
    export_paths = ()  # JAX's export paths are jax-jit's: one artifact per framework

    def _compile(self, fn: Any, **jit_args: Any) -> Any:
        return fn

    def settings(self) -> dict[str, Any]:
        kernel = f"optax.{self.spec.optimizer} (op by op)"
        return {**super().settings(), "jit": False, "donate_buffers": False, "optimizer_kernel": kernel}
