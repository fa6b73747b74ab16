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
``lax.while_loop`` that stops when every caption has ended.
"""

from __future__ import annotations

import collections
import itertools
import os
from collections import defaultdict
from collections.abc import Iterator
from typing import Any

import numpy as np

from adapters.base import Adapter, Options, pick_device
from workloads import Batch, Params, Workload
from workloads.optim import ADAM_BETA1, ADAM_BETA2, ADAM_EPS
from workloads.rnn import BOS, EOS, PAD


class JaxJit(Adapter):
    name = "jax-jit"
    framework = "jax"
    graph = "static"
    requires = ("jax", "optax")
    extra = "jax"
    loader_kind = "double-buffered asynchronous jax.device_put (prefetch_to_device pattern)"
    graph_loop = "lax.scan over max_len with lax.cond skipping steps past the batch length"

    @classmethod
    def worker_env(cls, threads: int) -> dict[str, str]:
        env = super().worker_env(threads)
        # Honest memory figures on GPU: allocate on demand instead of grabbing 75% up front.
        env["XLA_PYTHON_CLIENT_PREALLOCATE"] = "false"
        env["XLA_FLAGS"] = f"--xla_cpu_multi_thread_eigen=true intra_op_parallelism_threads={threads}"
        return env

    def version(self) -> dict[str, str]:
        import jax
        import jaxlib
        import optax

        return {"jax": jax.__version__, "jaxlib": jaxlib.__version__, "optax": optax.__version__}

    def resolve_device(self, device: str) -> str:
        import jax

        try:
            has_gpu = bool(jax.devices("cuda"))
        except RuntimeError:
            has_gpu = False
        return pick_device(device, has_gpu, "jax")

    def setup(self, spec: Workload, params: Params, device: str, options: Options) -> None:
        import jax
        import jax.numpy as jnp
        import optax

        # "highest" keeps float32 matmuls and convolutions in full precision on GPU (TF32 off);
        # "tensorfloat32" allows TF32, as --precision tf32 does in every framework.
        jax.config.update("jax_default_matmul_precision", "tensorfloat32" if options.tf32 else "highest")
        self._events: dict[str, list[float]] = defaultdict(list)
        jax.monitoring.register_event_duration_secs_listener(self._on_event)
        self.spec = spec
        self.device = jax.devices(device)[0]
        if spec.optimizer == "sgd":
            tx = optax.sgd(spec.learning_rate)
        else:
            tx = optax.adam(spec.learning_rate, b1=ADAM_BETA1, b2=ADAM_BETA2, eps=ADAM_EPS)
        loss_fn = _loss_fn(jax, jnp, optax, spec)

        def step(p, opt_state, batch):
            loss, grads = jax.value_and_grad(loss_fn)(p, batch)
            updates, opt_state = tx.update(grads, opt_state, p)
            return optax.apply_updates(p, updates), opt_state, loss

        self._step = jax.jit(step, donate_argnums=(0, 1))
        self._params = jax.device_put({k: jnp.asarray(v) for k, v in params.items()}, self.device)
        self._opt_state = jax.device_put(tx.init(self._params), self.device)
        if spec.family == "rnn-caption":
            self._decode = jax.jit(_decoder(jax, jnp, spec))

    def _on_event(self, event: str, duration: float, **_: Any) -> None:
        self._events[event].append(duration)

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

    def device_memory_peak(self) -> int | None:
        stats = self.device.memory_stats() if self.device.platform != "cpu" else None
        return stats.get("peak_bytes_in_use") if stats else None

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
        def durations(event: str) -> list[float]:
            return self._events.get(f"/jax/core/compile/{event}_duration", [])

        traces, lowers, compiles = (
            durations("jaxpr_trace"),
            durations("jaxpr_to_mlir_module"),
            durations("backend_compile"),
        )
        return {"traces": len(traces), "compiles": len(compiles), "compile_s": float(sum(traces + lowers + compiles))}

    def settings(self) -> dict[str, Any]:
        import jax

        return {
            "matmul_precision": jax.config.jax_default_matmul_precision,
            "donate_buffers": True,
            "xla_flags": os.environ.get("XLA_FLAGS", ""),
            "gpu_autotune": "XLA default (level 4)",
        }


def _dense(jax, p: Params, h, prefix: str, n_layers: int):
    for i in range(n_layers):
        h = h @ p[f"{prefix}{i}/kernel"] + p[f"{prefix}{i}/bias"]
        if i < n_layers - 1:
            h = jax.nn.relu(h)
    return h


def _gru(jax, jnp, p: Params, h, token, hidden: int):
    gi = p["embed/table"][token] @ p["gru/kernel"] + p["gru/bias"]
    gh = h @ p["gru/recurrent_kernel"] + p["gru/recurrent_bias"]
    r = jax.nn.sigmoid(gi[:, :hidden] + gh[:, :hidden])
    z = jax.nn.sigmoid(gi[:, hidden : 2 * hidden] + gh[:, hidden : 2 * hidden])
    n = jnp.tanh(gi[:, 2 * hidden :] + r * gh[:, 2 * hidden :])
    return (1 - z) * n + z * h


def _loss_fn(jax, jnp, optax, spec: Workload):
    lax = jax.lax
    if spec.family == "mlp":

        def mlp_loss(p, batch):
            x = batch["x"].reshape(batch["x"].shape[0], -1)
            logits = _dense(jax, p, x, "dense", len(spec.layer_sizes) - 1)
            return optax.softmax_cross_entropy_with_integer_labels(logits, batch["y"]).mean()

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
            return optax.softmax_cross_entropy_with_integer_labels(logits, batch["y"]).mean()

        return cnn_loss

    def caption_loss(p, batch):
        h0 = jnp.tanh(batch["features"] @ p["img/kernel"] + p["img/bias"])

        def one_step(h, tok, tgt, m):
            h = _gru(jax, jnp, p, h, tok, spec.hidden)
            logits = h @ p["out/kernel"] + p["out/bias"]
            return h, jnp.sum(optax.softmax_cross_entropy_with_integer_labels(logits, tgt) * m)

        time_major = (batch["tokens"].T, batch["targets"].T, batch["mask"].T)
        if spec.strategy == "graph-loop":
            length = batch["length"]

            def body(h, xs):
                t, tok, tgt, m = xs
                return lax.cond(t < length, one_step, lambda h, *_: (h, jnp.zeros((), h.dtype)), h, tok, tgt, m)

            _, ce = lax.scan(body, h0, (jnp.arange(time_major[0].shape[0]), *time_major))
        else:
            _, ce = lax.scan(lambda h, xs: one_step(h, *xs), h0, time_major)
        return ce.sum() / batch["mask"].sum()

    return caption_loss


def _decoder(jax, jnp, spec: Workload):
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

        return lax.while_loop(cond, body, init)[-1]

    return decode
