"""Helpers shared by the PyTorch-based adapters (not an adapter: the name starts with _)."""

from __future__ import annotations

from typing import Any

from workloads import Batch

#: How the torch adapters feed ``--data loader``.
LOADER_KIND = "torch DataLoader, 2 worker processes, pinned memory on CUDA, non-blocking copies"


class CycleDataset:
    """A map-style dataset cycling over pre-made batches (DataLoader with batch_size=None)."""

    def __init__(self, batches: list[Batch]) -> None:
        self.batches = batches

    def __len__(self) -> int:
        return 1 << 40

    def __getitem__(self, index: int) -> Batch:
        return self.batches[index % len(self.batches)]


def data_loader(torch: Any, batches: list[Batch], cuda: bool) -> Any:
    return torch.utils.data.DataLoader(
        CycleDataset(batches),
        batch_size=None,
        num_workers=2,
        pin_memory=cuda,
        persistent_workers=True,
        prefetch_factor=4,
    )


#: How the torch adapters feed ``--data loader`` on the image workloads (workloads.images).
IMAGE_LOADER_KIND = (
    "torch DataLoader over a map-style dataset of encoded images (per-sample decode + augment), "
    "num_workers worker processes, prefetch_factor, persistent workers, pinned memory on CUDA"
)


class ImageSamples:
    """A map-style dataset over the image stream's global sample indices (it never ends)."""

    def __init__(self, images: Any) -> None:
        self.images = images

    def __len__(self) -> int:
        return 1 << 40

    def __getitem__(self, g: int) -> Batch:
        return self.images.sample(g)


def image_loader(torch: Any, images: Any, settings: Any, cuda: bool) -> tuple[Any, dict[str, Any]]:
    """The DataLoader a torch user writes for ``images`` (workloads.images.ImageDataset), and its
    settings as the record keeps them. ``workers=0``: samples made in the training process."""
    from workloads.images import PipelineSkip

    if settings.workers < 0:
        raise PipelineSkip("torch DataLoader has no AUTOTUNE: num_workers is a number")
    workers = settings.workers
    knobs = {
        "batch_size": images.batch_size,
        "num_workers": workers,
        "pin_memory": cuda,
        "persistent_workers": workers > 0,
        # prefetch_factor is per worker and only exists with workers
        "prefetch_factor": max(settings.prefetch, 1) if workers else None,
    }
    return torch.utils.data.DataLoader(ImageSamples(images), shuffle=False, **knobs), knobs
