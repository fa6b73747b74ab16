"""One cell in this process (harness.running.worker's modes and the resident worker,
harness.running.resident): set the adapter up on its device and data, time its dispatch floor,
and build the cell's record from a measurement (the step statistics, GFLOP/s, tokens, the
pipelined and input-pipeline fields, the profiled pass). Raises ``Skip`` and ``DeviceFailure``
for a cell that cannot start."""

from __future__ import annotations

import contextlib
import dataclasses
import resource
import time
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any, cast

import numpy as np
import psutil

from adapters import DeviceUnavailable, discover
from adapters.base import Options
from harness.measuring import input_pipeline, profilers, timing
from harness.records import Cell, Record, base_adapter, new_record, pipeline_of, round_of, spec_of
from harness.running import devices
from harness.stats.steps import step_time, summarize
from workloads.arrays import ulp_moved
from workloads.images import PipelineSettings, PipelineSkip, has_images, image_dataset
from workloads.rnn import decoded_lengths


class Skip(Exception):
    """The cell cannot run here; the message is the reason."""


class DeviceFailure(Exception):
    """The cell asked for a GPU this machine has but the framework cannot use; the message says why."""


def prepare(cell: Cell):
    """Instantiate adapter and spec, resolve the device and set up; raises Skip, or DeviceFailure
    for a GPU this machine has that the framework cannot use (harness.running.devices tells them apart)."""
    adapter = discover()[base_adapter(cell)].cls()
    spec = spec_of(cell)
    reason = adapter.supports(spec)
    if reason:
        raise Skip(reason)
    try:
        device = adapter.resolve_device(cell["device_requested"])
    except DeviceUnavailable as exc:
        status, reason = devices.verdict(adapter, str(exc), cell["device_requested"])
        raise (Skip if status == "skipped" else DeviceFailure)(reason) from None
    params = spec.init_params()
    if cell.get("perturb_seed") is not None:  # harness.checks.backends: the rounding-spread run
        params = ulp_moved(params, np.random.default_rng(int(cell["perturb_seed"])))
    options = Options(threads=cell["threads"], precision=cell.get("precision", "fp32"))
    t0 = time.perf_counter()
    adapter.setup(spec, params, device, options)
    setup_s = time.perf_counter() - t0
    return adapter, spec, device, setup_s


def place(adapter, batches: list) -> tuple[list[Any], list[float]]:
    placed, seconds = [], []
    for batch in batches:
        t0 = time.perf_counter()
        placed.append(adapter.to_device(batch))
        seconds.append(time.perf_counter() - t0)
    return placed, seconds


def step_function(adapter, spec):
    """``infer_step`` for inference workloads (``task="decode"``), else ``train_step``."""
    return adapter.infer_step if spec.task != "train" else adapter.train_step


def feed(
    adapter, spec, mode: str, batches: list, pipeline: PipelineSettings | None = None
) -> tuple[Any, list, list[float], dict[str, Any] | None]:
    """The step function and its per-step inputs for a data mode:

    ``resident``: the dataset is placed before timing; steps take placed batches.
    ``host``: batches stay in host memory; every step places its batch (copy inside the step).
    ``loader``: the framework's native input pipeline feeds every step: on image workloads
    its image pipeline (per-sample decode and augmentation, workloads.images, tuned by
    ``pipeline``), on the others the pre-made batches.
    The third item is the seconds of copying single batches to the device, timed on their own;
    the fourth, for an image pipeline, its WaitMeter (``meter``), settings and knobs.
    """
    step = step_function(adapter, spec)
    if mode == "resident":
        return (step, *place(adapter, batches), None)
    _, copy_s = place(adapter, batches[:4])
    if mode == "host":
        return (lambda batch: step(adapter.to_device(batch))), batches, copy_s, None
    if has_images(spec):
        settings = pipeline or PipelineSettings()
        try:
            made = adapter.image_loader(image_dataset(spec), settings)
        except PipelineSkip as exc:
            raise Skip(f"{adapter.name}: {exc}") from None
        if made is None:
            raise Skip(f"{adapter.name} has no native image input pipeline")
        meter = input_pipeline.WaitMeter(made[0])
        meter.prime()
        info = {"meter": meter, "settings": settings, "knobs": made[1]}
        return (lambda _: step(meter.next())), list(range(len(batches))), copy_s, info
    stream = adapter.loader(batches)
    if stream is None:
        raise Skip(f"{adapter.name} has no native input pipeline")
    return (lambda _: step(next(stream))), list(range(len(batches))), copy_s, None


