"""JAX with ``jax.jit``: a static graph traced once per input shape and compiled by XLA.

The whole training step (forward, ``value_and_grad``, optax update) is one jitted function
with the parameter and optimiser-state buffers donated, so XLA updates them in place. JAX
dispatch is asynchronous on every backend, so ``sync`` blocks on the new parameters and the
loss before reading the clock. Trace and compile counts and seconds come from
``jax.monitoring`` duration events.

Parameters stay in the canonical layout (kernels (in, out), HWIO convolutions on NHWC data,
GRU gates [r | z | n]), which is also JAX's natural one. The caption decoder's time loop is
``lax.scan`` over the time axis of the batch: one compile per distinct length under the
``exact`` strategy, one per bucket under ``bucketed``. ``graph-loop`` scans over ``max_len``
with a ``lax.cond`` that skips the step (cell, projection and loss) past the batch's length,
so a single compiled program runs only the steps each batch needs. Greedy decoding is a
``lax.while_loop`` that stops when every caption has ended. The transformer
(adapters/_jax_transformer.py) is one jitted step too: one compile per sequence length under
``exact``, per bucket under ``bucketed``, one under ``padded``.
"""

from __future__ import annotations

import collections
import itertools
from collections.abc import Iterator
from pathlib import Path
from typing import Any, ClassVar

import numpy as np

from adapters import _export_jax, _grain_data, _jax_transformer, kit
from adapters._jax_layers import dense as _dense
from adapters.base import Adapter, Options
from adapters.exporting import Exports, Forward
from workloads import Batch, Params, Transformer, Workload
from workloads.optim import ADAM_BETA1, ADAM_BETA2, ADAM_EPS
from workloads.rnn import BOS, EOS, PAD


