"""Flax NNX: ``nnx.Module`` models trained with ``nnx.Optimizer`` inside an ``nnx.jit`` step.

Written as the Flax documentation teaches: the model is Python objects (``nnx.Linear``,
``nnx.Conv``, ``nnx.Embed`` and a GRU cell of two ``nnx.Linear`` layers), the step is a function
of ``(model, optimizer, batch)`` decorated with ``nnx.jit``, using ``nnx.value_and_grad`` and
``optimizer.update(model, grads)`` (optax inside). ``nnx.jit`` traverses the model's graph in
Python on every call to split and merge its state; that overhead is what this adapter measures
beside raw ``jax.jit`` (jax-jit). ``flax-nnx-cached`` is the same model with the performance
path the Flax docs give for a step called repeatedly with the same model and optimiser,
``nnx.cached_partial``, which caches that traversal.

Parameters keep the canonical layout, which is Flax's own (``nnx.Linear`` kernels (in, out),
``nnx.Conv`` kernels HWIO on NHWC images); the GRU's input and recurrent layers hold the gates
as canonical [r | z | n] column blocks with separate biases (``nnx.GRUCell`` has no recurrent
bias on r and z, so it would not be the same model). The caption loop is ``jax.lax.scan`` over
time (one compile per length under ``exact``); ``graph-loop`` scans over ``max_len`` with a
``lax.cond`` skipping steps past the batch's length; greedy decoding is a ``lax.while_loop``.
Initial state is placed with ``kit.jax_place`` (committed), so step 2 does not compile again.
Buffers are not donated (jax-jit donates its parameters; ``nnx.jit`` users rarely do). The
transformer is adapters/_flax_transformer.py (``nnx.MultiHeadAttention``); one compile per
sequence length under ``exact``, per bucket under ``bucketed``, one under ``padded``.

What the call path costs, ``mlp`` at batch 32 on the 2-core AMD EPYC VM, one process, the same
model and batch, median of 2000 synced steps: ``nnx.jit`` 1.00 ms, ``nnx.cached_partial`` 0.65,
``nnx.jit(graph=False)`` (tree mode) 0.73, ``nnx.split``/``merge`` inside a ``jax.jit`` with the
state donated 0.57, jax-jit 0.52. At batch 1024 the step's compute dominates and the paths tie.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, ClassVar

import numpy as np

from adapters import _export_jax, _flax_transformer, _grain_data, kit
from adapters.base import Adapter, Options
from adapters.exporting import Exports, Forward
from workloads import CNN, MLP, Batch, Params, RNNCaption, Transformer, Workload
from workloads.rnn import BOS, EOS, PAD


class FlaxNnx(Exports, Adapter):
    name = "flax-nnx"
    framework = "flax"
    graph = "static"
    requires = ("flax", "jax", "optax")
    extra = "flax"
    graph_loop = "lax.scan over max_len with lax.cond skipping steps past the batch length"
    image_loader_kind = _grain_data.IMAGE_LOADER_KIND
    families = ("mlp", "cnn", "rnn-caption", "transformer")
    precisions = ("fp32", "tf32", "bf16")

    cached = False
    """Call the step through ``nnx.cached_partial`` (flax-nnx-cached) instead of plain ``nnx.jit``."""

    @classmethod
    def worker_env(cls, threads: int, device: str = "cpu") -> dict[str, str]:
        return {**super().worker_env(threads, device), **kit.jax_env(threads, device)}

    def version(self) -> dict[str, str]:
        import flax
        import jax
        import optax

        return {"flax": flax.__version__, "jax": jax.__version__, "optax": optax.__version__}

    def resolve_device(self, device: str) -> str:
        return kit.jax_resolve_device(device, "flax (jax)")

    def build_info(self) -> dict[str, Any]:
        return kit.jax_build_info()

    # Export (docs/export.md): the model's forward through jax.export, served by JAX alone.
    export_paths: ClassVar[tuple[str, ...]] = ("jax-export",)
    in_process_forward = True

    def _model(self, spec: Workload, params: Params, device: str) -> Any:
        import jax
        from flax import nnx

        model = _build(nnx, spec)
        _load(nnx, model, spec, params)
        nnx.update(model, kit.jax_place(nnx.state(model), jax.devices(device)[0]))
        return model

    def forward(self, spec: Workload, params: Params, device: str, options: Options) -> Forward:
        """``nnx.jit`` over the model (graph traversal every call), or ``nnx.cached_partial``."""
        import jax
        from flax import nnx

        kit.jax_precision(options.tf32)
        model = self._model(spec, params, device)
        call = nnx.jit(lambda m, x: m(x))
        logits = nnx.cached_partial(call, model) if self.cached else (lambda x: call(model, x))
        return _export_jax.forward_of(jax, logits, device)

    def export(self, path: str, spec: Workload, params: Params, device: str, directory: Path) -> Path:
        from flax import nnx

        graphdef, state = nnx.split(self._model(spec, params, device))
        return _export_jax.write(lambda x: nnx.merge(graphdef, state)(x), spec, device, directory)

    @classmethod
    def serve(cls, path: str, artifact: Path, device: str, threads: int) -> Forward:
        return _export_jax.serve(path, artifact, device, threads)

    def setup(self, spec: Workload, params: Params, device: str, options: Options) -> None:
        import jax
        import optax
        from flax import nnx

        kit.jax_precision(options.tf32)
        self._events = kit.JaxCompileEvents()
        self.spec, self._nnx = spec, nnx
        self.device = jax.devices(device)[0]
        model = _build(nnx, spec)
        _load(nnx, model, spec, params)
        if spec.optimizer == "sgd":
            tx = optax.sgd(spec.learning_rate)
        elif spec.optimizer == "adamw":
            tx = _flax_transformer.adamw(jax, optax, spec.learning_rate)
        else:
            tx = optax.adam(spec.learning_rate, b1=kit.ADAM_BETA1, b2=kit.ADAM_BETA2, eps=kit.ADAM_EPS)
        optimizer = nnx.Optimizer(model, tx, wrt=nnx.Param)
        # Committed device arrays, as the jitted step's outputs will be (see kit.jax_place).
        nnx.update((model, optimizer), kit.jax_place(nnx.state((model, optimizer)), self.device))
        self.model, self.optimizer = model, optimizer
        loss = kit.flax_mixed_loss(nnx, _loss(jax, spec), options.bf16)
        self._mixed = kit.mixed_precision("flax", options)

        @nnx.jit
        def train_step(model, optimizer, batch):
            value, grads = nnx.value_and_grad(lambda m: loss(m, batch))(model)
            optimizer.update(model, grads)
            return value

        self._step: Callable[[Any], Any]
        if self.cached:
            self._step = nnx.cached_partial(train_step, model, optimizer)
        else:
            self._step = lambda batch: train_step(model, optimizer, batch)
        if spec.family == "rnn-caption":
            decode = nnx.jit(_decoder(jax, spec))
            self._decode = nnx.cached_partial(decode, model) if self.cached else lambda f: decode(model, f)

    def to_device(self, batch: Batch) -> Any:
        return kit.jax_place(dict(batch), self.device)

    def image_loader(self, images: Any, settings: Any) -> tuple[Any, dict[str, Any]]:
        import jax

        return _grain_data.image_stream(jax, images, settings, self.device)

    def train_step(self, batch: Any) -> Any:
        return self._step(batch)

    def infer_step(self, batch: Any) -> Any:
        return self._decode(batch["features"])

    def sync(self, handle: Any) -> float:
        import jax

        if handle.ndim:  # decoded tokens: mean caption length
            tokens = np.asarray(jax.block_until_ready(handle))
            return float((tokens != PAD).sum()) / len(tokens)
        # The loss is an output of the one XLA program that also writes the new parameters, and
        # each step reads the previous step's parameters: it is ready only when they all are.
        return float(jax.block_until_ready(handle))

    def params(self) -> Params:
        return _save(self.model, self.spec)

    def device_busy(self) -> bool | None:
        return kit.jax_device_busy(self._nnx.state((self.model, self.optimizer)))

    def device_memory_peak(self) -> int | None:
        return kit.jax_peak_bytes(self.device)

    def compile_stats(self) -> dict[str, Any]:
        return self._events.stats()

    def settings(self) -> dict[str, Any]:
        call = "nnx.cached_partial(nnx.jit step)" if self.cached else "nnx.jit step (graph traversal every call)"
        return {
            **kit.jax_settings(),
            "step": call,
            "mixed_precision": self._mixed,
            "optimizer_kernel": f"optax.{self.spec.optimizer} via nnx.Optimizer (inside the jitted step)",
            **(
                {"attention_kernel": _flax_transformer.ATTENTION_KERNELS[self.spec.attention]}
                if self.spec.family == "transformer"
                else {}
            ),
        }


class FlaxNnxCached(FlaxNnx):
    """The same model and step, called through ``nnx.cached_partial``: Flax's documented way to
    cut the per-call Python cost of a step that always takes the same model and optimiser."""

    name = "flax-nnx-cached"
    cached = True
    export_paths = ()  # Flax's artifact is flax-nnx's: one per framework


def _build(nnx: Any, spec: Workload) -> Any:
    """The spec's model as nnx Modules (initial values are replaced by the canonical ones)."""
    if spec.family == "transformer":
        assert isinstance(spec, Transformer)
        return _flax_transformer.build(nnx, spec)
    rngs = nnx.Rngs(0)

    class Mlp(nnx.Module):
        def __init__(self, sizes: Sequence[int]) -> None:
            self.dense = nnx.List([nnx.Linear(a, b, rngs=rngs) for a, b in zip(sizes[:-1], sizes[1:], strict=True)])

        def __call__(self, x: Any) -> Any:
            import jax

            x = x.reshape(x.shape[0], -1)
            for i, layer in enumerate(self.dense):
                x = layer(x)
                if i < len(self.dense) - 1:
                    x = jax.nn.relu(x)
            return x

    class Cnn(nnx.Module):
        def __init__(self) -> None:
            assert isinstance(spec, CNN)
            ins = [spec.input_shape[2], *spec.channels[:-1]]
            self.conv = nnx.List(
                [nnx.Conv(a, b, (3, 3), padding="SAME", rngs=rngs) for a, b in zip(ins, spec.channels, strict=True)]
            )
            self.head = Mlp(spec.dense_sizes)

        def __call__(self, x: Any) -> Any:
            import jax

            for conv in self.conv:
                x = nnx.max_pool(jax.nn.relu(conv(x)), (2, 2), strides=(2, 2))
            return self.head(x)  # flattens in (H, W, C) order, the canonical one

    class Gru(nnx.Module):
        """PyTorch's GRU equations, gates [r | z | n], separate input and recurrent biases."""

        def __init__(self) -> None:
            assert isinstance(spec, RNNCaption)
            self.input = nnx.Linear(spec.embed_dim, 3 * spec.hidden, rngs=rngs)
            self.recurrent = nnx.Linear(spec.hidden, 3 * spec.hidden, rngs=rngs)

        def __call__(self, h: Any, x: Any) -> Any:
            import jax
            import jax.numpy as jnp

            gi, gh = self.input(x), self.recurrent(h)
            ir, iz, in_ = jnp.split(gi, 3, axis=-1)
            hr, hz, hn = jnp.split(gh, 3, axis=-1)
            r, z = jax.nn.sigmoid(ir + hr), jax.nn.sigmoid(iz + hz)
            n = jnp.tanh(in_ + r * hn)
            return (1 - z) * n + z * h

    class Caption(nnx.Module):
        def __init__(self) -> None:
            assert isinstance(spec, RNNCaption)
            self.img = nnx.Linear(spec.feature_dim, spec.hidden, rngs=rngs)
            self.embed = nnx.Embed(spec.vocab, spec.embed_dim, rngs=rngs)
            self.gru = Gru()
            self.out = nnx.Linear(spec.hidden, spec.vocab, rngs=rngs)

    if spec.family == "mlp":
        assert isinstance(spec, MLP)
        return Mlp(spec.layer_sizes)
    return Cnn() if spec.family == "cnn" else Caption()


