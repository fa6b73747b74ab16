"""Result records: one flat JSON object per cell, one per line in ``results.jsonl``.

Reports are built from records alone, so every field a report shows lives here. A record is
its ``Cell`` (what was asked) followed by what was measured (``Record``): both are typed in
harness.record_types (imported here, where every stage takes them from), plain dicts at run
time, so the JSON on disk is exactly what these types describe.
``schema_version`` changes whenever a field changes meaning; ``upgrade`` brings a record of an
older version to the current one, and every reader goes through ``load``, which calls it, so no
reader downstream tells old records from new ones (env.json likewise: ``load_env``, ``upgrade_env``).
"""

from __future__ import annotations

import errno
import json
import math
import os
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from harness import jsonlines
from harness.record_types import Cell, Record
from harness.record_types import ExportRecord as ExportRecord  # re-exported: every stage imports record types from here

if TYPE_CHECKING:
    from workloads.images import PipelineSettings
    from workloads.spec import Workload

#: Version of the records this harness writes (``new_record``); UPGRADES reads every earlier one.
SCHEMA_VERSION = 3
#: Version of the env.json this harness reads to (``load_env``); ENV_UPGRADES reads every earlier one.
ENV_SCHEMA_VERSION = 2
STATUSES = ("ok", "skipped", "failed")
RESULTS = "results.jsonl"
ENV = "env.json"
#: A run's backend-parity outcomes (harness/checks/backends.py), which its report quotes.
PARITY = "parity.json"


class RecordError(ValueError):
    """A results file that is not ours or is damaged; the message names file and line."""


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


Step = Callable[[dict[str, Any]], dict[str, Any]]


def _floors_and_budget(rec: dict[str, Any]) -> dict[str, Any]:
    """Schema 1 -> 2: the generation protocol that times a group's dispatch floors once all its
    workers are ready and buys generations by time alone, its records saying both.

    A schema-1 record whose dispatch floor was timed inside its worker's start
    (``dispatch_floor_wall_s`` without ``dispatch_floor_timed_s``) gets ``dispatch_floor_timed_s``
    0.0: none of the floor was timed after its worker was ready (its ``ready_s`` holds it all).
    A schema-1 generation judged at a level above 95% without ``budget_s`` ran under a budget of
    the looks protocol (Pocock's level per look, which only a budget took): it gets ``budget_s``
    None, a budget whose size it did not keep."""
    out = {**rec, "schema_version": 2}
    if "dispatch_floor_wall_s" in rec and "dispatch_floor_timed_s" not in rec:
        out["dispatch_floor_timed_s"] = 0.0
    level = rec.get("verdict_level")
    if isinstance(level, int | float) and level > 0.95 and "budget_s" not in rec:
        out["budget_s"] = None
    return out


def _blocks_sized(rec: dict[str, Any]) -> dict[str, Any]:
    """Schema 2 -> 3: a protocol of processes taking turns says how their blocks were sized
    (``blocks_sized``). A schema-2 one without it sized each process's blocks by that process's
    own probe: ``"each process"`` (schema 3 writes ``"round 1"``: every process at its cell's
    round-1 size)."""
    protocol = rec.get("protocol")
    if isinstance(protocol, dict) and protocol.get("mode") == "turns" and "blocks_sized" not in protocol:
        return {**rec, "schema_version": 3, "protocol": {**protocol, "blocks_sized": "each process"}}
    return {**rec, "schema_version": 3}


#: ``version -> step`` turning a record of that version into one of the next (each fills in what
#: a record of its version meant, so that readers read every record as SCHEMA_VERSION's).
UPGRADES: dict[int, Step] = {1: _floors_and_budget, 2: _blocks_sized}


