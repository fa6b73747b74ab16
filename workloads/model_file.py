"""A user's Keras 3 model file as a workload (``python -m harness bench --model my_model.py``).

The file defines (docs/your-keras-model.md):

- ``build()``: an uncompiled ``keras.Model`` (functional, sequential or subclassed), written with
  ``keras.layers`` and ``keras.ops`` so that it runs on every backend;
- ``data(batch_size, seed)``: one batch as NumPy ``(inputs, targets)``, the same for the same
  arguments, or a generator of such batches (the run takes its first ``num_batches``). Inputs
  and targets are each an array, a list of arrays (several inputs or outputs, in the model's
  order) or a dict of arrays by input or output name; shapes may vary from batch to batch (a
  dynamic model: every block then holds whole passes, as for the caption workloads);
- optionally ``LOSS`` (a name ``keras.losses.get`` knows or a Keras loss; a list or dict of them
  for several outputs; default ``"sparse_categorical_crossentropy"``), ``OPTIMIZER``
  (``"sgd"``, ``"adam"`` or ``"adamw"``; default ``"adam"``), ``LEARNING_RATE`` (default 1e-3)
  and ``BATCH_SIZE`` (default 32).

Nothing here imports Keras or the file into the process that asks. Everything the harness needs
from the file (its initial weights, its batches, its settings, its step's kernels:
workloads.model_flops) comes from one run of it in a child process on Keras's NumPy backend
(``describe``, running workloads.model_file_child), which trains nothing and touches no GPU. The
initial weights are Keras's own initialisers drawn there with the spec's seed, so every backend
starts from the same numbers. The result is cached by the file's content and the spec's
settings. A file that does not import, lacks ``build`` or ``data``, builds no model, or gives
data the model rejects is a SpecError with the child's one line. Two faults are per backend
instead: a fault raised in one of the file's own layers (one calling a framework's API directly)
sends the description to each Keras framework backend in turn, and the backends it fails on skip
their cells with it (``backend_fault``); a model too large to build is described without weights
(``too_large``), and its cells fail (harness.checks.backends).
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from workloads.spec import Batch, Kernel, Params, SpecError, Workload, _positive, kernel_flops

FAMILY = "keras-model"
REPO = Path(__file__).resolve().parents[1]
#: Seconds the describing child may take (a Keras import and one forward pass on NumPy).
DESCRIBE_TIMEOUT_S = 300
DEFAULTS: dict[str, Any] = {
    "LOSS": "sparse_categorical_crossentropy",
    "OPTIMIZER": "adam",
    "LEARNING_RATE": 1e-3,
    "BATCH_SIZE": 32,
}


@dataclasses.dataclass(frozen=True)
class ModelFile(Workload):
    """The workload of one model file; ``name`` and ``path`` are the file's path as the run names it
    (``canonical_name``: relative to the repository where it lies inside it, so records and
    reports read the same on every machine)."""

    family = FAMILY
    fixed_fields = ("name", "path")

    path: str = ""
    optimizer: str = "adam"
    learning_rate: float = 1e-3
    num_batches: int = 8
    loss: str = DEFAULTS["LOSS"]

    def validate(self) -> None:
        super().validate()
        _positive(self, "num_batches")
        self.described()  # the file's own faults, as one line

    def file(self) -> Path:
        """The file: ``path`` as the run names it (relative to the repository, or absolute)."""
        return _located(self.path)

    def described(self) -> dict[str, Any]:
        """What ``describe`` found: ``{"params": {...}, "batches": [...], "settings": {...}}``;
        looked up once per spec and process (a Keras adapter's step reads the batch structure)."""
        return _described(self)

    def init_params(self) -> Params:
        return dict(self.described()["params"])

    def batches(self) -> list[Batch]:
        return list(self.described()["batches"])

    def reference_loss_and_grads(self, params: Params, batch: Batch, relu_tie: float = 0.0) -> tuple[float, Params]:
        raise SpecError(
            f"{self.name}: a model file has no NumPy reference; its backends are held to each other "
            "(harness.checks.backends), not to one"
        )

    def module(self) -> Any:
        """The file, imported in this process (a Keras adapter's worker, whose backend is set)."""
        return _import(self.file())

    @functools.cached_property
    def _structure(self) -> dict[str, Any]:
        # Read once per spec object: inputs() and targets() run inside every timed Keras step.
        return self.described()["settings"]["structure"]

    def inputs(self, batch: Mapping[str, Any]) -> Any:
        """A batch's (placed or NumPy) inputs as ``data()`` gave them: an array, a list or a dict."""
        return _structured(batch, "x", self._structure["x"])

    def targets(self, batch: Mapping[str, Any]) -> Any:
        """A batch's targets as ``data()`` gave them: an array, a list or a dict."""
        return _structured(batch, "y", self._structure["y"])

    def too_large(self) -> str | None:
        """Why the model cannot be built here (it asks for more memory than the machine has), or None."""
        return self.described()["settings"].get("too_large")

    def backend_fault(self, backend: str) -> str | None:
        """Why the model does not build on Keras backend ``backend`` ("torch", "jax", "tensorflow")
        where it does on another (a layer calling one framework's API directly), or None."""
        return self.described()["settings"].get("backend_faults", {}).get(backend)

    def kernels(self, batch: Batch) -> list[tuple[Kernel, int]] | None:
        """Counted from one forward pass on the description's NumPy backend (workloads.model_flops);
        None where the model was described on another backend (no count there)."""
        found = self.described()["settings"].get("kernels", {}).get(_signature(batch))
        return [(tuple(kernel), int(count)) for kernel, count in found] if found else None

    def flops(self, batch: Batch) -> int | None:
        kernels = self.kernels(batch)
        return sum(kernel_flops(k) * count for k, count in kernels) if kernels else None

    def steps_differ(self, batches: list[Batch]) -> bool:
        """Where the batches' shapes differ too (a dynamic model described without a FLOP count)."""
        return super().steps_differ(batches) or len({_signature(b) for b in batches}) > 1

    def sample_inputs(self, rows: int = 2) -> Any:
        """The first ``rows`` rows of the first batch's inputs: what builds the model (a
        subclassed model has no weights before its first call)."""
        return _rows(self._structure, self.batches()[0], rows)


@functools.cache
def _described(spec: ModelFile) -> dict[str, Any]:
    return _describe(spec.file(), spec.batch_size, spec.seed, spec.num_batches)


def from_file(path: str) -> ModelFile:
    """The spec of ``path`` with the file's own settings (``OPTIMIZER`` ...); SpecError names a
    missing file or any fault of it."""
    file = _located(path)
    if not file.is_file():
        raise SpecError(f"model file {path!r} does not exist")
    settings = _describe(file, None, 0, 1)["settings"]
    spec = ModelFile(
        name=path,
        path=path,
        batch_size=int(settings["BATCH_SIZE"]),
        optimizer=str(settings["OPTIMIZER"]),
        learning_rate=float(settings["LEARNING_RATE"]),
        loss=str(settings["LOSS"]),
    )
    spec.validate()
    return spec


def is_model_file(name: str) -> bool:
    return name.endswith(".py")


def canonical_name(path: str) -> str:
    """``path`` (relative to the working directory) as a run names it: relative to the repository
    where it lies inside it (workers run from there, and reports stay the same on every machine),
    else absolute."""
    file = Path(path).resolve()
    return str(file.relative_to(REPO)) if file.is_relative_to(REPO) else str(file)


def _located(path: str) -> Path:
    return Path(path) if Path(path).is_absolute() else REPO / path


# --- describing: the child process and its cache ----------------------------------------------


def _cache_dir(file: Path, batch_size: int | None, seed: int, num_batches: int) -> Path:
    """The description's folder, keyed by the file, the settings and the code that describes it (a
    description written by an older harness is never read)."""
    describing = b"".join(
        Path(__file__).with_name(m).read_bytes() for m in ("model_file.py", "model_file_child.py", "model_flops.py")
    )
    digest = hashlib.sha256(file.read_bytes() + describing + repr((batch_size, seed, num_batches)).encode())
    key = digest.hexdigest()[:24]
    root = Path(os.environ.get("DLCOMPARE_CACHE", Path(tempfile.gettempdir()) / "dlcompare-model-files"))
    return root / key


def _describe(file: Path, batch_size: int | None, seed: int, num_batches: int) -> dict[str, Any]:
    if not file.is_file():
        raise SpecError(f"model file {str(file)!r} does not exist")
    out = _cache_dir(file, batch_size, seed, num_batches)
    if not (out / "settings.json").is_file():
        args = [str(file), str(batch_size or 0), str(seed), str(num_batches)]
        code, said = _run_child(args, out, "numpy")
        if code == 3:  # a fault in one of the file's layers: the framework backends may not have it
            _describe_on_frameworks(args, out, said)
        elif code:
            raise SpecError(said)
    return _load(out, num_batches if batch_size else 0)


#: Keras's framework backends, by the module each needs, in the order a description tries them.
FRAMEWORK_BACKENDS = {"torch": "torch", "jax": "jax", "tensorflow": "tensorflow"}


def _describe_on_frameworks(args: list[str], out: Path, numpy_said: str) -> None:
    """Describe on every framework backend this interpreter has; the first that succeeds gives the
    description, which records the others' faults (``backend_faults``: their cells are skipped with
    it). None succeeding: the NumPy backend's fault."""
    faults, chosen, folder = {"numpy": numpy_said}, None, out
    for backend, module in FRAMEWORK_BACKENDS.items():
        if importlib.util.find_spec(module) is None:
            continue
        tried = out.with_name(f"{out.name}-{backend}")
        code, said = _run_child(args, tried, backend)
        if code:
            faults[backend] = said
        elif chosen is None:
            chosen, folder = backend, tried
    if chosen is None:
        raise SpecError(numpy_said)
    settings = json.loads((folder / "settings.json").read_text())
    settings |= {"described_on": chosen, "backend_faults": faults}
    out.mkdir(parents=True, exist_ok=True)
    for f in folder.glob("*.npz"):
        shutil.copy(f, out / f.name)
    (out / "settings.json").write_text(json.dumps(settings))


CHILD = "import sys; from workloads.model_file_child import child_main; child_main(sys.argv[1:])"


def _run_child(args: list[str], out: Path, backend: str) -> tuple[int, str]:
    """The describing child on one Keras backend, writing into ``out``: its exit status and one line."""
    out.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ, KERAS_BACKEND=backend, CUDA_VISIBLE_DEVICES="")
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))
    try:
        proc = subprocess.run(
            [sys.executable, "-c", CHILD, *args, str(out)],
            env=env,
            capture_output=True,
            text=True,
            timeout=DESCRIBE_TIMEOUT_S,
        )
    except subprocess.TimeoutExpired:
        return 1, f"model file {args[0]!r}: no description within {DESCRIBE_TIMEOUT_S} s"
    if proc.returncode in (2, 3):
        return proc.returncode, proc.stdout.strip()  # the child's one line
    return proc.returncode, _one_line((proc.stderr.strip().splitlines() or [f"exit {proc.returncode}"])[-1])


