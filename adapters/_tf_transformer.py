"""The ``transformer`` workload in plain TensorFlow ops, for tf-function and tf-eager.

The spec's decoder-only model (workloads/transformer.py) written with ``tf.matmul``,
``tf.nn.moments`` (LayerNorm, biased variance, epsilon inside the square root), ``tf.nn.gelu(
approximate=True)`` and ``tf.nn.sparse_softmax_cross_entropy_with_logits``. Positions are kept
flat, (B T, D), for every projection: one 2-D matmul per layer rather than a broadcast batch
matmul. Attention is ``naive`` only (matmul, causal mask, softmax, matmul): TensorFlow has no
fused attention op (``tf.nn`` offers none; the fused kernels of the TensorFlow world are Keras's
``keras.ops.dot_product_attention``, which the keras adapters run, and XLA's cuDNN rewrite on
GPUs, which plain TensorFlow does not expose), so ``attention=fused`` is a skipped cell.

AdamW: TensorFlow has no fused AdamW kernel (``tf.raw_ops`` holds ``ResourceApplyAdam`` and
its AMSGrad variant only), so the decoupled decay is written out as the workloads state it,
``p -= lr * wd * p`` on the parameters ``workloads.optim.decays`` names, before the fused
``ResourceApplyAdam`` update (which does not read ``p``, so the order changes nothing).
"""

from __future__ import annotations

import math
from typing import Any

from workloads import Workload
from workloads.transformer import LN_EPS, Transformer

#: The attention the TensorFlow adapters run, as settings() records it.
ATTENTION_KERNEL = "naive: tf.matmul, causal tf.where, tf.nn.softmax, tf.matmul"
#: Why tf-function and tf-eager skip ``attention=fused``.
NO_FUSED_ATTENTION = (
    "TensorFlow has no fused attention op (tf.nn offers none; keras.ops.dot_product_attention is "
    "the keras adapters' cell); attention=fused does not apply"
)


def loss_fn(tf: Any, spec: Workload, v: dict[str, Any]) -> Any:
    """The masked mean next-token cross-entropy of a batch (``tokens``, ``targets``, ``mask``),
    from the variables ``v`` in the canonical layout."""
    assert isinstance(spec, Transformer)
    heads, width, head_dim = spec.heads, spec.width, spec.head_dim
    scale = 1.0 / math.sqrt(head_dim)

    def layer_norm(x, prefix):
        mean, var = tf.nn.moments(x, axes=[-1], keepdims=True)
        return (x - mean) * tf.math.rsqrt(var + LN_EPS) * v[f"{prefix}/scale"] + v[f"{prefix}/bias"]

    def dense(x, prefix):
        return tf.matmul(x, v[f"{prefix}/kernel"]) + v[f"{prefix}/bias"]

    def attention(h, prefix, b, t):
        def split(z):  # (B T, D) -> (B, H, T, E)
            return tf.transpose(tf.reshape(z, [b, t, heads, head_dim]), [0, 2, 1, 3])

        q, k, val = (split(dense(h, f"{prefix}/{name}")) for name in ("query", "key", "value"))
        scores = tf.matmul(q, k, transpose_b=True) * scale
        causal = tf.linalg.band_part(tf.ones([t, t], tf.bool), -1, 0)
        scores = tf.where(causal, scores, tf.constant(-math.inf, scores.dtype))
        out = tf.matmul(tf.nn.softmax(scores, axis=-1), val)
        return dense(tf.reshape(tf.transpose(out, [0, 2, 1, 3]), [b * t, width]), f"{prefix}/out")

    def loss(batch):
        tokens = batch["tokens"]
        b, t = tf.shape(tokens)[0], tf.shape(tokens)[1]
        x = tf.gather(v["tok/table"], tokens) + v["pos/table"][:t]
        x = tf.reshape(x, [b * t, width])
        for layer in range(spec.layers):
            block = f"block{layer}"
            x += attention(layer_norm(x, f"{block}/ln1"), f"{block}/attn", b, t)
            hidden = tf.nn.gelu(dense(layer_norm(x, f"{block}/ln2"), f"{block}/mlp/in"), approximate=True)
            x += dense(hidden, f"{block}/mlp/out")
        logits = dense(layer_norm(x, "ln_f"), "out")
        # float32 loss under bf16 (kit.tf_mixed_loss casts the batch's mask to bf16 too)
        labels, mask = tf.reshape(batch["targets"], [-1]), tf.cast(tf.reshape(batch["mask"], [-1]), tf.float32)
        logits = tf.cast(logits, tf.float32)
        xent = tf.nn.sparse_softmax_cross_entropy_with_logits(labels=labels, logits=logits)
        return tf.reduce_sum(xent * mask) / tf.reduce_sum(mask)

    return loss
