"""A resident worker: one cell's fresh process that stays alive and takes turns with the other
cells' workers (harness.running.turns drives them).

It sets the cell up and runs its cold window alone (compiles included, as harness.measuring.timing
describes), says ``ready``, then waits idle on its command pipe. Each ``turn`` runs one block of
synced steps (each timed alone; about BLOCK_S, whole passes where steps differ in size) and, in the
cell's first process, every PIPED_EVERY-th turn, one pipelined block (issued back to back, one
sync), and replies with the synced block's step time. ``finish`` names the turns to keep (the parent
leaves out turns taken under contention); the record is built from those alone. A cell planned with
``dispatch_floor`` prepares its dispatch floor's tiny instance (harness.running.cell_work.prepare_floor:
set-up and compiles) and times it on ``floor``, which the parent sends after the turns, to one
worker at a time while the others wait idle: the parent asks once per cell, in its group's last
planned generation, so that the floors' compiles do not delay the
generations the verdicts need. End of file on the command pipe (the parent died) ends the worker
silently. A cell planned ``gated`` (a later generation's worker, started beside another) says
``set`` once it is imported and set up, and runs its cold window only on ``warm``: the parent warms
one worker at a time while the others wait idle, since a warm-up beside another's import ran
PyTorch's steps 40-80 times slower (their OpenMP threads wait on a busy core); two whose warm-ups
use about one core (``{"cmd": "warm", "beside": true}``: harness.running.turns.light_cells) warm
up side by side. Every worker records the cores its cold window used (``cold_cpu_cores``: its own
and its helpers' CPU seconds over the window's wall time), whether it warmed up beside another
(``warmed_beside``), and how long preparing its dispatch floor took (``floor_prepare_s``).

Messages are JSON lines: commands ``{"cmd": "warm", "beside": B}``, ``{"cmd": "floor"}``,
``{"cmd": "turn", "turn": T}``, ``{"cmd": "finish", "keep": [T, ...]}``; replies ``{"event": "set"}``,
``{"event": "ready", ...}``, ``{"event": "floor"}``, ``{"event": "turn", "turn": T, "block_s": S, ...}``.
"""

from __future__ import annotations

import json
import math
import os
import time
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import psutil

from harness.measuring import timing
from harness.measuring.contention import MachineLoad, cpu_of
from harness.measuring.gpu_util import UtilSampler
from harness.records import Cell, Record, amended, new_record, round_of
from harness.running import cell_work
from harness.stats.steps import step_time

#: Most steps in one block, whatever the step time (a tiny step would otherwise ask for millions).
MAX_BLOCK_STEPS = 500
#: Most synced step times a record keeps (``step_times_s``, for quartiles and plots): whole turns,
#: evenly spread, past it. The verdicts use every block (``turn_block_s``); a record stays small.
MAX_RECORDED_STEPS = 5000
#: A turn's pipelined block is taken every PIPED_EVERY-th turn, in a cell's first process only.
#: The verdicts read the synced blocks alone; the pipelined blocks give a secondary figure
#: (throughput without a sync per step, set against the same process's synced blocks) whose median
#: settles from half of them: one every turn doubled the turns' time, and taking them in every
#: generation cost rnn-caption's later generations a sixth of their time.
PIPED_EVERY = 2
#: Fewest synced steps in a block: its median must not be one step's (the first after a wait is slow).
MIN_BLOCK_STEPS = 5
#: Seconds of synced steps after the cold window that size the blocks (the cold window's own
#: steps may have run beside another worker's start-up).
PROBE_S = 0.1


def block_steps(step_s: float, pass_steps: int, block_s: float = timing.BLOCK_S) -> int:
    """Steps of a block lasting about ``block_s`` at ``step_s`` a step: whole passes of
    ``pass_steps``, at least MIN_BLOCK_STEPS steps, at most MAX_BLOCK_STEPS (rounded up to a pass)."""
    steps = max(MIN_BLOCK_STEPS, math.ceil(block_s / max(step_s, 1e-9)))
    return pass_steps * math.ceil(min(steps, MAX_BLOCK_STEPS) / pass_steps)


def probe(stepper: timing.Stepper, pass_steps: int, seconds: float = PROBE_S) -> float:
    """The step time now: synced steps for about ``seconds`` (whole passes where steps differ in
    size, at least one pass or MIN_BLOCK_STEPS steps); their median, or their mean over passes."""
    times: list[float] = []
    start = time.perf_counter()
    while (
        len(times) < max(pass_steps, MIN_BLOCK_STEPS)
        or (time.perf_counter() - start < seconds and len(times) < MAX_BLOCK_STEPS)
        or len(times) % pass_steps
    ):
        times.append(stepper.one()[0])
    return float(np.median(times)) if pass_steps == 1 else float(np.mean(times))


