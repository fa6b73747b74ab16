"""The Method's calibration lines: what the committed calibrations (``make calibrate``, harness.calibrate)
measured of the verdict rules on the machine type and device a run used.

A run's verdicts claim a false-separation rate and a power; a calibration measured both on a
machine with identical twins and known slow-downs. The Method quotes each committed calibration
of the same CPU model and device, with its own level, generations and repeats, so a reader sees
how far the claim was checked where the run ran (and that it was not, where none matches).

The committed calibrations are one versioned file, ``evidence/calibrations.json`` (``CALIBRATIONS``):
what each calibration under ``evidence/`` counted, the machine it ran on, and nothing else is read,
so a calibration a user runs into ``reports/`` changes no report's text. ``python -m
harness.reporting.calibration_note --write`` regenerates the file from the calibration folders under
``evidence/`` (``build``). A user's own calibration (a ``calibration-<K>-generations.json`` that
``harness calibrate`` wrote, or its folder) is quoted only where passed (``calibration``), beside
the committed ones.
"""

from __future__ import annotations

import argparse
import json
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from harness.records import Record
from harness.stats.inference import wilson

ROOT = Path(__file__).resolve().parents[2]
#: The committed evidence: run folders kept as examples, the calibrations the Method rests on among them.
EVIDENCE = ROOT / "evidence"
#: The committed calibrations a report quotes, one file read by name (``build`` writes it).
CALIBRATIONS = EVIDENCE / "calibrations.json"
SCHEMA_VERSION = 1
#: A calibration page as harness.calibrate writes it, one per number of generations judged.
PAGE_GLOB = "calibration-*-generations.json"


class CalibrationError(ValueError):
    """A calibration file that cannot be read: its path and why."""


# --- one calibration page, counted (what calibrations.json holds of it) ---


