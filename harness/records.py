"""Result records: one flat JSON object per cell, one per line in ``results.jsonl``.

Reports are built from records alone, so every field a report shows lives here. A record is
its ``Cell`` (what was asked) followed by what was measured (``Record``): both are typed here,
plain dicts at run time, so the JSON on disk is exactly what these types describe.
``schema_version`` changes whenever a field changes meaning; ``upgrade`` brings a record of an
older version to the current one, and every reader goes through ``load``, which calls it.
"""

from __future__ import annotations

import errno
import json
import math
import os
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypedDict, cast

from harness import jsonlines

if TYPE_CHECKING:
    from workloads.images import PipelineSettings
    from workloads.spec import Workload

SCHEMA_VERSION = 1
STATUSES = ("ok", "skipped", "failed")
RESULTS = "results.jsonl"
ENV = "env.json"
#: A run's backend-parity outcomes (harness/checks/backends.py), which its report quotes.
PARITY = "parity.json"


class RecordError(ValueError):
    """A results file that is not ours or is damaged; the message names file and line."""


class _Worker(TypedDict):
    """The keys every cell has: what starting its worker reads (harness.running.runner)."""

    adapter: str  #: the label (``torch-eager``, ``torch-eager@torch-next``, ``...~twin1``)
    threads: int
    device_requested: str  #: ``cpu``, ``cuda`` (``auto`` only for doctor's probe)


class Cell(_Worker, total=False):
    """One cell of a run's matrix: what a worker is asked to run. harness.running.plan builds
    them (calibration twins add ``slowdown``, fidelity ``kind`` and ``script``, the session
    ``kernel_floor_s``, the executors each round's ``round``); conformance and doctor build
    smaller ones, with the keys their workers read. Every record starts with its cell's keys."""

    run_id: str
    cell_id: str  #: see ``cell_id``: stable across runs
    base_adapter: str  #: the adapter module where ``adapter`` is not it (see ``base_adapter``)
    env: str  #: the named environment (``--env NAME=PYTHON``) a cell runs in
    python: str | None  #: that environment's interpreter
    framework: str
    graph: str
    workload: str
    overrides: list[str]  #: ``field=value`` spec overrides (``spec_of`` applies them)
    spec: dict[str, Any]  #: the resulting spec, ``Workload.as_dict()``
    param_count: int
    data: str  #: ``resident``, ``host`` or ``loader``
    precision: str
    force_precision: bool
    profile: str
    pipeline: dict[str, int]  #: input pipeline settings, parsed by the plan (``pipeline_of``)
    sweep: dict[str, Any]  #: ``{"field": name, "value": float}`` of a sweep's cell
    slowdown: float  #: a calibration twin's busy-wait factor (harness.calibrate)
    kind: str  #: ``idiomatic`` for a fidelity script's cell
    script: str  #: that script's module
    kernel_floor_s: float | None  #: the step's kernels at the device's measured peak (harness.measuring.floors)
    round: int  #: which of the run's rounds a worker is running (from 1)
    compile_cache_dir: str  #: the cell's compiler cache for the run (harness.running.turns.compile_cache)
    warm_compiles: bool  #: an earlier process of the cell may have filled that cache
    worker_bytes: float  #: host memory a resident worker of the cell may take (turns.resident_limit)
    profile_ops: str  #: the run folder a profiled pass writes its trace under (``--profile-ops``)
    floors: bool  #: False: skip the kernel floors (calibration twins run none)
    perturb_seed: int  #: backend parity's perturbed-weights run: the seed of its one-ulp moves


