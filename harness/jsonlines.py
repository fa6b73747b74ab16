"""An append-only JSON-lines file that outlives crashes and full disks: ``append`` writes one line
whole or not at all, after mending a torn last line an older writer or a crash left behind.
Knows nothing of what the lines hold (harness.records does)."""

from __future__ import annotations

import errno
import os
import sys
from collections.abc import Callable
from pathlib import Path


def append(path: Path, line: bytes, whole: Callable[[bytes], bool]) -> None:
    """Append ``line`` (ending in a newline): the bytes are written in full (a short write is
    continued) and fsynced; on any failure the file is truncated back to its size before and the
    ``OSError`` raised, so no half line is left for a reader or a later append. A torn last line
    (no newline at the end) is first mended: kept, with its newline, where ``whole`` says it is a
    whole line; cut away (with a warning) otherwise, so ``line`` never joins it."""
    fd = os.open(path, os.O_RDWR | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        size = os.fstat(fd).st_size
        try:
            size = _mend_tail(fd, path, size, whole)
            view = memoryview(line)
            while view:
                n = os.write(fd, view)
                if n <= 0:
                    raise OSError(errno.EIO, "write wrote nothing")
                view = view[n:]
            os.fsync(fd)
        except OSError:
            try:
                os.ftruncate(fd, size)
                os.fsync(fd)
            except OSError:
                pass  # readers skip a torn last line; the next append mends it
            raise
    finally:
        os.close(fd)


def _mend_tail(fd: int, path: Path, size: int, whole: Callable[[bytes], bool]) -> int:
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
    if whole(tail):
        os.write(fd, b"\n")
        return size + 1
    n = os.pread(fd, start, 0).count(b"\n") + 1
    warn(f"{path}:{n}: torn last line ({len(tail)} bytes, no newline) cut away before appending")
    os.ftruncate(fd, start)
    return start


_warned: set[str] = set()


def warn(message: str) -> None:
    """One warning on stderr, once per process (a bench reads its results file several times)."""
    if message not in _warned:
        _warned.add(message)
        print(f"warning: {message}", file=sys.stderr)
