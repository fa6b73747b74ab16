"""A small decoder-only transformer language model over sequences of varying length.

Model (B = batch, T = time steps run, D = width, H = heads, E = D / H, V = vocab, L = layers):
    x = tok/table[tokens] + pos/table[:T]                         token + learned positions
    for each block l (pre-LayerNorm, residual):
        h = LN(x; block{l}/ln1)
        q, k, v = h @ block{l}/attn/{query,key,value}/kernel + .../bias, split into H heads
        a = causal_attention(q, k, v)  (softmax(q k^T / sqrt(E), j <= i) v, heads merged)
        x = x + a @ block{l}/attn/out/kernel + block{l}/attn/out/bias
        x = x + gelu(LN(x; block{l}/ln2) @ block{l}/mlp/in/kernel + .../bias) @ block{l}/mlp/out/kernel + .../bias
    logits = LN(x; ln_f) @ out/kernel + out/bias                  untied output projection
    loss = sum(mask * cross_entropy(logits, targets)) / sum(mask)

``LN(x; p) = (x - mean) / sqrt(var + LN_EPS) * p/scale + p/bias`` over the last axis, with the
biased (population) variance and LN_EPS = 1e-5 (set it explicitly: Keras defaults to 1e-3, Flax
to 1e-6). GELU is the tanh approximation, ``0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))``
(torch ``gelu(approximate="tanh")``, ``jax.nn.gelu(approximate=True)``, ``keras.ops.gelu(
approximate=True)``, ``tf.nn.gelu(approximate=True)``). Heads: head ``h`` is columns
``[h E, (h + 1) E)`` of the query, key and value projections (a reshape of (B, T, D) to
(B, T, H, E)), and the merged output is the inverse reshape. The causal mask is the only mask:
with right padding a real position never attends to a padded one, and padded positions carry
no loss, so no padding mask is needed and every strategy gives the same loss and gradients.

Canonical parameter layout (``y = x @ kernel + bias``): ``tok/table`` (V, D), ``pos/table``
(max_len, D); per block ``block{l}/ln1/scale``, ``block{l}/ln1/bias``, ``block{l}/ln2/scale``,
``block{l}/ln2/bias`` (D,), ``block{l}/attn/{query,key,value,out}/kernel`` (D, D) and ``/bias``
(D,), ``block{l}/mlp/in/kernel`` (D, 4D), ``block{l}/mlp/in/bias`` (4D,), ``block{l}/mlp/out/kernel``
(4D, D), ``block{l}/mlp/out/bias`` (D,); ``ln_f/scale``, ``ln_f/bias`` (D,); ``out/kernel`` (D, V),
``out/bias`` (V,). Initialisation: tables normal(0, 0.02), kernels Glorot-uniform, biases uniform
in [-0.05, 0.05], LayerNorm scales 1 + uniform [-0.1, 0.1] (all non-trivial, so a parameter
dropped or mis-mapped by an adapter shows in the step-0 loss).

Optimiser: ``adamw`` (workloads/optim.py): decoupled weight decay on every ``*/kernel`` and
``*/table`` parameter, none on biases and LayerNorm parameters.

``attention``: ``naive`` is matmul, causal mask, softmax, matmul written out; ``fused`` is the
framework's own attention kernel (torch ``scaled_dot_product_attention``,
``jax.nn.dot_product_attention``, ``keras.ops.dot_product_attention``), same maths. A run plans
both, side by side, unless ``--set attention=...`` fixes one (``plan_axes``).

Data: token 0 is PAD, 1 is BOS, 2 is EOS. Every sequence starts with BOS then a random first
word w in [3, V); its topic is ``w % topics`` and each next word is a fixed topic-specific
successor of the current one (a fixed random teacher), so all but the first word are
predictable by attending back to the first: the loss falls for real. Each batch has its own
length T_b drawn from [min_len, max_len]; each sequence in it has a length in [min_len, T_b]
(one of them exactly T_b) and ends with EOS. ``lengths = "fixed"``: every sequence is max_len
long (for sequence-length sweeps; min_len unused). Batch keys: ``tokens`` (B, T) int32 inputs,
``targets`` (B, T) int32 next tokens, ``mask`` (B, T) float32 (1 on real positions).

Loop strategies (the ``strategy`` field) decide the arrays' time length T, never the result:
    ``exact``      each batch at its own length T_b (graph frameworks see a new shape)
    ``bucketed``   padded up to the next of ``buckets``, capped at max_len (a bounded number of shapes)
    ``padded``     padded to ``max_len`` (one shape, wasted positions)
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from typing import ClassVar

import numpy as np

from workloads.mlp import softmax_cross_entropy
from workloads.spec import Batch, Kernel, Params, SpecError, Workload, _positive

PAD, BOS, EOS = 0, 1, 2
LN_EPS = 1e-5
GELU_C = math.sqrt(2.0 / math.pi)
GELU_A = 0.044715
STRATEGIES = ("exact", "bucketed", "padded")
ATTENTION = ("naive", "fused")
LENGTHS = ("vary", "fixed")
TASKS = ("train",)


def gelu(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Tanh-approximate GELU and its derivative."""
    t = np.tanh(GELU_C * (x + GELU_A * x**3))
    dt = (1 - t**2) * GELU_C * (1 + 3 * GELU_A * x**2)
    return 0.5 * x * (1 + t), 0.5 * (1 + t) + 0.5 * x * dt


