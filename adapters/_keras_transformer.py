"""The ``transformer`` workload as Keras users build it, for keras-torch and keras-jax.

A functional model of Keras layers: ``Embedding`` for tokens, a small ``PositionEmbedding``
layer (core Keras has none; KerasHub's has the same single (max_len, D) table), pre-LayerNorm
blocks of ``LayerNormalization(epsilon=LN_EPS)`` (Keras defaults to 1e-3), ``MultiHeadAttention``
called with ``use_causal_mask=True``, ``Add`` residuals and a ``Dense`` 4x MLP with tanh-approximate
GELU, a final ``LayerNormalization`` and an untied ``Dense`` output projection.

Attention, the spec's ``attention`` setting, both through Keras's own ``MultiHeadAttention``:
    ``fused``  the layer's default path: ``keras.ops.dot_product_attention(is_causal=True)``,
               which is ``torch.nn.functional.scaled_dot_product_attention`` on the torch backend
               and ``jax.nn.dot_product_attention`` (the "xla" implementation on CPU, cuDNN where
               Keras finds it usable on a GPU) on the JAX backend;
    ``naive``  the layer's explicit-scores path (einsum, causal mask through its masked
               ``Softmax``, einsum), which Keras runs when the scores are asked for
               (``return_attention_scores=True``; the scores are dropped).

Canonical layout: MultiHeadAttention's query/key/value kernels are (D, H, E) and biases (H, E),
its output kernel (H, E, D): row-major reshapes of the canonical (D, D) and (D,) arrays, head h
being columns [h E, (h + 1) E) as the spec states. Every other weight has the canonical shape.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from workloads import Params, Workload
from workloads.optim import decays
from workloads.transformer import LN_EPS, Transformer


def build_model(keras: Any, spec: Transformer) -> tuple[Any, dict[str, Any]]:
    """The spec's model and its variables by canonical parameter name."""
    L, ops = keras.layers, keras.ops
    Layer: Any = L.Layer

    class PositionEmbedding(Layer):
        """``x + table[:T]``: a learned position table of ``max_len`` rows."""

        def __init__(self, max_len: int, **kwargs: Any) -> None:
            super().__init__(**kwargs)
            self.max_len = max_len

        def build(self, input_shape: tuple) -> None:
            self.table = self.add_weight(shape=(self.max_len, input_shape[-1]), name="table")

        def call(self, x: Any) -> Any:
            return x + self.table[: ops.shape(x)[1]]

        def compute_output_shape(self, input_shape: tuple) -> tuple:
            return input_shape

    def gelu_tanh(x: Any) -> Any:
        return ops.gelu(x, approximate=True)

    d = spec.width
    named: dict[str, Any] = {}
    tokens = keras.Input((None,), dtype="int32", name="tokens")
    named["tok"] = L.Embedding(spec.vocab, d, name="tok")
    named["pos"] = PositionEmbedding(spec.max_len, name="pos")
    x = named["pos"](named["tok"](tokens))
    for layer in range(spec.layers):
        b = f"block{layer}"
        for part in ("ln1", "ln2"):
            named[f"{b}/{part}"] = L.LayerNormalization(epsilon=LN_EPS, name=f"{b}_{part}")
        named[f"{b}/attn"] = L.MultiHeadAttention(spec.heads, spec.head_dim, name=f"{b}_attn")
        named[f"{b}/mlp/in"] = L.Dense(4 * d, activation=gelu_tanh, name=f"{b}_mlp_in")
        named[f"{b}/mlp/out"] = L.Dense(d, name=f"{b}_mlp_out")
        h = named[f"{b}/ln1"](x)
        if spec.attention == "naive":
            a, _scores = named[f"{b}/attn"](h, h, use_causal_mask=True, return_attention_scores=True)
        else:
            a = named[f"{b}/attn"](h, h, use_causal_mask=True)
        x = L.Add()([x, a])
        x = L.Add()([x, named[f"{b}/mlp/out"](named[f"{b}/mlp/in"](named[f"{b}/ln2"](x)))])
    named["ln_f"] = L.LayerNormalization(epsilon=LN_EPS, name="ln_f")
    named["out"] = L.Dense(spec.vocab, name="out")
    model = keras.Model(tokens, named["out"](named["ln_f"](x)))
    return model, _variables(named, spec)


def _variables(named: dict[str, Any], spec: Transformer) -> dict[str, Any]:
    out = {"tok/table": named["tok"].embeddings, "pos/table": named["pos"].table}
    for layer in range(spec.layers):
        b = f"block{layer}"
        for part in ("ln1", "ln2"):
            out[f"{b}/{part}/scale"], out[f"{b}/{part}/bias"] = named[f"{b}/{part}"].gamma, named[f"{b}/{part}"].beta
        attn = named[f"{b}/attn"]
        for proj, dense in (("query", attn.query_dense), ("key", attn.key_dense), ("value", attn.value_dense)):
            out[f"{b}/attn/{proj}/kernel"], out[f"{b}/attn/{proj}/bias"] = dense.kernel, dense.bias
        out[f"{b}/attn/out/kernel"], out[f"{b}/attn/out/bias"] = attn.output_dense.kernel, attn.output_dense.bias
        for part in ("mlp/in", "mlp/out"):
            out[f"{b}/{part}/kernel"], out[f"{b}/{part}/bias"] = named[f"{b}/{part}"].kernel, named[f"{b}/{part}"].bias
    out["ln_f/scale"], out["ln_f/bias"] = named["ln_f"].gamma, named["ln_f"].beta
    out["out/kernel"], out["out/bias"] = named["out"].kernel, named["out"].bias
    return out


def load_params(variables: dict[str, Any], p: Params) -> None:
    for name, variable in variables.items():
        variable.assign(p[name].reshape(variable.shape))


def save_params(keras: Any, variables: dict[str, Any], spec: Transformer) -> Params:
    d = spec.width
    out: Params = {}
    for name, variable in variables.items():
        value = np.asarray(keras.ops.convert_to_numpy(variable), dtype=np.float32)
        if name.startswith("block") and "/attn/" in name:  # MultiHeadAttention's head axes merged
            value = value.reshape((d, d) if name.endswith("/kernel") else (d,))
        out[name] = value
    return out


def undecayed(variables: dict[str, Any]) -> list[Any]:
    """The variables AdamW must not decay (biases, LayerNorm scales and biases)."""
    return [v for name, v in variables.items() if not decays(name)]


def attention_kernel(spec: Workload, backend: str) -> str:
    """The attention a cell runs, as settings() records it."""
    if spec.attention == "naive":
        return "MultiHeadAttention, explicit scores (einsum, masked Softmax, einsum)"
    fused = {
        "torch": "torch.nn.functional.scaled_dot_product_attention",
        "jax": "jax.nn.dot_product_attention",
        # Keras's TensorFlow backend has no fused kernel: its own einsum-softmax-einsum (XLA-friendly) code
        "tensorflow": "written out by Keras's TensorFlow backend (no fused kernel)",
    }[backend]
    return f"MultiHeadAttention -> keras.ops.dot_product_attention(is_causal=True) -> {fused}"
