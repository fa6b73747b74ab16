"""TensorFlow with ``tf.function``: a static graph traced per input signature, optimised by
Grappler.

The training step is one ``tf.function`` holding a ``GradientTape`` backward pass and
TensorFlow's fused optimiser kernels, ``ResourceApplyGradientDescent`` and ``ResourceApplyAdam``
(what ``tf.compat.v1.train.AdamOptimizer`` runs). The Adam kernel adds epsilon to sqrt(v) before
the bias correction; the step passes ``eps * sqrt(1 - beta2^t)``, which makes its update the
workloads' Algorithm-1 one exactly (Kingma & Ba, section 2, the ``eps_hat`` form). Until
2026-11-23 the update was written out element-wise instead; on ``mlp-wide`` the fused kernel
takes a tf-function step from 16.7 to 8.8 ms (2-core CPU VM, one process, interleaved).
Variables stay on the device; ``sync`` reads the loss with ``.numpy()``, which waits for the
step. Parameters keep the canonical layout, which is TensorFlow's own (kernels (in, out),
HWIO convolutions on NHWC images).

Retracing is the point of the caption decoder's strategies: under ``exact``, ``bucketed`` and
``padded`` the step is traced for each new time length, with a Python loop over the static
length (AutoGraph unrolls it into the graph); under ``graph-loop`` the signature is fixed at
``max_len`` and AutoGraph turns ``for t in tf.range(length)`` into a ``tf.while_loop`` that
runs only the batch's steps: one trace. Greedy decoding is a ``tf.while_loop`` as well.
The transformer (adapters/_tf_transformer.py) follows the same strategies with no input
signature: one trace per sequence length under ``exact``, per bucket under ``bucketed``, one
under ``padded``. Its ``attention=fused`` cell is skipped (TensorFlow has no fused attention
op), and its AdamW is the fused Adam kernel after the decoupled decay written out.
``compile_stats`` reports the tracing count and the seconds spent in Python tracing;
Grappler's graph optimisation on the first call is not exposed and lands in the first step.

Integer inputs (labels, tokens) are placed as int64: TensorFlow keeps int32 tensors placed on a
GPU in host memory, so int32 labels would never really be on the device.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any, ClassVar

import numpy as np

from adapters import _export_tf, _tf_data, _tf_transformer, kit
from adapters._tf_layers import dense as _dense
from adapters.base import Adapter, Options
from adapters.exporting import Exports, Forward
from workloads import MLP, Batch, Params, Workload
from workloads.optim import ADAM_BETA1, ADAM_BETA2, ADAM_EPS, ADAMW_WEIGHT_DECAY, decays
from workloads.rnn import BOS, EOS, PAD


class TfFunction(Exports, Adapter):
    name = "tf-function"
    framework = "tensorflow"
    graph = "static"
    requires = ("tensorflow",)
    extra = "tensorflow"
    loader_kind = _tf_data.LOADER_KIND
    image_loader_kind = _tf_data.IMAGE_LOADER_KIND
    graph_loop: ClassVar[str | None] = "tf.while_loop via AutoGraph over tf.range(length)"
    families = ("mlp", "cnn", "rnn-caption", "transformer")
    precisions = ("fp32", "tf32", "bf16")
    export_paths: ClassVar[tuple[str, ...]] = _export_tf.PATHS
    in_process_forward = True

    @classmethod
    def worker_env(cls, threads: int, device: str = "cpu") -> dict[str, str]:
        return {**super().worker_env(threads, device), **kit.tf_env(threads, device)}

    def export_reason(self, path: str, spec: Workload) -> str | None:
        reason = super().export_reason(path, spec)
        if reason is None and path == "onnx":
            return _export_tf.converter_reason()
        return reason

    def forward(self, spec: Workload, params: Params, device: str, options: Options) -> Forward:
        import tensorflow as tf

        kit.tf_precision(tf, options.tf32, options.threads)
        self._tf = tf  # what _compile reads
        logits = _export_tf.logits_fn(tf, spec, _export_tf.variables(tf, params, device))
        return _export_tf.forward_of(tf, self._compile(logits, _export_tf.signature(tf, spec)), device)

    def export(self, path: str, spec: Workload, params: Params, device: str, directory: Path) -> Path:
        return _export_tf.export(path, spec, params, device, directory)

    @classmethod
    def serve(cls, path: str, artifact: Path, device: str, threads: int) -> Forward:
        return _export_tf.serve(path, artifact, device, threads)

    def version(self) -> dict[str, str]:
        import tensorflow as tf

        return {"tensorflow": tf.__version__}

    def resolve_device(self, device: str) -> str:
        return kit.tf_resolve_device(device, "tensorflow")

    def build_info(self) -> dict[str, Any]:
        return kit.tf_build_info()

    def supports(self, spec: Workload) -> str | None:
        if spec.family == "transformer" and spec.attention == "fused":
            return _tf_transformer.NO_FUSED_ATTENTION
        return super().supports(spec)

    def setup(self, spec: Workload, params: Params, device: str, options: Options) -> None:
        import tensorflow as tf

        kit.tf_precision(tf, options.tf32, options.threads)
        self._tf = tf
        self.spec = spec
        self._device = "/GPU:0" if device == "cuda" else "/CPU:0"
        self._trace_s = 0.0
        with tf.device(self._device):
            self._vars = {k: tf.Variable(v, name=k.replace("/", "_")) for k, v in params.items()}
            variables = list(self._vars.values())
            adam = spec.optimizer in ("adam", "adamw")
            slots = [(tf.Variable(tf.zeros_like(v)), tf.Variable(tf.zeros_like(v))) for v in variables] if adam else []
            step_count = tf.Variable(0.0)
        build = _tf_transformer.loss_fn if spec.family == "transformer" else _loss_fn
        loss_fn = kit.tf_mixed_loss(tf, lambda v: build(tf, spec, v), self._vars, options.bf16)
        self._mixed = kit.mixed_precision("tensorflow", options)
        lr = float(spec.learning_rate)
        # AdamW's decoupled decay, written out: TensorFlow has no fused AdamW kernel.
        decayed = [v for k, v in self._vars.items() if decays(k)] if spec.optimizer == "adamw" else []

        def apply(grads):
            if not adam:
                for v, g in zip(variables, grads, strict=True):
                    tf.raw_ops.ResourceApplyGradientDescent(var=v.handle, alpha=lr, delta=g)
                return
            for v in decayed:
                v.assign_sub(lr * ADAMW_WEIGHT_DECAY * v)
            t = step_count.assign_add(1.0)
            b1_power, b2_power = ADAM_BETA1**t, ADAM_BETA2**t
            eps_hat = ADAM_EPS * tf.sqrt(1.0 - b2_power)
            for v, g, (m, s) in zip(variables, grads, slots, strict=True):
                tf.raw_ops.ResourceApplyAdam(
                    var=v.handle,
                    m=m.handle,
                    v=s.handle,
                    beta1_power=b1_power,
                    beta2_power=b2_power,
                    lr=lr,
                    beta1=ADAM_BETA1,
                    beta2=ADAM_BETA2,
                    epsilon=eps_hat,
                    grad=tf.convert_to_tensor(g),  # embedding gradients arrive as IndexedSlices
                )

        def step(batch):
            with tf.GradientTape() as tape:
                loss = loss_fn(batch)
            apply(tape.gradient(loss, variables))
            return loss

        signature = None
        if spec.family not in ("rnn-caption", "transformer") or spec.strategy == "graph-loop":
            # One fixed signature: the step can never retrace on a new batch object.
            example = spec.batches()[0]
            signature = [{k: tf.TensorSpec(v.shape, tf.as_dtype(v.dtype)) for k, v in _tf_data.widen(example).items()}]
        self._step = self._compile(self._timed(step), input_signature=signature)
        self._functions = [self._step]
        if spec.family == "rnn-caption":
            self._decode = self._compile(self._timed(_decoder(tf, spec, self._vars)))
            self._functions.append(self._decode)

    def _compile(self, fn: Any, input_signature: Any = None) -> Any:
        """How step functions become executable: tf.function here (tf-eager overrides it)."""
        return self._tf.function(fn, input_signature=input_signature, jit_compile=False)

    def _timed(self, fn):
        """Wrap a Python function so the seconds spent tracing it are counted: tf.function
        runs the Python body only while tracing."""

        def traced(*args):
            started = time.perf_counter()
            try:
                return fn(*args)
            finally:
                self._trace_s += time.perf_counter() - started

        return traced

    def to_device(self, batch: Batch) -> Any:
        return _tf_data.place(self._tf, batch, self._device)

    def loader(self, batches: list[Batch]) -> Iterator[Any]:
        return _tf_data.batch_iterator(self._tf, batches, self._device)

    def image_loader(self, images: Any, settings: Any) -> tuple[Iterator[Any], dict[str, Any]]:
        tf = self._tf
        dataset, knobs = _tf_data.image_dataset(tf, images, settings)
        if self._device != "/CPU:0":
            dataset = dataset.apply(tf.data.experimental.prefetch_to_device(self._device))
        return iter(dataset), knobs

    def device_memory_peak(self) -> int | None:
        return kit.tf_peak_bytes(self._tf, "cpu" if self._device == "/CPU:0" else "cuda")

    def train_step(self, batch: Any) -> Any:
        with self._tf.device(self._device):
            return self._step(batch)

    def infer_step(self, batch: Any) -> Any:
        with self._tf.device(self._device):
            return self._decode(batch["features"])

    def sync(self, handle: Any) -> float:
        value = handle.numpy()
        if value.ndim:  # decoded tokens: mean caption length
            return float((value != PAD).sum()) / len(value)
        return float(value)

    def fetch(self, handle: Any) -> np.ndarray:
        return handle.numpy()

    def params(self) -> Params:
        return {k: np.asarray(v.numpy(), dtype=np.float32) for k, v in self._vars.items()}

    def compile_stats(self) -> dict[str, Any]:
        return kit.tf_compile_stats(self._functions, self._trace_s)

    def settings(self) -> dict[str, Any]:
        tf = self._tf
        return {
            "tf32": tf.config.experimental.tensor_float_32_execution_enabled(),
            "jit_compile": False,
            "mixed_precision": self._mixed,
            "optimizer_kernel": _optimizer_kernel(self.spec.optimizer),
            **({"attention_kernel": _tf_transformer.ATTENTION_KERNEL} if self.spec.family == "transformer" else {}),
            "intra_op_threads": tf.config.threading.get_intra_op_parallelism_threads(),
            "cudnn_autotune": os.environ.get("TF_CUDNN_USE_AUTOTUNE", "on (default)"),
        }


def _optimizer_kernel(optimizer: str) -> str:
    if optimizer == "adamw":
        return "ResourceApplyAdam (fused), after AdamW's decoupled decay written out (TF has no AdamW kernel)"
    return "ResourceApplyAdam (fused)" if optimizer == "adam" else "ResourceApplyGradientDescent (fused)"


def _gru(tf, v, h, token, hidden: int):
    gi = tf.matmul(tf.gather(v["embed/table"], token), v["gru/kernel"]) + v["gru/bias"]
    gh = tf.matmul(h, v["gru/recurrent_kernel"]) + v["gru/recurrent_bias"]
    r = tf.sigmoid(gi[:, :hidden] + gh[:, :hidden])
    z = tf.sigmoid(gi[:, hidden : 2 * hidden] + gh[:, hidden : 2 * hidden])
    n = tf.tanh(gi[:, 2 * hidden :] + r * gh[:, 2 * hidden :])
    return (1 - z) * n + z * h


def _loss_fn(tf, spec: Workload, v):
    def xent(logits, labels):
        # float32 whatever the compute dtype: the loss in float32 under --precision bf16
        return tf.nn.sparse_softmax_cross_entropy_with_logits(labels=labels, logits=tf.cast(logits, tf.float32))

    if spec.family == "mlp":
        assert isinstance(spec, MLP)
        return lambda b: tf.reduce_mean(
            xent(_dense(tf, v, tf.reshape(b["x"], [tf.shape(b["x"])[0], -1]), len(spec.layer_sizes) - 1), b["y"])
        )

    if spec.family == "cnn":

        def cnn_loss(b):
            h = b["x"]
            for i in range(len(spec.channels)):
                h = tf.nn.relu(tf.nn.conv2d(h, v[f"conv{i}/kernel"], 1, "SAME") + v[f"conv{i}/bias"])
                h = tf.nn.max_pool2d(h, 2, 2, "VALID")
            h = tf.reshape(h, [tf.shape(h)[0], -1])
            return tf.reduce_mean(xent(_dense(tf, v, h, len(spec.dense_sizes) - 1), b["y"]))

        return cnn_loss

    def one_step(h, tok, tgt, m):
        h = _gru(tf, v, h, tok, spec.hidden)
        logits = tf.matmul(h, v["out/kernel"]) + v["out/bias"]
        return h, tf.reduce_sum(xent(logits, tgt) * tf.cast(m, tf.float32))

    def caption_loss(b):
        h = tf.tanh(tf.matmul(b["features"], v["img/kernel"]) + v["img/bias"])
        total = tf.constant(0.0)
        if spec.strategy == "graph-loop":
            for t in tf.range(b["length"]):  # AutoGraph: a tf.while_loop over a tensor bound
                h, ce = one_step(h, b["tokens"][:, t], b["targets"][:, t], b["mask"][:, t])
                total += ce
        else:
            for t in range(b["tokens"].shape[1]):  # static length: unrolled, retraced per shape
                h, ce = one_step(h, b["tokens"][:, t], b["targets"][:, t], b["mask"][:, t])
                total += ce
        return total / tf.reduce_sum(tf.cast(b["mask"], tf.float32))

    return caption_loss


def _decoder(tf, spec: Workload, v):
    def decode(features):
        b = tf.shape(features)[0]
        h = tf.tanh(tf.matmul(features, v["img/kernel"]) + v["img/bias"])
        token = tf.fill([b], BOS)
        done = tf.zeros([b], tf.bool)
        out = tf.fill([b, spec.max_len], PAD)
        positions = tf.range(spec.max_len)

        def cond(t, h, token, done, out):
            return tf.logical_and(t < spec.max_len, tf.logical_not(tf.reduce_all(done)))

        def body(t, h, token, done, out):
            h = _gru(tf, v, h, token, spec.hidden)
            best = tf.argmax(tf.matmul(h, v["out/kernel"]) + v["out/bias"], axis=1, output_type=tf.int32)
            token = tf.where(done, PAD, best)
            out = tf.where(positions[None, :] == t, token[:, None], out)
            return t + 1, h, token, tf.logical_or(done, token == EOS), out

        return tf.while_loop(cond, body, (tf.constant(0), h, token, done, out))[-1]

    return decode