class JaxJit(Exports, Adapter):
    name = "jax-jit"
    framework = "jax"
    graph = "static"
    requires = ("jax", "optax")
    extra = "jax"
    loader_kind = "double-buffered asynchronous jax.device_put (prefetch_to_device pattern)"
    image_loader_kind = _grain_data.IMAGE_LOADER_KIND
    graph_loop: ClassVar[str | None] = "lax.scan over max_len with lax.cond skipping steps past the batch length"
    families = ("mlp", "cnn", "rnn-caption", "transformer")
    precisions = ("fp32", "tf32", "bf16")

    @classmethod
    def worker_env(cls, threads: int, device: str = "cpu") -> dict[str, str]:
        return {**super().worker_env(threads, device), **kit.jax_env(threads, device)}

    def version(self) -> dict[str, str]:
        import jax
        import jaxlib
        import optax

        return {"jax": jax.__version__, "jaxlib": jaxlib.__version__, "optax": optax.__version__}

    def resolve_device(self, device: str) -> str:
        return kit.jax_resolve_device(device, "jax")

    def build_info(self) -> dict[str, Any]:
        return kit.jax_build_info()

    def device_busy(self) -> bool | None:
        return kit.jax_device_busy(self._params, self._opt_state)

    def setup(self, spec: Workload, params: Params, device: str, options: Options) -> None:
        import jax
        import jax.numpy as jnp
        import optax

        kit.jax_precision(options.tf32)
        self._events = kit.JaxCompileEvents()
        self.spec = spec
        self.device = jax.devices(device)[0]
        if spec.optimizer == "sgd":
            tx = optax.sgd(spec.learning_rate)
        elif spec.optimizer == "adamw":
            tx = _jax_transformer.adamw(optax, spec.learning_rate)
        else:
            tx = optax.adam(spec.learning_rate, b1=ADAM_BETA1, b2=ADAM_BETA2, eps=ADAM_EPS)
        loss_fn = kit.jax_mixed_loss(_loss_fn(jax, jnp, optax, spec, self.python_loop), options.bf16)
        self._mixed = kit.mixed_precision("jax", options)

        def step(p, opt_state, batch):
            loss, grads = jax.value_and_grad(loss_fn)(p, batch)
            updates, opt_state = tx.update(grads, opt_state, p)
            return optax.apply_updates(p, updates), opt_state, loss

        self._step = self._compile(step, donate_argnums=(0, 1))
        self._params = kit.jax_place({k: jnp.asarray(v) for k, v in params.items()}, self.device)
        self._opt_state = kit.jax_place(tx.init(self._params), self.device)
        if spec.family == "rnn-caption":
            self._decode = self._compile(_decoder(jax, jnp, spec, self.python_loop))

    python_loop = False
    """Run the caption loops as Python loops (op by op) instead of lax.scan / lax.while_loop."""

    export_paths: ClassVar[tuple[str, ...]] = _export_jax.PATHS
    in_process_forward = True

    def export_reason(self, path: str, spec: Workload) -> str | None:
        reason = super().export_reason(path, spec)
        if reason is None and path == "onnx":
            return _export_jax.onnx_reason()
        return reason

    def forward(self, spec: Workload, params: Params, device: str, options: Options) -> Forward:
        import jax

        kit.jax_precision(options.tf32)
        p = kit.jax_place({k: jax.numpy.asarray(v) for k, v in params.items()}, jax.devices(device)[0])
        logits = self._compile(_export_jax.logits_fn(jax, spec))
        return _export_jax.forward_of(jax, lambda x: logits(p, x), device)

    def export(self, path: str, spec: Workload, params: Params, device: str, directory: Path) -> Path:
        return _export_jax.export(path, spec, params, device, directory)

    @classmethod
    def serve(cls, path: str, artifact: Path, device: str, threads: int) -> Forward:
        return _export_jax.serve(path, artifact, device, threads)

    def _compile(self, fn: Any, **jit_args: Any) -> Any:
        """How step functions become executable: jax.jit here (jax-eager overrides it)."""
        import jax

        return jax.jit(fn, **jit_args)

    def to_device(self, batch: Batch) -> Any:
        import jax

        return jax.block_until_ready(jax.device_put(dict(batch), self.device))

    def loader(self, batches: list[Batch]) -> Iterator[Any]:
        """Double-buffered ``jax.device_put`` of the next batches (flax's prefetch_to_device
        pattern): the copy of batch i+2 is dispatched, asynchronously, before batch i runs."""
        import jax

        def stream() -> Iterator[Any]:
            source = itertools.cycle(batches)
            ahead = collections.deque(jax.device_put(next(source), self.device) for _ in range(2))
            while True:
                ahead.append(jax.device_put(next(source), self.device))
                yield ahead.popleft()

        return stream()

    def image_loader(self, images: Any, settings: Any) -> tuple[Iterator[Any], dict[str, Any]]:
        import jax

        return _grain_data.image_stream(jax, images, settings, self.device)

    def device_memory_peak(self) -> int | None:
        return kit.jax_peak_bytes(self.device)

    def train_step(self, batch: Any) -> Any:
        self._params, self._opt_state, loss = self._step(self._params, self._opt_state, batch)
        return self._params, loss

    def infer_step(self, batch: Any) -> Any:
        return self._decode(self._params, batch["features"])

    def sync(self, handle: Any) -> float:
        import jax

        if isinstance(handle, tuple):
            _, loss = jax.block_until_ready(handle)
            return float(loss)
        tokens = np.asarray(jax.block_until_ready(handle))
        return float((tokens != PAD).sum()) / len(tokens)

    def params(self) -> Params:
        return {k: np.asarray(v, dtype=np.float32).copy() for k, v in self._params.items()}

    def compile_stats(self) -> dict[str, Any]:
        return self._events.stats()

    def settings(self) -> dict[str, Any]:
        return {
            **kit.jax_settings(),
            "donate_buffers": True,
            "mixed_precision": self._mixed,
            "optimizer_kernel": f"optax.{self.spec.optimizer} (inside the jitted step, fused by XLA)",
            **_attention_setting(self.spec),
        }


def _attention_setting(spec: Workload) -> dict[str, str]:
    """The transformer's attention kernel, for ``settings``."""
    if spec.family != "transformer":
        return {}
    return {"attention_kernel": _jax_transformer.ATTENTION_KERNELS[spec.attention]}