def _linears(model: Any, spec: Workload) -> dict[str, Any]:
    """Canonical prefix -> the nnx.Linear / nnx.Conv holding it."""
    if spec.family == "mlp":
        return {f"dense{i}": layer for i, layer in enumerate(model.dense)}
    if spec.family == "cnn":
        convs = {f"conv{i}": conv for i, conv in enumerate(model.conv)}
        return {**convs, **{f"dense{i}": layer for i, layer in enumerate(model.head.dense)}}
    return {"img": model.img, "out": model.out}


def _load(nnx: Any, model: Any, spec: Workload, p: Params) -> None:
    import jax.numpy as jnp

    if spec.family == "transformer":
        assert isinstance(spec, Transformer)
        return _flax_transformer.load(model, spec, p)

    for prefix, layer in _linears(model, spec).items():
        layer.kernel.value = jnp.asarray(p[f"{prefix}/kernel"])
        layer.bias.value = jnp.asarray(p[f"{prefix}/bias"])
    if spec.family == "rnn-caption":
        model.embed.embedding.value = jnp.asarray(p["embed/table"])
        model.gru.input.kernel.value = jnp.asarray(p["gru/kernel"])
        model.gru.input.bias.value = jnp.asarray(p["gru/bias"])
        model.gru.recurrent.kernel.value = jnp.asarray(p["gru/recurrent_kernel"])
        model.gru.recurrent.bias.value = jnp.asarray(p["gru/recurrent_bias"])


