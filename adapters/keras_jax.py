"""Keras 3 on the JAX backend (``KERAS_BACKEND=jax``): Keras's jit-compiled train step.

The same Keras models as keras-torch (adapters/_keras_common.py), compiled with
``jit_compile=True``, Keras's default on this backend: ``train_on_batch`` runs one XLA
program per input shape, so this is a static graph (the caption decoder's ``exact`` strategy
retraces for every new length; Keras's GRU runs as ``lax.scan`` inside it). Adam is Keras's
Adam with epsilon moved after the bias correction inside the compiled update (see
``algorithm1_adam``). Greedy decoding steps the GRU cell with Keras ops in a Python loop.
Compile counts and seconds come from ``jax.monitoring``. Keras on JAX has no input pipeline of
its own outside ``fit``, so ``--data loader`` is skipped.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from adapters import _jax_common
from adapters._jax_common import CompileEvents, jax_env, peak_bytes
from adapters._keras_common import algorithm1_adam, build_model, compile_model, load_params, save_params
from adapters.base import Adapter, Options
from workloads import Batch, Params, Workload
from workloads.rnn import BOS, EOS, PAD


class KerasJax(Adapter):
    name = "keras-jax"
    framework = "keras"
    graph = "static"
    requires = ("keras", "jax")
    extra = "keras"

    @classmethod
    def worker_env(cls, threads: int, device: str = "cpu") -> dict[str, str]:
        return {**super().worker_env(threads, device), **jax_env(threads, device), "KERAS_BACKEND": "jax"}

    def version(self) -> dict[str, str]:
        import jax
        import keras

        return {"keras": keras.__version__, "jax": jax.__version__, "keras_backend": keras.backend.backend()}

    def resolve_device(self, device: str) -> str:
        return _jax_common.resolve_device(device, "keras (jax backend)")

    def build_info(self) -> dict[str, Any]:
        return _jax_common.build_info()

    def setup(self, spec: Workload, params: Params, device: str, options: Options) -> None:
        import jax
        import keras

        if keras.backend.backend() != "jax":
            raise RuntimeError(f"Keras backend is {keras.backend.backend()!r}; KERAS_BACKEND=jax must be set first")
        jax.config.update("jax_default_matmul_precision", "tensorfloat32" if options.tf32 else "highest")
        self._jax, self._keras = jax, keras
        self._device = jax.devices(device)[0]
        self._events = CompileEvents()
        self.spec = spec
        with keras.device(f"{self._device.platform}:0"):
            self.model, self._layers = build_model(keras, spec)
            load_params(self._layers, params, spec)
            adam = algorithm1_adam(keras, spec.learning_rate) if spec.optimizer == "adam" else None
            compile_model(keras, self.model, spec, adam, jit_compile=True)

    def to_device(self, batch: Batch) -> Any:
        jax = self._jax
        return jax.block_until_ready(jax.device_put(dict(batch), self._device))

    def train_step(self, batch: Any) -> Any:
        if self.spec.family == "rnn-caption":
            x = [batch["features"], batch["tokens"]]
            return self.model.train_on_batch(x, batch["targets"], sample_weight=batch["mask"])
        return self.model.train_on_batch(batch["x"], batch["y"])

    def infer_step(self, batch: Any) -> Any:
        jnp, layers, spec = self._jax.numpy, self._layers, self.spec
        features = batch["features"]
        h = layers["img"](features)
        token = jnp.full((len(features),), BOS, jnp.int32)
        done = jnp.zeros(len(features), bool)
        out = jnp.full((len(features), spec.max_len), PAD, jnp.int32)
        for step in range(spec.max_len):
            h, _ = layers["gru"].cell(layers["embed"](token), [h])
            token = jnp.where(done, PAD, jnp.argmax(layers["out"](h), axis=1).astype(jnp.int32))
            out = out.at[:, step].set(token)
            done = done | (token == EOS)
            if bool(done.all()):  # the data-dependent exit: a host sync every step
                break
        return out

    def sync(self, handle: Any) -> float:
        if isinstance(handle, self._jax.Array):  # decoded tokens: mean caption length
            tokens = np.asarray(self._jax.block_until_ready(handle))
            return float((tokens != PAD).sum()) / len(tokens)
        return float(handle)  # train_on_batch already returned a host value

    def params(self) -> Params:
        return save_params(self._layers, self.spec)

    def device_memory_peak(self) -> int | None:
        return peak_bytes(self._device)

    def compile_stats(self) -> dict[str, Any]:
        return self._events.stats()

    def settings(self) -> dict[str, Any]:
        return {
            "jit_compile": True,
            "matmul_precision": self._jax.config.jax_default_matmul_precision,
            "gpu_autotune_level": _jax_common.gpu_autotune_level(),
        }