class Record(Cell, total=False):
    """A cell's result as written to ``results.jsonl``: the cell's keys, then these. Only
    ``schema_version``, ``status`` and ``reason`` are in every record; the measured keys are
    in ``ok`` records (and some in others), each where its part of the harness measured it.
    Listed are the keys the reports and statistics read; a record may hold more."""

    schema_version: int
    status: str  #: one of STATUSES
    reason: str
    # identity of where it ran
    machine: str | None  #: None where a merged run's records name unlike machines without a fingerprint
    node: str
    device: str
    versions: dict[str, Any]
    fingerprint: dict[str, Any]
    protocol: dict[str, Any]
    group: str
    rounds: int
    turn_ids: list[int]
    # the timed steps (seconds)
    step_times_s: list[float]
    median_s: float
    ci_low_s: float
    ci_high_s: float
    iqr_s: float
    wall_s: float
    first_step_s: float
    compile_s: float | None
    cold_s: float
    cold_times_s: list[float]
    cold_settled: bool | None
    cold_other_cores: float  #: other CPU load while the cold window ran (cores; resident workers)
    cold_contended: bool  #: that load was past the contention threshold (harness.measuring.contention)
    pipelined_s: float
    synced_block_s: float
    turn_block_s: list[float]
    turns_dropped: int
    turns_contended: int
    verdict_level: float
    contended: bool
    other_cpu_cores: float
    noisy: bool
    # what a step does
    batch_size: int
    steps: int
    loss_first: float
    samples_per_s: float
    tokens_per_s: float | None  #: over the steady window's mean step (the report divides tokens_per_step by its median)
    tokens_per_step: float | None  #: set by combine: tokens a step processes, over a pass of the dataset
    mean_s: float
    decode_captions: int
    decode_len_mean: float
    gflops: float | None
    flops_per_step: float | None
    dispatch_floor_s: float
    dispatch_floor_wall_s: float  #: seconds its measurement took (the budget's estimate of later rounds)
    steady_recompiles: int
    pipelined_recompiles: int
    recompile_times_s: list[float]
    step_batches: list[int]
    pass_steps: int
    pass_s: float
    # input pipelines (``data: loader``)
    wait_times_s: list[float]
    wait_median_s: float
    input_bound_share: float
    pipeline_data: dict[str, Any]
    # resources
    host_peak_rss_bytes: int
    device_peak_bytes: int | None
    gpu_util_mean: float | None
    to_device_s: float
    traces: int | None
    ops_profile: dict[str, Any]
    ready_s: float  #: the worker's start: import, set-up, cold window and floor (resident workers)
    setup_s: float  #: the worker's set-up before its first step (build, data, parameters)
    pipelined_blocks_s: list[float]
    turn_block_steps: int  #: steps in each of its blocks (resident workers)
    settings: dict[str, Any]  #: the adapter's settings as the worker ran them (compile mode, XLA flags ...)
    compute_median_s: float  #: the step without its input wait (``data: loader``)
    loss_last: float
    decode_len_min: int
    decode_len_max: int
    gflops_max_step: float | None
    # serving (the export task, harness.measuring.serving)
    p50_s: float
    p99_s: float
    # input pipelines' own measurements (``data: loader``)
    cpu_cores_busy: float
    cpu_worker_cores_busy: float
    cpu_count: int
    pipeline_batches_per_s: float
    pipeline_ceiling_s: float
    # set when records are combined (harness.stats.cells) or a report reads them (harness.reporting.model)
    rounds_ok: int
    rounds_done: int
    round_cold_contended: list[bool]
    group_generations: list[int]  #: the generations every cell of the record's group ran (annotate_groups)
    group_cells: int
    group_prior_var: float | None  #: the group's prior for a pair's variance (harness.stats.verdicts)
    group_prior_df: float | None
    prior_weight: float
    process_levels: dict[int, float]
    round_cold_times_s: list[list[float]]
    peak_gflops: float | None
    machine_label: str | None


def spec_of(cell: Cell | Mapping[str, Any]) -> Workload:
    """The workload spec a cell (or record) runs: its ``workload`` with its ``overrides`` applied
    and validated (the only keys read, so a check's variant may pass just those). The one place
    a spec is rebuilt from a cell; raises ``workloads.SpecError``."""
    from workloads import get_workload, override  # the workloads import numpy: not for every reader

    return override(get_workload(cell["workload"]), list(cell.get("overrides", [])))


def pipeline_of(cell: Cell | Mapping[str, Any]) -> PipelineSettings:
    """A cell's input pipeline settings (defaults where it names none). The plan parsed and
    validated them from ``--set`` and ``--sweep`` (harness.running.plan); read as they are."""
    from workloads.images import PipelineSettings

    return PipelineSettings(**cell.get("pipeline", {}))


#: ``version -> step`` turning a record of that version into one of the next; empty while no
#: version before SCHEMA_VERSION has been written (every committed record is version 1).
UPGRADES: dict[int, Callable[[dict[str, Any]], dict[str, Any]]] = {}


