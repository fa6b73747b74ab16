"""The framework-free workload contract: a frozen spec plus NumPy init, data and reference.

A workload is a frozen dataclass. Its fields are the knobs a user may override from the CLI
(``--set batch_size=256``); :func:`override` parses and validates them. Everything a workload
produces is plain NumPy so that every adapter starts from identical numbers.
"""

from __future__ import annotations

import abc
import dataclasses
import math
import typing
from collections.abc import Mapping
from types import MappingProxyType
from typing import Any, ClassVar

import numpy as np

from workloads.arrays import Batch, Params

Kernel = tuple  # ("matmul", m, k, n) or ("conv3x3", b, h, w, cin, cout, role): see Workload.kernels


def kernel_flops(kernel: Kernel) -> int:
    """Multiply-adds x 2 of one kernel (every role of a 3x3 convolution does the forward's work)."""
    if kernel[0] == "matmul":
        _, m, k, n = kernel
        return 2 * m * k * n
    _, b, h, w, cin, cout, _role = kernel
    return 2 * b * h * w * 9 * cin * cout


def dense_kernels(sizes: list[int], batch: int, first_input_grad: bool = False) -> list[tuple[Kernel, int]]:
    """A stack of dense layers' training matmuls: forward, weight gradient, and the input
    gradient for every layer but the first (unless its input is itself computed)."""
    out = []
    for i, (fan_in, fan_out) in enumerate(zip(sizes[:-1], sizes[1:], strict=True)):
        out += [(("matmul", batch, fan_in, fan_out), 1), (("matmul", fan_in, batch, fan_out), 1)]
        if i > 0 or first_input_grad:
            out.append((("matmul", batch, fan_out, fan_in), 1))
    return out


class SpecError(ValueError):
    """A bad workload name, field or value; the message names it and the valid choices."""


class Declared:
    """What the harness reads of every workload, with the value a workload that does not set it
    has. A plain base class, not dataclass fields: a subclass may make one of them a field
    (rnn-caption's ``task``, ``strategy``), and a workload that does not records no such field."""

    task: str = "train"
    """``train`` (a step trains) or another task (rnn-decode's ``decode``: a step infers)."""
    strategy: str = "exact"
    """The loop strategy of a variable-length workload; fixed-shape workloads are ``exact``."""
    strategies: ClassVar[tuple[str, ...]] = ()
    """The loop strategies a run plans for this workload when it trains (empty: none, fixed shapes)."""
    attention: str = "naive"
    """The attention kernel (the transformer's field); ``naive`` where a workload has no attention."""
    plan_axes: ClassVar[Mapping[str, tuple[str, ...]]] = MappingProxyType({})
    """Fields a run plans every value of unless ``--set`` fixes one (harness.running.plan.variants)."""


