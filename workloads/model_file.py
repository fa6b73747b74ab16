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

Nothing here imports Keras or the file into the process that asks. Everything the harness
needs from the file (its initial weights, its batches, its settings, its step's kernels:
workloads.model_flops) comes from one run of it in a child process on Keras's NumPy backend
(``describe``), which trains nothing and touches no GPU. The initial weights are Keras's own
initialisers drawn there with the spec's seed, so every backend starts from the same numbers.
The result is cached by the file's content and the spec's settings. A file that does not
import, lacks ``build`` or ``data``, builds no model, or gives data the model rejects is a
SpecError with the child's one line. Two faults are per backend instead: a fault raised in one
of the file's own layers (one calling a framework's API directly) sends the description to each
Keras framework backend in turn, and the backends it fails on skip their cells with it
(``backend_fault``); a model too large to build is described without weights (``too_large``),
and its cells fail (harness.checks.backends).
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
from collections.abc import Iterator, Mapping
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


# --- the child process ------------------------------------------------------------------------


def _cache_dir(file: Path, batch_size: int | None, seed: int, num_batches: int) -> Path:
    """The description's folder, keyed by the file, the settings and the code that describes it (a
    description written by an older harness is never read)."""
    describing = b"".join(Path(m).read_bytes() for m in (__file__, Path(__file__).with_name("model_flops.py")))
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


def _child(file: Path, batch_size: int, seed: int, num_batches: int, out: Path) -> None:
    """Describe ``file`` into ``out`` on Keras's NumPy backend (this process's KERAS_BACKEND)."""
    import keras

    module = _import(file)
    where = f"model file {str(file)!r}"
    missing = [f for f in ("build", "data") if not callable(getattr(module, f, None))]
    if missing:
        raise SpecError(f"{where} defines no {' and no '.join(f + '()' for f in missing)} (docs/your-keras-model.md)")
    settings = {k: getattr(module, k, v) for k, v in DEFAULTS.items()}
    if not isinstance(settings["LOSS"], str):  # Loss objects (a list or dict of them): their configs, as JSON
        try:
            settings["LOSS"] = json.dumps(_serialized(keras, settings["LOSS"]))
        except Exception as exc:  # noqa: BLE001
            raise SpecError(f"{where}: LOSS is neither a loss name nor a Keras loss: {_fault(exc)}") from exc
    if settings["OPTIMIZER"] not in ("sgd", "adam", "adamw"):
        raise SpecError(f"{where}: OPTIMIZER {settings['OPTIMIZER']!r} is not one of: sgd, adam, adamw")
    size = batch_size or int(settings["BATCH_SIZE"])
    batches, settings["structure"] = _batches(module, where, size, seed, num_batches)
    if not batch_size:  # the file's settings only (from_file): the model is built with the run's batch size
        return _write(out, settings, {}, [])
    keras.utils.set_random_seed(seed)
    try:
        model = module.build()
        if not isinstance(model, keras.Model):
            raise SpecError(f"{where}: build() returned {type(model).__name__}, not a keras.Model")
    except SpecError:
        raise
    except MemoryError as exc:
        settings["too_large"] = f"build() asks for more memory than this machine has: {_fault(exc)}"
        return _write(out, settings, {}, batches)
    except Exception as exc:  # noqa: BLE001
        layer = _layer_in(exc, file)
        raise (_OnThisBackend if layer else SpecError)(f"{where}: build() fails{layer}: {_fault(exc)}") from exc
    try:
        model(_rows(settings["structure"], batches[0], 2))  # builds a subclassed model; fails on inputs it rejects
    except MemoryError as exc:
        settings["too_large"] = f"the model's first call asks for more memory than this machine has: {_fault(exc)}"
        return _write(out, settings, {}, batches)
    except Exception as exc:  # noqa: BLE001
        shapes = ", ".join(f"{k} {v.shape}" if k != "x" else str(v.shape) for k, v in batches[0].items() if k[0] == "x")
        layer = _layer_in(exc, file)
        said = f"{where}: the model rejects data()'s inputs of shape {shapes}{layer}: {_fault(exc)}"
        raise (_OnThisBackend if layer else SpecError)(said) from exc
    params = {f"{i:03d}:{v.path}": np.asarray(v.numpy(), np.float32) for i, v in enumerate(model.weights)}
    on_numpy = keras.backend.backend() == "numpy"  # (the count reads the NumPy backend's calls)
    settings["kernels"] = _kernels(model, batches, settings["structure"]) if on_numpy else {}
    _write(out, settings, params, batches)


def _kernels(model: Any, batches: list[dict[str, np.ndarray]], structure: dict) -> dict[str, list]:
    """Each batch shape's training-step kernels (workloads.model_flops), by ``_signature``."""
    from workloads import model_flops

    found: dict[str, list] = {}
    for batch in batches:
        key = _signature(batch)
        if key not in found:
            found[key] = model_flops.step_kernels(model, _structured(batch, "x", structure["x"]))
    return found


def _signature(batch: Mapping[str, Any]) -> str:
    """A batch's array names and shapes, which its step's kernels depend on."""
    return json.dumps(sorted((k, list(np.shape(v))) for k, v in batch.items()))


