"""Result records: one flat JSON object per cell, one per line in ``results.jsonl``.

Reports are built from records alone, so every field a report shows lives here.
``schema_version`` changes whenever a field changes meaning.
"""

from __future__ import annotations

import json
import math
import os
from pathlib import Path
from typing import Any

SCHEMA_VERSION = 1
STATUSES = ("ok", "skipped", "failed")
RESULTS = "results.jsonl"
ENV = "env.json"


class RecordError(ValueError):
    """A results file that is not ours or is damaged; the message names file and line."""


#: The ``kind`` of a record (or cell) that an idiomatic script ran, not an adapter (harness.checks.fidelity).
IDIOMATIC = "idiomatic"


def is_idiomatic(rec: dict[str, Any]) -> bool:
    """Whether a record (or cell) is an idiomatic script's rather than an adapter's."""
    return rec.get("kind") == IDIOMATIC


def base_adapter(cell: dict[str, Any]) -> str:
    """The adapter module a cell runs (``torch-eager@torch-next`` runs ``torch-eager``)."""
    return cell.get("base_adapter") or cell["adapter"]


def cell_id(adapter: str, workload: str, device: str, overrides: list[str]) -> str:
    """Stable identity of a matrix cell (the same cell in two runs has the same id)."""
    return "|".join([adapter, workload, device, *sorted(overrides)])


def new_record(cell: dict[str, Any], status: str, reason: str = "", **fields: Any) -> dict[str, Any]:
    if status not in STATUSES:
        raise ValueError(f"status {status!r} is not one of {STATUSES}")
    return {"schema_version": SCHEMA_VERSION, **cell, "status": status, "reason": reason, **fields}


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


def writable(record: dict[str, Any]) -> dict[str, Any]:
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


def append(path: Path, record: dict[str, Any]) -> None:
    """Append one record as a single write, flushed and fsynced, so a crash or Ctrl-C can
    never leave half a line behind. A record JSON cannot hold is written as ``writable`` makes
    it: a failed record, never an exception that would lose the run."""
    line = (json.dumps(writable(record), sort_keys=True, allow_nan=False) + "\n").encode()
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, line)
        os.fsync(fd)
    finally:
        os.close(fd)


def load_env(run_dir: Path) -> dict[str, Any]:
    """A run's environment (env.json), or {} where it has none."""
    path = run_dir / ENV
    return json.loads(path.read_text()) if path.is_file() else {}


def load(path: Path) -> list[dict[str, Any]]:
    """Read and validate every record of a results file."""
    if not path.is_file():
        raise RecordError(f"{path}: no such results file")
    records = []
    for n, line in enumerate(path.read_text().splitlines(), start=1):
        if not line.strip():
            continue
        try:
            rec = json.loads(line)
        except json.JSONDecodeError as exc:
            raise RecordError(f"{path}:{n}: not a JSON record ({exc.msg})") from None
        if not isinstance(rec, dict) or "schema_version" not in rec:
            raise RecordError(f"{path}:{n}: not a dlcompare record (no schema_version)")
        if rec["schema_version"] != SCHEMA_VERSION:
            raise RecordError(
                f"{path}:{n}: schema_version {rec['schema_version']!r}, this version reads {SCHEMA_VERSION}"
            )
        missing = [k for k in ("adapter", "workload", "device_requested", "status") if k not in rec]
        if missing or rec["status"] not in STATUSES:
            raise RecordError(f"{path}:{n}: record lacks {missing or 'a valid status'}")
        records.append(rec)
    return records