def upgrade(record: dict[str, Any]) -> Record:
    """A record of any readable version as a record of SCHEMA_VERSION (the record itself where it
    is current). Raises ``RecordError`` naming the version and the readable ones where it is
    newer than this harness or older than any step in UPGRADES."""
    version = record.get("schema_version")
    readable = sorted({*UPGRADES, SCHEMA_VERSION})
    while version != SCHEMA_VERSION:
        step = UPGRADES.get(version) if isinstance(version, int) else None
        if step is None or not isinstance(version, int):
            newer = " (written by a newer dlcompare)" if isinstance(version, int) and version > SCHEMA_VERSION else ""
            raise RecordError(f"schema_version {version!r}{newer}: this version reads {', '.join(map(str, readable))}")
        record = step(record)
        if record.get("schema_version") != version + 1:
            raise AssertionError(f"upgrade from schema_version {version} must give {version + 1}")
        version = record["schema_version"]
    return record  # type: ignore[return-value]  # a dict holding Record's keys


#: The ``kind`` of a record (or cell) that an idiomatic script ran, not an adapter (harness.checks.fidelity).
IDIOMATIC = "idiomatic"


def is_idiomatic(rec: Cell | Mapping[str, Any]) -> bool:
    """Whether a record (or cell) is an idiomatic script's rather than an adapter's."""
    return rec.get("kind") == IDIOMATIC


#: A record whose cell ran beside more than this much other CPU load (in cores) is tagged
#: ``contended`` (harness.measuring.contention measures the load; reports leave such cells out of verdicts).
CONTENDED_CORES = 0.25


class RecordWriteError(OSError):
    """A record that could not be written (disk full, quota, I/O error, read-only file system).

    An ``OSError`` (its ``errno``, ``strerror`` and ``filename`` are the cause's), not a
    ``RecordError``: the file is not damaged, the storage failed, and nothing that catches
    ``RecordError`` as bad input may mistake it for that. The file holds every record written
    before it and no part of the one that failed. ``str()`` is one line naming path and cause."""

    def __init__(self, path: Path, cause: OSError) -> None:
        super().__init__(cause.errno, cause.strerror or str(cause), str(path))
        self.path, self.cause = Path(path), cause

    def __str__(self) -> str:
        code = errno.errorcode.get(self.errno, "") if self.errno else ""
        return f"cannot write a record to {self.path}: {self.strerror}" + (f" ({code})" if code else "")


def round_of(rec: Cell | Mapping[str, Any]) -> int:
    """A record's (or cell's) round, its generation: 1 where it says none (records of one round)."""
    return int(rec.get("round") or 1)


def base_adapter(cell: Cell | Mapping[str, Any]) -> str:
    """The adapter module a cell runs (``torch-eager@torch-next`` runs ``torch-eager``)."""
    return str(cell.get("base_adapter") or cell["adapter"])


def cell_id(adapter: str, workload: str, device: str, overrides: list[str]) -> str:
    """Stable identity of a matrix cell (the same cell in two runs has the same id)."""
    return "|".join([adapter, workload, device, *sorted(overrides)])


def overrides_of(cell: Cell | Mapping[str, Any]) -> dict[str, str]:
    """A cell's ``field=value`` overrides as ``{field: value}``, in their order."""
    return dict(o.partition("=")[::2] for o in cell.get("overrides") or [])


def strategy_override(cell: Cell | Mapping[str, Any]) -> str | None:
    """The loop strategy a cell's overrides name (``strategy=...``), None where none does."""
    return overrides_of(cell).get("strategy")


def setting_overrides(cell: Cell | Mapping[str, Any]) -> tuple[str, ...]:
    """A cell's overrides other than its loop strategy, in their order: what a table never ranks
    across (a strategy is compared within a table)."""
    return tuple(o for o in cell.get("overrides") or [] if not o.startswith("strategy="))


def setting_of(cell: Cell | Mapping[str, Any]) -> str:
    """A cell's id without its adapter (workload, device, overrides): the same for every adapter
    of one setting, in any run; "" for a record without an id."""
    return (cell.get("cell_id") or "").partition("|")[2]


def new_record(cell: Cell | Mapping[str, Any], status: str, reason: str = "", **fields: Any) -> Record:
    """A record of the current version: the cell's keys, status and reason, then ``fields``."""
    if status not in STATUSES:
        raise ValueError(f"status {status!r} is not one of {STATUSES}")
    return cast(Record, {"schema_version": SCHEMA_VERSION, **cell, "status": status, "reason": reason, **fields})