def _delta(before: dict[str, Any], after: dict[str, Any]) -> dict[str, Any]:
    """Compile counters accrued during training (set-up compiles are not the step's)."""
    return {k: after[k] - before.get(k, 0) for k in after}


def achieved_gflops(flops: list[int | None], step_batches: list[int], times: list[float]) -> tuple[float, float] | None:
    """Useful GFLOP/s over the steady window, and the highest single step's (step i ran batch ``step_batches[i]``)."""
    if any(f is None for f in flops):
        return None
    work = [cast(int, flops[b]) for b in step_batches]
    return sum(work) / sum(times) / 1e9, max(w / t for w, t in zip(work, times, strict=True)) / 1e9


def token_counts(adapter, spec, batches: list) -> tuple[list[int] | None, dict[str, Any]]:
    """Tokens each batch's step processes, and for decoding the decoded-length statistics.

    Decoding counts what the adapter emitted (EOS included, PAD after it not), from one more
    untimed decode of every batch; training counts the workload's own token count."""
    if spec.task == "train":
        return [spec.tokens(b) for b in batches] if spec.tokens(batches[0]) is not None else None, {}
    lengths = [decoded_lengths(adapter.fetch(adapter.infer_step(adapter.to_device(b)))) for b in batches]
    every = np.concatenate(lengths)
    stats = {
        "decode_len_mean": float(every.mean()),
        "decode_len_min": int(every.min()),
        "decode_len_max": int(every.max()),
        "decode_early_exits": int((every < spec.max_len).sum()),
        "decode_captions": int(every.size),
    }
    return [int(n.sum()) for n in lengths], stats


def tokens_per_s(tokens: list[int] | None, step_batches: list[int], times: list[float]) -> float | None:
    """Tokens per second over the steady window; step i of it ran batch ``step_batches[i]``."""
    if not tokens:
        return None
    return sum(tokens[b] for b in step_batches) / sum(times)


def pipelined(m: timing.Measurement, batch_size: int, flops: list[int | None]) -> dict[str, Any]:
    """Throughput fields from the pipelined blocks: the median block's time per step, the same for the
    synced steps in windows of a block's length, the fastest block's GFLOP/s (for the physics check)."""
    if not m.block_times_s:
        return {"pipelined_s": None}
    per_step = float(np.median(m.block_times_s)) / m.block_steps
    work = None if None in flops else float(np.mean(cast("list[int]", flops)))
    k, synced = m.block_steps, m.step_times_s
    # Mean per step over windows of a block's length, median over windows: against this, not the median
    # step, the pipelined time shows what overlap gains (a block's mean holds the odd slow step).
    windows = [float(np.mean(synced[i : i + k])) for i in range(0, len(synced) - k + 1, k)]
    return {
        "pipelined_s": per_step,
        "synced_block_s": float(np.median(windows)) if windows else float(np.mean(synced)),
        "pipelined_samples_per_s": batch_size / per_step,
        "pipelined_block_steps": m.block_steps,
        "pipelined_blocks_s": m.block_times_s,
        "pipelined_recompiles": m.block_recompiles,
        "pipelined_gflops_max": None if work is None else work * m.block_steps / min(m.block_times_s) / 1e9,
    }


def compile_count(adapter) -> Callable[[], int] | None:
    """The adapter's cumulative traces + compiles, for the timing protocol; None if it counts neither."""
    if not {"traces", "compiles"} & set(adapter.compile_stats()):
        return None
    return lambda: sum(compile_counters(adapter))


