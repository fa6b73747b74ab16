"""An image-captioning-style decoder: a GRU run over a caption of varying length.

Model (B = batch, T = steps run, F = feature_dim, D = embed_dim, H = hidden, V = vocab):
    h_0 = tanh(features @ img/kernel + img/bias)                 image feature -> initial state
    e_t = embed/table[tokens[:, t]]                                token embedding
    GRU cell, gate order (r, z, n), PyTorch's equations:
        gi = e_t @ gru/kernel + gru/bias;  gh = h @ gru/recurrent_kernel + gru/recurrent_bias
        r = sigmoid(gi_r + gh_r);  z = sigmoid(gi_z + gh_z);  n = tanh(gi_n + r * gh_n)
        h_{t+1} = (1 - z) * n + z * h
    logits_t = h_{t+1} @ out/kernel + out/bias
    loss = sum(mask * cross_entropy(logits, targets)) / sum(mask)

Canonical parameter layout: ``img/kernel`` (F, H), ``img/bias`` (H,), ``embed/table`` (V, D),
``gru/kernel`` (D, 3H) and ``gru/recurrent_kernel`` (H, 3H) with column blocks [r | z | n],
``gru/bias`` and ``gru/recurrent_bias`` (3H,), ``out/kernel`` (H, V), ``out/bias`` (V,).
Keras orders GRU gates (z, r, n) and stacks the two biases; its adapter reorders.

Data: token 0 is PAD, 1 is BOS, 2 is EOS. Each image belongs to one of ``topics`` (argmax of a
fixed projection of its feature); a caption starts with the topic's first word and each next
word is a fixed topic-specific successor of the current one, so the task is learnable. Each
batch has its own length T_b, drawn from [min_len, max_len]; each caption in it has a length
in [min_len, T_b] (one of them exactly T_b) and ends with EOS.

Loop strategies (the ``strategy`` field) decide the arrays' time length, never the result:
    ``exact``      each batch at its own length T_b (graph frameworks see a new shape)
    ``bucketed``   padded up to the next of ``buckets`` (a bounded number of shapes)
    ``padded``     padded to ``max_len`` (one shape, wasted steps)
    ``graph-loop`` padded to ``max_len`` plus ``length`` = T_b, for a loop inside the graph
                   that runs only T_b steps
Padding has mask 0, so the loss and gradients are the same under every strategy.

``task = "decode"``: greedy decoding from BOS until every caption has emitted EOS or
``max_len`` steps; a finished caption emits PAD. Inputs are the batches' ``features``.
Random weights alone almost never emit EOS, so the decode spec builds its stopping rule in:
each image gets a target caption length L drawn exactly as the training captions' lengths are
(per batch T_b uniform in [min_len, max_len], each caption in [min_len, T_b], one at T_b), and
two hidden units make EOS the greedy choice at step L (token L, counting EOS):
    a clock unit (the second-last): no inputs, update gate 1 - a with a = 1/max_len and
        candidate tanh(10) ~= 1, from h_0 = 0, so after k steps it holds c(k) = 1 - (1 - a)^k;
    a memory unit (the last): update gate ~1, so it keeps h_0 = tanh(features @ img/kernel[:, -1]);
        each image's features are moved along that column so that h_0 = (c(L - 1) + c(L)) / 2;
    the EOS logit is KAPPA * (clock - memory): negative before step L, +KAPPA * (c(L) - c(L-1)) / 2
        (>= 9 at max_len 40, more for shorter captions) at step L, above every word's logit.
PAD and BOS get a logit bias of -30, so neither is emitted as a word. Everything else is the
random initialisation, so the words themselves come from a real GRU. The batches' ``mask``
marks each caption's designed length, which the decode reproduces (tests check it).
"""

from __future__ import annotations

import dataclasses
from typing import ClassVar

import numpy as np

from workloads.mlp import softmax_cross_entropy
from workloads.spec import Batch, Kernel, Params, SpecError, Workload, _positive

PAD, BOS, EOS = 0, 1, 2
#: Gain of the EOS logit on (clock - memory) in the decode spec, see the module docstring.
KAPPA = 2000.0
STRATEGIES = ("exact", "bucketed", "padded", "graph-loop")
TASKS = ("train", "decode")


def decoded_lengths(tokens: np.ndarray) -> np.ndarray:
    """Tokens each decoded caption holds, its EOS included (the PAD after EOS does not count)."""
    return (tokens != PAD).sum(axis=-1)


