"""The export task's optional protocol (harness.export, docs/export.md): a mixin, ``Exports``.

An adapter that ships its model inherits it before ``Adapter`` (``class TorchEager(Exports,
Adapter)``); the bench never calls these methods. An adapter without it takes no part in the
export task: its rows are skipped, with that reason. Called on a fresh adapter:
    export_reason(path, spec) -> None, or why this adapter cannot take spec through path
    forward(spec, params, device, options) -> the in-process forward (NumPy in, NumPy out)
    export(path, spec, params, device, directory) -> the artifact written under directory
    serve(path, artifact, device, threads) (classmethod, in a fresh process) -> its served forward
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any, ClassVar

from adapters.base import Options
from workloads import Params, Workload

#: Workload families with a fixed-shape forward, the ones the export task ships.
EXPORT_FAMILIES = ("mlp", "cnn")
#: The export task's row of an adapter's own forward in the running process (no artifact).
IN_PROCESS = "in-process"
#: A served or in-process forward: a NumPy batch of inputs in, the NumPy logits out. Returning
#: host memory is its sync: the copy back waits for the device (the harness's clock relies on it).
Forward = Callable[[Any], Any]


class Exports:
    """Mixin of an adapter that takes part in the export task; the adapter's own ``name`` is
    used in the reasons."""

    name: ClassVar[str]  # the Adapter's, declared here for the type checker

    export_paths: ClassVar[tuple[str, ...]] = ()
    """The paths from canonical parameters to a saved artifact that this adapter takes
    (``torch-export``, ``onnx``, ... docs/export.md). Each is served in a fresh process by
    ``serve``; a path one adapter of a framework declares is left out of its other modes."""
    in_process_forward: ClassVar[bool] = False
    """Whether ``forward`` is implemented: the export table's in-process row of this adapter."""

    def export_reason(self, path: str, spec: Workload) -> str | None:
        """None if this adapter can take ``spec`` through export ``path`` (or IN_PROCESS: its own
        forward), else the reason, which makes the cell ``skipped``. Override to add reasons
        (a converter not installed), calling this first."""
        if spec.family not in EXPORT_FAMILIES:
            return f"export covers the fixed-shape forward families ({', '.join(EXPORT_FAMILIES)}), not {spec.family!r}"
        if path == IN_PROCESS:
            return None if self.in_process_forward else f"{self.name} has no in-process forward"
        if path not in self.export_paths:
            have = ", ".join(self.export_paths) or "none"
            return f"{self.name} has no export path {path!r} (it has: {have})"
        return None

    def forward(self, spec: Workload, params: Params, device: str, options: Options) -> Forward:
        """The model's forward as this adapter runs it in process (eager, or compiled in its own
        mode), built from canonical parameters: a ``Forward``. Compiles lazily on first call."""
        raise TypeError(f"{self.name} has no in-process forward")

    def export(self, path: str, spec: Workload, params: Params, device: str, directory: Path) -> Path:
        """Ship the model built from canonical float32 ``params`` through ``path``: write its
        artifact (a file or a folder) under ``directory``, for ``device``, and return it. The
        artifact takes inputs in the workload's own layout (NHWC images) with any batch size."""
        raise TypeError(f"{self.name} has no export path {path!r}")

    @classmethod
    def serve(cls, path: str, artifact: Path, device: str, threads: int) -> Forward:
        """In a fresh process (nothing of the framework imported yet): import the runtime, load
        ``artifact`` as ``path`` wrote it, place it on ``device`` with ``threads`` intra-op
        threads, and return its ``Forward``. Raises DeviceUnavailable where the runtime cannot."""
        raise TypeError(f"{cls.name} cannot serve export path {path!r}")