def _peaks_at_start(env: dict[str, Any]) -> dict[str, Any]:
    """env.json 1 -> 2: every measured peak keeps its figures at the run's start
    (``matmul_gflops_start``, ``copy_gbs_start``). A schema-1 peak without them was measured at
    the start alone (its run measured no peaks at its end, or that measurement failed), so its
    figures are the start's."""
    peaks = {}
    for device, peak in (env.get("peaks") or {}).items():
        if isinstance(peak, dict) and "error" not in peak and "matmul_gflops" in peak:
            peak = {f"{k}_start": peak.get(k) for k in ("matmul_gflops", "copy_gbs")} | peak
        peaks[device] = peak
    return {**env, "schema_version": 2, **({"peaks": peaks} if "peaks" in env else {})}


#: ``version -> step`` for env.json, as UPGRADES for records (an env.json without a version is 1).
ENV_UPGRADES: dict[int, Step] = {1: _peaks_at_start}


def _upgraded(data: dict[str, Any], current: int, steps: Mapping[int, Step]) -> dict[str, Any]:
    """``data`` brought from its ``schema_version`` to ``current`` by ``steps``, each applied once
    in turn (``data`` itself where it is current). Raises ``RecordError`` naming the version and
    the readable ones where it is newer than ``current`` or older than any step."""
    version = data.get("schema_version")
    readable = sorted({*steps, current})
    while version != current:
        step = steps.get(version) if isinstance(version, int) else None
        if step is None or not isinstance(version, int):
            newer = " (written by a newer dlcompare)" if isinstance(version, int) and version > current else ""
            raise RecordError(f"schema_version {version!r}{newer}: this version reads {', '.join(map(str, readable))}")
        data = step(data)
        if data.get("schema_version") != version + 1:
            raise AssertionError(f"upgrade from schema_version {version} must give {version + 1}")
        version = data["schema_version"]
    return data


def upgrade(record: dict[str, Any]) -> Record:
    """A record of any readable version as a record of SCHEMA_VERSION (the record itself where it
    is current; the one given is never changed). Raises ``RecordError`` naming the version and the
    readable ones where it is newer than this harness or older than any step in UPGRADES."""
    return cast(Record, _upgraded(record, SCHEMA_VERSION, UPGRADES))


def upgrade_env(env: dict[str, Any]) -> dict[str, Any]:
    """A run's env.json of any readable version (none: version 1) as one of ENV_SCHEMA_VERSION;
    raises ``RecordError`` as ``upgrade`` does."""
    return _upgraded(env if "schema_version" in env else {**env, "schema_version": 1}, ENV_SCHEMA_VERSION, ENV_UPGRADES)


#: The ``kind`` of a record (or cell) that an idiomatic script ran, not an adapter (harness.checks.fidelity).
IDIOMATIC = "idiomatic"


def is_idiomatic(rec: Cell | Mapping[str, Any]) -> bool:
    """Whether a record (or cell) is an idiomatic script's rather than an adapter's."""
    return rec.get("kind") == IDIOMATIC


#: A record whose cell ran beside more than this much other CPU load (in cores) is tagged
#: ``contended`` (harness.measuring.contention measures the load; reports leave such cells out of verdicts).
CONTENDED_CORES = 0.25
#: ... or whose turns lost more than this share of the machine's CPU time to hypervisor steal (a
#: VM whose host is busy: the other load runs outside the VM, where no process count sees it).
STEAL_SHARE = 0.05


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


def override_number(override: str) -> float | None:
    """The value of one ``field=value`` override as a number (a sweep's batch size), None where it
    is not one (``strategy=exact``)."""
    try:
        return float(override.partition("=")[2])
    except ValueError:
        return None


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


def amended(rec: Record, fields: Mapping[str, Any]) -> Record:
    """A new record: ``rec`` with ``fields`` added, measurements whose keys a stage computes (a
    pipeline's, a dispatch floor's, the worker's own). Their keys are Record's to declare."""
    return cast(Record, {**rec, **fields})


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
    """A run's environment (env.json) upgraded to ENV_SCHEMA_VERSION (``upgrade_env``), or {} where
    it has none. Raises ``RecordError`` naming the file where no step reads its version."""
    path = run_dir / ENV
    if not path.is_file():
        return {}
    try:
        return upgrade_env(json.loads(path.read_text()))
    except RecordError as exc:
        raise RecordError(f"{path}: {exc}") from None


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
