"""CPU used by other processes while a cell runs: a busy machine is detected, not measured.

Two snapshots of every process's CPU time, at the cell's start and end. What processes outside
the cell's worker session (the worker and everything it started) and outside this harness
process used in between, divided by the cell's wall time, is the other load in cores. A process
that both started and ended inside the interval is missed: a contender that matters runs longer.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import time
from collections.abc import Iterator

import psutil

from harness.records import CONTENDED_CORES, STEAL_SHARE  # the ``contended`` tag's rule, with the records


def _snapshot() -> dict[tuple[int, float], tuple[float, int | None]]:
    """(pid, create time) -> (CPU seconds, session id) of every process we may read."""
    found: dict[tuple[int, float], tuple[float, int | None]] = {}
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


def _proc_stat() -> tuple[float, float, float]:
    """(busy, steal, total) CPU seconds of the whole machine so far, from /proc/stat's ``cpu`` line."""
    with open("/proc/stat") as f:
        fields = [float(v) for v in f.readline().split()[1:]]
    tick = os.sysconf("SC_CLK_TCK")
    user, nice, system, idle, iowait, irq, softirq, steal = (fields + [0.0] * 8)[:8]
    busy = user + nice + system + irq + softirq
    return busy / tick, steal / tick, (busy + idle + iowait + steal) / tick


def cpu_of(pids: list[int]) -> float:
    """CPU seconds (user and system) these processes and the children they waited for have used."""
    total = 0.0
    for pid in pids:
        try:
            cpu = psutil.Process(pid).cpu_times()
            total += cpu.user + cpu.system + cpu.children_user + cpu.children_system
        except psutil.Error:
            continue
    return total


class MachineLoad:
    """Load on the whole machine over a short interval (one turn of resident workers), from
    /proc/stat: ``start(pids)`` and ``stop()`` around it; then ``other_cores`` is the CPU that
    neither ``pids`` (the workers) nor this process used, in cores, and ``steal`` the share of the
    machine's CPU time the hypervisor gave to other guests. Tick-granular (10 ms), so a turn
    shorter than about 0.2 s reads coarsely; ``contended`` allows for that, and ``combined``
    reads many short turns as one long interval."""

    other_cores: float = 0.0
    steal: float = 0.0

    def __init__(self, own_children: bool = False) -> None:
        #: Count this process's own finished children as ours (a worker's compiler runs, g++ under
        #: Inductor); not the parent's: it reaps its workers, whose whole lives would land in one turn.
        self.own_children = own_children

    def _self_cpu(self) -> float:
        return sum(os.times()[: 4 if self.own_children else 2])

    def start(self, pids: list[int]) -> None:
        self._pids = list(pids)
        self._t0 = time.perf_counter()
        self._stat = _proc_stat()
        self._mine = cpu_of(self._pids) + self._self_cpu()

    def stop(self, pids: list[int] | None = None) -> None:
        """End the interval; ``pids``: processes that started during it and count as ours too
        (a worker's compile pool), their CPU from their start."""
        busy, steal, total = (b - a for a, b in zip(self._stat, _proc_stat(), strict=True))
        ours = self._pids if pids is None else sorted(set(self._pids) | set(pids))
        mine = cpu_of(ours) + self._self_cpu() - self._mine
        self._set(max(busy - mine, 0.0), steal, total, max(time.perf_counter() - self._t0, 1e-9))

    def _set(self, other_s: float, steal_s: float, total_s: float, wall: float) -> None:
        self._other_s, self._steal_s, self._total_s, self._wall = other_s, steal_s, total_s, wall
        self.other_cores = other_s / wall
        self.steal = steal_s / total_s if total_s > 0 else 0.0

    @classmethod
    def combined(cls, loads: list[MachineLoad]) -> MachineLoad:
        """The load over all of ``loads``' intervals together (none: an idle, zero-length one)."""
        both = cls()
        sums = [sum(getattr(ld, f) for ld in loads) for f in ("_other_s", "_steal_s", "_total_s", "_wall")]
        both._set(sums[0], sums[1], sums[2], max(sums[3], 1e-9))
        return both

    @property
    def contended(self) -> bool:
        # Two ticks of slack per core: /proc's accounting is sampled, and a short turn is few
        # ticks (a 50 ms turn's slack on 2 cores is 0.8 cores: only ``combined`` can tell).
        slack = 2 * (os.cpu_count() or 1) / os.sysconf("SC_CLK_TCK") / self._wall
        return self.other_cores > CONTENDED_CORES + slack or self.steal > STEAL_SHARE


@contextlib.contextmanager
def busy_cores(cores: int) -> Iterator[list[int]]:
    """``cores`` processes that each keep one core busy (a steady load beside a calibration or a
    test: the neighbour a user's machine has), ended on exit; their pids. Each spins on its own,
    so the load is the same from the first turn to the last."""
    procs = [
        subprocess.Popen([sys.executable, "-c", "while True: pass"], stdin=subprocess.DEVNULL)
        for _ in range(max(cores, 0))
    ]
    try:
        yield [p.pid for p in procs]
    finally:
        for p in procs:
            p.kill()
        for p in procs:
            p.wait()