def sigmoid(x: np.ndarray) -> np.ndarray:
    return 1.0 / (1.0 + np.exp(-x))


@dataclasses.dataclass(frozen=True)
class RNNCaption(Workload):
    family = "rnn-caption"

    optimizer: str = "adam"
    learning_rate: float = 3e-3
    feature_dim: int = 512
    vocab: int = 1000
    embed_dim: int = 128
    hidden: int = 256
    topics: int = 16
    min_len: int = 5
    max_len: int = 40
    strategy: str = "exact"
    buckets: tuple[int, ...] = (10, 20, 30, 40)
    task: str = "train"

    #: The loop strategies a run plans for this workload (harness.running.plan.variants): all.
    strategies: ClassVar[tuple[str, ...]] = STRATEGIES

    def validate(self) -> None:
        super().validate()
        for field in ("feature_dim", "embed_dim", "hidden", "topics", "min_len"):
            _positive(self, field)
        if self.vocab < 4:
            raise SpecError(f"vocab must be >= 4 (PAD, BOS, EOS and a word), got {self.vocab}")
        if self.min_len < 2 or self.max_len < self.min_len:
            raise SpecError(f"need 2 <= min_len <= max_len, got min_len={self.min_len}, max_len={self.max_len}")
        if self.strategy not in STRATEGIES:
            raise SpecError(f"strategy {self.strategy!r} is not one of: {', '.join(STRATEGIES)}")
        if self.task not in TASKS:
            raise SpecError(f"task {self.task!r} is not one of: {', '.join(TASKS)}")
        if self.task == "decode" and self.hidden < 3:
            raise SpecError(f"hidden must be >= 3 for decoding (a clock, a memory and a word unit), got {self.hidden}")
        if not self.buckets or list(self.buckets) != sorted(self.buckets) or self.buckets[-1] < self.max_len:
            raise SpecError(f"buckets must be increasing and end at >= max_len ({self.max_len}), got {self.buckets!r}")

    def init_params(self) -> Params:
        rng = np.random.default_rng([self.seed, 1])
        f, v, d, h = self.feature_dim, self.vocab, self.embed_dim, self.hidden

        def glorot(shape: tuple[int, int]) -> np.ndarray:
            limit = np.sqrt(6.0 / sum(shape))
            return rng.uniform(-limit, limit, shape).astype(np.float32)

        def bias(n: int) -> np.ndarray:
            return rng.uniform(-0.05, 0.05, (n,)).astype(np.float32)

        params = {
            "img/kernel": glorot((f, h)),
            "img/bias": bias(h),
            "embed/table": rng.uniform(-0.05, 0.05, (v, d)).astype(np.float32),
            "gru/kernel": glorot((d, 3 * h)),
            "gru/recurrent_kernel": glorot((h, 3 * h)),
            "gru/bias": bias(3 * h),
            "gru/recurrent_bias": bias(3 * h),
            "out/kernel": glorot((h, v)),
            "out/bias": bias(v),
        }
        return self._with_stopping_rule(params) if self.task == "decode" else params

    def _clock(self, steps: np.ndarray) -> np.ndarray:
        """The clock unit's value after ``steps`` GRU steps (decode spec)."""
        return 1.0 - (1.0 - 1.0 / self.max_len) ** np.asarray(steps, np.float64)

    def _with_stopping_rule(self, p: Params) -> Params:
        """The decode spec's clock and memory units and EOS logit (module docstring)."""
        h, clock, memory = self.hidden, self.hidden - 2, self.hidden - 1
        a = 1.0 / self.max_len
        for unit in (clock, memory):
            gates = [unit, h + unit, 2 * h + unit]  # its r, z, n columns
            p["gru/kernel"][:, gates] = 0.0
            p["gru/recurrent_kernel"][:, gates] = 0.0
            p["gru/bias"][gates] = 0.0
            p["gru/recurrent_bias"][gates] = 0.0
            p["out/kernel"][unit, :] = 0.0
        p["gru/bias"][h + clock] = np.log((1 - a) / a)  # update gate 1 - a
        p["gru/bias"][2 * h + clock] = 10.0  # candidate tanh(10) ~= 1
        p["gru/bias"][h + memory] = 20.0  # update gate ~1: keeps h_0
        p["img/kernel"][:, clock] = 0.0
        p["img/bias"][[clock, memory]] = 0.0
        p["out/kernel"][:, EOS] = 0.0
        p["out/kernel"][[clock, memory], EOS] = (KAPPA, -KAPPA)
        p["out/bias"][EOS] = 0.0
        p["out/kernel"][:, [PAD, BOS]] = 0.0
        p["out/bias"][[PAD, BOS]] = -30.0
        return p

    def _encode_lengths(self, features: np.ndarray, lengths: np.ndarray) -> np.ndarray:
        """Move each image's features along the memory unit's input column so that its memory
        value sits halfway between the clock's values at steps L - 1 and L (decode spec)."""
        w = self.init_params()["img/kernel"][:, -1].astype(np.float64)
        target = np.arctanh((self._clock(lengths - 1) + self._clock(lengths)) / 2)
        shift = (target - features.astype(np.float64) @ w) / (w @ w)
        return (features + shift[:, None] * w[None, :]).astype(np.float32)

    def _time_length(self, length: int) -> int:
        if self.strategy == "exact":
            return length
        if self.strategy == "bucketed":
            return next(b for b in self.buckets if b >= length)
        return self.max_len

    def batches(self) -> list[Batch]:
        rng = np.random.default_rng([self.seed, 2])
        teacher = np.random.default_rng([self.seed, 3])
        projection = teacher.standard_normal((self.feature_dim, self.topics))
        first_word = teacher.integers(3, self.vocab, self.topics)
        successor = teacher.integers(3, self.vocab, (self.topics, self.vocab))
        out = []
        for _ in range(self.num_batches):
            b = self.batch_size
            features = rng.standard_normal((b, self.feature_dim), dtype=np.float32)
            topic = (features @ projection).argmax(axis=1)
            length = int(rng.integers(self.min_len, self.max_len + 1))
            lengths = rng.integers(self.min_len, length + 1, b)
            lengths[0] = length
            steps = self._time_length(length)
            targets = np.zeros((b, steps), np.int32)
            for i in range(b):
                word = first_word[topic[i]]
                for t in range(lengths[i] - 1):
                    targets[i, t] = word
                    word = successor[topic[i], word]
                targets[i, lengths[i] - 1] = EOS
            tokens = np.zeros_like(targets)
            tokens[:, 0] = BOS
            tokens[:, 1:] = targets[:, :-1]
            mask = (np.arange(steps)[None, :] < lengths[:, None]).astype(np.float32)
            tokens[mask == 0] = PAD
            if self.task == "decode":
                features = self._encode_lengths(features, lengths)
            batch = {"features": features, "tokens": tokens, "targets": targets, "mask": mask}
            if self.strategy == "graph-loop":
                batch["length"] = np.asarray(length, np.int32)
            out.append(batch)
        return out

    def flops(self, batch: Batch) -> int | None:
        """Training only (a decode's step count is data-dependent): per caption step the two
        GRU matmuls and the output projection, three passes each (forward, weight and input
        gradients), over the steps the batch needs; plus the image projection (no input
        gradient). Padded steps are waste and not counted."""
        if self.task != "train":
            return None
        b = len(batch["features"])
        steps = int(batch["mask"].sum(axis=1).max())
        h = self.hidden
        per_step = 2 * b * (self.embed_dim * 3 * h + h * 3 * h + h * self.vocab)
        return 3 * per_step * steps + 4 * b * self.feature_dim * h

    def kernels(self, batch: Batch) -> list[tuple[Kernel, int]] | None:
        """As ``flops`` counts them, in the fastest legitimate arrangement: the input and output
        projections of all T steps as one matmul each (B T rows), the recurrent matmul step by
        step (it needs the previous state); each with its weight and input gradients."""
        if self.task != "train":
            return None
        b = len(batch["features"])
        steps = int(batch["mask"].sum(axis=1).max())
        d, h, v = self.embed_dim, self.hidden, self.vocab

        def trained(m: int, k: int, n: int, count: int) -> list[tuple[Kernel, int]]:
            return [(("matmul", m, k, n), count), (("matmul", k, m, n), count), (("matmul", m, n, k), count)]

        image = [(("matmul", b, self.feature_dim, h), 1), (("matmul", self.feature_dim, b, h), 1)]
        return image + trained(b * steps, d, 3 * h, 1) + trained(b, h, 3 * h, steps) + trained(b * steps, h, v, 1)

    def tiny(self) -> RNNCaption:
        """Batch size, feature width and lengths as they are (the captions' lengths come from the
        same random stream as the features), every other width tiny."""
        return dataclasses.replace(self, vocab=8, embed_dim=2, hidden=3, topics=2)

    def tokens(self, batch: Batch) -> int | None:
        """Caption tokens a training step predicts (padding excluded). Decoding counts what
        the decoder emitted instead, which only the run knows."""
        return int(batch["mask"].sum()) if self.task == "train" else None

    def reference_loss_and_grads(self, params: Params, batch: Batch, relu_tie: float = 0.0) -> tuple[float, Params]:
        """(No ReLU here: ``relu_tie`` changes nothing.)"""
        p = params
        h_dim = self.hidden
        dtype = p["img/kernel"].dtype
        tokens, targets, mask = batch["tokens"], batch["targets"], batch["mask"].astype(dtype)
        b, steps = tokens.shape
        features = batch["features"].astype(dtype)
        h = np.tanh(features @ p["img/kernel"] + p["img/bias"])
        h0 = h
        tape = []
        logits = np.empty((b, steps, self.vocab), dtype)
        for t in range(steps):
            e = p["embed/table"][tokens[:, t]]
            gi = e @ p["gru/kernel"] + p["gru/bias"]
            gh = h @ p["gru/recurrent_kernel"] + p["gru/recurrent_bias"]
            r = sigmoid(gi[:, :h_dim] + gh[:, :h_dim])
            z = sigmoid(gi[:, h_dim : 2 * h_dim] + gh[:, h_dim : 2 * h_dim])
            n = np.tanh(gi[:, 2 * h_dim :] + r * gh[:, 2 * h_dim :])
            h_new = (1 - z) * n + z * h
            tape.append((e, h, r, z, n, gh[:, 2 * h_dim :]))
            h = h_new
            logits[:, t] = h @ p["out/kernel"] + p["out/bias"]
        loss, dlogits = softmax_cross_entropy(logits.reshape(-1, self.vocab), targets.reshape(-1), mask.reshape(-1))
        dlogits = dlogits.reshape(b, steps, self.vocab)

        g = {k: np.zeros_like(v) for k, v in p.items()}
        dh = np.zeros((b, h_dim), dtype)
        for t in reversed(range(steps)):
            e, h_prev, r, z, n, gh_n = tape[t]
            h_t = (1 - z) * n + z * h_prev
            g["out/kernel"] += h_t.T @ dlogits[:, t]
            g["out/bias"] += dlogits[:, t].sum(axis=0)
            dh = dh + dlogits[:, t] @ p["out/kernel"].T
            dn = dh * (1 - z) * (1 - n**2)
            dz = dh * (h_prev - n) * z * (1 - z)
            dr = dn * gh_n * r * (1 - r)
            dgi = np.concatenate([dr, dz, dn], axis=1)
            dgh = np.concatenate([dr, dz, dn * r], axis=1)
            g["gru/kernel"] += e.T @ dgi
            g["gru/bias"] += dgi.sum(axis=0)
            g["gru/recurrent_kernel"] += h_prev.T @ dgh
            g["gru/recurrent_bias"] += dgh.sum(axis=0)
            np.add.at(g["embed/table"], tokens[:, t], dgi @ p["gru/kernel"].T)
            dh = dh * z + dgh @ p["gru/recurrent_kernel"].T
        dpre = dh * (1 - h0**2)
        g["img/kernel"] = features.T @ dpre
        g["img/bias"] = dpre.sum(axis=0)
        return loss, g

    def reference_decode(self, params: Params, features: np.ndarray) -> np.ndarray:
        """Greedy decode in float64: (B, max_len) tokens, PAD after each caption's EOS."""
        p = {k: v.astype(np.float64) for k, v in params.items()}
        h_dim = self.hidden
        h = np.tanh(features.astype(np.float64) @ p["img/kernel"] + p["img/bias"])
        token = np.full(len(features), BOS)
        done = np.zeros(len(features), bool)
        out = np.full((len(features), self.max_len), PAD, np.int32)
        for t in range(self.max_len):
            gi = p["embed/table"][token] @ p["gru/kernel"] + p["gru/bias"]
            gh = h @ p["gru/recurrent_kernel"] + p["gru/recurrent_bias"]
            r = sigmoid(gi[:, :h_dim] + gh[:, :h_dim])
            z = sigmoid(gi[:, h_dim : 2 * h_dim] + gh[:, h_dim : 2 * h_dim])
            n = np.tanh(gi[:, 2 * h_dim :] + r * gh[:, 2 * h_dim :])
            h = (1 - z) * n + z * h
            token = np.where(done, PAD, (h @ p["out/kernel"] + p["out/bias"]).argmax(axis=1))
            out[:, t] = token
            done |= token == EOS
            if done.all():
                break
        return out
