"""CPU used by other processes while a cell runs: a busy machine is detected, not measured.

Two snapshots of every process's CPU time, at the cell's start and end. What processes outside
the cell's worker session (the worker and everything it started) and outside this harness
process used in between, divided by the cell's wall time, is the other load in cores. A process
that both started and ended inside the interval is missed: a contender that matters runs longer.
"""

from __future__ import annotations

import os
import time

import psutil

#: Cells that ran beside more than this much other CPU load (in cores) count as contended.
CONTENDED_CORES = 0.25


def _snapshot() -> dict[tuple[int, float], tuple[float, int | None]]:
    """(pid, create time) -> (CPU seconds, session id) of every process we may read."""
    found = {}
    for proc in psutil.process_iter():
        try:
            with proc.oneshot():
                cpu = proc.cpu_times()
                found[proc.pid, proc.create_time()] = (cpu.user + cpu.system, os.getsid(proc.pid))
        except (psutil.Error, OSError):
            continue
    return found


class OtherLoad:
    """``start()`` before the worker starts, ``stop(worker_pid)`` after it exits; then ``cores``
    is the average number of cores other processes used meanwhile."""

    cores: float | None = None

    def start(self) -> None:
        self._t0 = time.perf_counter()
        self._before = _snapshot()

    def stop(self, worker_pid: int) -> None:
        wall = time.perf_counter() - self._t0
        mine = {os.getpid(), worker_pid}
        used = 0.0
        for key, (cpu, sid) in _snapshot().items():
            if key[0] in mine or sid == worker_pid:
                continue
            used += cpu - self._before.get(key, (0.0, None))[0]
        self.cores = max(used, 0.0) / wall if wall > 0 else 0.0