#: Untimed steps before the dispatch floor's window, which may be 30 steps of well under a
#: millisecond: the tiny instance's first steps after its set-up are not its steady ones.
FLOOR_WAKE_S = 0.5


def wake(stepper: timing.Stepper, seconds: float = FLOOR_WAKE_S) -> None:
    """Synced steps, untimed, for ``seconds``: the machine and the framework's pools awake."""
    until = time.perf_counter() + seconds
    while time.perf_counter() < until:
        stepper.one()


#: The dispatch floor's timing: the tiny step is cheap, so a short window settles.
FLOOR_PROFILE = timing.Profile("floor", 5, 30, 2000, budget_s=0.3, target_rel_iqr=0.05, rounds=1, timeout_s=600)


@dataclasses.dataclass
class Floor:
    """A dispatch floor's tiny adapter instance, set up and compiled (``prepare_floor``), for
    ``time_floor`` to time."""

    adapter: Any
    step: Callable[[Any], Any]
    inputs: list
    pass_steps: int
    chained: bool
    prepared_s: float


def prepare_floor(cell: Cell, spec, device: str) -> Floor | dict[str, Any]:
    """The first half of ``dispatch_floor``: a second adapter instance on ``spec.tiny()`` (its
    compiles are not the cell's), set up and run untimed through a cold window until a pass
    compiles nothing, so that timing it later (``time_floor``) needs no compile. Its time is
    start-up, not measured: a resident worker prepares it beside another's start. A dict where
    there is no floor to time: ``{}`` (none planned, no tiny spec, unsupported) or the failure."""
    if cell.get("floors") is False:
        return {}
    tiny = spec.tiny()
    if tiny is None:
        return {}
    started = time.perf_counter()
    try:
        adapter = discover()[base_adapter(cell)].cls()
        if adapter.supports(tiny):
            return {}
        adapter.setup(tiny, tiny.init_params(), device, Options(cell["threads"], cell.get("precision", "fp32")))
        batches = tiny.batches()
        mode = cell.get("data", "resident")
        # An image pipeline's per-sample work is not dispatch overhead (and its workers are
        # expensive to start twice): the floor of an image pipeline cell is a resident one's.
        mode = "resident" if mode == "loader" and has_images(tiny) else mode
        step, inputs, _, _ = feed(adapter, tiny, mode, batches)
        pass_steps = len(batches) if len({tiny.flops(b) for b in batches}) > 1 else 1  # as bench() decides
        timing.Stepper(step, adapter.sync, inputs, compiles=compile_count(adapter)).cold_window(FLOOR_PROFILE)
        return Floor(adapter, step, inputs, pass_steps, tiny.task == "train", time.perf_counter() - started)
    except Exception as exc:  # noqa: BLE001 - the floor is extra; the cell's own numbers stand
        return {"dispatch_floor_error": f"{type(exc).__name__}: {exc}"[:300]}


def time_floor(floor: Floor) -> dict[str, Any]:
    """The second half of ``dispatch_floor``: the prepared instance woken, then its steady step
    time taken as the cell's is (``dispatch_floor_s``); ``dispatch_floor_timed_s`` is what this
    took, ``dispatch_floor_wall_s`` that and the preparation. A failure is recorded, not raised."""
    started = time.perf_counter()
    try:
        wake(timing.Stepper(floor.step, floor.adapter.sync, floor.inputs))
        m = timing.measure(
            floor.step,
            floor.adapter.sync,
            floor.inputs,
            FLOOR_PROFILE,
            compiles=compile_count(floor.adapter),
            pass_steps=floor.pass_steps,
            chained=floor.chained,
            blocks=False,  # its synced steps alone: the pipelined blocks would double its cost (whole passes)
            warm=True,  # prepare_floor ran its cold window: another would cost a warm pass or more, untimed
        )
    except Exception as exc:  # noqa: BLE001 - the floor is extra; the cell's own numbers stand
        return {"dispatch_floor_error": f"{type(exc).__name__}: {exc}"[:300]}
    timed = time.perf_counter() - started
    return {
        "dispatch_floor_s": step_time(m.step_times_s, m.step_batches if floor.pass_steps > 1 else None),
        "dispatch_floor_wall_s": floor.prepared_s + timed,
        "dispatch_floor_timed_s": timed,
    }


