"""TensorFlow with ``tf.function``: a static graph traced once, optimised by Grappler.

The step is one ``tf.function`` with a fixed ``input_signature`` (so it never retraces on a
new batch object), a ``GradientTape`` backward pass, the fused ``ResourceApplyGradientDescent``
kernel for SGD and Adam written out (see ``step``). Variables stay on the device; ``sync``
reads the loss with ``.numpy()``, which waits for the step.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from adapters.base import Adapter, pick_device
from workloads import Batch, Params, Workload
from workloads.mlp import ADAM_BETA1, ADAM_BETA2, ADAM_EPS


class TfFunction(Adapter):
    name = "tf-function"
    framework = "tensorflow"
    graph = "static"
    requires = ("tensorflow",)
    extra = "tensorflow"

    @classmethod
    def worker_env(cls, threads: int) -> dict[str, str]:
        env = super().worker_env(threads)
        env.update(
            TF_NUM_INTRAOP_THREADS=str(threads),
            TF_CPP_MIN_LOG_LEVEL="2",
            # Allocate GPU memory as needed, so memory figures mean something.
            TF_FORCE_GPU_ALLOW_GROWTH="true",
        )
        return env

    def version(self) -> dict[str, str]:
        import tensorflow as tf

        return {"tensorflow": tf.__version__}

    def resolve_device(self, device: str) -> str:
        import tensorflow as tf

        return pick_device(device, bool(tf.config.list_physical_devices("GPU")), "tensorflow")

    def setup(self, spec: Workload, params: Params, device: str, threads: int) -> None:
        import tensorflow as tf

        tf.config.experimental.enable_tensor_float_32_execution(False)
        try:  # also set through the environment (worker_env); this makes it readable back
            tf.config.threading.set_intra_op_parallelism_threads(threads)
        except RuntimeError:
            pass  # the runtime is already initialised with TF_NUM_INTRAOP_THREADS
        self._tf = tf
        self._device = "/GPU:0" if device == "cuda" else "/CPU:0"
        n_layers = len(spec.layer_sizes) - 1
        names = [f"dense{i}/{part}" for i in range(n_layers) for part in ("kernel", "bias")]
        with tf.device(self._device):
            self._vars = {k: tf.Variable(params[k], name=k.replace("/", "_")) for k in names}
            variables = list(self._vars.values())
            adam = spec.optimizer == "adam"
            if adam:
                slots = [(tf.Variable(tf.zeros_like(v)), tf.Variable(tf.zeros_like(v))) for v in variables]
                step_count = tf.Variable(0.0)
        lr = float(spec.learning_rate)

        def loss_fn(x, y):
            h = tf.reshape(x, [tf.shape(x)[0], -1])
            for i in range(n_layers):
                h = tf.matmul(h, self._vars[f"dense{i}/kernel"]) + self._vars[f"dense{i}/bias"]
                if i < n_layers - 1:
                    h = tf.nn.relu(h)
            return tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(labels=y, logits=h))

        def step(x, y):
            with tf.GradientTape() as tape:
                loss = loss_fn(x, y)
            grads = tape.gradient(loss, variables)
            if not adam:
                for v, g in zip(variables, grads, strict=True):
                    tf.raw_ops.ResourceApplyGradientDescent(var=v.handle, alpha=lr, delta=g)
                return loss
            t = step_count.assign_add(1.0)
            b1_power, b2_power = ADAM_BETA1**t, ADAM_BETA2**t
            # Written out rather than tf.raw_ops.ResourceApplyAdam: that fused CPU kernel (with
            # epsilon rescaled to the spec's form) left the NumPy reference from step 3 on in
            # the parity test, while this form stays on it. Grappler fuses the element-wise ops.
            for v, g, (m, s) in zip(variables, grads, slots, strict=True):
                m.assign(ADAM_BETA1 * m + (1 - ADAM_BETA1) * g)
                s.assign(ADAM_BETA2 * s + (1 - ADAM_BETA2) * g * g)
                v.assign_sub(lr * (m / (1 - b1_power)) / (tf.sqrt(s / (1 - b2_power)) + ADAM_EPS))
            return loss

        signature = [
            tf.TensorSpec([spec.batch_size, *spec.input_shape], tf.float32),
            tf.TensorSpec([spec.batch_size], tf.int32),
        ]
        self._step = tf.function(step, input_signature=signature, jit_compile=False)

    def to_device(self, batch: Batch) -> Any:
        tf = self._tf
        with tf.device(self._device):
            placed = (tf.identity(batch["x"]), tf.identity(batch["y"]))
        if self._device != "/CPU:0":
            tf.test.experimental.sync_devices()
        return placed

    def train_step(self, batch: Any) -> Any:
        with self._tf.device(self._device):
            return self._step(*batch)

    def sync(self, handle: Any) -> float:
        return float(handle.numpy())

    def params(self) -> Params:
        return {k: np.asarray(v.numpy(), dtype=np.float32) for k, v in self._vars.items()}

    def compile_stats(self) -> dict[str, Any]:
        return {"traces": int(self._step.experimental_get_tracing_count())}

    def settings(self) -> dict[str, Any]:
        tf = self._tf
        return {
            "tf32": tf.config.experimental.tensor_float_32_execution_enabled(),
            "jit_compile": False,
            "intra_op_threads": tf.config.threading.get_intra_op_parallelism_threads(),
        }