def sizing_step(stepper: timing.Stepper, pass_steps: int, cold: list[float]) -> float:
    """The step time that sizes a worker's blocks: where steps differ in size (a block is whole
    passes anyway), the mean over the cold window's last pass, which ended it (compile-free where
    the adapter counts compiles), instead of one more pass: a pass of an eager decoder takes
    seconds, and sizing needs no precision; else ``probe``."""
    if pass_steps > 1 and len(cold) >= pass_steps:
        return float(np.mean(cold[-pass_steps:]))
    return probe(stepper, pass_steps)


def slowed(
    step: Callable[[Any], Any], sync: Callable[[Any], float], factor: float, wait_s: float = 0.0
) -> Callable[[Any], Any]:
    """``step``, synced, then a busy-wait of ``factor`` times what it took plus ``wait_s``, inside
    the timed region: a twin of the adapter slowed by a known share of each step whatever the
    machine's drift, or by a fixed time (which, unlike a share of a contended step, does not grow
    when another worker loads the machine), for calibration (harness.calibrate). A busy-wait, not a
    sleep, so the core stays as busy as a slower kernel would keep it. (The harness's own sync
    afterwards finds nothing left to wait for.)"""

    def run(batch: Any) -> Any:
        t0 = time.perf_counter()
        handle = step(batch)
        sync(handle)
        until = time.perf_counter() + factor * (time.perf_counter() - t0) + wait_s
        while time.perf_counter() < until:
            pass
        return handle

    return run


def _lines(fd: int) -> Iterator[dict[str, Any]]:
    with os.fdopen(fd, "r") as commands:
        for line in commands:
            if line.strip():
                yield json.loads(line)


def serve(cell: Cell, fd_in: int, fd_out: int) -> Record | None:
    """Run the cell as a resident worker (module docstring); its record, or None if the parent
    went away. A skip or a device failure is returned at once, before ``ready``."""
    profile = timing.PROFILES[cell["profile"]]
    reply = os.fdopen(fd_out, "w", buffering=1)
    try:
        s = cell_work.start(cell)
    except cell_work.Skip as exc:
        return new_record(cell, "skipped", str(exc))
    except cell_work.DeviceFailure as exc:
        return new_record(cell, "failed", str(exc))
    slowdown, wait_s = float(cell.get("slowdown") or 0.0), float(cell.get("wait_s") or 0.0)
    step = slowed(s.step, s.adapter.sync, slowdown, wait_s) if slowdown or wait_s else s.step
    stepper = timing.Stepper(step, s.adapter.sync, s.inputs, compiles=cell_work.compile_count(s.adapter))
    commands = _lines(fd_in)
    beside = False
    if cell.get("gated"):  # imported and set up beside another worker: warm up when the parent says
        reply.write(json.dumps({"event": "set"}) + "\n")
        warm = next(commands, None)
        if warm is None:
            return None  # the parent went away
        beside = bool(warm.get("beside"))
    load = MachineLoad(own_children=True)  # the cold window runs alone: all but this worker's family is other load
    load.start(_children())
    cpu_before, t0 = cpu_of([os.getpid(), *_children()]), time.perf_counter()
    cold, values, settled = stepper.cold_window(profile)
    cores = (cpu_of([os.getpid(), *_children()]) - cpu_before) / max(time.perf_counter() - t0, 1e-9)
    load.stop(_children())
    # a later generation's blocks are round 1's size, sized alone (harness.running.turns.first_blocks)
    steps = int(cell.get("first_block_steps") or block_steps(sizing_step(stepper, s.pass_steps, cold), s.pass_steps))
    extra: dict[str, Any] = {"cold_other_cores": load.other_cores, "cold_contended": load.contended}
    extra.update({"cold_cpu_cores": cores, "warmed_beside": beside})
    sampler = UtilSampler(interval_s=0.01) if s.device == "cuda" else None
    turns: dict[int, dict[str, Any]] = {}
    first = round_of(cell) == 1  # later processes are there for the verdicts' synced blocks
    reply.write(json.dumps({"event": "ready", "cold_s": sum(cold), "block_steps": steps}) + "\n")
    for msg in commands:
        if msg["cmd"] == "floor":
            if cell.get("dispatch_floor") and "floor_prepare_s" not in extra:
                extra.update(floor_after_turns(cell, s))
            reply.write(json.dumps({"event": "floor"}) + "\n")
        elif msg["cmd"] == "turn":
            piped = first and msg["turn"] % PIPED_EVERY == 0
            turns[msg["turn"]] = taken = take_turn(stepper, s, steps, sampler, piped)
            reply.write(json.dumps({"event": "turn", "turn": msg["turn"], "block_s": taken["block_s"]}) + "\n")
        elif msg["cmd"] == "finish":
            return record(cell, s, profile, sampler, cold, values, settled, turns, msg["keep"], steps, extra)
    return None


def floor_after_turns(cell: Cell, s: cell_work.Started) -> dict[str, Any]:
    """The cell's dispatch floor, prepared (a second, tiny instance set up and compiled:
    ``floor_prepare_s``) and timed now, after the turns, while the other workers wait idle; what
    failed, where it did."""
    t0 = time.perf_counter()
    prepared = cell_work.prepare_floor(cell, s.spec, s.device)
    found: dict[str, Any] = {"floor_prepare_s": time.perf_counter() - t0, "floor_after_turns": True}
    return {**found, **(prepared if isinstance(prepared, dict) else cell_work.time_floor(prepared))}