@dataclasses.dataclass(frozen=True)
class Workload(Declared, abc.ABC):
    """Base class of every workload spec.

    Subclasses set ``family`` (what adapters dispatch on) and implement the NumPy methods.
    Fields listed in ``fixed_fields`` describe identity and cannot be overridden.
    """

    family: ClassVar[str] = ""
    relu: ClassVar[bool] = False
    """True where the reference has ReLUs, whose derivative ``relu_tie`` can move."""
    fixed_fields: ClassVar[tuple[str, ...]] = ("name",)

    name: str
    batch_size: int = 32
    seed: int = 0
    optimizer: str = "sgd"
    learning_rate: float = 0.01
    num_batches: int = 16

    # --- contract -------------------------------------------------------------------------
    def validate(self) -> None:
        """Raise SpecError naming the field if a value is out of range."""
        from workloads.optim import OPTIMIZERS

        _positive(self, "batch_size")
        _positive(self, "num_batches")
        if self.seed < 0:
            raise SpecError(f"seed must be >= 0, got {self.seed}")
        if not (math.isfinite(self.learning_rate) and self.learning_rate > 0):
            raise SpecError(f"learning_rate must be a finite number > 0, got {self.learning_rate!r}")
        if self.optimizer not in OPTIMIZERS:
            raise SpecError(f"optimizer {self.optimizer!r} is not one of: {', '.join(OPTIMIZERS)}")

    @abc.abstractmethod
    def init_params(self) -> Params:
        """Deterministic float32 initial parameters in the canonical layout."""

    @abc.abstractmethod
    def batches(self) -> list[Batch]:
        """Deterministic synthetic training batches; step i trains on batch i % len(batches)."""

    @abc.abstractmethod
    def reference_loss_and_grads(self, params: Params, batch: Batch, relu_tie: float = 0.0) -> tuple[float, Params]:
        """NumPy forward and backward pass on one batch, in the parameters' dtype (float64 for
        the reference; float32 to measure how far float32 rounding alone moves the result).

        ``relu_tie``: ReLU's derivative is 1 where its input z > relu_tie * max|z| of that layer
        (0: the usual). An input within float32 rounding of zero may land on either side in a
        float32 framework; the conformance checks try +-a rounding's width to follow it."""

    def reference_train(
        self,
        params: Params,
        steps: int,
        dtype: type = np.float64,
        optimizer: Any = None,
        data: list[Batch] | None = None,
    ) -> tuple[list[float], list[Params]]:
        """NumPy reference training: the loss before each of ``steps`` updates and the
        parameters before the first and after every update (``steps + 1`` snapshots),
        starting from ``params`` and cycling through ``data`` (default ``batches()``).

        ``dtype`` is the arithmetic's precision (float64 for the reference; float32 to measure
        what float32 rounding alone does). ``optimizer`` (an object with ``apply(p, g)``, see
        workloads.optim) replaces the spec's own, for tests that train a deliberately wrong model."""
        from workloads import optim

        p: Params = {k: v.astype(dtype) for k, v in params.items()}
        data = data if data is not None else self.batches()
        opt = optimizer or optim.make(self.optimizer, self.learning_rate, p)
        losses, snapshots = [], [{k: v.copy() for k, v in p.items()}]
        for step in range(steps):
            loss, grads = self.reference_loss_and_grads(p, data[step % len(data)])
            losses.append(loss)
            opt.apply(p, grads)
            snapshots.append({k: v.copy() for k, v in p.items()})
        return losses, snapshots

    def inert_params(self) -> tuple[str, ...]:
        """Parameters no output depends on (their exact gradient is identically zero): float32
        rounding alone moves them under Adam, so conformance leaves them out of the per-tensor
        update check (the loss and the whole-model step still include them)."""
        return ()

    def flops(self, batch: Batch) -> int | None:
        """Useful floating-point operations of one training (or inference) step on ``batch``,
        or None where the workload states none. Counted analytically from the spec: matmul and
        convolution multiply-adds as 2 FLOPs each, element-wise work ignored, so the figure is
        a slight lower bound; padding a strategy adds is not counted, it is waste."""
        return None

    def kernels(self, batch: Batch) -> list[tuple[Kernel, int]] | None:
        """The step's matmuls and convolutions on ``batch``, each with how many times it runs,
        for the kernel floor (harness.measuring.floors); None where the workload states none. Each is
        ``("matmul", m, k, n)`` (an (m, k) @ (k, n) product) or ``("conv3x3", b, h, w, cin,
        cout, role)`` ('same' padding, NHWC; role ``forward``, ``input_grad`` or ``kernel_grad``).
        Their FLOPs add up to ``flops(batch)`` (kernel_flops; a test holds every workload to it)."""
        return None

    def steps_differ(self, batches: list[Batch]) -> bool:
        """Whether steps on ``batches`` differ in size, so that every timed block must hold whole
        passes to do the same work: by default, where their FLOPs differ."""
        return len({self.flops(b) for b in batches}) > 1

    def tiny(self) -> Workload | None:
        """The same step structure on tiny tensors (every width 1-3), for the dispatch floor: its
        step time is the framework's and adapter's overhead alone. None where there is none."""
        return None

    def tokens(self, batch: Batch) -> int | None:
        """Tokens one training step on ``batch`` processes, for workloads measured in tokens
        (sequence models); None for the others."""
        return None

    def param_count(self) -> int:
        return int(sum(p.size for p in self.init_params().values()))

    def as_dict(self) -> dict[str, Any]:
        d = dataclasses.asdict(self)
        d["family"] = self.family
        return d


def _positive(spec: Workload, field: str) -> None:
    value = getattr(spec, field)
    if value <= 0:
        raise SpecError(f"{field} must be > 0, got {value!r}")


def _parse_value(field: dataclasses.Field, hint: Any, raw: str) -> Any:
    origin = typing.get_origin(hint)
    try:
        if hint is int:
            return int(raw)
        if hint is float:
            return float(raw)
        if hint is str:
            return raw
        if origin is tuple:
            (item, *_rest) = typing.get_args(hint)
            parts = [p for p in raw.replace("x", ",").split(",") if p.strip()]
            return tuple(int(p) if item is int else float(p) for p in parts)
    except ValueError:
        pass
    raise SpecError(f"--set {field.name}={raw!r}: expected {_type_name(hint)}")


def _type_name(hint: Any) -> str:
    if typing.get_origin(hint) is tuple:
        return "a comma list of integers"
    return {int: "an integer", float: "a number", str: "a string"}.get(hint, str(hint))


def overridable_fields(spec: Workload) -> list[str]:
    return [f.name for f in dataclasses.fields(spec) if f.name not in spec.fixed_fields]


def override(spec: Workload, assignments: list[str]) -> Workload:
    """Apply ``field=value`` strings to a spec, validating names, types and ranges."""
    hints = typing.get_type_hints(type(spec))
    fields = {f.name: f for f in dataclasses.fields(spec)}
    changes: dict[str, Any] = {}
    for item in assignments:
        key, sep, raw = item.partition("=")
        key = key.strip()
        if not sep:
            raise SpecError(f"--set {item!r}: expected field=value")
        if key not in fields or key in spec.fixed_fields:
            valid = ", ".join(overridable_fields(spec))
            raise SpecError(f"unknown field {key!r} for workload {spec.name}; valid fields: {valid}")
        changes[key] = _parse_value(fields[key], hints[key], raw.strip())
    new = dataclasses.replace(spec, **changes)
    new.validate()
    for key, value in changes.items():  # NaN passes every "< x" check: a net under validate()
        if isinstance(value, float) and not math.isfinite(value):
            raise SpecError(f"{key} must be a finite number, got {value!r}")
    return new


class FixedForward(abc.ABC):
    """A workload family with a fixed-shape forward (mlp, cnn): the export task's parity reference."""

    @abc.abstractmethod
    def reference_logits(self, params: Params, x: np.ndarray) -> np.ndarray:
        """The model's forward pass (inference) in the parameters' dtype: logits for inputs ``x``."""