def dispatch_floor(cell: Cell, spec, device: str) -> dict[str, Any]:
    """The adapter's step time on ``spec.tiny()`` (harness.measuring.floors): a second adapter instance,
    set up and warmed up like the first (its compiles are not the cell's), its steady step time
    as the cell's is taken (``prepare_floor``, then ``time_floor``). Once per cell: the caller says
    when (a cell timed alone in its first round, a resident worker where its cell is planned with
    ``dispatch_floor``, which prepares it in its start and times it when the parent asks). Not for
    a cell planned with ``floors: False`` (a calibration's: it judges verdicts alone); a failure is
    recorded, not raised."""
    floor = prepare_floor(cell, spec, device)
    return floor if isinstance(floor, dict) else time_floor(floor)


@dataclasses.dataclass
class Started:
    """A cell set up and ready for its first step: what ``finish`` needs to write its record."""

    adapter: Any
    spec: Any
    device: str
    setup_s: float
    batches: list
    step: Callable[[Any], Any]
    inputs: list
    place_s: list[float]
    pipe: dict[str, Any] | None
    flops: list[int | None]
    pass_steps: int
    """Steps of one pass where steps differ in size (every block holds whole passes), else 1."""
    chained: bool
    compiles_before: dict[str, Any]


def start(cell: Cell) -> Started:
    """Set the cell up (adapter, spec, device, placed data or pipeline); raises Skip or DeviceFailure."""
    adapter, spec, device, setup_s = prepare(cell)
    batches = spec.batches()
    step, inputs, place_s, pipe = feed(adapter, spec, cell.get("data", "resident"), batches, pipeline_of(cell))
    flops = [spec.flops(b) for b in batches]
    return Started(
        adapter,
        spec,
        device,
        setup_s,
        batches,
        step,
        inputs,
        place_s,
        pipe,
        flops,
        # Steps of different sizes: a block is whole passes, so every block does the same work.
        pass_steps=len(batches) if spec.steps_differ(batches) else 1,
        chained=spec.task == "train",
        compiles_before=adapter.compile_stats(),
    )


def finish(cell: Cell, s: Started, m: timing.Measurement, profile, sampler) -> Record:
    """The record of a cell whose steps were measured (``m``), from its steady window and blocks."""
    adapter, spec, device, batches, flops, pass_steps = s.adapter, s.spec, s.device, s.batches, s.flops, s.pass_steps
    if not m.step_times_s:
        n = len(m.recompile_times_s)
        raise RuntimeError(f"all {n} steady-window steps recompiled: {adapter.name} never reached a steady state")
    compile_stats = _delta(s.compiles_before, adapter.compile_stats())
    sync_verified = None
    if device == "cuda":
        # One more step: right after sync() the GPU must have nothing queued, else every step
        # time above stopped the clock before the work was done.
        adapter.sync(s.step(s.inputs[0]))
        busy = adapter.device_busy()
        if busy:
            reason = f"{adapter.name}.sync() returned while the GPU still had queued work; its step times read low"
            return new_record(cell, "failed", reason)
        sync_verified = None if busy is None else True
    gflops = achieved_gflops(flops, m.step_batches, m.step_times_s)
    tokens, decode_stats = token_counts(adapter, spec, batches)
    steady: dict[str, Any] = summarize(
        m.step_times_s, spec.batch_size, batches=m.step_batches if pass_steps > 1 else None
    )
    passes: dict[str, Any] = {"step_batches": m.step_batches, "pass_s": steady["median_s"] * pass_steps}
    return new_record(
        cell,
        "ok",
        device=device,
        batch_size=spec.batch_size,
        protocol=timing.protocol(profile),
        versions=adapter.version(),
        settings=adapter.settings(),
        setup_s=s.setup_s,
        to_device_s=float(np.median(s.place_s)),
        batch_bytes=int(sum(a.nbytes for a in batches[0].values())),
        first_step_s=m.first_step_s,
        cold_steps=len(m.cold_times_s),
        cold_times_s=m.cold_times_s,
        cold_s=sum(m.cold_times_s),
        steps=len(m.step_times_s),
        step_times_s=m.step_times_s,
        loss_first=m.loss_first,
        loss_last=m.loss_last,
        compiles=compile_stats.get("compiles"),
        traces=compile_stats.get("traces"),
        compile_s=compile_stats.get("compile_s"),
        flops_per_step=None if gflops is None else float(np.mean(cast("list[int]", flops))),
        gflops=None if gflops is None else gflops[0],
        gflops_max_step=None if gflops is None else gflops[1],
        host_peak_rss_bytes=resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
        device_peak_bytes=adapter.device_memory_peak(),
        gpu_util_mean=sampler.mean if sampler else None,
        gpu_sampled=sampler.gpu if sampler else None,
        sync_verified=sync_verified,
        tokens_per_s=tokens_per_s(tokens, m.step_batches, m.step_times_s),
        steady_recompiles=len(m.recompile_times_s),
        recompile_times_s=m.recompile_times_s,
        cold_settled=m.cold_settled,
        **pipelined(m, spec.batch_size, flops),
        **decode_stats,
        pass_steps=pass_steps,
        **(passes if pass_steps > 1 else {}),
        **steady,
    )