def _judged_pairs(pairs: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    return [p for p in pairs if p.get("high") is not None and math.isfinite(p["high"])]


def summarize(data: dict[str, Any], file: str = "") -> dict[str, Any]:
    """One calibration page (harness.calibrate's JSON) as the counts the Method quotes: its setting,
    false separations per pair and per group (family-wise), power at each known slow-down, and the
    same between two fresh runs where it measured them; judged pairs only."""
    meta = data["meta"]
    judged = _judged_pairs(data["pairs"])
    null = [p for p in judged if not p["effect"]]
    fam = [g for g in data["groups"] if g.get("judged") and g.get("leader_twins")]
    out: dict[str, Any] = {
        **({"file": file} if file else {}),
        "adapter": meta["adapter"],
        "workload": meta["workload"],
        "device": meta["device"],
        "machine": meta.get("machine"),
        "twins": meta["twins"],
        "level": meta["level"],
        "generations": meta["rounds"],
        "first_look": meta.get("first_look", meta["rounds"]),
        "repeats": meta["repeats"],
        "identical": {"pairs": len(null), "different": sum(bool(p["different"]) for p in null)},
        "family": {"groups": len(fam), "false": sum(bool(g["family_false"]) for g in fam)},
        "slowdowns": [],
        # beside a steady load (harness.calibrate --beside-load), contended repeats judged too
        **{k: meta[k] for k in ("beside_load", "rank_under_load", "other_cores", "cell_threads") if k in meta},
    }
    for effect in sorted({p["effect"] for p in judged if p["effect"]}):
        hit = [p for p in judged if p["effect"] == effect]
        out["slowdowns"].append(
            {
                "effect": effect,
                "pairs": len(hit),
                "detected": sum(bool(p["right_way"]) for p in hit),
                # a busy-wait twin runs slower than it names: the median of what the pairs measured
                "measured": sorted(p["ratio"] for p in hit)[len(hit) // 2],
            }
        )
    if "between" in data:
        pairs = _judged_pairs(data["between"]["pairs"])
        null = [p for p in pairs if not p["effect"]]
        runs = [g for g in data["between"]["groups"] if g.get("judged")]
        out["between"] = {
            "identical": {"pairs": len(null), "different": sum(bool(p["different"]) for p in null)},
            "runs": {"pairs": len(runs), "false": sum(bool(g["any_pair_false"]) for g in runs)},
            "slowdowns": [
                {
                    "effect": effect,
                    "pairs": len(hit := [p for p in pairs if p["effect"] == effect]),
                    "found": sum(bool(p["right_way"]) for p in hit),
                }
                for effect in sorted({p["effect"] for p in pairs if p["effect"]})
            ],
            # how much slower identical code ran in one run than in the other, at most
            "drift": max((max(p["ratio"], 1 / p["ratio"]) for p in null), default=1.0),
        }
    return out


def _fingerprint(folder: Path) -> dict[str, Any]:
    """The machine a calibration ran on, as its repeats' records name it (harness.env.fingerprint:
    CPU model, cores, driver, GPUs); an env.json's where the folder has one."""
    for env in [folder / "env.json", *sorted(folder.glob("*/env.json"))]:
        if env.is_file() and (found := json.loads(env.read_text()).get("fingerprint")):
            return found
    for results in sorted(folder.glob("*/results.jsonl")):
        for line in results.read_text().splitlines():
            if line.strip() and (found := json.loads(line).get("fingerprint")):
                return found
    return {}


def _folder(folder: Path, name: str) -> dict[str, Any]:
    """A calibration folder as calibrations.json holds it: its name, machine, command and every page."""
    ran = folder / "calibration-run.json"
    run = json.loads(ran.read_text()) if ran.is_file() else {}
    pages = sorted(folder.glob(PAGE_GLOB), key=lambda p: (len(p.name), p.name))
    return {
        "folder": name,
        "machine": _fingerprint(folder),
        **({"command": run["command"]} if run.get("command") else {}),
        "judgings": [summarize(json.loads(p.read_text()), p.name) for p in pages],
    }


def build(evidence: Path = EVIDENCE) -> dict[str, Any]:
    """calibrations.json's content: every calibration folder under ``evidence`` (one holding a
    calibration page), named relative to the repository."""
    folders = sorted({p.parent for p in evidence.glob(f"*/{PAGE_GLOB}")})
    return {
        "schema_version": SCHEMA_VERSION,
        "about": (
            "The committed calibrations a report's Method quotes (harness.reporting.calibration_note), counted "
            "from their folders; regenerate with python -m harness.reporting.calibration_note --write."
        ),
        "calibrations": [_folder(f, f"{evidence.name}/{f.name}") for f in folders],
    }


def write(path: Path = CALIBRATIONS, evidence: Path = EVIDENCE) -> Path:
    """Write calibrations.json from the calibration folders under ``evidence``."""
    path.write_text(json.dumps(build(evidence), indent=1, allow_nan=False) + "\n")
    return path


# --- the calibrations a report may quote ---


def committed(path: Path | None = None) -> list[tuple[str, dict[str, Any]]]:
    """(folder, page) of every judging of every committed calibration (``path``: CALIBRATIONS);
    none where the file is not there."""
    path = path or CALIBRATIONS
    if not path.is_file():
        return []
    data = json.loads(path.read_text())
    if data.get("schema_version") != SCHEMA_VERSION:
        raise CalibrationError(
            f"{path}: schema_version {data.get('schema_version')!r}, this version reads {SCHEMA_VERSION}"
        )
    return [(c["folder"], page) for c in data["calibrations"] for page in c["judgings"]]


def own(path: Path) -> list[tuple[str, dict[str, Any]]]:
    """(folder, page) of a user's calibration: a page harness.calibrate wrote
    (``calibration-<K>-generations.json``) or the folder holding its pages, each named by the path given.
    A ``CalibrationError`` where it is none: a command taking one checks it before it runs."""
    pages = sorted(path.glob(PAGE_GLOB), key=lambda p: (len(p.name), p.name)) if path.is_dir() else [path]
    if not pages or not pages[0].is_file():
        raise CalibrationError(f"{path}: no calibration page (a {PAGE_GLOB} that harness calibrate writes)")
    out = []
    for page in pages:
        try:
            out.append((str(page.parent), summarize(json.loads(page.read_text()), page.name)))
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise CalibrationError(f"{page}: not a calibration page ({type(exc).__name__}: {exc})") from None
    return out


def _pages(calibration: Path | None, evidence: Path | None) -> list[tuple[str, dict[str, Any]]]:
    return committed(evidence) + (own(calibration) if calibration is not None else [])


# --- the Method's lines ---


def _rate(hits: int, n: int, noun: str) -> str:
    """``2 of 540 pairs (0.4% [0.1, 1.3])``: one decimal below 10%, where a whole percent would read 0."""
    low, high = wilson(hits, n)
    digits = 1 if hits / n < 0.1 else 0
    return f"{hits} of {n} {noun} ({100 * hits / n:.{digits}f}% [{100 * low:.{digits}f}, {100 * high:.{digits}f}])"


def quote(folder: str, page: dict[str, Any]) -> str:
    """One calibration as a Method line: its setting, false separations per pair and per group
    (family-wise), and power at each known slow-down, each over the pairs it judged, with its
    Wilson interval (as its own page counts them, harness.calibrate)."""
    parts = []  # a calibration of slowed twins only judged no identical pair, and says nothing of them
    null, fam = page["identical"], page["family"]
    if null["pairs"]:
        parts.append(f"identical cells called different in {_rate(null['different'], null['pairs'], 'pairs')}")
    if fam["groups"]:
        false_groups = _rate(fam["false"], fam["groups"], "groups")
        parts.append(f"a cell identical to the leader marked different in {false_groups} (family-wise)")
    for slow in page["slowdowns"]:
        parts.append(
            f"a {slow['effect']:.0%} slow-down (measured {slow['measured']:.2f}x, median) detected in "
            f"{_rate(slow['detected'], slow['pairs'], 'pairs')}"
        )
    return (
        f"- Calibration (`{folder}`, {page['machine']}, {page['device']}, {page['adapter']} on "
        f"{page['workload']} beside twins {page['twins']}, {_generations(page)}, "
        f"{100 * page['level']:.4g}%, {page['repeats']} repeats{_loaded(page)}): " + "; ".join(parts) + "."
    )


def threads_words(threads: int | None) -> str:
    """``, 2 threads a cell`` or ``, 1 thread a cell``; "" where the cells' threads are not one number."""
    return f", {threads} thread{'s' * (threads > 1)} a cell" if threads else ""


def _beside_load(page: dict[str, Any]) -> bool:
    """A calibration measured beside a steady load, or judging contended repeats with the others."""
    return bool(page.get("beside_load") or page.get("rank_under_load"))


def _loaded(page: dict[str, Any]) -> str:
    """``, beside a steady load of 1 busy core (the cells measured 0.98-1.02 other cores)``, or ""."""
    n = page.get("beside_load") or 0
    said = f", beside a steady load of {n} busy core{'s' * (n > 1)}" if n else ""
    if n and page.get("other_cores"):
        low, high = page["other_cores"]
        said += f" (the cells measured {low:.2f}-{high:.2f} other cores)"
    return (
        said
        + threads_words(page.get("cell_threads"))
        + (", contended cells ranked" if page.get("rank_under_load") else "")
    )


def under_load_sentence(recs: Sequence[Record], *, evidence: Path | None = None) -> str:
    """What a ranking under load is worth on the run's CPU model and device: each committed
    calibration measured beside a steady load with contended cells ranked (``_loaded``), one
    clause each (its threads a cell: they decide how a step shares the busy cores); where none
    matches, the command that measures one."""
    machines = _machines(recs)
    pages: dict[str, dict[str, Any]] = {}  # one judging per folder: the most generations
    for folder, page in committed(evidence):
        if page.get("rank_under_load") and page.get("beside_load") and _matches(page, machines) and _judged(page):
            if folder not in pages or page["generations"] > pages[folder]["generations"]:
                pages[folder] = page
    if not pages:
        return (
            "No calibration under load was measured on this CPU model and device, so the error rate of these "
            'verdicts is not known: `make calibrate ARGS="--beside-load 1 --rank-under-load"` measures it.'
        )
    clauses = []
    for folder in sorted(pages):
        page = pages[folder]
        parts = []
        null = page["identical"]
        if null["pairs"]:
            parts.append(f"identical cells called different in {_rate(null['different'], null['pairs'], 'pairs')}")
        for slow in page["slowdowns"]:
            parts.append(
                f"a {slow['effect']:.0%} slow-down detected in {_rate(slow['detected'], slow['pairs'], 'pairs')}"
            )
        n = page["beside_load"]
        clauses.append(
            f"beside {n} busy core{'s' * (n > 1)}{threads_words(page.get('cell_threads'))} (`{folder}`): "
            + ", ".join(parts)
        )
    ran = sorted({r["threads"] for r in recs if r.get("threads")})
    this = f" This run's cells ran {' or '.join(map(str, ran))} thread{'s' * (ran[-1] > 1)} each." if ran else ""
    return "Calibrated so, " + "; ".join(clauses) + "." + this + " A load that comes and goes is not calibrated."


def _looked(page: dict[str, Any]) -> bool:
    """Whether a calibration page was judged where a budgeted bench stops (``--looks``: its first
    look, and one more per look while the group is unsettled), not at a fixed number of generations."""
    return page["first_look"] < page["generations"]


def _generations(page: dict[str, Any]) -> str:
    """How many generations a calibration page judged."""
    if _looked(page):
        first, last = page["first_look"], page["generations"]
        return f"{first} generations, up to {last} where the group was unsettled (a budgeted run's looks)"
    return f"{page['generations']} generations"


def _fixed_rounds(page: dict[str, Any]) -> int:
    """A page's generations judged, a ``--looks`` page's counted below every fixed one's."""
    return 0 if _looked(page) else page["generations"]


def _judged(page: dict[str, Any]) -> bool:
    return bool(page["identical"]["pairs"] or any(s["pairs"] for s in page["slowdowns"]))


def _machines(recs: Sequence[Record]) -> set[tuple[Any, Any]]:
    """The (CPU model, device) pairs the run's ok cells ran on: what a calibration must match."""
    return {((r.get("fingerprint") or {}).get("cpu"), r.get("device")) for r in recs if r["status"] == "ok"}


def _matches(page: dict[str, Any], machines: set[tuple[Any, Any]]) -> bool:
    return (page.get("machine"), page.get("device")) in machines


def lines(recs: Sequence[Record], calibration: Path | None = None, *, evidence: Path | None = None) -> list[str]:
    """The committed calibrations (``evidence``: CALIBRATIONS) of the runs' CPU models and devices,
    and the user's own ``calibration`` where one is passed; one line saying none matches where none does."""
    machines = _machines(recs)
    # a calibration beside a steady load speaks for a run that ranks under load alone
    loaded = any(r.get("ranked_under_load") for r in recs)
    found = [
        (f, p)
        for f, p in committed(evidence)
        if _matches(p, machines) and _judged(p) and (loaded or not _beside_load(p))
    ]
    given = own(calibration) if calibration is not None else []
    # a committed calibration passed again is quoted once, as committed
    mine = [(f, p) for f, p in given if _matches(p, machines) and _judged(p) and f not in {c for c, _ in found}]
    # per calibration folder, the judging that matches the run: a run that looked again at an unsettled
    # group (a budgeted run of the looks protocol, at Pocock's level) the one judged where such a run
    # stopped, else the closest to its own generations
    ok = [r for r in recs if r["status"] == "ok"]
    gens = sorted(r.get("rounds_done") or 1 for r in ok)
    typical = gens[len(gens) // 2] if gens else 1
    looked = any((r.get("verdict_level") or 0.95) > 0.95 for r in ok)

    def mismatch(page: dict[str, Any]) -> tuple[bool, int]:
        return _looked(page) != looked, abs(page["generations"] - typical)

    def best(pages: list[tuple[str, dict[str, Any]]]) -> list[tuple[str, dict[str, Any]]]:
        kept: dict[str, tuple[str, dict[str, Any]]] = {}
        for f, p in pages:
            if f not in kept or mismatch(p) < mismatch(kept[f][1]):
                kept[f] = (f, p)
        return [kept[k] for k in sorted(kept)]

    out = [quote(f, p) for f, p in best(found) + best(mine)]
    if not found and not mine:
        out.append(
            "- Calibration: no committed calibration was measured on this CPU model and device; `make calibrate` "
            "measures how often the rules call identical code different here (docs/measurement.md, Calibration)."
        )
    if given and not any(_matches(p, machines) for _, p in given):
        folder, page = given[0]
        out.append(
            f"- Calibration (`{folder}`): measured on {page['machine']}, {page['device']}, not on this run's CPU "
            "model and device: not quoted."
        )
    return out


def across(recs: Sequence[Record], calibration: Path | None = None, *, evidence: Path | None = None) -> str:
    """What the committed calibrations (``evidence``: CALIBRATIONS) of the runs' CPU models and devices,
    and the user's own ``calibration`` where one is passed, measured of the verdict between two groups
    (Welch's t on process levels, harness.calibrate.between: every cell of one fresh run against every
    cell of its adapter in the next), over all of them together; "" where none measured it."""
    machines = _machines(recs)
    # one page per calibration folder: its judgings of 2, 3 or 4 generations pair the same repeats
    # again, so counting each would count those pairs more than once (the most generations judged)
    pages: dict[str, dict[str, Any]] = {}
    for folder, page in _pages(calibration, evidence):
        if "between" in page and _matches(page, machines) and not _beside_load(page):
            if folder not in pages or _fixed_rounds(page) > _fixed_rounds(pages[folder]):
                pages[folder] = page
    kept = [(f, pages[f]["between"]) for f in sorted(pages)]
    null = [b["identical"] for _, b in kept]
    if not sum(n["pairs"] for n in null) + sum(s["pairs"] for _, b in kept for s in b["slowdowns"]):
        return ""
    parts = []  # a calibration of slowed twins only judged no identical pair, and says nothing of them
    if sum(n["pairs"] for n in null):
        same = _rate(sum(n["different"] for n in null), sum(n["pairs"] for n in null), "pairs")
        runs = [b["runs"] for _, b in kept if b["runs"]["pairs"]]
        false_runs = _rate(sum(r["false"] for r in runs), sum(r["pairs"] for r in runs), "pairs of runs")
        parts.append(f"identical cells called different in {same}" + (f", in {false_runs}" if runs else ""))
    for effect in sorted({s["effect"] for _, b in kept for s in b["slowdowns"] if s["pairs"]}):
        hit = [s for _, b in kept for s in b["slowdowns"] if s["effect"] == effect]
        found = _rate(sum(s["found"] for s in hit), sum(s["pairs"] for s in hit), "pairs")
        parts.append(f"a {effect:.0%} slow-down found in {found}")
    drift = max((b["drift"] for _, b in kept if b["identical"]["pairs"]), default=1.0)
    names = ", ".join(f"`{f}`" for f, _ in kept)
    return (
        "Between two groups (`steady vs its exact`: Welch's t, nothing pairs their generations), calibrated "
        f"between two fresh runs on this CPU model ({names}): " + "; ".join(parts) + ". "
        f"Identical code ran up to {drift:.2f}x slower in one run than in the other: the machine's speed drifts "
        "between groups, which this verdict does not model, so it separates only large differences, and a run "
        "whose speed shifted between its groups can separate identical code."
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m harness.reporting.calibration_note",
        description="Write evidence/calibrations.json from the calibration folders under evidence/, or check it.",
    )
    parser.add_argument("--write", action="store_true", help=f"write {CALIBRATIONS.relative_to(ROOT)}")
    args = parser.parse_args(argv)
    if args.write:
        print(write())
        return 0
    current = CALIBRATIONS.is_file() and json.loads(CALIBRATIONS.read_text()) == build()
    print(f"{CALIBRATIONS.relative_to(ROOT)}: " + ("up to date" if current else "out of date (--write regenerates it)"))
    return 0 if current else 1


if __name__ == "__main__":
    raise SystemExit(main())
