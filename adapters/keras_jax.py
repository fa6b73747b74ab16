"""Keras 3 on the JAX backend (``KERAS_BACKEND=jax``), timed through the step ``fit`` runs.

The same Keras models as keras-torch (adapters/_keras_common.py), compiled with
``jit_compile=True``, Keras's default on this backend: one XLA program per input shape, so this
is a static graph (the caption decoder's ``exact`` strategy retraces for every new length;
Keras's GRU runs as ``lax.scan`` inside it).

Each timed step is ``model.train_function``, the jitted step ``fit`` calls, with the training
state held as ``fit`` holds it: a tuple of device arrays passed from step to step (donated to
XLA), written back to the Keras variables only when the parameters are read (``fit`` does so at
the end of an epoch). ``train_on_batch`` is not what Keras users train with: it gathers the state
from the variables, writes it back and converts the logs to Python on every call, which cost
keras-jax about 2.5x ``fit``'s step time at ``mlp`` batch 32. The setup calls are the ones
``fit`` makes (``keras/src/backend/jax/trainer.py``): ``_symbolic_build``,
``make_train_function``, ``_get_jax_state``, and ``jax_state_sync`` to write back. One
difference from ``fit``: the loss tracker's accumulators restart from zero every step (two tiny
arrays), so the logged loss is this step's loss rather than the running mean of the epoch.
``steps_per_execution`` stays 1: on this backend it is a Python loop over the same jitted step
(``_make_function``), which the pipelined blocks already issue back to back.

Adam is Keras's own (its update unchanged), with epsilon scaled per step inside the compiled
update so that it runs the workloads' Algorithm-1 form (see ``algorithm1_adam``); ``adamw`` is
Keras's AdamW the same way. The transformer is the keras-torch model
(adapters/_keras_transformer.py); its fused attention is ``jax.nn.dot_product_attention`` under
``keras.ops.dot_product_attention``, and it compiles once per sequence length under ``exact``,
per bucket under ``bucketed``, once under ``padded``. Greedy
decoding steps the GRU cell with Keras ops in a Python loop. Compile counts and seconds come
from ``jax.monitoring``. ``--data loader``: on the image workloads, Keras's own PyDataset
(adapters/_keras_data.py); on the caption workloads, which have no per-sample work, skipped.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from adapters import _export_keras, _keras_transformer, kit
from adapters._keras_common import (
    algorithm1_adam,
    build_model,
    compile_model,
    fit_data,
    load_params,
    model_file_reason,
    optimizer_kernel,
    save_params,
)
from adapters._keras_data import IMAGE_LOADER_KIND, image_batches
from adapters.base import Adapter, Options
from adapters.exporting import Exports, Forward
from workloads import Batch, Params, Workload
from workloads.optim import ADAMW_WEIGHT_DECAY
from workloads.rnn import BOS, EOS, PAD, RNNCaption


class KerasJax(Exports, Adapter):
    name = "keras-jax"
    framework = "keras"
    graph = "static"
    requires = ("keras", "jax")
    extra = "keras"
    image_loader_kind = IMAGE_LOADER_KIND
    families = ("mlp", "cnn", "rnn-caption", "transformer", "keras-model")
    precisions = ("fp32", "tf32", "bf16")

    export_paths = _export_keras.PATHS
    in_process_forward = True

    def supports(self, spec: Workload) -> str | None:
        return super().supports(spec) or model_file_reason(spec, "jax")

    def export_reason(self, path: str, spec: Workload) -> str | None:
        return super().export_reason(path, spec) or _export_keras.path_reason(path, "jax")

    def forward(self, spec: Workload, params: Params, device: str, options: Options) -> Forward:
        import keras

        kit.jax_precision(options.tf32)
        return _export_keras.forward_of(_export_keras.model(keras, spec, params, device, jit_compile=True))

    def export(self, path: str, spec: Workload, params: Params, device: str, directory: Path) -> Path:
        return _export_keras.export(path, spec, params, device, directory, jit_compile=True)

    @classmethod
    def serve(cls, path: str, artifact: Path, device: str, threads: int) -> Forward:
        return _export_keras.serve(path, artifact, device, threads)

    @classmethod
    def worker_env(cls, threads: int, device: str = "cpu") -> dict[str, str]:
        return {**super().worker_env(threads, device), **kit.keras_env("jax", threads, device)}

    def version(self) -> dict[str, str]:
        import jax
        import keras

        return {"keras": keras.__version__, "jax": jax.__version__, "keras_backend": keras.backend.backend()}

    def resolve_device(self, device: str) -> str:
        return kit.jax_resolve_device(device, "keras (jax backend)")

    def build_info(self) -> dict[str, Any]:
        return kit.jax_build_info()

    def setup(self, spec: Workload, params: Params, device: str, options: Options) -> None:
        import jax
        import keras

        if keras.backend.backend() != "jax":
            raise RuntimeError(f"Keras backend is {keras.backend.backend()!r}; KERAS_BACKEND=jax must be set first")
        kit.jax_precision(options.tf32)
        self._jax, self._keras = jax, keras
        self._device = jax.devices(device)[0]
        self._events = kit.JaxCompileEvents()
        self.spec = spec
        self._mixed = kit.mixed_precision("keras", options)
        kit.keras_policy(keras, options.bf16)
        with keras.device(f"{self._device.platform}:0"):
            self.model, self._layers = build_model(keras, spec)
            load_params(self._layers, params, spec)
            adam = None
            if spec.optimizer in ("adam", "adamw"):
                decay = ADAMW_WEIGHT_DECAY if spec.optimizer == "adamw" else None
                adam = algorithm1_adam(keras, spec.learning_rate, weight_decay=decay)
            compile_model(keras, self.model, spec, adam, jit_compile=True, layers=self._layers)
        self._state: tuple[Any, ...] | None = None

    def to_device(self, batch: Batch) -> Any:
        jax = self._jax
        return jax.block_until_ready(jax.device_put(dict(batch), self._device))

    def image_loader(self, images: Any, settings: Any) -> tuple[Any, dict[str, Any]]:
        jax = self._jax
        stream, knobs = image_batches(self._keras, images, settings)
        return (jax.device_put(b, self._device) for b in stream), knobs

    def train_step(self, batch: Any) -> Any:
        data = fit_data(self.spec, batch)
        if self._state is None:
            self._take_state(data)
        logs, (trainable, non_trainable, optimizer, metrics) = self.model.train_function(self._state, iter([data]))
        # Fresh accumulators: the loss tracker's mean then covers this step only.
        fresh = [self._jax.numpy.zeros_like(v) for v in metrics]
        self._state = (trainable, non_trainable, optimizer, fresh)
        return logs["loss"]

    def _take_state(self, data: tuple[Any, Any, Any]) -> None:
        """What ``fit`` does before its loop: build, compile the step, move the state out of the
        Keras variables into arrays the step passes on."""
        model = self.model
        model._symbolic_build(data_batch=data)
        model.make_train_function()
        model.reset_metrics()
        state = model._get_jax_state(
            trainable_variables=True,
            non_trainable_variables=True,
            optimizer_variables=True,
            metrics_variables=True,
            purge_model_variables=True,
        )
        # Committed to the device, as the jitted step's outputs are: the Keras variables hold
        # uncommitted arrays, and jit compiled the step again on step 2 for its own outputs
        # (mlp: 3 compiles in records before 2026-11-23, now 1; harness check catches it).
        self._state = kit.jax_place(state, self._device)
        model._jax_state_synced = False

    def _write_back(self) -> None:
        """What ``fit`` does at the end of an epoch: the state back into the Keras variables."""
        if self._state is None:
            return
        names = ("trainable_variables", "non_trainable_variables", "optimizer_variables", "metrics_variables")
        self.model._jax_state = dict(zip(names, self._state, strict=True))
        self.model.jax_state_sync()
        self.model._jax_state = None
        self._state = None

    def infer_step(self, batch: Any) -> Any:
        jnp, layers, spec = self._jax.numpy, self._layers, self.spec
        assert isinstance(spec, RNNCaption)
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
        # The whole state, not the loss alone: the step's fresh metric accumulators are dispatched
        # after its loss (on an H200, sync() returned with them still queued: make gpu-check).
        self._jax.block_until_ready(self._state)
        if handle.ndim:  # decoded tokens: mean caption length
            tokens = np.asarray(self._jax.block_until_ready(handle))
            return float((tokens != PAD).sum()) / len(tokens)
        return float(handle)  # the loss; blocks until the step that computes it is done

    def params(self) -> Params:
        self._write_back()
        return save_params(self._layers, self.spec)

    def device_busy(self) -> bool | None:
        return kit.jax_device_busy(self._state)

    def device_memory_peak(self) -> int | None:
        return kit.jax_peak_bytes(self._device)

    def compile_stats(self) -> dict[str, Any]:
        return self._events.stats()

    def settings(self) -> dict[str, Any]:
        attention = {}
        if self.spec.family == "transformer":
            attention = {"attention_kernel": _keras_transformer.attention_kernel(self.spec, "jax")}
        return {
            "jit_compile": True,
            "train_path": "fit's train_function, state kept on the device",
            "optimizer_kernel": optimizer_kernel(self.spec, "epsilon scaled per step inside the jitted update"),
            "steps_per_execution": self.model.steps_per_execution,
            **attention,
            "mixed_precision": self._mixed,
            "matmul_precision": self._jax.config.jax_default_matmul_precision,  # type: ignore[attr-defined]
            "gpu_autotune_level": kit.gpu_autotune_level(),
            "persistent_compile_cache": bool(self._jax.config.jax_enable_compilation_cache),  # type: ignore[attr-defined]
            "persistent_cache_min_compile_s": float(
                self._jax.config.jax_persistent_cache_min_compile_time_secs  # type: ignore[attr-defined]
            ),
        }
