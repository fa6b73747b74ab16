"""A run folder's rules, one set for every task that writes one (bench, sweep, fidelity in
harness.session; export in harness.export): its name, the test write before anything is
measured, the lock that keeps two runs out of one folder, and the one line a failed write or a
bad option gets (exit 2, every record already written kept)."""

from __future__ import annotations

import errno
import fcntl
import os
import re
import sys
from pathlib import Path
from typing import IO

from harness import records

#: Each task's plan, so ``--resume`` runs what has no record yet.
PLAN = "plan.json"
LOCK = ".lock"
RUN_ID = re.compile(r"[A-Za-z0-9_.-]+")
# Write failures of the storage (not of the harness): one line and exit 2, never a traceback.
STORAGE_ERRORS = {errno.ENOSPC, errno.EDQUOT, errno.EIO, errno.EROFS, errno.EFBIG}


def fail(message: str) -> int:
    """A command's error: one line on stderr, exit code 2."""
    print(f"error: {message}", file=sys.stderr)
    return 2


def run_id_error(run_id: str | None) -> str | None:
    """Why ``--run-id`` cannot name a run folder, or None (None: the default name)."""
    if run_id is not None and (not RUN_ID.fullmatch(run_id) or run_id in (".", "..")):
        return f"--run-id {run_id!r} is not a name: letters, digits and - _ . only (no path separator), and not . or .."
    return None


def unwritable(run_dir: Path) -> str | None:
    """Why ``run_dir`` cannot hold a run (created here if need be, a test write made), or None."""
    probe = run_dir / f".write-test-{os.getpid()}"
    try:
        run_dir.mkdir(parents=True, exist_ok=True)
        fd = os.open(probe, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            os.write(fd, b"dlcompare write test\n" * 200)
            os.fsync(fd)
        finally:
            os.close(fd)
            probe.unlink(missing_ok=True)
    except OSError as exc:
        where = f" ({exc.filename})" if exc.filename and Path(exc.filename) not in (run_dir, probe) else ""
        return f"{exc.strerror or exc}{where}"
    return None


def storage_failure(exc: OSError) -> bool:
    """Whether ``exc`` is the storage failing (a full disk, a quota, an I/O error), not a bug."""
    return isinstance(exc, records.RecordWriteError) or exc.errno in STORAGE_ERRORS


def write_failed(exc: OSError, run_dir: Path, resume: str) -> int:
    """The one line for a write that failed mid-run; every record written before it is whole.
    ``resume`` is the command that goes on (``python -m harness bench --resume``)."""
    what = (
        str(exc)
        if isinstance(exc, records.RecordWriteError)
        else f"cannot write {exc.filename or run_dir}: {exc.strerror}"
    )
    if (run_dir / PLAN).is_file():
        then = f"finished cells are kept; free space, then: {resume} {run_dir}"
    else:
        then = "nothing was measured yet; free space and start the run again"
    return fail(f"{what}; {then}")


def lock(run_dir: Path) -> IO[str] | None:
    """An exclusive lock on the run folder, held while the handle is open; None if another
    process holds it. Two runs writing one folder would time each other and mix records."""
    run_dir.mkdir(parents=True, exist_ok=True)
    handle = (run_dir / LOCK).open("a")
    try:
        fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        handle.close()
        return None
    return handle


def in_use(run_dir: Path, task: str) -> str:
    """The error for a folder whose lock another ``task`` (bench, export) holds."""
    return f"{run_dir} is in use by another {task} (it holds {run_dir / LOCK}); wait for it or choose another --run-id"