def layer_norm(x: np.ndarray, scale: np.ndarray, bias: np.ndarray) -> tuple[np.ndarray, tuple]:
    mu = x.mean(axis=-1, keepdims=True)
    inv = 1.0 / np.sqrt(((x - mu) ** 2).mean(axis=-1, keepdims=True) + LN_EPS)
    xhat = (x - mu) * inv
    return xhat * scale + bias, (xhat, inv, scale)


def layer_norm_backward(dy: np.ndarray, tape: tuple) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    xhat, inv, scale = tape
    dxhat = dy * scale
    dx = inv * (dxhat - dxhat.mean(axis=-1, keepdims=True) - xhat * (dxhat * xhat).mean(axis=-1, keepdims=True))
    axes = tuple(range(dy.ndim - 1))
    return dx, (dy * xhat).sum(axis=axes), dy.sum(axis=axes)


@dataclasses.dataclass(frozen=True)
class Transformer(Workload):
    family = "transformer"

    # Sized for a 2-core CPU: about 6 GFLOP a step at the mean length (the batch 16 and
    # lengths up to 256 made a step ~50 GFLOP, about a second here).
    batch_size: int = 8
    num_batches: int = 8
    optimizer: str = "adamw"
    learning_rate: float = 1e-3
    vocab: int = 1000
    width: int = 256
    heads: int = 4
    layers: int = 2
    topics: int = 16
    min_len: int = 16
    max_len: int = 128
    lengths: str = "vary"
    strategy: str = "exact"
    buckets: tuple[int, ...] = (32, 64, 96, 128)
    attention: str = "naive"
    task: str = "train"

    #: The loop strategies this workload has (rnn-caption's graph-loop has no meaning here).
    strategies: ClassVar[tuple[str, ...]] = STRATEGIES
    #: Fields a run plans every value of unless ``--set`` fixes one (harness.running.plan.variants): the
    #: attention kernels side by side in one run.
    plan_axes: ClassVar[Mapping[str, tuple[str, ...]]] = {"attention": ATTENTION}

    def validate(self) -> None:
        super().validate()
        for field in ("width", "heads", "layers", "topics", "max_len"):
            _positive(self, field)
        if self.vocab < 4:
            raise SpecError(f"vocab must be >= 4 (PAD, BOS, EOS and a word), got {self.vocab}")
        if self.width % self.heads:
            raise SpecError(f"width ({self.width}) must be a multiple of heads ({self.heads})")
        if self.lengths not in LENGTHS:
            raise SpecError(f"lengths {self.lengths!r} is not one of: {', '.join(LENGTHS)}")
        if self.lengths == "fixed" and self.max_len < 2:
            raise SpecError(f"max_len must be >= 2 (BOS and EOS), got {self.max_len}")
        if self.lengths == "vary" and (self.min_len < 2 or self.max_len < self.min_len):
            raise SpecError(f"need 2 <= min_len <= max_len, got min_len={self.min_len}, max_len={self.max_len}")
        if self.strategy not in STRATEGIES:
            raise SpecError(f"strategy {self.strategy!r} is not one of: {', '.join(STRATEGIES)}")
        if self.attention not in ATTENTION:
            raise SpecError(f"attention {self.attention!r} is not one of: {', '.join(ATTENTION)}")
        if self.task not in TASKS:
            raise SpecError(f"task {self.task!r} is not one of: {', '.join(TASKS)}")
        # with fixed lengths every batch is max_len long: no bucket is ever looked up
        short = self.lengths == "vary" and self.buckets and self.buckets[-1] < self.max_len
        if not self.buckets or list(self.buckets) != sorted(self.buckets) or short:
            raise SpecError(f"buckets must be increasing and end at >= max_len ({self.max_len}), got {self.buckets!r}")

    @property
    def head_dim(self) -> int:
        return self.width // self.heads

    def init_params(self) -> Params:
        rng = np.random.default_rng([self.seed, 1])
        d, v = self.width, self.vocab

        def glorot(shape: tuple[int, int]) -> np.ndarray:
            limit = np.sqrt(6.0 / sum(shape))
            return rng.uniform(-limit, limit, shape).astype(np.float32)

        def bias(n: int) -> np.ndarray:
            return rng.uniform(-0.05, 0.05, (n,)).astype(np.float32)

        def norm(prefix: str) -> Params:
            return {
                f"{prefix}/scale": (1 + rng.uniform(-0.1, 0.1, (d,))).astype(np.float32),
                f"{prefix}/bias": bias(d),
            }

        params: Params = {
            "tok/table": (0.02 * rng.standard_normal((v, d))).astype(np.float32),
            "pos/table": (0.02 * rng.standard_normal((self.max_len, d))).astype(np.float32),
        }
        for layer in range(self.layers):
            b = f"block{layer}"
            params.update(norm(f"{b}/ln1"))
            for proj in ("query", "key", "value", "out"):
                params[f"{b}/attn/{proj}/kernel"] = glorot((d, d))
                params[f"{b}/attn/{proj}/bias"] = bias(d)
            params.update(norm(f"{b}/ln2"))
            params[f"{b}/mlp/in/kernel"] = glorot((d, 4 * d))
            params[f"{b}/mlp/in/bias"] = bias(4 * d)
            params[f"{b}/mlp/out/kernel"] = glorot((4 * d, d))
            params[f"{b}/mlp/out/bias"] = bias(d)
        params.update(norm("ln_f"))
        params["out/kernel"] = glorot((d, v))
        params["out/bias"] = bias(v)
        return params

    def _time_length(self, length: int) -> int:
        if self.strategy == "exact":
            return length
        if self.strategy == "bucketed":
            return min(next((b for b in self.buckets if b >= length), self.max_len), self.max_len)
        return self.max_len

    def batches(self) -> list[Batch]:
        rng = np.random.default_rng([self.seed, 2])  # lengths: the same whatever the widths (``tiny``)
        words = np.random.default_rng([self.seed, 4])
        teacher = np.random.default_rng([self.seed, 3])
        successor = teacher.integers(3, self.vocab, (self.topics, self.vocab))
        out = []
        for _ in range(self.num_batches):
            b = self.batch_size
            if self.lengths == "fixed":
                length = self.max_len
                lengths = np.full(b, length)
            else:
                length = int(rng.integers(self.min_len, self.max_len + 1))
                lengths = rng.integers(self.min_len, length + 1, b)
                lengths[0] = length
            first = words.integers(3, self.vocab, b)
            steps = self._time_length(length)
            targets = np.zeros((b, steps), np.int32)
            for i in range(b):
                word, topic = first[i], first[i] % self.topics
                for t in range(lengths[i] - 1):
                    targets[i, t] = word
                    word = successor[topic, word]
                targets[i, lengths[i] - 1] = EOS
            tokens = np.zeros_like(targets)
            tokens[:, 0] = BOS
            tokens[:, 1:] = targets[:, :-1]
            mask = (np.arange(steps)[None, :] < lengths[:, None]).astype(np.float32)
            tokens[mask == 0] = PAD
            out.append({"tokens": tokens, "targets": targets, "mask": mask})
        return out

    @staticmethod
    def _steps(batch: Batch) -> tuple[int, int]:
        """Batch size and the time steps the batch needs (its longest sequence; padding beyond
        it is waste)."""
        mask = batch["mask"]
        return mask.shape[0], int(mask.sum(axis=1).max())

    def inert_params(self) -> tuple[str, ...]:
        # softmax is invariant to q . b_k, a shift shared by every key: the key bias changes nothing
        return tuple(f"block{layer}/attn/key/bias" for layer in range(self.layers))

    def flops(self, batch: Batch) -> int | None:
        """Training: every matmul three times (forward, weight gradient, input gradient), over the
        B x T_b positions the batch needs (N = B T_b):
            3 (L (24 N D^2 + 4 B T_b^2 D) + 2 N D V)
        24 N D^2 per block: query, key, value and output projections (4 x 2 N D^2) and the 4x MLP
        (2 x 8 N D^2); 4 B T^2 D: the scores q k^T and their product with v (2 B T^2 D each), the
        full T x T square as naive attention computes it (a causal kernel may skip the masked half);
        2 N D V: the output projection. Embedding lookups, LayerNorm, GELU and softmax ignored."""
        b, t = self._steps(batch)
        n, d, layers = b * t, self.width, self.layers
        return 3 * (layers * (24 * n * d * d + 4 * b * t * t * d) + 2 * n * d * self.vocab)

    def kernels(self, batch: Batch) -> list[tuple[Kernel, int]] | None:
        """As ``flops`` counts them: the projections over all N positions at once (query, key and
        value as one (N, D, 3D) product), each with its weight and input gradients; attention's
        six per-head (T, T, E)-sized products (scores, output, and their four gradients) B H times
        per block."""
        b, t = self._steps(batch)
        n, d, e, layers = b * t, self.width, self.head_dim, self.layers

        def trained(m: int, k: int, n_: int, count: int) -> list[tuple[Kernel, int]]:
            return [(("matmul", m, k, n_), count), (("matmul", k, m, n_), count), (("matmul", m, n_, k), count)]

        heads = b * self.heads * layers
        attention = [
            (("matmul", t, e, t), heads),  # q k^T
            (("matmul", t, t, e), heads),  # softmax(.) v
            (("matmul", t, t, e), heads),  # d q = d s k
            (("matmul", t, t, e), heads),  # d k = d s^T q
            (("matmul", t, e, t), heads),  # d p = d o v^T
            (("matmul", t, t, e), heads),  # d v = p^T d o
        ]
        blocks = (
            trained(n, d, 3 * d, layers)
            + trained(n, d, d, layers)
            + trained(n, d, 4 * d, layers)
            + trained(n, 4 * d, d, layers)
        )
        return blocks + attention + trained(n, d, self.vocab, 1)

    def tiny(self) -> Transformer:
        """Batch size and lengths as they are, every width tiny (two heads of one unit)."""
        return dataclasses.replace(self, vocab=8, width=2, heads=2, topics=2)

    def tokens(self, batch: Batch) -> int | None:
        """Tokens a training step predicts (padding excluded)."""
        return int(batch["mask"].sum())

    def reference_loss_and_grads(self, params: Params, batch: Batch, relu_tie: float = 0.0) -> tuple[float, Params]:
        """(No ReLU here: ``relu_tie`` changes nothing.)"""
        p = params
        dtype = p["tok/table"].dtype
        tokens, targets, mask = batch["tokens"], batch["targets"], batch["mask"].astype(dtype)
        b, t = tokens.shape
        h_, e, d = self.heads, self.head_dim, self.width
        causal = np.tril(np.ones((t, t), bool))
        scale = 1.0 / math.sqrt(e)

        def split(x: np.ndarray) -> np.ndarray:  # (B, T, D) -> (B, H, T, E)
            return x.reshape(b, t, h_, e).transpose(0, 2, 1, 3)

        def merge(x: np.ndarray) -> np.ndarray:  # (B, H, T, E) -> (B, T, D)
            return x.transpose(0, 2, 1, 3).reshape(b, t, d)

        x = p["tok/table"][tokens] + p["pos/table"][:t]
        tapes = []
        for layer in range(self.layers):
            k_ = f"block{layer}"
            h, ln1 = layer_norm(x, p[f"{k_}/ln1/scale"], p[f"{k_}/ln1/bias"])
            q, k, v = (
                split(h @ p[f"{k_}/attn/{n}/kernel"] + p[f"{k_}/attn/{n}/bias"]) for n in ("query", "key", "value")
            )
            s = np.where(causal, q @ k.transpose(0, 1, 3, 2) * scale, -np.inf)
            a = np.exp(s - s.max(axis=-1, keepdims=True))
            a /= a.sum(axis=-1, keepdims=True)
            o = merge(a @ v)
            x = x + o @ p[f"{k_}/attn/out/kernel"] + p[f"{k_}/attn/out/bias"]
            h2, ln2 = layer_norm(x, p[f"{k_}/ln2/scale"], p[f"{k_}/ln2/bias"])
            u = h2 @ p[f"{k_}/mlp/in/kernel"] + p[f"{k_}/mlp/in/bias"]
            g, dg = gelu(u)
            x = x + g @ p[f"{k_}/mlp/out/kernel"] + p[f"{k_}/mlp/out/bias"]
            tapes.append((h, ln1, q, k, v, a, o, h2, ln2, g, dg))
        hf, lnf = layer_norm(x, p["ln_f/scale"], p["ln_f/bias"])
        logits = hf @ p["out/kernel"] + p["out/bias"]
        loss, dlogits = softmax_cross_entropy(logits.reshape(-1, self.vocab), targets.reshape(-1), mask.reshape(-1))
        dlogits = dlogits.reshape(b, t, self.vocab)

        def flat(z: np.ndarray) -> np.ndarray:
            return z.reshape(-1, z.shape[-1])

        g_: Params = {}
        g_["out/kernel"] = flat(hf).T @ flat(dlogits)
        g_["out/bias"] = dlogits.sum(axis=(0, 1))
        dx, g_["ln_f/scale"], g_["ln_f/bias"] = layer_norm_backward(dlogits @ p["out/kernel"].T, lnf)
        for layer in reversed(range(self.layers)):
            k_ = f"block{layer}"
            h, ln1, q, k, v, a, o, h2, ln2, g, dg = tapes[layer]
            # MLP branch
            g_[f"{k_}/mlp/out/kernel"] = flat(g).T @ flat(dx)
            g_[f"{k_}/mlp/out/bias"] = dx.sum(axis=(0, 1))
            du = (dx @ p[f"{k_}/mlp/out/kernel"].T) * dg
            g_[f"{k_}/mlp/in/kernel"] = flat(h2).T @ flat(du)
            g_[f"{k_}/mlp/in/bias"] = du.sum(axis=(0, 1))
            dh2, g_[f"{k_}/ln2/scale"], g_[f"{k_}/ln2/bias"] = layer_norm_backward(du @ p[f"{k_}/mlp/in/kernel"].T, ln2)
            dx = dx + dh2
            # attention branch
            g_[f"{k_}/attn/out/kernel"] = flat(o).T @ flat(dx)
            g_[f"{k_}/attn/out/bias"] = dx.sum(axis=(0, 1))
            do = split(dx @ p[f"{k_}/attn/out/kernel"].T)
            da = do @ v.transpose(0, 1, 3, 2)
            dv = a.transpose(0, 1, 3, 2) @ do
            ds = a * (da - (da * a).sum(axis=-1, keepdims=True)) * scale
            dq = ds @ k
            dk = ds.transpose(0, 1, 3, 2) @ q
            dh = np.zeros_like(dx)
            for name, dz in (("query", dq), ("key", dk), ("value", dv)):
                dz = merge(dz)
                g_[f"{k_}/attn/{name}/kernel"] = flat(h).T @ flat(dz)
                g_[f"{k_}/attn/{name}/bias"] = dz.sum(axis=(0, 1))
                dh += dz @ p[f"{k_}/attn/{name}/kernel"].T
            dh1, g_[f"{k_}/ln1/scale"], g_[f"{k_}/ln1/bias"] = layer_norm_backward(dh, ln1)
            dx = dx + dh1
        g_["tok/table"] = np.zeros_like(p["tok/table"])
        np.add.at(g_["tok/table"], tokens.reshape(-1), flat(dx))
        g_["pos/table"] = np.zeros_like(p["pos/table"])
        g_["pos/table"][:t] = dx.sum(axis=0)
        return loss, {name: g_[name] for name in p}
