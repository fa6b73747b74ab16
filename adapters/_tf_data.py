"""tf.data pipelines shared by the TensorFlow-based adapters (not an adapter: the name starts
with _): batches from memory, and the image pipeline."""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from typing import Any

import numpy as np

LOADER_KIND = "tf.data (from_tensor_slices, or from_generator for ragged lengths) with prefetch"
IMAGE_LOADER_KIND = (
    "tf.data: range -> map(tf.numpy_function(per-sample decode + augment), num_parallel_calls) "
    "-> batch -> prefetch (AUTOTUNE as workers=autotune); prefetch_to_device on GPU"
)


def widen(batch: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Integer arrays as int64, others as they are: TensorFlow keeps int32 tensors placed on a
    GPU in host memory, so int32 labels would never really be on the device."""
    return {k: v.astype(np.int64) if v.dtype.kind in "iu" else v for k, v in batch.items()}


def place(tf: Any, batch: dict[str, np.ndarray], device: str) -> dict[str, Any]:
    """``batch`` on ``device`` ("/CPU:0" or "/GPU:0"), integers widened; on a GPU, returned once
    the copies are done."""
    with tf.device(device):
        placed = {k: tf.identity(v) for k, v in widen(batch).items()}
    if device != "/CPU:0":
        tf.test.experimental.sync_devices()
    return placed


def batch_iterator(tf: Any, batches: list[dict[str, np.ndarray]], device: str) -> Iterator[Any]:
    """The spec's batches cycled through tf.data with prefetch (to the device on a GPU):
    stacked slices where every batch has one shape, a generator where lengths vary (captions)."""
    batches = [widen(b) for b in batches]
    if all(b[k].shape == batches[0][k].shape for b in batches for k in b):
        stacked = {k: np.stack([b[k] for b in batches]) for k in batches[0]}
        dataset = tf.data.Dataset.from_tensor_slices(stacked).repeat()
    else:
        signature = {k: tf.TensorSpec([None] * v.ndim, tf.as_dtype(v.dtype)) for k, v in batches[0].items()}
        dataset = tf.data.Dataset.from_generator(lambda: itertools.cycle(batches), output_signature=signature)
    dataset = dataset.prefetch(tf.data.AUTOTUNE)
    if device != "/CPU:0":
        dataset = dataset.apply(tf.data.experimental.prefetch_to_device(device))
    return iter(dataset)


def image_dataset(tf: Any, images: Any, settings: Any) -> tuple[Any, dict[str, Any]]:
    """The tf.data pipeline over ``images`` (workloads.images.ImageDataset) and its settings.

    The per-sample work is the shared Python function (Pillow decode and NumPy augmentation,
    wrapped in ``tf.numpy_function``), so the batches are the other frameworks' bit for bit;
    tf.data runs it on ``num_parallel_calls`` threads of its own pool (``workers=0``: a
    sequential map; tf.data always runs in its own threads, never on the caller's)."""
    workers = settings.workers
    parallel = None if workers == 0 else tf.data.AUTOTUNE if workers < 0 else workers

    def load(g: np.int64) -> tuple[np.ndarray, np.ndarray]:
        s = images.sample(int(g))
        return s["x"], s["y"].astype(np.int64)  # the TF adapters take integers as int64

    def to_sample(g: Any) -> dict[str, Any]:
        x, y = tf.numpy_function(load, [g], (tf.float32, tf.int64), stateful=False)
        x.set_shape(images.shape)
        y.set_shape(())
        return {"x": x, "y": y}

    order = {"deterministic": True} if parallel else {}  # sequential maps are ordered anyway
    dataset = tf.data.Dataset.range(1 << 62).map(to_sample, num_parallel_calls=parallel, **order)
    dataset = dataset.batch(images.batch_size, drop_remainder=True)
    if settings.prefetch:
        dataset = dataset.prefetch(settings.prefetch)
    knobs = {
        "num_parallel_calls": "AUTOTUNE" if workers < 0 else parallel,
        "prefetch": settings.prefetch,
        "deterministic": True,
    }
    return dataset, knobs
