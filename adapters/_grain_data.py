"""Grain image pipeline feeding ``jax.device_put``, shared by the JAX and Flax adapters (not an
adapter: the name starts with _)."""

from __future__ import annotations

import collections
from collections.abc import Iterator
from typing import Any

IMAGE_LOADER_KIND = (
    "Grain: MapDataset.range -> map(per-sample decode + augment) -> batch -> to_iter_dataset "
    "-> mp_prefetch(num_workers worker processes), double-buffered jax.device_put"
)


def image_stream(jax: Any, images: Any, settings: Any, device: Any) -> tuple[Iterator[Any], dict[str, Any]]:
    """Placed batches of ``images`` (workloads.images.ImageDataset) through Grain, as the JAX
    ecosystem documents it, and the settings as the record keeps them. ``workers=0``: no
    worker processes, the samples made on the consuming thread."""
    from workloads.images import PipelineSkip

    try:
        import grain
        from absl import flags
    except ImportError as exc:
        raise PipelineSkip(f"{exc.name} not installed: pip install 'dlcompare[jax]'") from None
    if not flags.FLAGS.is_parsed():
        # Grain reads absl flags and expects an absl.app program; a plain script marks the
        # defaults as parsed, else its worker processes fail on the first flag they read.
        flags.FLAGS.mark_as_parsed()

    if settings.workers < 0:
        raise PipelineSkip("Grain has no AUTOTUNE for its worker processes: num_workers is a number")
    dataset = grain.MapDataset.range(0, 1 << 40).map(images.sample).batch(images.batch_size, drop_remainder=True)
    # Threads reading ahead inside each process: none, so the worker processes are the only
    # parallelism (workers=0 is the training thread alone).
    read = grain.ReadOptions(num_threads=0, prefetch_buffer_size=0)
    stream = dataset.to_iter_dataset(read)
    if settings.workers:
        options = grain.MultiprocessingOptions(
            num_workers=settings.workers, per_worker_buffer_size=max(settings.prefetch, 1)
        )
        stream = stream.mp_prefetch(options)
    knobs = {
        "num_workers": settings.workers,
        "per_worker_buffer_size": max(settings.prefetch, 1) if settings.workers else None,
        "read_threads": 0,
        "device_put_ahead": 2,
    }

    def placed() -> Iterator[Any]:
        source = iter(stream)
        ahead = collections.deque(jax.device_put(next(source), device) for _ in range(2))
        while True:
            ahead.append(jax.device_put(next(source), device))
            yield ahead.popleft()

    return placed(), knobs
