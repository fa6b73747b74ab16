"""The types of a run's cells and records (``Cell``, ``Record``): every key a stage writes or
reads, declared once. harness.records reads and writes them (JSON, the schema version) and is
where every stage imports them from; they are apart only so that each file holds one job."""

from __future__ import annotations

from typing import Any, TypedDict


class _Worker(TypedDict):
    """The keys every cell has: what starting its worker reads (harness.running.runner)."""

    adapter: str  #: the label (``torch-eager``, ``torch-eager@torch-next``, ``...~twin1``)
    threads: int
    device_requested: str  #: ``cpu``, ``cuda`` (``auto`` only for doctor's probe)


class Cell(_Worker, total=False):
    """One cell of a run's matrix: what a worker is asked to run. harness.running.plan builds
    them (calibration twins add ``slowdown`` or ``wait_s``, fidelity ``kind`` and ``script``, the session
    ``kernel_floor_s``, the executors each round's ``round``); conformance and doctor build
    smaller ones, with the keys their workers read. Every record starts with its cell's keys."""

    run_id: str
    cell_id: str  #: see ``cell_id``: stable across runs
    base_adapter: str  #: the adapter module where ``adapter`` is not it (see ``base_adapter``)
    env: str  #: the named environment (``--env NAME=PYTHON``) a cell runs in
    python: str | None  #: that environment's interpreter
    framework: str
    graph: str
    workload: str
    overrides: list[str]  #: ``field=value`` spec overrides (``spec_of`` applies them)
    spec: dict[str, Any]  #: the resulting spec, ``Workload.as_dict()``
    param_count: int
    data: str  #: ``resident``, ``host`` or ``loader``
    precision: str
    force_precision: bool
    profile: str
    pipeline: dict[str, int]  #: input pipeline settings, parsed by the plan (``pipeline_of``)
    sweep: dict[str, Any]  #: ``{"field": name, "value": float}`` of a sweep's cell
    slowdown: float  #: a calibration twin's busy-wait factor (harness.calibrate)
    wait_s: float  #: a calibration twin's busy-wait per step in seconds (harness.calibrate)
    first_block_steps: int  #: a later generation's block size, round 1's (harness.running.turns.first_blocks)
    gated: bool  #: started beside another: warms up only when the parent says (harness.running.resident)
    kind: str  #: ``idiomatic`` for a fidelity script's cell
    script: str  #: that script's module
    kernel_floor_s: float | None  #: the step's kernels at the device's measured peak (harness.measuring.floors)
    round: int  #: which of the run's rounds a worker is running (from 1)
    compile_cache_dir: str  #: the cell's compiler cache for the run (harness.running.turns.compile_cache)
    warm_compiles: bool  #: an earlier process of the cell may have filled that cache
    worker_bytes: float  #: host memory a resident worker of the cell may take (turns.resident_limit)
    profile_ops: str  #: the run folder a profiled pass writes its trace under (``--profile-ops``)
    floors: bool  #: False: skip the kernel floors (calibration twins run none)
    perturb_seed: int  #: backend parity's perturbed-weights run: the seed of its one-ulp moves
    dispatch_floor: bool  #: this process times the cell's dispatch floor (harness.running.turns)


