"""The report model: what a report says, computed once from its runs' records, from which
harness.reporting.report renders every table, picture and sentence.

It holds the combined cells (``load_runs``) and each process's own record, the runs'
environments and parity outcomes, each
group's family verdicts (leaders, "vs fastest" marks: ``cells.families``), the overview's grid
(which reads those families), the workload sections' cells in the overview's order, and the pair
verdicts asked of it (``Model.pair``), each computed once. Verdicts are pure functions of two
records (harness.stats.verdicts), so a sentence quoting a verdict reads the one its table printed.

Every section of a report renders from this model alone (harness.reporting.sections: ``Section``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from harness import records
from harness.records import Record, is_idiomatic, load_env
from harness.reporting import overview, parity
from harness.reporting.cells import families
from harness.reporting.formatting import fingerprint_name, machine_name
from harness.reporting.hardware import peak_gflops, physics_violations, same_machine
from harness.stats.cells import combine_all, fingerprint_key
from harness.stats.verdicts import Family, PairVerdict, pair_verdict


@dataclass(frozen=True)
class Block:
    """What one section of a report adds: its lines on the first page (``report.md``) and on the
    details page (``details.md``); either may be empty (a section with nothing to say adds
    nothing). Pictures are written into ``Model.plot_dir`` by the section and linked from its lines."""

    report: list[str] = field(default_factory=list)
    details: list[str] = field(default_factory=list)


def load_runs(
    run_dirs: list[Path], raw: Mapping[Path, list[Record]] | None = None, rank_under_load: bool = False
) -> tuple[list[Record], dict[str, dict[str, Any]]]:
    """Records of one or several runs, combined per cell, each a new record annotated with its
    machine and the measured peak of its device; with several machines, device labels name the
    machine. ``raw``: a run's records as already loaded (results.jsonl is read once per report).
    A contended cell is marked ``ranked_under_load`` where its run's env.json asked for that
    ranking (the bench's ``--rank-under-load``) or ``rank_under_load`` does (the report's).

    A run's machine is the one its env.json describes, unless its records carry several machine
    fingerprints (a cluster run over unlike nodes): then each record's machine is its fingerprint.
    The peaks and kernel floors measured on the submitting host stay with the cells that ran on
    a machine like it."""
    recs: list[Record] = []
    envs: dict[str, dict[str, Any]] = {}
    for run_dir in run_dirs:
        env = load_env(run_dir)
        name = machine_name(env) if env else run_dir.name
        if name in envs:
            name = f"{name} [{run_dir.name}]"
        envs[name] = env
        loaded = (raw or {}).get(run_dir)
        loaded = records.load(run_dir / records.RESULTS) if loaded is None else loaded
        combined = combine_all([r for r in loaded if not is_idiomatic(r)])
        mixed = len({fingerprint_key(r) for r in combined if r.get("fingerprint")}) > 1
        for r in combined:
            r = {**r, "machine": name}
            if r.get("contended") and (rank_under_load or (env or {}).get("rank_under_load")):
                r["ranked_under_load"] = True
            if mixed and r.get("fingerprint"):
                suffix = f" [{run_dir.name}]" if len(run_dirs) > 1 else ""
                r["machine"] = fingerprint_name(r["fingerprint"]) + suffix
            r["peak_gflops"] = peak_gflops(env, r)
            if not same_machine(env, r):
                r.pop("kernel_floor_s", None)
            recs.append(r)
    if len(envs) > 1 or len({r["machine"] for r in recs}) > 1:
        recs = [{**r, "machine_label": r["machine"]} for r in recs]
    return recs, envs


@dataclass
class Model:
    """One report's facts (module docstring). Its records are never changed after ``load``."""

    run_dirs: list[Path]
    recs: list[Record]
    envs: dict[str, dict[str, Any]]
    #: The runs' parity outcomes by workload, then adapter (harness.reporting.parity).
    parity: dict[str, dict[str, dict[str, Any]]]
    #: Every group's family verdicts, by ``cells.axes``: the summary, findings, tables and overview read them.
    families: dict[tuple, Family]
    #: The overview's adapter x column grid, None where nothing ran on resident data.
    grid: overview.Grid | None
    #: Each workload table's cells (resident data), by (workload, setting), in the overview's column order.
    sections: dict[tuple[str, tuple], list[Record]]
    #: Every process's own record, rounds apart (the runs' results.jsonl as written; idiomatic scripts left out).
    processes: list[Record] = field(default_factory=list)
    #: Where plots are written (None: a report without pictures).
    plot_dir: Path | None = None
    #: The user's own calibration the Method quotes beside the committed ones (``--calibration``).
    calibration: Path | None = None
    #: Where the run is still going: what the provisional page says of it (None: the final report).
    provisional: str | None = None
    #: Every pair verdict asked so far, by the records' identities and level (the records held too,
    #: so an identity is not reused while its verdict is kept).
    verdicts: dict[tuple[int, int, float | None], tuple[Record, Record, PairVerdict]] = field(default_factory=dict)

    def pair(self, a: Record, b: Record, level: float | None = None) -> PairVerdict:
        """time(b) / time(a) judged (harness.stats.verdicts.pair_verdict), once per pair."""
        key = (id(a), id(b), level)
        if key not in self.verdicts:
            self.verdicts[key] = (a, b, pair_verdict(a, b, level))
        return self.verdicts[key][2]

    @property
    def title(self) -> str:
        """The runs' ids, or their folders' names where the records carry none."""
        ids = ", ".join(sorted({str(r.get("run_id", "")) for r in self.recs}))
        return ids or ", ".join(d.name for d in self.run_dirs)


def load(
    run_dirs: list[Path],
    raw: Mapping[Path, list[Record]] | None = None,
    plot_dir: Path | None = None,
    calibration: Path | None = None,
    rank_under_load: bool = False,
) -> Model:
    """The model of a report over ``run_dirs`` (``raw``: their records as already loaded), its
    plots to be drawn in ``plot_dir`` (None: none); ``calibration``: the user's own, else the one
    the first run's env.json names (its bench's ``--calibration``), else none; ``rank_under_load``:
    contended cells ranked, their load stated (``load_runs``), whatever the runs asked."""
    loaded = {d: records.load(d / records.RESULTS) if (raw or {}).get(d) is None else (raw or {})[d] for d in run_dirs}
    recs, envs = load_runs(run_dirs, loaded, rank_under_load)
    sections: dict[tuple[str, tuple], list[Record]] = {}
    for r in sorted(recs, key=overview.setting_order):  # sections in the overview's column order
        if r.get("data", "resident") == "resident":
            sections.setdefault((r["workload"], records.setting_overrides(r)), []).append(r)
    processes = [r for d in run_dirs for r in loaded[d] if not is_idiomatic(r)]
    named = next((env.get("calibration") for env in envs.values() if env and env.get("calibration")), None)
    model = Model(list(run_dirs), recs, envs, parity.load(run_dirs), {}, None, sections, processes, plot_dir)
    model.calibration = calibration or (Path(named) if named and Path(named).exists() else None)
    env = next(iter(envs.values()), {}) or {}
    model.families = {  # a leader whose timing fails the physics check is never called the fastest
        key: replace(fam, claimable=not physics_violations([fam.leader], env)) for key, fam in families(recs).items()
    }
    model.grid = overview.grid(recs, model.families)
    return model


#: A report section: renders from the model alone (harness.reporting.report.SECTIONS lists them in order).
Section = Callable[[Model], Block]