def _unwritable(value: Any, path: str, found: list[str]) -> Any:
    """``value`` with every part strict JSON cannot hold (NaN, infinities, foreign objects)
    replaced by its text; ``path=text`` of each such part is appended to ``found``."""
    if isinstance(value, dict):
        return {str(k): _unwritable(v, f"{path}.{k}" if path else str(k), found) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_unwritable(v, f"{path}[{i}]", found) for i, v in enumerate(value)]
    if value is None or isinstance(value, str | int | bool) or (isinstance(value, float) and math.isfinite(value)):
        return value
    found.append(f"{path}={value!r}")
    return repr(value)


def writable(record: Mapping[str, Any]) -> Mapping[str, Any]:
    """``record`` itself when strict JSON can hold it; otherwise a ``failed`` record whose
    reason names the fields that could not be written (their values kept as text)."""
    found: list[str] = []
    clean = _unwritable(record, "", found)
    if not found:
        return record
    reason = "result not recordable as JSON: " + ", ".join(found[:5]) + (" ..." if len(found) > 5 else "")
    if record.get("status") == "failed" and record.get("reason"):
        reason = f"{record['reason']}; {reason}"
    return {**clean, "status": "failed", "reason": reason}


def append(path: Path, record: Mapping[str, Any]) -> None:
    """Append one record as one line, whole or not at all (harness.jsonlines.append: written in
    full and fsynced, or the file truncated back; a torn last line left by a crash mended first:
    kept where it is a whole record, cut away with a warning otherwise). A record JSON cannot hold
    is written as ``writable`` makes it: a failed record, never an exception that would lose the
    run. Raises ``RecordWriteError`` where the storage fails."""
    line = (json.dumps(writable(record), sort_keys=True, allow_nan=False) + "\n").encode()
    try:
        jsonlines.append(path, line, _whole_record)
    except OSError as exc:
        raise RecordWriteError(path, exc) from exc


def _whole_record(raw: bytes) -> bool:
    try:
        rec = json.loads(raw)
    except ValueError:
        return False
    return isinstance(rec, dict) and "schema_version" in rec


def write_json(path: Path, data: Any, indent: int = 2) -> None:
    """Write a run folder's JSON file (env.json, plan.json) whole or not at all: a temporary file
    beside it, fsynced, then renamed over it, so a full disk never leaves half a plan behind."""
    tmp = path.with_name(f".{path.name}.tmp")
    try:
        with tmp.open("w") as f:
            f.write(json.dumps(data, indent=indent) + "\n")
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except OSError as exc:
        tmp.unlink(missing_ok=True)
        raise RecordWriteError(path, exc) from None


def load_env(run_dir: Path) -> dict[str, Any]:
    """A run's environment (env.json), or {} where it has none."""
    path = run_dir / ENV
    return json.loads(path.read_text()) if path.is_file() else {}


def load(path: Path) -> list[Record]:
    """Read and validate every record of a results file, each upgraded to SCHEMA_VERSION.

    A torn last line (no newline at the end and not JSON: a write cut short by a full disk or
    a crash) is skipped with a warning on stderr naming file and line; every whole record
    before it is kept. A damaged line anywhere else is a ``RecordError``."""
    if not path.is_file():
        raise RecordError(f"{path}: no such results file")
    raw = path.read_bytes()
    lines = raw.decode("utf-8", errors="replace").split("\n")
    torn = not raw.endswith(b"\n")  # then the last element is an unfinished line
    records: list[Record] = []
    for n, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            rec = json.loads(line)
        except json.JSONDecodeError as exc:
            if torn and n == len(lines):
                kept = len(records)
                torn_line = f"{path}:{n}: torn last line ({len(line)} bytes, no newline)"
                jsonlines.warn(f"{torn_line} skipped; {kept} whole records kept")
                continue
            raise RecordError(f"{path}:{n}: not a JSON record ({exc.msg})") from None
        if not isinstance(rec, dict) or "schema_version" not in rec:
            raise RecordError(f"{path}:{n}: not a dlcompare record (no schema_version)")
        try:
            rec = upgrade(rec)
        except RecordError as exc:
            raise RecordError(f"{path}:{n}: {exc}") from None
        missing = [k for k in ("adapter", "workload", "device_requested", "status") if k not in rec]
        if missing or rec["status"] not in STATUSES:
            raise RecordError(f"{path}:{n}: record lacks {missing or 'a valid status'}")
        records.append(rec)
    return records
