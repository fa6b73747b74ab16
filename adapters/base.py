"""The adapter boundary: the few methods through which the harness drives a framework.

The harness owns the clock; an adapter owns its framework. Adapter modules must not import
their framework at module level (discovery and ``harness list`` import every adapter module);
import it inside the methods instead.

Lifecycle in a worker process, one adapter instance per cell:
    worker_env(threads, device) -> environment variables, set before the process starts
    supports(spec)         -> None, or the reason this adapter cannot run the spec
    resolve_device(device) -> "cpu" / "cuda" / a plugin's device (harness.running.devices); raises
                              DeviceUnavailable with the framework's reason
    setup(spec, params, device, options)   build the model from canonical NumPy parameters
    to_device(batch)       -> framework batch; must return only once the data is placed
    train_step(batch)      -> a loss handle; may return before the device finishes (async)
    infer_step(batch)      -> an output handle, for inference workloads (rnn-decode)
    sync(handle)           -> float; blocks until the step behind it is done (a lazy framework
                              evaluates the updated parameters and optimiser state too): the
                              loss, or for inference a finite summary of the outputs
    fetch(handle)          -> the outputs of infer_step as a NumPy array (parity checks)
    loader(batches)        -> the framework's native input pipeline (``--data loader``)
    image_loader(images, settings) -> the same for the image workloads: per-sample decode and
                              augmentation (workloads.images), with its settings as recorded
    device_memory_peak()   -> peak device bytes, where the framework reports them
    params()               -> canonical NumPy parameters (for parity checks)
    compile_stats()        -> trace/compile counters the framework exposes (may be empty)
    build_info()           -> the framework's build (CUDA/cuDNN or CPU-only) and the GPUs it sees
    device_busy()          -> after sync: whether the device still has queued work (sync check)

The export task's methods are an optional mixin: adapters/exporting.py (``Exports``). A plugin's
profiler, idiomatic script, kernels and devices are entry points beside its adapters, not part of
this contract (adapters/__init__.py, HOOK_GROUPS).
"""

from __future__ import annotations

import abc
import importlib.util
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, ClassVar

from workloads import Batch, Params, Workload

PRECISIONS = ("fp32", "tf32", "bf16")


def threads_env(threads: int) -> dict[str, str]:
    """OpenMP/MKL pool sizes: the base of every adapter's ``worker_env`` (``kit.threads_env``)."""
    return {"OMP_NUM_THREADS": str(threads), "MKL_NUM_THREADS": str(threads)}


@dataclass(frozen=True)
class Options:
    """Run settings every adapter applies the same way."""

    threads: int
    """Intra-op threads on CPU, the same for every framework."""
    precision: str = "fp32"
    """``fp32``: TF32 off everywhere (the default); ``tf32``: TF32 matmuls/convolutions on;
    ``bf16``: mixed precision, float32 master weights and optimiser state, bfloat16 compute
    in the training step's forward and backward (``adapters.kit``'s mixed-precision section)."""

    @property
    def tf32(self) -> bool:
        return self.precision == "tf32"

    @property
    def bf16(self) -> bool:
        return self.precision == "bf16"


class DeviceUnavailable(RuntimeError):
    """The requested device is not usable by this framework; the message says why."""


