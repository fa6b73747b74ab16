"""Keras's own data path for the image workloads, shared by the Keras adapters (not an adapter:
the name starts with _): a ``keras.utils.PyDataset`` read the way ``fit`` reads it."""

from __future__ import annotations

import atexit
from collections.abc import Iterator
from typing import Any

IMAGE_LOADER_KIND = (
    "keras.utils.PyDataset (per-sample decode + augment in __getitem__), workers with "
    "use_multiprocessing, max_queue_size = prefetch, read through fit's PyDatasetAdapter"
)


def image_batches(keras: Any, images: Any, settings: Any) -> tuple[Iterator[dict[str, Any]], dict[str, Any]]:
    """NumPy batches of ``images`` (workloads.images.ImageDataset) through a PyDataset, and its
    settings. ``workers=0``: no enqueuer, batches made on the training thread (as ``fit`` does
    with ``workers=0``); otherwise ``workers`` processes (``use_multiprocessing=True``)."""
    from keras.src.trainers.data_adapters.py_dataset_adapter import PyDatasetAdapter

    from workloads.images import PipelineSkip

    if settings.workers < 0:
        raise PipelineSkip("keras PyDataset has no AUTOTUNE: workers is a number")

    class ImageBatches(keras.utils.PyDataset):
        def __init__(self) -> None:
            super().__init__(
                workers=settings.workers,
                use_multiprocessing=settings.workers > 0,
                max_queue_size=max(settings.prefetch, 1),
            )

        @property
        def num_batches(self) -> None:
            return None  # infinite: the stream cycles over the epochs

        def __getitem__(self, k: int) -> dict[str, Any]:
            return images.batch(k)

    adapter = PyDatasetAdapter(ImageBatches(), shuffle=False)
    knobs = {
        "workers": settings.workers,
        "use_multiprocessing": settings.workers > 0,
        "max_queue_size": max(settings.prefetch, 1),
    }
    batches = adapter.get_numpy_iterator()
    # Closed while the interpreter is whole: finalised at shutdown instead, Keras's enqueuer
    # generator reports a spurious TypeError (its `except queue.Empty` runs on torn-down modules).
    atexit.register(batches.close)
    return batches, knobs