def take_turn(
    stepper: timing.Stepper, s: cell_work.Started, steps: int, sampler: UtilSampler | None, piped: bool = True
) -> dict[str, Any]:
    """One turn: ``steps`` synced steps, then (if ``piped``) a pipelined block of as many; a step or
    block during which the adapter compiled is kept apart. ``block_s`` is None when every synced
    step compiled; ``piped_s`` is None when the block compiled, absent when none was taken;
    ``energy_j``: the GPU's energy per synced step (NVML's counter), absent where it has none."""
    times, batches, recompiled = [], [], []
    with sampler or _Nothing():
        energy_before = sampler.energy_mj() if sampler else None
        for _ in range(steps):
            before, batch = stepper.count(), stepper.step % len(stepper.batches)
            elapsed, value = stepper.one()
            if stepper.count() != before:
                recompiled.append(elapsed)
            else:
                times.append(elapsed)
                batches.append(batch)
        energy_after = sampler.energy_mj() if sampler else None
        block: dict[str, float | None] = {}
        if energy_before is not None and energy_after is not None and steps:
            block["energy_j"] = (energy_after - energy_before) / 1e3 / steps  # per synced step, whole GPU
        if piped:
            before = stepper.count()
            piped_s, value = stepper.block(steps, s.chained)
            block["piped_s"] = piped_s if stepper.count() == before else None
    whole = times and (s.pass_steps == 1 or len(times) == steps)
    return {
        **block,
        "times": times,
        "batches": batches,
        "recompiled": recompiled,
        "block_s": step_time(times, batches if s.pass_steps > 1 else None) if whole else None,
        "loss": value,
        "trained_steps": stepper.step,  # every step so far, cold window included: what ``loss`` is after
    }


class _Nothing:
    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: object) -> None:
        return None


def _children() -> list[int]:
    """This worker's live descendants (Inductor's compile pool, a loader's workers)."""
    return [p.pid for p in psutil.Process().children(recursive=True)]


def record(
    cell: Cell,
    s: cell_work.Started,
    profile: timing.Profile,
    sampler: UtilSampler | None,
    cold: list[float],
    values: list[float],
    settled: bool | None,
    turns: dict[int, dict[str, Any]],
    keep: list[int],
    steps: int,
    extra: dict[str, Any],
) -> Record:
    """The cell's record from the kept turns (harness.running.cell_work.finish builds the rest) and
    ``extra``, what the worker measured before its turns (the cold window's load, its dispatch floor)."""
    kept = [t for t in keep if t in turns]
    ok = [t for t in kept if turns[t]["block_s"] is not None]
    shown = ok[:: max(1, math.ceil(len(ok) * steps / MAX_RECORDED_STEPS))]  # whole turns, evenly spread
    m = timing.Measurement(
        cold_times_s=cold,
        step_times_s=[x for t in shown for x in turns[t]["times"]],
        loss_first=values[0],
        loss_last=turns[max(turns)]["loss"] if turns else values[-1],
        step_batches=[b for t in shown for b in turns[t]["batches"]],
        recompile_times_s=[x for t in turns for x in turns[t]["recompiled"]],
        cold_settled=settled,
        block_steps=steps,
        block_times_s=[turns[t]["piped_s"] for t in kept if turns[t].get("piped_s") is not None],
        block_recompiles=sum("piped_s" in turns[t] and turns[t]["piped_s"] is None for t in kept),
    )
    rec = cell_work.finish(cell, s, m, profile, sampler)
    if rec["status"] != "ok":
        return rec
    rec["protocol"] = {
        **rec["protocol"],
        "mode": "turns",
        "block_steps": steps,
        "piped_every": PIPED_EVERY,
        "piped_first_process": True,
        "blocks_sized": "round 1",  # every process's blocks are as its cell's round-1 process sized them
    }
    energy = [turns[t]["energy_j"] for t in ok if turns[t].get("energy_j") is not None]
    turned = {
        # the steps the last loss comes after: processes whose cold windows differ in length end
        # at different losses without computing anything differently
        **({"loss_last_step": turns[max(turns)]["trained_steps"]} if turns else {}),
        "turn_ids": ok,
        "turn_block_s": [turns[t]["block_s"] for t in ok],
        # None: a GPU whose energy counter NVML could not read (before Volta, or no NVML)
        **({"turn_energy_j": energy, "energy_per_step_j": float(np.median(energy))} if energy else {}),
        **({"energy_per_step_j": None} if sampler is not None and not energy else {}),
        "turn_block_steps": steps,
        **{key: cell[key] for key in ("slowdown", "wait_s") if cell.get(key)},
        **extra,
    }
    rec = amended(rec, turned)
    # At finish the other workers of the generation wait idle: the profiled pass runs alone.
    return amended(rec, cell_work.ops_profile(cell, s, rec))
