"""Result records: one flat JSON object per cell, one per line in ``results.jsonl``.

Reports are built from records alone, so every field a report shows lives here.
``schema_version`` changes whenever a field changes meaning.
"""

from __future__ import annotations

import errno
import json
import math
import os
import sys
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
    """Append one record as one line, whole or not at all: the bytes are written in full (a
    short write is continued) and fsynced; on any failure the file is truncated back to its
    size before and ``RecordWriteError`` is raised, so no half record is left behind for a
    reader or a later append. A record JSON cannot hold is written as ``writable`` makes it:
    a failed record, never an exception that would lose the run.

    A torn last line left by an older writer or a crash (no newline at the end) is first
    mended: kept, with its newline, where it is a whole record; cut away (with a warning)
    otherwise, so the new record never joins it on one line."""
    line = (json.dumps(writable(record), sort_keys=True, allow_nan=False) + "\n").encode()
    try:
        fd = os.open(path, os.O_RDWR | os.O_APPEND | os.O_CREAT, 0o644)
    except OSError as exc:
        raise RecordWriteError(path, exc) from exc
    try:
        size = os.fstat(fd).st_size
        try:
            size = _mend_tail(fd, path, size)
            view = memoryview(line)
            while view:
                n = os.write(fd, view)
                if n <= 0:
                    raise OSError(errno.EIO, "write wrote nothing")
                view = view[n:]
            os.fsync(fd)
        except OSError as exc:
            try:
                os.ftruncate(fd, size)
                os.fsync(fd)
            except OSError:
                pass  # readers skip a torn last line; the next append mends it
            raise RecordWriteError(path, exc) from exc
    finally:
        os.close(fd)


def _mend_tail(fd: int, path: Path, size: int) -> int:
    """Make the file end in a newline (see ``append``); returns its size afterwards."""
    if size == 0 or os.pread(fd, 1, size - 1) == b"\n":
        return size
    start = size
    while start > 0:  # back to the start of the last line
        chunk = os.pread(fd, min(4096, start), start - min(4096, start))
        cut = chunk.rfind(b"\n")
        if cut >= 0:
            start = start - len(chunk) + cut + 1
            break
        start -= len(chunk)
    tail = os.pread(fd, size - start, start)
    if _whole_record(tail):
        os.write(fd, b"\n")
        return size + 1
    n = os.pread(fd, start, 0).count(b"\n") + 1
    _warn(f"{path}:{n}: torn last line ({len(tail)} bytes, no newline) cut away before appending")
    os.ftruncate(fd, start)
    return start


def _whole_record(raw: bytes) -> bool:
    try:
        rec = json.loads(raw)
    except ValueError:
        return False
    return isinstance(rec, dict) and "schema_version" in rec


_warned: set[str] = set()


def _warn(message: str) -> None:
    """One warning on stderr, once per process (a bench reads its results file several times)."""
    if message not in _warned:
        _warned.add(message)
        print(f"warning: {message}", file=sys.stderr)


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


def load(path: Path) -> list[dict[str, Any]]:
    """Read and validate every record of a results file.

    A torn last line (no newline at the end and not JSON: a write cut short by a full disk or
    a crash) is skipped with a warning on stderr naming file and line; every whole record
    before it is kept. A damaged line anywhere else is a ``RecordError``."""
    if not path.is_file():
        raise RecordError(f"{path}: no such results file")
    raw = path.read_bytes()
    lines = raw.decode("utf-8", errors="replace").split("\n")
    torn = not raw.endswith(b"\n")  # then the last element is an unfinished line
    records = []
    for n, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            rec = json.loads(line)
        except json.JSONDecodeError as exc:
            if torn and n == len(lines):
                kept = len(records)
                _warn(f"{path}:{n}: torn last line ({len(line)} bytes, no newline) skipped; {kept} whole records kept")
                continue
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
