"""Resident workers taking turns: how a run's cells are timed on this machine.

The cells compared with each other (a *group*: the same workload, setting, data mode, device and
precision, differing only by adapter) are timed together. A *generation* of a group (a record's
``round``) is one fresh worker process per cell, started one after another: each sets up and runs
its cold window alone, then waits idle (harness.running.resident). Then the parent runs *turns*:
each turn asks every worker, one at a time in a shuffled order, for one block of steps (tens of
milliseconds), while the others wait on their pipes. Turns milliseconds apart see the same machine,
so the machine's drift over minutes lands on every cell alike and cancels in their ratios; several
generations measure what differs between processes (harness.stats has the verdict rules).

A turn during which other processes used the CPU or the hypervisor stole it (/proc/stat,
harness.measuring.contention.MachineLoad) is left out for every worker and retaken, up to
MAX_DROPPED_SHARE of the turns; past that the turns are kept. The records are marked contended
when the kept turns, read together as one interval, show such load (one short turn is too few
clock ticks to tell on its own).

Slow workers (``slow_workers``): a block is whole passes where steps differ in size, and at least
a few steps, so one slow adapter's block can last many times the others'. A worker whose warm-up block lasted
SLOW_BLOCK_FACTOR times its group's median block or more takes part in only verdicts.MIN_BLOCKS of
every ``min_turns`` kept turns, spread evenly (``takes_part``); its record says how many kept turns it
sat out (``sat_out_turns``), and its level is read over its own turns (harness.stats.cells).

Memory: every worker of a generation is resident at once (its framework, model and data; on a GPU
a context each, with no preallocation). A group of more cells than ``resident_limit()`` allows runs
as several sub-groups, each its own group.

Dispatch floors (harness.running.cell_work.dispatch_floor, a second tiny instance of each adapter)
are timed once per cell, by its worker in its group's last planned generation, where the budget
holds them beside it and the planned generations of the groups still to run: those generations are
what the verdicts need, and in round 1 the floors took over a quarter of a slow group's start-up.
Once the turns are over, each worker in turn (a shuffled order) sets the tiny instance up, compiles
it (``prepare_floor``: ``floor_prepare_s``) and times it while the others wait idle: the turns
never wait for a floor. (Where a worker prepared its floor in its start, warming up alone: records
with ``floor_prepare_s`` but not ``floor_after_turns``, a later generation's start with floors took
53-61% of generation 1's, against 32-54% without, in evidence/2026-11-28-xeon-cpu-default-30m-b.)

Which generation runs next, and what a time budget buys, is harness.running.budget's. Cells that
cannot take turns run alone as before (harness.running.runner.run_cell): the idiomatic
scripts of ``fidelity`` and image input pipelines (their loader workers would keep decoding while
other cells take their turns).

Start-ups side by side (``starts_at_once``): a generation after the first starts two workers at a
time on a machine of two cores or more; they import and set up together, then each warms up alone
(its cold window, ``gated``: harness.running.resident) while the other waits idle, and the next
two start once both are ready. Two *light* cells (``light_cells``: a warm-up that, the last time it
ran alone, used about one core: TensorFlow's tracing, JAX's op-by-op dispatch) start together and
warm up side by side, each on a core of its own; the light cells start first, the longest
warm-ups (``latest_cold_s``) first, so that they pair with each other and a pair lasts about as
long as each of its warm-ups.
(Where each next worker started as soon as one was ready, one
worker's cold window ran beside another's import: on the 2-core VM torch-eager's
16-step rnn-caption warm-up took 22-40 s there against 0.5 s alone, its OpenMP threads waiting on
a busy core, in the AMD default run of 2026-11-28: docs/results.md.) Nothing measured there is reported: its
compiles come from the cache, its cold window is round 1's, and the turns begin only once every
worker is ready. A
worker of a later generation takes its cell's block size from round 1's record (``first_blocks``),
where its probe ran alone: a probe beside another's start read the step slow and sized blocks of 5
steps, whose steps measured 8-34% slower (median 13%, in 51 of 51 generations of
reports/2026-11-27-calibration-slow-cells) than those of identical cells sized alone (the first
step after a wait is slow, and weighs more in a short block). Round 1 (cold compiles, cold windows,
break-even) still starts one at a time, alone.
(Floors timed inside the start, which then went one worker at a time, took 148 of the 263 s of
start of the default run's rnn-caption third generation: records of schema 1 with
``dispatch_floor_timed_s`` 0, harness.records.)
A generation's records say how long its start took in all (``starting_s``, the floors not in
it) and how many started at once (``starts_at_once``). Once every worker is ready, the
generation waits for the machine to be quiet (``wait_quiet``, at most QUIET_WAIT_S and as long as
its start took; ``quiet_wait_s`` on its records) before its turns.

Compiler caches (``compile_cache``): each cell gets a compiler cache of its own for the run
(XLA's persistent cache, Inductor's caches), empty when its first process starts, so that process
compiles cold (its first step, cold window, compile counts and break-even are what the reports
show) and later processes, which are there for their steady state, start warm (``warm_compiles``
on their records) instead of paying the same compiles again. TensorFlow and eager adapters have
no such cache: theirs are cold in every process.
"""

