"""tf.data image pipeline shared by the TensorFlow adapters (not an adapter: the name starts with _)."""

from __future__ import annotations

from typing import Any

import numpy as np

IMAGE_LOADER_KIND = (
    "tf.data: range -> map(tf.numpy_function(per-sample decode + augment), num_parallel_calls) "
    "-> batch -> prefetch (AUTOTUNE as workers=autotune); prefetch_to_device on GPU"
)


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