def _write(out: Path, settings: dict[str, Any], params: dict[str, np.ndarray], batches: list[dict]) -> None:
    np.savez(out / "params.npz", **params)  # type: ignore[arg-type]  # numpy stubs: a key could be allow_pickle
    for i, b in enumerate(batches):
        np.savez(out / f"batch{i}.npz", **b)
    settings["param_order"] = list(params)
    (out / "settings.json").write_text(json.dumps(settings))


class _OnThisBackend(SpecError):
    """A fault of ``build()`` or of the model's first call raised in one of the file's own layers,
    which another Keras backend may not have (a layer that calls one framework's API directly)."""


def _layer_in(exc: BaseException | None, file: Path) -> str:
    """`` in layer 'name' (Class)``: the innermost layer of ``file`` the traceback passes
    through, or "" where none does."""
    import keras

    found = ""
    seen: set[int] = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        tb = exc.__traceback__
        while tb is not None:
            me = tb.tb_frame.f_locals.get("self")
            if tb.tb_frame.f_code.co_filename == str(file) and isinstance(me, keras.layers.Layer):
                found = f" in layer {me.name!r} ({type(me).__name__})"
            tb = tb.tb_next
        exc = exc.__cause__ or exc.__context__
    return found


def _serialized(keras: Any, loss: Any) -> Any:
    """LOSS as JSON-able data: names stay, a Loss becomes its config, lists and dicts (one loss per
    output) keep their shape (a dict under ``by_output``); ``adapters._keras_common.loss_of``
    rebuilds it."""
    if isinstance(loss, str):
        return loss
    if isinstance(loss, dict):
        return {"by_output": {k: _serialized(keras, v) for k, v in loss.items()}}
    if isinstance(loss, (list, tuple)):
        return [_serialized(keras, v) for v in loss]
    config = keras.losses.serialize(loss)
    if not isinstance(config, dict):
        raise TypeError(f"{type(loss).__name__} is not a Keras loss")
    return config


def _batches(module: Any, where: str, size: int, seed: int, count: int) -> tuple[list[dict[str, np.ndarray]], dict]:
    """The run's ``count`` batches as flat dicts (``_flat``) and their one structure: batch ``i``
    is ``data(size, seed + i)``, or the ``i``-th a generator ``data(size, seed)`` yields."""
    try:
        first = module.data(size, seed)
        stream = first if isinstance(first, Iterator) else None
        got = [next(stream) if stream else module.data(size, seed + i) if i else first for i in range(count)]
    except StopIteration:
        raise SpecError(f"{where}: data({size}, {seed}) yielded fewer than the {count} batches a run takes") from None
    except Exception as exc:  # noqa: BLE001
        raise SpecError(f"{where}: data({size}, {seed}) fails: {_fault(exc)}") from exc
    batches, structures = [], []
    for i, pair in enumerate(got):
        if not (isinstance(pair, tuple) and len(pair) == 2):
            raise SpecError(f"{where}: data() must return (inputs, targets), got {type(pair).__name__}")
        x, sx = _flat(pair[0], "x")
        y, sy = _flat(pair[1], "y")
        rows = {len(v) if v.ndim else 0 for v in (x | y).values()}
        if rows != {size}:
            said = "a generator's" if stream else f"data({size}, {seed + i})'s"
            raise SpecError(
                f"{where}: {said} batch {i} has {' and '.join(map(str, sorted(rows)))} rows in its inputs and targets, "
                f"not {size}"
            )
        batches.append(x | y)
        structures.append({"x": sx, "y": sy})
    if any(s != structures[0] for s in structures):
        raise SpecError(f"{where}: data() gave batches of different structures: {structures[0]} and then others")
    return batches, structures[0]


def _flat(value: Any, side: str) -> tuple[dict[str, np.ndarray], Any]:
    """One side of a batch (an array, a list or tuple of arrays, or a dict by name) as flat batch
    entries (``x``, ``x:0``..., ``x:name``...) and its structure (None, a count, or the names)."""
    if isinstance(value, dict):
        return {f"{side}:{k}": np.asarray(v) for k, v in value.items()}, {"names": list(value)}
    if isinstance(value, (list, tuple)):
        return {f"{side}:{i}": np.asarray(v) for i, v in enumerate(value)}, {"count": len(value)}
    return {side: np.asarray(value)}, None


def _structured(batch: Mapping[str, Any], side: str, structure: Any) -> Any:
    """The inverse of ``_flat`` over a batch's entries (NumPy or placed on a device)."""
    if structure is None:
        return batch[side]
    if "names" in structure:
        return {k: batch[f"{side}:{k}"] for k in structure["names"]}
    return [batch[f"{side}:{i}"] for i in range(structure["count"])]


def _rows(structure: dict, batch: Mapping[str, np.ndarray], n: int) -> Any:
    """The first ``n`` rows of a batch's inputs, in their structure."""
    return _structured({k: v[:n] for k, v in batch.items()}, "x", structure["x"])


def child_main(argv: list[str]) -> None:
    """The describing child: FILE BATCH_SIZE (0: the file's) SEED NUM_BATCHES OUT; a fault of the
    file is one line on stdout and exit 2, or 3 where another backend may not have it."""
    path, size, seed, count, folder = argv
    try:
        _child(Path(path), int(size), int(seed), int(count), Path(folder))
    except SpecError as error:
        print(error)
        raise SystemExit(3 if isinstance(error, _OnThisBackend) else 2) from None


CHILD = "import sys; from workloads.model_file import child_main; child_main(sys.argv[1:])"