from __future__ import annotations

import hashlib
import math
import os
import random
import select
import shutil
import statistics
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

import psutil

from adapters import AdapterInfo
from harness import records
from harness.measuring import timing
from harness.measuring.contention import MachineLoad
from harness.records import Cell, Record
from harness.running import runner
from harness.running.resident_handle import Gone, Resident
from harness.running.sink import RoundSink
from harness.stats import verdicts
from workloads.images import has_images

#: Fewest kept turns per generation: each is one block per worker, the unit the verdicts average.
MIN_TURNS = 8
MAX_TURNS = 500
#: Contended turns retaken, as a share of the turns wanted, before contended ones are kept.
MAX_DROPPED_SHARE = 1.0
#: Memory one resident worker may take on a CPU machine (a framework, its model and data).
WORKER_BYTES = 1.5 * 2**30
#: GPU memory one resident worker may take: a CUDA context (~0.5 GiB) and the default workloads.
GPU_WORKER_BYTES = 2 * 2**30
#: A cell whose warm-up (cold window) used at most this many cores, its own and its helpers' CPU
#: seconds over its wall time, warms up beside another such cell in a later generation
#: (``light_cells``): one Python thread (tracing, op-by-op dispatch) and some slack. On the 2-core
#: Xeon VM rnn-caption's tf-function and jax-eager warm-ups used 1.03 and 1.17 cores alone and took
#: 22.5 s side by side against 41 s one after the other; torch-eager's and keras-torch's (OpenMP,
#: 1.9-2.0 cores) took 4.8 s side by side against 0.95 s.
LIGHT_CORES = 1.3
#: Without a reply to a turn in this many seconds (or the cell's timeout, if shorter), a worker is hung.
TURN_TIMEOUT_S = 120.0
#: A worker whose block (its fewest steps or whole passes, as its warm-up turn took it) lasts this
#: many times its group's median block or more is *slow* (``slow_workers``) and takes part in only
#: verdicts.MIN_BLOCKS of every ``min_turns`` kept turns, spread evenly (``takes_part``): the
#: verdicts' error is mostly between processes, so its blocks past the fewest a verdict needs buy
#: little and took most of a generation's turns (rnn-caption's jax-eager and tf-eager, 8 s and 3.4 s
#: a pass against a median of 0.45 s, were 72% of them in the 2026-11-27 default run).
SLOW_BLOCK_FACTOR = 5.0
#: Once every worker is ready, a generation waits for the machine to be quiet (``wait_quiet``)
#: before it times floors or turns, at most this long and as long as its start took. On the H100 of
#: 2026-11-27 other load of 0.5-0.6 cores ran through the turns of the mlp bench's generations 2
#: and 4 (started from the cache, no floors), so each of their cells was tagged contended and not
#: ranked; generation 3, whose floors' compiles ran before ``ready``, was quiet. A worker's
#: background start-up going on after its ``ready`` fits that (Inductor, for one, starts a pool of
#: compile workers), and would load every turn. The test suite's runs (timing.QUICK_TURNS) wait at
#: most 5 s: they assert no timing, and beside the suite's other test process (``make test`` runs
#: two) the machine does not quiet, so each of their generations waited as long as its start took.
QUIET_WAIT_S = 5.0 if timing.QUICK_TURNS else 60.0


