"""The transformer workload as a PyTorch ``nn.Module`` (torch-eager and torch-compile).

Written as nanoGPT-style PyTorch: ``nn.Embedding`` tables, ``nn.LayerNorm`` and ``nn.Linear``
layers, query/key/value as three Linear layers (the canonical layout; packing them into one
would change the kernels, not the maths), heads by ``view``/``transpose``. ``attention``:
``naive`` is ``q @ k^T``, ``masked_fill`` with the causal mask, ``softmax``, ``@ v``; ``fused``
is ``F.scaled_dot_product_attention(is_causal=True)``, which picks its own CPU/CUDA kernel.
Linear weights are (out, in): canonical kernels are transposed.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from workloads import Params
from workloads.transformer import LN_EPS, Transformer

#: What each ``attention`` setting runs, for the record's settings.
ATTENTION_KERNELS = {
    "naive": "matmul, masked_fill(-inf), softmax, matmul",
    "fused": "torch.nn.functional.scaled_dot_product_attention(is_causal=True)",
}


def build(torch: Any, spec: Transformer, compile_fn: Any) -> Any:
    """The spec's model with ``load_canonical`` / ``canonical`` / ``loss``; ``compile_fn(fn)``
    wraps the whole loss (forward; torch-compile's AOTAutograd compiles its backward)."""
    nn, F = torch.nn, torch.nn.functional
    Module: Any = nn.Module
    d, heads, e = spec.width, spec.heads, spec.head_dim
    fused = spec.attention == "fused"

    class Block(Module):
        def __init__(self) -> None:
            super().__init__()
            self.ln1 = nn.LayerNorm(d, eps=LN_EPS)
            self.query, self.key, self.value, self.out = (nn.Linear(d, d) for _ in range(4))
            self.ln2 = nn.LayerNorm(d, eps=LN_EPS)
            self.mlp_in = nn.Linear(d, 4 * d)
            self.mlp_out = nn.Linear(4 * d, d)

        def attention(self, h):
            b, t, _ = h.shape
            q, k, v = (proj(h).view(b, t, heads, e).transpose(1, 2) for proj in (self.query, self.key, self.value))
            if fused:
                o = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            else:
                causal = torch.ones(t, t, dtype=torch.bool, device=h.device).tril()
                s = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(e))
                o = torch.softmax(s.masked_fill(~causal, float("-inf")), dim=-1) @ v
            return self.out(o.transpose(1, 2).reshape(b, t, d))

        def forward(self, x):
            x = x + self.attention(self.ln1(x))
            return x + self.mlp_out(F.gelu(self.mlp_in(self.ln2(x)), approximate="tanh"))

    class TransformerLM(Module):
        def __init__(self) -> None:
            super().__init__()
            self.tok = nn.Embedding(spec.vocab, d)
            self.pos = nn.Embedding(spec.max_len, d)
            self.blocks = nn.ModuleList(Block() for _ in range(spec.layers))
            self.ln_f = nn.LayerNorm(d, eps=LN_EPS)
            self.head = nn.Linear(d, spec.vocab)
            self._loss = compile_fn(self._uncompiled_loss)

        def _uncompiled_loss(self, tokens, targets, mask):
            x = self.tok(tokens) + self.pos.weight[: tokens.shape[1]]
            for block in self.blocks:
                x = block(x)
            logits = self.head(self.ln_f(x))
            ce = F.cross_entropy(logits.flatten(0, 1), targets.flatten(), reduction="none")
            return (ce * mask.flatten()).sum() / mask.sum()

        def loss(self, batch):
            return self._loss(batch["tokens"], batch["targets"], batch["mask"])

        def _pairs(self) -> list[tuple[str, Any, bool]]:
            """(canonical name, parameter, stored transposed) for every parameter."""
            pairs = [("tok/table", self.tok.weight, False), ("pos/table", self.pos.weight, False)]
            for i, blk in enumerate(self.blocks):
                b = f"block{i}"
                layers = [
                    ("ln1", blk.ln1),
                    ("attn/query", blk.query),
                    ("attn/key", blk.key),
                    ("attn/value", blk.value),
                    ("attn/out", blk.out),
                    ("ln2", blk.ln2),
                    ("mlp/in", blk.mlp_in),
                    ("mlp/out", blk.mlp_out),
                ]
                for name, layer in layers:
                    if isinstance(layer, nn.LayerNorm):
                        pairs += [(f"{b}/{name}/scale", layer.weight, False), (f"{b}/{name}/bias", layer.bias, False)]
                    else:
                        pairs += [(f"{b}/{name}/kernel", layer.weight, True), (f"{b}/{name}/bias", layer.bias, False)]
            pairs += [("ln_f/scale", self.ln_f.weight, False), ("ln_f/bias", self.ln_f.bias, False)]
            return pairs + [("out/kernel", self.head.weight, True), ("out/bias", self.head.bias, False)]

        def load_canonical(self, p: Params) -> None:
            with torch.no_grad():
                for name, param, transposed in self._pairs():
                    value = p[name].T if transposed else p[name]
                    param.copy_(torch.from_numpy(np.ascontiguousarray(value)))

        def canonical(self) -> Params:
            out = {}
            for name, param, transposed in self._pairs():
                value = param.detach().cpu().numpy()
                out[name] = (value.T if transposed else value).copy()
            return out

    return TransformerLM()
