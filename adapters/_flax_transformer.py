"""The transformer workload as Flax NNX modules (flax-nnx, flax-nnx-cached).

Written with Flax's own layers: ``nnx.Embed`` tables, ``nnx.LayerNorm`` (epsilon set to the
spec's, and ``use_fast_variance=False``: the two-pass variance the reference computes),
``nnx.MultiHeadAttention`` (query/key/value kernels (D, H, E) with biases (H, E), output kernel
(H, E, D): reshapes of the canonical (D, D) ones) and ``nnx.Linear`` for the MLP and the head.
``attention``: ``fused`` is ``nnx.MultiHeadAttention``'s default ``attention_fn``,
``nnx.dot_product_attention``, called with ``is_causal=True``; without dropout it hands over to
``jax.nn.dot_product_attention``. ``naive`` is Flax's unfused path,
``flax.nnx.nn.attention.dot_product_attention_weights`` with the causal mask of
``nnx.make_causal_mask`` (masked scores set to the dtype's minimum), then the weighted sum of
the values by ``einsum``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from adapters import _jax_transformer
from workloads import Params, Workload
from workloads.transformer import LN_EPS, Transformer

#: What each ``attention`` setting runs, for the record's settings.
ATTENTION_KERNELS = {
    "naive": "nnx.MultiHeadAttention, attention_fn: dot_product_attention_weights (make_causal_mask) + einsum",
    "fused": "nnx.MultiHeadAttention, attention_fn: nnx.dot_product_attention(is_causal=True) "
    "-> jax.nn.dot_product_attention",
}


def adamw(jax: Any, optax: Any, learning_rate: float) -> Any:
    """``optax.adamw`` decaying the ``kernel`` and ``embedding`` parameters only (the canonical
    ``*/kernel`` and ``*/table``, workloads.optim.decays), by their names in the model's state."""

    def decays(path: tuple, _: Any) -> bool:
        names = [k.key for k in path if isinstance(k, jax.tree_util.DictKey)]
        return names[-1] in ("kernel", "embedding")

    return _jax_transformer.adamw(optax, learning_rate, lambda params: jax.tree_util.tree_map_with_path(decays, params))


def build(nnx: Any, spec: Transformer) -> Any:
    """The spec's model (initial values are replaced by the canonical ones)."""
    import jax
    import jax.numpy as jnp
    from flax.nnx.nn.attention import dot_product_attention_weights

    rngs = nnx.Rngs(0)
    d = spec.width

    def naive_attention(query, key, value, mask=None, **kwargs):
        weights = dot_product_attention_weights(query, key, mask=mask)
        return jnp.einsum("...hqk,...khd->...qhd", weights, value)

    fused = spec.attention == "fused"

    def norm() -> Any:
        return nnx.LayerNorm(d, epsilon=LN_EPS, use_fast_variance=False, rngs=rngs)

    class Block(nnx.Module):
        def __init__(self) -> None:
            self.ln1 = norm()
            self.attn = nnx.MultiHeadAttention(
                num_heads=spec.heads,
                in_features=d,
                qkv_features=d,
                out_features=d,
                decode=False,
                attention_fn=nnx.dot_product_attention if fused else naive_attention,
                rngs=rngs,
            )
            self.ln2 = norm()
            self.mlp_in = nnx.Linear(d, 4 * d, rngs=rngs)
            self.mlp_out = nnx.Linear(4 * d, d, rngs=rngs)

        def __call__(self, x, mask):
            if fused:
                x = x + self.attn(self.ln1(x), is_causal=True)
            else:
                x = x + self.attn(self.ln1(x), mask=mask)
            return x + self.mlp_out(jax.nn.gelu(self.mlp_in(self.ln2(x)), approximate=True))

    class TransformerLM(nnx.Module):
        def __init__(self) -> None:
            self.tok = nnx.Embed(spec.vocab, d, rngs=rngs)
            self.pos = nnx.Embed(spec.max_len, d, rngs=rngs)
            self.blocks = nnx.List([Block() for _ in range(spec.layers)])
            self.ln_f = norm()
            self.head = nnx.Linear(d, spec.vocab, rngs=rngs)

        def __call__(self, tokens):
            t = tokens.shape[1]
            x = self.tok(tokens) + self.pos.embedding.value[:t]
            mask = None if fused else nnx.make_causal_mask(tokens)
            for block in self.blocks:
                x = block(x, mask)
            return self.head(self.ln_f(x))

    return TransformerLM()


def _pairs(model: Any, spec: Transformer) -> list[tuple[str, Any, tuple[int, ...] | None]]:
    """(canonical name, nnx variable, its shape where it differs from the canonical one)."""
    h, e, d = spec.heads, spec.head_dim, spec.width
    pairs: list[tuple[str, Any, tuple[int, ...] | None]] = [
        ("tok/table", model.tok.embedding, None),
        ("pos/table", model.pos.embedding, None),
    ]
    for i, blk in enumerate(model.blocks):
        b = f"block{i}"
        for name, ln in (("ln1", blk.ln1), ("ln2", blk.ln2)):
            pairs += [(f"{b}/{name}/scale", ln.scale, None), (f"{b}/{name}/bias", ln.bias, None)]
        for name in ("query", "key", "value"):
            proj = getattr(blk.attn, name)
            pairs += [(f"{b}/attn/{name}/kernel", proj.kernel, (d, h, e)), (f"{b}/attn/{name}/bias", proj.bias, (h, e))]
        pairs += [
            (f"{b}/attn/out/kernel", blk.attn.out.kernel, (h, e, d)),
            (f"{b}/attn/out/bias", blk.attn.out.bias, None),
        ]
        for name, layer in (("mlp/in", blk.mlp_in), ("mlp/out", blk.mlp_out)):
            pairs += [(f"{b}/{name}/kernel", layer.kernel, None), (f"{b}/{name}/bias", layer.bias, None)]
    pairs += [("ln_f/scale", model.ln_f.scale, None), ("ln_f/bias", model.ln_f.bias, None)]
    return pairs + [("out/kernel", model.head.kernel, None), ("out/bias", model.head.bias, None)]


def load(model: Any, spec: Transformer, p: Params) -> None:
    import jax.numpy as jnp

    for name, variable, shape in _pairs(model, spec):
        variable.value = jnp.asarray(p[name].reshape(shape) if shape else p[name])


def save(model: Any, spec: Transformer) -> Params:
    out: Params = {}
    d = spec.width
    for name, variable, shape in _pairs(model, spec):
        value = np.asarray(variable.value, dtype=np.float32)
        if shape:  # attention's per-head layouts back to (D, D) kernels and (D,) biases
            value = value.reshape((d, d) if name.endswith("/kernel") else (d,))
        out[name] = value.copy()
    return out


def loss(jax: Any, spec: Workload) -> Callable[[Any, Any], Any]:
    import optax

    def transformer_loss(model, batch):
        # float32 loss under bf16: the logits and the mask (cast with the batch's floats) back to float32
        logits = model(batch["tokens"]).astype("float32")
        ce = optax.softmax_cross_entropy_with_integer_labels(logits, batch["targets"])
        mask = batch["mask"].astype("float32")
        return (ce * mask).sum() / mask.sum()

    return transformer_loss