def compile_cache(results: Path, cell: Cell, k: int) -> dict[str, Any]:
    """The fields that give generation ``k`` of a cell its compiler cache (module docstring): the
    folder, one per run and cell (emptied before the cell's first process, so that one compiles
    cold even where an interrupted run left it), and whether an earlier process may have filled it."""
    folder = cache_root(results) / _digest(cell["cell_id"])
    if k == 1:
        shutil.rmtree(folder, ignore_errors=True)
    return {"compile_cache_dir": str(folder), "warm_compiles": k > 1}


def first_blocks(done: Sequence[Record], k: int) -> dict[str, int]:
    """Cell id -> the block size (steps) its round-1 process took turns with, for the workers of
    generation ``k`` > 1 (module docstring); none for round 1 or where that process left none."""
    if k == 1:
        return {}
    return {r["cell_id"]: int(r["turn_block_steps"]) for r in done if r.get("round") == 1 and r.get("turn_block_steps")}


def light_cells(done: Sequence[Record]) -> set[str]:
    """Cells whose latest warm-up that ran alone (``warmed_beside`` false) used at most LIGHT_CORES
    cores (``cold_cpu_cores``): their warm-ups may run side by side in a later generation (module
    docstring). A warm-up beside another never reclassifies its cell: it shared the cores."""
    cores = _latest(done, lambda r: None if r.get("warmed_beside") else r.get("cold_cpu_cores"))
    return {cell for cell, used in cores.items() if used <= LIGHT_CORES}


def latest_cold_s(done: Sequence[Record]) -> dict[str, float]:
    """Cell id -> the seconds of its latest process's cold window (its warm-up)."""
    return _latest(done, lambda r: sum(r["cold_times_s"]) if r.get("cold_times_s") else None)


def _latest(done: Sequence[Record], value: Callable[[Record], float | None]) -> dict[str, float]:
    """Cell id -> ``value`` of its latest round's record among those where it is not None."""
    latest: dict[str, tuple[int, float]] = {}
    for r in done:
        v = value(r)
        if v is not None and (r["cell_id"] not in latest or records.round_of(r) >= latest[r["cell_id"]][0]):
            latest[r["cell_id"]] = (records.round_of(r), float(v))
    return {cell: v for cell, (_, v) in latest.items()}


def cache_root(results: Path) -> Path:
    """Where a run's compiler caches live while it runs: a temporary folder named after the run's
    results file (two runs never share one), never inside the run's own folder."""
    return Path(tempfile.gettempdir()) / f"dlcompare-compile-cache-{_digest(str(results.resolve()))}"


def _digest(text: str) -> str:
    return hashlib.sha1(text.encode()).hexdigest()[:16]


def group_of(cell: Cell) -> str:
    """The group key: the cell's id without its adapter (the same for the same setting in any run)."""
    return records.setting_of(cell)


def servable(cell: Cell) -> bool:
    """Whether a cell can take turns (the module docstring says which cannot)."""
    if cell.get("script"):
        return False
    if cell.get("data") == "loader":
        return not has_images(records.spec_of(cell))
    return True