def _f32(logits):
    """Logits as float32 for the cross-entropy: the loss in float32 under --precision bf16."""
    return logits.astype("float32")


def _gru(jax, jnp, p: Params, h, token, hidden: int):
    gi = p["embed/table"][token] @ p["gru/kernel"] + p["gru/bias"]
    gh = h @ p["gru/recurrent_kernel"] + p["gru/recurrent_bias"]
    r = jax.nn.sigmoid(gi[:, :hidden] + gh[:, :hidden])
    z = jax.nn.sigmoid(gi[:, hidden : 2 * hidden] + gh[:, hidden : 2 * hidden])
    n = jnp.tanh(gi[:, 2 * hidden :] + r * gh[:, 2 * hidden :])
    return (1 - z) * n + z * h


def _loss_fn(jax, jnp, optax, spec: Workload, python_loop: bool = False):
    lax = jax.lax
    if spec.family == "transformer":
        assert isinstance(spec, Transformer)
        return _jax_transformer.loss_fn(jax, jnp, optax, spec)
    if spec.family == "mlp":

        def mlp_loss(p, batch):
            x = batch["x"].reshape(batch["x"].shape[0], -1)
            logits = _dense(jax, p, x, "dense", len(spec.layer_sizes) - 1)
            return optax.softmax_cross_entropy_with_integer_labels(_f32(logits), batch["y"]).mean()

        return mlp_loss

    if spec.family == "cnn":

        def cnn_loss(p, batch):
            h = batch["x"]
            for i in range(len(spec.channels)):
                h = lax.conv_general_dilated(
                    h, p[f"conv{i}/kernel"], (1, 1), "SAME", dimension_numbers=("NHWC", "HWIO", "NHWC")
                )
                h = jax.nn.relu(h + p[f"conv{i}/bias"])
                h = lax.reduce_window(h, -jnp.inf, lax.max, (1, 2, 2, 1), (1, 2, 2, 1), "VALID")
            logits = _dense(jax, p, h.reshape(h.shape[0], -1), "dense", len(spec.dense_sizes) - 1)
            return optax.softmax_cross_entropy_with_integer_labels(_f32(logits), batch["y"]).mean()

        return cnn_loss

    def caption_loss(p, batch):
        h0 = jnp.tanh(batch["features"] @ p["img/kernel"] + p["img/bias"])

        def one_step(h, tok, tgt, m):
            h = _gru(jax, jnp, p, h, tok, spec.hidden)
            logits = h @ p["out/kernel"] + p["out/bias"]
            return h, jnp.sum(optax.softmax_cross_entropy_with_integer_labels(_f32(logits), tgt) * m)

        time_major = (batch["tokens"].T, batch["targets"].T, batch["mask"].T)
        if python_loop:  # op by op, as an eager JAX user writes it
            h, total = h0, 0.0
            for t in range(time_major[0].shape[0]):
                h, ce = one_step(h, time_major[0][t], time_major[1][t], time_major[2][t])
                total = total + ce
            return total / batch["mask"].sum(dtype="float32")  # a count past 256 is inexact in bf16
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


def _decoder(jax, jnp, spec: Workload, python_loop: bool = False):
    lax = jax.lax

    def decode(p, features):
        b = features.shape[0]
        h = jnp.tanh(features @ p["img/kernel"] + p["img/bias"])
        init = (0, h, jnp.full((b,), BOS), jnp.zeros((b,), bool), jnp.full((b, spec.max_len), PAD))

        def cond(carry):
            t, _, _, done, _ = carry
            return (t < spec.max_len) & ~jnp.all(done)

        def body(carry):
            t, h, token, done, out = carry
            h = _gru(jax, jnp, p, h, token, spec.hidden)
            token = jnp.where(done, PAD, jnp.argmax(h @ p["out/kernel"] + p["out/bias"], axis=1))
            return t + 1, h, token, done | (token == EOS), out.at[:, t].set(token)

        if not python_loop:
            return lax.while_loop(cond, body, init)[-1]
        carry = init
        while bool(cond(carry)):  # the data-dependent exit: a host sync every step
            carry = body(carry)
        return carry[-1]

    return decode