@functools.cache
def _load(out: Path, num_batches: int) -> dict[str, Any]:
    """A description read once per process (a worker asks for the weights at every snapshot)."""
    settings = json.loads((out / "settings.json").read_text())
    with np.load(out / "params.npz") as f:
        params = {k: f[k] for k in settings["param_order"]}
    batches = []
    for i in range(num_batches):
        with np.load(out / f"batch{i}.npz") as f:
            batches.append({k: f[k] for k in f.files})
    return {"params": params, "batches": batches, "settings": settings}


# --- shared with the child (workloads.model_file_child imports these; nothing here imports it) ---


def _one_line(text: str, limit: int = 600) -> str:
    """Keras's multi-line, coloured exception text as one plain line."""
    plain = re.sub(r"\x1b\[[0-9;]*m", "", text)
    flat = " ".join(plain.split())
    return flat if len(flat) <= limit else flat[: limit - 3] + "..."


def _fault(exc: BaseException) -> str:
    """The exception in one line, without the arguments Keras appends to a layer's error (a
    tensor's repr per argument: the layer and the error are the news)."""
    return _one_line(f"{type(exc).__name__}: {exc}".split("Arguments received by", 1)[0])


def _import(file: Path) -> Any:
    spec = importlib.util.spec_from_file_location(f"dlcompare_model_{file.stem}", file)
    if spec is None or spec.loader is None:
        raise SpecError(f"model file {str(file)!r} is not a Python module")
    module = importlib.util.module_from_spec(spec)
    try:
        spec.loader.exec_module(module)
    except Exception as exc:  # noqa: BLE001 - whatever the file raises is its fault, told in one line
        raise SpecError(f"model file {str(file)!r} does not import: {_fault(exc)}") from exc
    return module


def _signature(batch: Mapping[str, Any]) -> str:
    """A batch's array names and shapes, which its step's kernels depend on."""
    return json.dumps(sorted((k, list(np.shape(v))) for k, v in batch.items()))


def _structured(batch: Mapping[str, Any], side: str, structure: Any) -> Any:
    """The inverse of ``model_file_child._flat`` over a batch's entries (NumPy or placed on a device)."""
    if structure is None:
        return batch[side]
    if "names" in structure:
        return {k: batch[f"{side}:{k}"] for k in structure["names"]}
    return [batch[f"{side}:{i}"] for i in range(structure["count"])]


def _rows(structure: dict, batch: Mapping[str, np.ndarray], n: int) -> Any:
    """The first ``n`` rows of a batch's inputs, in their structure."""
    return _structured({k: v[:n] for k, v in batch.items()}, "x", structure["x"])
