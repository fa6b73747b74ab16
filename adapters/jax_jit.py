"""JAX with ``jax.jit``: a static graph traced once and compiled by XLA.

The whole training step (forward, ``value_and_grad``, optax update) is one jitted function
with the parameter and optimiser-state buffers donated, so XLA updates them in place. JAX
dispatch is asynchronous on every backend, so ``sync`` blocks on the new parameters and the
loss before reading the clock. Compile seconds come from ``jax.monitoring`` duration events.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

import numpy as np

from adapters.base import Adapter, pick_device
from workloads import Batch, Params, Workload
from workloads.mlp import ADAM_BETA1, ADAM_BETA2, ADAM_EPS


class JaxJit(Adapter):
    name = "jax-jit"
    framework = "jax"
    graph = "static"
    requires = ("jax", "optax")
    extra = "jax"

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

    def setup(self, spec: Workload, params: Params, device: str, threads: int) -> None:
        import jax
        import jax.numpy as jnp
        import optax

        # TF32 off: "highest" keeps float32 matmuls in full precision on GPU.
        jax.config.update("jax_default_matmul_precision", "highest")
        self._events: dict[str, list[float]] = defaultdict(list)
        jax.monitoring.register_event_duration_secs_listener(self._on_event)

        self.device = jax.devices(device)[0]
        n_layers = len(spec.layer_sizes) - 1
        if spec.optimizer == "sgd":
            tx = optax.sgd(spec.learning_rate)
        else:
            tx = optax.adam(spec.learning_rate, b1=ADAM_BETA1, b2=ADAM_BETA2, eps=ADAM_EPS)

        def loss_fn(p, x, y):
            h = x.reshape(x.shape[0], -1)
            for i in range(n_layers):
                h = h @ p[f"dense{i}/kernel"] + p[f"dense{i}/bias"]
                if i < n_layers - 1:
                    h = jax.nn.relu(h)
            return optax.softmax_cross_entropy_with_integer_labels(h, y).mean()

        def step(p, opt_state, x, y):
            loss, grads = jax.value_and_grad(loss_fn)(p, x, y)
            updates, opt_state = tx.update(grads, opt_state, p)
            return optax.apply_updates(p, updates), opt_state, loss

        self._step = jax.jit(step, donate_argnums=(0, 1))
        self._params = jax.device_put({k: jnp.asarray(v) for k, v in params.items()}, self.device)
        self._opt_state = jax.device_put(tx.init(self._params), self.device)

    def _on_event(self, event: str, duration: float, **_: Any) -> None:
        self._events[event].append(duration)

    def to_device(self, batch: Batch) -> Any:
        import jax

        return jax.block_until_ready(jax.device_put((batch["x"], batch["y"]), self.device))

    def train_step(self, batch: Any) -> Any:
        x, y = batch
        self._params, self._opt_state, loss = self._step(self._params, self._opt_state, x, y)
        return self._params, loss

    def sync(self, handle: Any) -> float:
        import jax

        params, loss = jax.block_until_ready(handle)
        return float(loss)

    def params(self) -> Params:
        return {k: np.asarray(v, dtype=np.float32).copy() for k, v in self._params.items()}

    def compile_stats(self) -> dict[str, Any]:
        def total(event: str) -> list[float]:
            return self._events.get(f"/jax/core/compile/{event}_duration", [])

        traces, lowers, compiles = total("jaxpr_trace"), total("jaxpr_to_mlir_module"), total("backend_compile")
        return {
            "traces": len(traces),
            "compiles": len(compiles),
            "compile_s": float(sum(traces) + sum(lowers) + sum(compiles)),
        }

    def settings(self) -> dict[str, Any]:
        import jax

        return {"matmul_precision": jax.config.jax_default_matmul_precision, "donate_buffers": True}
