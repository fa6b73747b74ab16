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