class Record(Cell, total=False):
    """A cell's result as written to ``results.jsonl``: the cell's keys, then these. Only
    ``schema_version``, ``status`` and ``reason`` are in every record; the measured keys are
    in ``ok`` records (and some in others), each where its part of the harness measured it.
    Listed are the keys the reports and statistics read; a record may hold more."""

    schema_version: int
    status: str  #: one of STATUSES
    reason: str
    # identity of where it ran
    machine: str | None  #: None where a merged run's records name unlike machines without a fingerprint
    node: str
    device: str
    versions: dict[str, Any]
    fingerprint: dict[str, Any]
    #: how it was timed (harness.measuring.timing.protocol); resident workers add ``mode`` ``turns``
    #: and ``blocks_sized``: ``round 1`` or ``each process`` (schema 2 and before, harness.records)
    protocol: dict[str, Any]
    group: str
    rounds: int
    turn_ids: list[int]
    # the timed steps (seconds)
    step_times_s: list[float]
    median_s: float
    ci_low_s: float
    ci_high_s: float
    iqr_s: float
    wall_s: float
    first_step_s: float
    compile_s: float | None
    cold_s: float
    cold_times_s: list[float]
    cold_settled: bool | None
    cold_other_cores: float  #: other CPU load while the cold window ran (cores; resident workers)
    cold_contended: bool  #: that load was past the contention threshold (harness.measuring.contention)
    cold_cpu_cores: float  #: cores the cold window used: the worker's and its helpers' CPU s over its wall s
    warmed_beside: bool  #: its cold window ran beside another light worker's (harness.running.turns.light_cells)
    floor_prepare_s: float  #: seconds preparing its dispatch floor: after the turns, else in its start (``ready_s``)
    floor_after_turns: bool  #: its dispatch floor was prepared and timed after the turns, not in its start
    pipelined_s: float
    synced_block_s: float
    turn_block_s: list[float]
    turns_dropped: int
    turns_contended: int
    #: kept turns a slow cell sat out (harness.running.turns.takes_part; a combined record: over its
    #: processes); absent: none
    sat_out_turns: int
    #: the rule a slow cell's turns followed: ``block_factor`` (its block against the group's median),
    #: ``blocks`` of every ``turns`` kept turns
    slow_rule: dict[str, float]
    verdict_level: float
    #: the run's time budget, where it had one (harness.running.budget); None: a budget whose size
    #: its records did not keep (schema 1, the looks protocol: harness.records)
    budget_s: float | None
    contended: bool
    other_cpu_cores: float
    steal_share: float
    noisy: bool
    # what a step does
    batch_size: int
    steps: int
    loss_first: float
    samples_per_s: float
    tokens_per_s: float | None  #: over the steady window's mean step (the report divides tokens_per_step by its median)
    tokens_per_step: float | None  #: set by combine: tokens a step processes, over a pass of the dataset
    mean_s: float
    decode_captions: int
    decode_len_mean: float
    gflops: float | None
    flops_per_step: float | None
    dispatch_floor_s: float
    dispatch_floor_wall_s: float  #: seconds its preparation and timing took (the budget's estimate of later rounds)
    #: of those, the seconds its timing took once its worker was ready (alone); 0.0: the floor was
    #: timed inside its worker's start (schema 1, harness.records)
    dispatch_floor_timed_s: float
    steady_recompiles: int
    pipelined_recompiles: int
    recompile_times_s: list[float]
    step_batches: list[int]
    pass_steps: int
    pass_s: float
    # input pipelines (``data: loader``)
    wait_times_s: list[float]
    wait_median_s: float
    input_bound_share: float
    pipeline_data: dict[str, Any]
    # resources
    host_peak_rss_bytes: int
    device_peak_bytes: int | None
    gpu_util_mean: float | None
    energy_per_step_j: float  #: the whole GPU's energy per synced step (NVML's counter), where it has one
    turn_energy_j: list[float]  #: per kept turn, one process (harness.running.resident)
    round_energy_j: list[float]  #: each process's, combined (harness.stats.cells.energy)
    energy_ci_j: list[float]  #: its interval over processes, with enough of them
    to_device_s: float
    loss_last_step: int  #: the steps its process had trained when ``loss_last`` was read (resident workers)
    batch_bytes: int  #: one batch's bytes, as placed (``to_device_s`` is its placement)
    traces: int | None
    ops_profile: dict[str, Any]
    worker_s: float  #: the worker process's own time, start to record (harness.running.worker)
    ready_s: float  #: the worker's start: import, set-up, cold window and floor (resident workers)
    starting_s: float  #: its generation's start, its first worker started to its last ready (turns)
    starts_at_once: int  #: workers its generation started at a time (harness.running.turns)
    quiet_wait_s: float  #: its generation's wait for a quiet machine, all ready, before floors and turns
    setup_s: float  #: the worker's set-up before its first step (build, data, parameters)
    pipelined_blocks_s: list[float]
    turn_block_steps: int  #: steps in each of its blocks (resident workers)
    settings: dict[str, Any]  #: the adapter's settings as the worker ran them (compile mode, XLA flags ...)
    compute_median_s: float  #: the step without its input wait (``data: loader``)
    loss_last: float
    decode_len_min: int
    decode_len_max: int
    gflops_max_step: float | None
    pipelined_gflops_max: float | None
    # serving (the export task, harness.measuring.serving)
    p50_s: float
    p99_s: float
    # input pipelines' own measurements (``data: loader``)
    cpu_cores_busy: float
    cpu_worker_cores_busy: float
    cpu_count: int
    pipeline_batches_per_s: float
    pipeline_ceiling_s: float
    # set when records are combined (harness.stats.cells) or a report reads them (harness.reporting.model)
    rounds_ok: int
    rounds_done: int
    round_numbers: list[int]
    round_medians_s: list[float]
    round_steps: list[int]
    round_cold_s: list[float]
    round_pipelined_s: list[float]
    blocks: int | None  #: the fewest kept blocks behind one of its process levels
    ci_kind: str  #: ``processes`` or ``steps``: what the cell's interval is over
    pipelined_samples_per_s: float
    round_cold_contended: list[bool]
    group_generations: list[int]  #: the generations every cell of the record's group ran (annotate_groups)
    group_cells: int
    group_prior_var: float | None  #: the group's prior for a pair's variance (harness.stats.verdicts)
    group_prior_df: float | None
    prior_weight: float
    process_levels: dict[int, float]
    round_cold_times_s: list[list[float]]
    peak_gflops: float | None
    machine_label: str | None
    ranked_under_load: bool  #: contended, ranked all the same (the run's --rank-under-load)
    nodes: list[str]  #: the nodes a combined cell's processes ran on (cluster executors)
    round_turns: dict[int, list[int]]  #: generation -> [turns kept, retaken, contended] (harness.stats.cells)
    stderr_tail: str  #: a failed worker's last stderr lines (harness.processes.tail)


class ExportRecord(Record, total=False):
    """An export task's record (harness.export): a cell's keys, a record's (``status``, ``p50_s``,
    ``p99_s`` ...), and what exporting and serving one path measured."""

    export_path: str  #: ``in-process`` (the adapter's own forward) or the exporter's name
    export_s: float
    artifact_bytes: int
    export_runtimes: dict[str, str]
    load_s: float
    first_call_s: float
    cold_load_s: float
    framework_preloaded: bool
    throughput_per_s: float
    throughput_batch: int
    parity_error: float
    parity_worst_row: int
    parity_allowed: float