def ops_profile(cell: Cell, s: Started, record: Mapping[str, Any]) -> dict[str, Any]:
    """``{"ops_profile": ...}``: the cell's profiled pass (harness.measuring.profilers), its trace in
    ``<run folder>/traces/``; only with ``--profile-ops`` (the cell's ``profile_ops`` names the run
    folder), in a cell's first round, after its timing. Else {} (a default run is unchanged)."""
    if not cell.get("profile_ops") or round_of(cell) != 1 or record.get("status") != "ok":
        return {}
    run_dir = Path(cell["profile_ops"])
    out_dir = run_dir / profilers.TRACES / profilers.folder_name(cell["cell_id"])
    profilers.clear(out_dir)
    requires = type(s.adapter).requires
    found = profilers.profile_cell(requires, s.step, s.adapter.sync, s.inputs, out_dir, run_dir, record.get("median_s"))
    return {"ops_profile": found}


@contextlib.contextmanager
def steady_meters(*meters: Any) -> Iterator[None]:
    """Every given meter (None ones left out) entered around the steady window."""
    with contextlib.ExitStack() as stack:
        for meter in filter(None, meters):
            stack.enter_context(meter)
        yield


def pipeline_fields(adapter, spec, pipe: dict[str, Any], cpu, m: timing.Measurement, profile) -> dict[str, Any]:
    """An image pipeline cell's record fields: what ran (kind, settings, knobs, data), the
    steady window's waits and CPU use, and the pipeline's own throughput (no training), read
    after the timing so it never competes with the steps."""
    meter, settings = pipe["meter"], pipe["settings"]
    # What it buffered while the steps ran comes out at once: drawn untimed first.
    drain = (settings.prefetch + 2) * max(settings.workers, 1)
    per_s = input_pipeline.throughput(meter.next, profile.budget_s, drain)
    return {
        "loader_kind": adapter.image_loader_kind,
        "pipeline": settings.as_dict(),
        "pipeline_knobs": pipe["knobs"],
        "pipeline_data": image_dataset(spec).settings(),
        "pipeline_start_s": meter.start_s,
        **input_pipeline.wait_fields(meter, m.step_times_s, m.recompile_times_s),
        "cpu_cores_busy": cpu.cores,
        "cpu_worker_cores_busy": cpu.worker_cores,
        "cpu_util": cpu.util,
        "cpu_count": psutil.cpu_count(),
        "pipeline_batches_per_s": per_s,
        "pipeline_ceiling_s": 1.0 / per_s,
    }


def compile_counters(adapter) -> tuple[int, int]:
    """The adapter's cumulative (traces, compiles); a counter it does not report reads 0."""
    stats = adapter.compile_stats()
    return int(stats.get("traces") or 0), int(stats.get("compiles") or 0)