class Adapter(abc.ABC):
    name: ClassVar[str]
    """Unique adapter name, e.g. ``torch-eager``."""
    framework: ClassVar[str]
    """Framework family, e.g. ``torch``; ``FRAMEWORK=torch`` selects every torch adapter."""
    graph: ClassVar[str]
    """``dynamic`` (eager, graph rebuilt every step) or ``static`` (traced once, compiled)."""
    requires: ClassVar[tuple[str, ...]]
    """Importable module names this adapter needs (``env.json`` lists their packages)."""
    environment: ClassVar[str | None] = None
    """The framework family whose environment holds what ``requires`` names, where it is not
    ``framework``'s (keras-tf: "tensorflow", whose GPU variants' .venv-tf holds Keras too)."""
    extra: ClassVar[str | None] = None
    """The pip extra of this project that installs them (built-in adapters)."""
    install_hint: ClassVar[str | None] = None
    """The command that installs what ``requires`` names, shown when a module is missing. A
    built-in adapter may leave it None (then ``pip install 'dlcompare[<extra>]'``); an adapter
    from another package should name its own, e.g. ``pip install 'my-package[flax]'``."""
    families: ClassVar[tuple[str, ...]] = ("mlp", "cnn", "rnn-caption")
    """Workload families this adapter implements."""
    loader_kind: ClassVar[str | None] = None
    """The native input pipeline behind ``loader`` (e.g. ``tf.data with prefetch``); None
    when the adapter has none, which makes ``--data loader`` a skipped cell."""
    image_loader_kind: ClassVar[str | None] = None
    """The input pipeline behind ``image_loader`` (e.g. ``torch DataLoader ...``), named in the
    record; None when the adapter has none (``--data loader`` on image workloads is skipped)."""
    graph_loop: ClassVar[str | None] = None
    """How the adapter runs the rnn-caption ``graph-loop`` strategy (e.g. ``tf.while_loop``);
    None when it has no loop inside a graph, which makes that strategy a skipped cell."""
    precisions: ClassVar[tuple[str, ...]] = ("fp32", "tf32")
    """The precisions ``setup`` applies (PRECISIONS); a cell in another is skipped. Add ``bf16``
    only with a mixed-precision mechanism (``Options.bf16``, adapters.kit), never to run float32
    under a bf16 label."""

    def precision_reason(self, precision: str) -> str | None:
        """None if this adapter runs ``precision``, else the reason (the cell is skipped)."""
        if precision in self.precisions:
            return None
        return f"{self.name} has no {precision} mechanism (it runs {', '.join(self.precisions)})"

    @classmethod
    def unavailable_reason(cls) -> str | None:
        """None if the framework can be imported, else the reason with the install command."""
        missing = [m for m in cls.requires if importlib.util.find_spec(m) is None]
        if not missing:
            return None
        if cls.install_hint:
            hint = cls.install_hint
        elif cls.__module__.startswith("adapters.") and cls.extra:
            hint = f"pip install 'dlcompare[{cls.extra}]'"
        else:  # a plugin that names no command: dlcompare's extras would be the wrong advice
            hint = f"install the package that provides it ({cls.__module__}.{cls.__name__} sets no install_hint)"
        return f"{', '.join(missing)} not installed: {hint}"

    @classmethod
    def worker_env(cls, threads: int, device: str = "cpu") -> dict[str, str]:
        """Environment for the worker process, applied before the framework is imported:
        thread-pool sizes and backend/platform selection that a framework reads only at
        start-up. ``device`` is the cell's requested device ("cpu", "cuda" or "auto")."""
        return threads_env(threads)

    def supports(self, spec: Workload) -> str | None:
        """None if this adapter can run ``spec``, else the reason (the cell is skipped)."""
        if spec.family not in self.families:
            return f"{self.name} does not implement workload family {spec.family!r}"
        if getattr(spec, "task", "train") != "train" and type(self).infer_step is Adapter.infer_step:
            return f"{self.name} has no inference step (infer_step), which {spec.name} needs"
        if getattr(spec, "strategy", None) == "graph-loop" and getattr(spec, "task", "train") == "train":
            if self.graph_loop is None:
                return f"{self.name} has no loop inside a graph for the caption decoder; graph-loop does not apply"
        return None

    @abc.abstractmethod
    def version(self) -> dict[str, str]:
        """Versions of the framework packages in use, e.g. {"torch": "2.13.0"}."""

    @abc.abstractmethod
    def resolve_device(self, device: str) -> str:
        """Map "cpu", "cuda", "auto" or a device a plugin names to the device this cell runs on
        ("cpu", "cuda" or that name); raise DeviceUnavailable for one the framework cannot use."""

    @abc.abstractmethod
    def setup(self, spec: Workload, params: Params, device: str, options: Options) -> None:
        """Build model and optimiser state from the canonical parameters on ``device``, with
        ``options.threads`` intra-op threads and TF32 as ``options.tf32`` says."""

    @abc.abstractmethod
    def to_device(self, batch: Batch) -> Any:
        """Place one batch on the device; synchronous."""

    @abc.abstractmethod
    def train_step(self, batch: Any) -> Any:
        """One optimiser step on a placed batch; returns a handle to the pre-update loss."""

    def infer_step(self, batch: Any) -> Any:
        """One inference step (greedy decode) on a placed batch; returns an output handle.
        Adapters that implement inference workloads override it and accept them in supports."""
        raise TypeError(f"{self.name} has no inference step")

    @abc.abstractmethod
    def sync(self, handle: Any) -> float:
        """Block until the step behind ``handle`` is complete, and every step issued before it,
        and return its loss (or, for inference, a finite summary of its outputs). A lazy framework
        evaluates the step's updated parameters and optimiser state with the loss: the loss is
        computed before the update, so evaluating it alone leaves the update unrun."""

    def fetch(self, handle: Any) -> Any:
        """The outputs behind an ``infer_step`` handle as a NumPy array: for greedy decoding,
        (batch, max_len) integer tokens with PAD after each caption's EOS (``reference_decode``'s)."""
        import numpy as np

        return np.asarray(handle)

    @abc.abstractmethod
    def params(self) -> Params:
        """Current parameters as float32 NumPy arrays in the workload's canonical layout."""

    def loader(self, batches: list[Batch]) -> Iterator[Any] | None:
        """The framework's native input pipeline, as its users write it, yielding placed
        batches in order and cycling forever; None if the adapter has none (skipped cell)."""
        return None

    def image_loader(self, images: Any, settings: Any) -> tuple[Iterator[Any], dict[str, Any]] | None:
        """The framework's own image pipeline as its users write it over ``images``
        (workloads.images.ImageDataset: ``sample(g)`` is one decoded, augmented sample, batch
        ``k`` is samples ``k*batch_size`` onwards, in order), tuned by ``settings``
        (workloads.images.PipelineSettings): placed batches cycling forever, and the knobs it
        set as the record keeps them. None if it has none; raises workloads.images.PipelineSkip
        for a setting it has no counterpart for (both skip the cell)."""
        return None

    def device_memory_peak(self) -> int | None:
        """Peak bytes the framework allocated on the device; None where it cannot say (CPU)."""
        return None

    def compile_stats(self) -> dict[str, Any]:
        """Trace/compile counters and seconds from the framework's own instrumentation."""
        return {}

    def settings(self) -> dict[str, Any]:
        """Execution settings worth recording (precision, jit flags, thread counts)."""
        return {}

    def build_info(self) -> dict[str, Any]:
        """The installed build and what it sees, without ``setup``: ``cuda`` (the CUDA version
        it was built for, None for a CPU-only build), ``cudnn``, ``gpus`` (device names) and
        ``error`` (the framework's own message when a CUDA build cannot start). Empty when the
        adapter cannot tell; the harness then reports the device error as it came."""
        return {}

    def device_busy(self) -> bool | None:
        """Called right after ``sync`` on a GPU: True if the device still has queued work (the
        sync did not wait for the step), False if idle, None where the framework cannot tell."""
        return None


def no_cuda(framework: str, why: str | None = None) -> DeviceUnavailable:
    return DeviceUnavailable(f"no CUDA device visible to {framework}" + (f": {why}" if why else ""))


def pick_device(device: str, cuda_visible: bool, framework: str, why: str | None = None) -> str:
    """Shared device resolution: "auto" falls back to CPU, "cuda" requires a GPU; ``why`` is the
    framework's own reason when it sees none."""
    if device == "cpu":
        return "cpu"
    if cuda_visible:
        return "cuda"
    if device == "auto":
        return "cpu"
    raise no_cuda(framework, why)
