"""The transformer workload as a pure JAX function of the canonical parameters (jax-jit, jax-eager).

Parameters stay in the canonical layout (kernels (in, out)), heads by reshape to (B, T, H, E).
``attention``: ``naive`` is ``einsum`` scores, ``jnp.where`` with the causal mask, softmax,
``einsum``; ``fused`` is ``jax.nn.dot_product_attention(is_causal=True)`` with its default
``implementation=None`` (XLA's composition on CPU; on a GPU the cuDNN kernel where it applies).
AdamW is ``optax.adamw`` with its ``mask`` set to the canonical decay rule (workloads.optim).
"""

from __future__ import annotations

import math
from typing import Any

from workloads.optim import ADAM_BETA1, ADAM_BETA2, ADAM_EPS, ADAMW_WEIGHT_DECAY, decays
from workloads.transformer import LN_EPS, Transformer

#: What each ``attention`` setting runs, for the record's settings.
ATTENTION_KERNELS = {
    "naive": "einsum, where(causal, s, -inf), jax.nn.softmax, einsum",
    "fused": "jax.nn.dot_product_attention(is_causal=True, implementation=None)",
}


def adamw(optax: Any, learning_rate: float, mask: Any = None) -> Any:
    """``optax.adamw`` with the workloads' constants, decaying only what ``decays`` names
    (canonical parameter names are the dict keys), or what ``mask`` (params -> bools) says."""
    return optax.adamw(
        learning_rate,
        b1=ADAM_BETA1,
        b2=ADAM_BETA2,
        eps=ADAM_EPS,
        weight_decay=ADAMW_WEIGHT_DECAY,
        mask=mask or (lambda params: {k: decays(k) for k in params}),
    )


def layer_norm(jax: Any, jnp: Any, x: Any, scale: Any, bias: Any) -> Any:
    mu = x.mean(axis=-1, keepdims=True)
    var = jnp.square(x - mu).mean(axis=-1, keepdims=True)
    return (x - mu) * jax.lax.rsqrt(var + LN_EPS) * scale + bias


def loss_fn(jax: Any, jnp: Any, optax: Any, spec: Transformer) -> Any:
    """loss(params, batch) of the spec's model."""
    heads, e, d = spec.heads, spec.head_dim, spec.width
    fused = spec.attention == "fused"

    def attention(q, k, v):
        if fused:
            return jax.nn.dot_product_attention(q, k, v, is_causal=True)
        t = q.shape[1]
        s = jnp.einsum("bqhe,bkhe->bhqk", q, k) * (1.0 / math.sqrt(e))
        causal = jnp.tril(jnp.ones((t, t), bool))
        return jnp.einsum("bhqk,bkhe->bqhe", jax.nn.softmax(jnp.where(causal, s, -jnp.inf), axis=-1), v)

    def loss(p, batch):
        tokens = batch["tokens"]
        b, t = tokens.shape
        x = p["tok/table"][tokens] + p["pos/table"][:t]
        for layer in range(spec.layers):
            k_ = f"block{layer}"
            h = layer_norm(jax, jnp, x, p[f"{k_}/ln1/scale"], p[f"{k_}/ln1/bias"])
            q, k, v = (
                (h @ p[f"{k_}/attn/{n}/kernel"] + p[f"{k_}/attn/{n}/bias"]).reshape(b, t, heads, e)
                for n in ("query", "key", "value")
            )
            o = attention(q, k, v).reshape(b, t, d)
            x = x + o @ p[f"{k_}/attn/out/kernel"] + p[f"{k_}/attn/out/bias"]
            h = layer_norm(jax, jnp, x, p[f"{k_}/ln2/scale"], p[f"{k_}/ln2/bias"])
            u = jax.nn.gelu(h @ p[f"{k_}/mlp/in/kernel"] + p[f"{k_}/mlp/in/bias"], approximate=True)
            x = x + u @ p[f"{k_}/mlp/out/kernel"] + p[f"{k_}/mlp/out/bias"]
        logits = layer_norm(jax, jnp, x, p["ln_f/scale"], p["ln_f/bias"]) @ p["out/kernel"] + p["out/bias"]
        # float32 loss under bf16: the logits and the mask (cast with the batch's floats) back to float32
        ce = optax.softmax_cross_entropy_with_integer_labels(logits.astype("float32"), batch["targets"])
        mask = batch["mask"].astype("float32")
        return (ce * mask).sum() / mask.sum()

    return loss