def resident_limit(device: str = "cpu", gpu_free_bytes: int | None = None, worker_bytes: float | None = None) -> int:
    """Workers that may be resident at once (at least 2): what the available host memory holds at
    ``worker_bytes`` each (a cell's own, else WORKER_BYTES), and on a GPU also what its free memory
    holds at GPU_WORKER_BYTES each (a CUDA context, the model and data; the frameworks are set not
    to preallocate). ``gpu_free_bytes``: read with
    NVML where not given; without NVML the host's limit alone."""
    limit = int(psutil.virtual_memory().available * 0.8 // (worker_bytes or WORKER_BYTES))
    if device == "cuda":
        free = gpu_free_bytes if gpu_free_bytes is not None else _gpu_free_bytes()
        if free is not None:
            limit = min(limit, int(free * 0.8 // GPU_WORKER_BYTES))
    return max(2, limit)


def _gpu_free_bytes() -> int | None:
    """Free memory of the GPU the cells use (NVML, the first visible GPU), None without NVML."""
    try:
        import pynvml

        from harness.measuring.gpu_util import cell_gpu

        pynvml.nvmlInit()
        try:
            kind, key = cell_gpu()
            get = pynvml.nvmlDeviceGetHandleByUUID if kind == "uuid" else pynvml.nvmlDeviceGetHandleByIndex
            return int(pynvml.nvmlDeviceGetMemoryInfo(get(key if kind == "uuid" else int(key))).free)
        finally:
            pynvml.nvmlShutdown()
    except Exception:  # noqa: BLE001 - no NVML, no driver: the host's limit stands
        return None


def starts_at_once(k: int, cores: int | None = None) -> int:
    """Workers generation ``k`` starts at a time (module docstring): 2 after the first generation
    where this process may use two cores or more (``cores``), else 1."""
    if cores is None:
        cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    return 2 if k > 1 and cores >= 2 else 1


def wait_quiet(pids: list[int], wait_s: float = QUIET_WAIT_S, cores: int | None = None) -> float:
    """Wait until a window of ``quiet_window_s(cores)`` shows no other load past the contention
    rule (harness.measuring.contention.MachineLoad; the workers ``pids`` are ours, their live
    children are not), at most ``wait_s``; the seconds waited, one window at least."""
    window = quiet_window_s(cores)
    began = time.monotonic()
    while True:
        load = MachineLoad()
        load.start(pids)
        time.sleep(window)
        load.stop()
        if not load.contended or time.monotonic() - began >= wait_s:
            return time.monotonic() - began


def quiet_window_s(cores: int | None = None) -> float:
    """How long one look for quiet lasts: 0.2 s a core, from 0.5 to 4 s, so that /proc/stat's
    ticks (two a core of slack in MachineLoad.contended) leave about 0.1 core of slack."""
    cores = cores or os.cpu_count() or 1
    return min(max(0.2 * cores, 0.5), 4.0)


def slow_workers(blocks: Mapping[Any, float], factor: float = SLOW_BLOCK_FACTOR) -> set[Any]:
    """The workers (keys of ``blocks``: each one's block seconds) whose block lasts ``factor``
    times the median block or more; none among fewer than three (two cells have no typical block)."""
    if len(blocks) < 3:
        return set()
    middle = statistics.median(blocks.values())
    return {w for w, s in blocks.items() if middle > 0 and s >= factor * middle}


def takes_part(taken: int, kept: int, min_turns: int) -> bool:
    """Whether a slow worker that took part in ``taken`` of the ``kept`` turns so far takes the
    next: it keeps verdicts.MIN_BLOCKS blocks of every ``min_turns`` kept turns (all of them where
    ``min_turns`` is that few), spread evenly; a turn left out for contention is taken again."""
    return taken * min_turns < verdicts.MIN_BLOCKS * (kept + 1)


def slow_rule(plan: Turns) -> dict[str, float]:
    """The rule a slow worker's turns followed, as its record keeps it (``slow_rule``)."""
    return {"block_factor": SLOW_BLOCK_FACTOR, "blocks": verdicts.MIN_BLOCKS, "turns": plan.min_turns}


def first_ready(starting: Sequence[Resident], timeout_s: float) -> Resident:
    """The starting worker that said ``ready`` (or ended) first; past its ``timeout_s`` from its
    start, the one whose time ran out first (its ``ready`` then fails it)."""
    if len(starting) == 1:
        return starting[0]
    deadline = {r: r.t0 + timeout_s for r in starting}
    while True:
        left = min(deadline.values()) - time.perf_counter()
        if left <= 0:
            return min(starting, key=lambda r: deadline[r])
        found, _, _ = select.select(list(starting), [], [], left)
        if found:
            return found[0]


@dataclass
class Turns:
    """How long a generation takes turns: at least ``min_turns`` kept turns, then until
    ``seconds`` are spent (or ``max_turns``)."""

    seconds: float
    min_turns: int = MIN_TURNS
    max_turns: int = MAX_TURNS


def run_generation(
    cells: Sequence[Cell],
    k: int,
    adapters: Mapping[str, AdapterInfo],
    sink: RoundSink,
    plan: Turns,
    first_turn: int,
    extra: Mapping[str, Any],
    group: str | None = None,
    floors: bool = False,
) -> int:
    """Generation ``k`` of one group (module docstring): every cell's worker started and warmed
    up in turn, then turns, then each record (with ``extra`` fields) handed to ``sink``; with
    ``floors``, each cell whose dispatch floor no earlier record holds prepares and times it,
    one worker at a time, after the turns.
    A cell that is skipped, fails or hangs gets its record; the others go on. Returns the next
    free turn number. Every worker is ended on the way out, also on an interruption."""
    residents: list[Resident] = []
    rng = random.Random(f"{cells[0]['run_id']}:{group_of(cells[0])}:{k}")
    order = list(cells)
    rng.shuffle(order)
    extra = {**extra, "group": group or group_of(cells[0])}

    def done(rec: Mapping[str, Any]) -> None:
        sink.finish({**rec, **extra})

    def take(turn: int, part: Sequence[Resident] | None = None) -> dict[Resident, float]:
        """One turn: the block of every resident worker (of ``part``, where given), in a shuffled
        order; a worker lost fails its cell. Each block's seconds, where its step time came back."""
        part = list(residents if part is None else part)
        took = {}
        for r in rng.sample(part, len(part)):
            try:
                step_s = r.turn(turn, min(sink.timeout_s, TURN_TIMEOUT_S))
            except Gone as exc:
                residents.remove(r)
                done(r.record(f"{exc} during turn {turn}"))
                continue
            if step_s is not None:
                took[r] = step_s * r.block_steps
        return took

    done_before = records.load(sink.results) if sink.results.exists() else []
    measured = floored(done_before) if floors else set()
    sized = first_blocks(done_before, k)
    at_once = starts_at_once(k)
    # cells whose warm-ups may run side by side
    pairable = light_cells(done_before) if at_once > 1 else set()
    # the light ones start (and pair) first, the longest warm-ups together: each pair lasts its longer one's
    took = latest_cold_s(done_before)
    order.sort(key=lambda c: (c["cell_id"] not in pairable, -took.get(c["cell_id"], 0.0)))
    starting: list[Resident] = []

    def settle() -> None:
        """Wait for the first starting worker to be ready; one that ended gets its record."""
        r = first_ready(starting, sink.timeout_s)
        starting.remove(r)
        if r.ready(sink.timeout_s):
            residents.append(r)
        else:
            done(r.record())

    def settle_gated() -> None:
        """Side by side: the starting workers import and set up together; once all are set up,
        each warms up alone while the others wait idle (module docstring)."""
        waiting = []
        for r in list(starting):
            if r.set_up(sink.timeout_s):
                waiting.append(r)
            else:
                starting.remove(r)
                done(r.record())
        if len(waiting) > 1 and all(r.cell["cell_id"] in pairable for r in waiting):
            since = time.perf_counter()  # light warm-ups side by side: each on a core of its own
            sent = [r for r in waiting if r.send_warm(beside=True)]
            for r in waiting:
                starting.remove(r)
                if r in sent and r.ready(sink.timeout_s, since):
                    residents.append(r)
                else:
                    done(r.record())
            return
        for r in waiting:
            starting.remove(r)
            if r.warm(sink.timeout_s):
                residents.append(r)
            else:
                done(r.record())

    began = time.monotonic()
    try:
        for cell in order:
            cell_k = cast(Cell, {**cell, "round": k, **compile_cache(sink.results, cell, k)})
            if cell["cell_id"] in sized:
                cell_k["first_block_steps"] = sized[cell["cell_id"]]
            if floors and cell["cell_id"] not in measured:
                cell_k["dispatch_floor"] = True
            sink.progress.start(cell, k)
            try:
                reason = runner.skip_reason(adapters[records.base_adapter(cell)], cell_k)
            except Exception as exc:  # noqa: BLE001 - a bad spec is the cell's failure
                done(records.new_record(cell_k, "failed", f"{type(exc).__name__}: {exc}"))
                continue
            if reason:
                done(records.new_record(cell_k, "skipped", reason))
                continue
            if at_once > 1:
                cell_k["gated"] = True
            starting.append(Resident(adapters[records.base_adapter(cell)], cell_k))
            while len(starting) >= at_once:
                settle_gated() if at_once > 1 else settle()
        while starting:
            settle_gated() if at_once > 1 else settle()
        starting_s = time.monotonic() - began
        # never longer than the start took: a machine busy with other work gets no quieter by waiting
        quiet_s = wait_quiet([r.proc.pid for r in residents], min(QUIET_WAIT_S, starting_s))
        kept: list[int]
        loads: list[MachineLoad]
        turn, kept, dropped, loads = first_turn, [], 0, []
        # A warm-up turn, not kept: the first after a long wait (caches, thread pools asleep) is no steady step.
        slow = slow_workers(take(turn))
        taken = dict.fromkeys(slow, 0)
        turn += 1
        start = time.monotonic()
        while residents and len(kept) < plan.max_turns:
            if len(kept) >= plan.min_turns and time.monotonic() - start >= plan.seconds:
                break
            part = [r for r in residents if r not in slow or takes_part(taken[r], len(kept), plan.min_turns)]
            load = MachineLoad()
            load.start([r.proc.pid for r in residents])
            take(turn, part)
            load.stop()
            if load.contended and dropped < MAX_DROPPED_SHARE * max(plan.min_turns, len(kept)):
                dropped += 1
            else:
                kept.append(turn)
                loads.append(load)
                for r in slow.intersection(part):
                    taken[r] += 1
            turn += 1
        # The cell's tag reads all kept turns as one interval: one short turn is too few ticks to tell.
        whole = MachineLoad.combined(loads)
        turn_fields = {
            "turns_dropped": dropped,
            "turns_contended": sum(ld.contended for ld in loads),
            "contended": whole.contended,
            "other_cpu_cores": whole.other_cores,
            "steal_share": whole.steal,
            "starting_s": starting_s,
            "starts_at_once": at_once,
            "quiet_wait_s": quiet_s,
        }
        for r in rng.sample(residents, len(residents)):  # each floor alone, the others idle
            if r.cell.get("dispatch_floor"):
                try:  # its tiny instance is set up, compiled and timed: minutes where JAX and TF trace
                    r.floor(sink.timeout_s)
                except Gone as exc:
                    residents.remove(r)
                    done(r.record(f"{exc} while preparing or timing its dispatch floor"))
        for r in residents:
            r.ask_finish(kept)
        deadline = time.monotonic() + sink.timeout_s
        while residents:
            r = residents.pop(0)
            rec = r.collect(max(deadline - time.monotonic(), 1.0))
            sat_out = {"sat_out_turns": len(kept) - taken[r], "slow_rule": slow_rule(plan)} if r in slow else {}
            done({**rec, **turn_fields, **sat_out} if rec["status"] == "ok" else rec)
        return turn
    finally:
        for r in residents + starting:
            r.kill()
            r.close()


#: A record's fields that say its cell's dispatch floor was tried (a value, or why it failed).
FLOOR_FIELDS = ("dispatch_floor_s", "dispatch_floor_error")


def floored(done: Sequence[Record]) -> set[str]:
    """Cells of the run whose dispatch floor a record already holds (measured or failed)."""
    return {r["cell_id"] for r in done if any(f in r for f in FLOOR_FIELDS)}


def next_turn(results: Path) -> int:
    """The first turn number no record of the run has used (turns are numbered run-wide)."""
    done = records.load(results) if results.exists() else []
    return 1 + max((t for r in done for t in r.get("turn_ids") or []), default=0)


def split(cells: list[Cell], limit: int) -> list[list[Cell]]:
    """A group's cells in sub-groups of at most ``limit`` resident workers, as even as possible."""
    parts = math.ceil(len(cells) / limit)
    return [cells[i::parts] for i in range(parts)]