def _save(model: Any, spec: Workload) -> Params:
    def n(variable: Any) -> np.ndarray:
        return np.asarray(variable.value, dtype=np.float32).copy()

    if spec.family == "transformer":
        assert isinstance(spec, Transformer)
        return _flax_transformer.save(model, spec)
    out: Params = {}
    for prefix, layer in _linears(model, spec).items():
        out[f"{prefix}/kernel"], out[f"{prefix}/bias"] = n(layer.kernel), n(layer.bias)
    if spec.family == "rnn-caption":
        out["embed/table"] = n(model.embed.embedding)
        out["gru/kernel"], out["gru/bias"] = n(model.gru.input.kernel), n(model.gru.input.bias)
        out["gru/recurrent_kernel"] = n(model.gru.recurrent.kernel)
        out["gru/recurrent_bias"] = n(model.gru.recurrent.bias)
    return out


def _loss(jax: Any, spec: Workload) -> Callable[[Any, Any], Any]:
    import jax.numpy as jnp
    import optax

    lax = jax.lax
    if spec.family == "transformer":
        return _flax_transformer.loss(jax, spec)
    if spec.family in ("mlp", "cnn"):
        return lambda model, batch: optax.softmax_cross_entropy_with_integer_labels(
            model(batch["x"]).astype(jnp.float32),  # the loss in float32 (bf16 runs)
            batch["y"],
        ).mean()

    def caption_loss(model, batch):
        h0 = jnp.tanh(model.img(batch["features"]))

        def one_step(h, tok, tgt, m):
            h = model.gru(h, model.embed(tok))
            ce = optax.softmax_cross_entropy_with_integer_labels(model.out(h).astype(jnp.float32), tgt)
            return h, jnp.sum(ce * m)

        time_major = (batch["tokens"].T, batch["targets"].T, batch["mask"].T)
        if spec.strategy == "graph-loop":
            length = batch["length"]

            def body(h, xs):
                t, tok, tgt, m = xs
                return lax.cond(t < length, one_step, lambda h, *_: (h, jnp.zeros((), jnp.float32)), h, tok, tgt, m)

            _, ce = lax.scan(body, h0, (jnp.arange(time_major[0].shape[0]), *time_major))
        else:
            _, ce = lax.scan(lambda h, xs: one_step(h, *xs), h0, time_major)
        return ce.sum() / batch["mask"].sum(dtype="float32")  # a count past 256 is inexact in bf16

    return caption_loss


def _decoder(jax: Any, spec: Workload) -> Callable[[Any, Any], Any]:
    import jax.numpy as jnp

    def decode(model, features):
        b = features.shape[0]
        h = jnp.tanh(model.img(features))
        init = (0, h, jnp.full((b,), BOS), jnp.zeros((b,), bool), jnp.full((b, spec.max_len), PAD))

        def cond(carry):
            t, _, _, done, _ = carry
            return (t < spec.max_len) & ~jnp.all(done)

        def body(carry):
            t, h, token, done, out = carry
            h = model.gru(h, model.embed(token))
            token = jnp.where(done, PAD, jnp.argmax(model.out(h), axis=1))
            return t + 1, h, token, done | (token == EOS), out.at[:, t].set(token)

        return jax.lax.while_loop(cond, body, init)[-1]

    return decode
