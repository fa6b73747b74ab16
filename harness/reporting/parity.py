"""The backend-parity line and table of a model file's workload section (harness/checks/backends.py).

A check that passed is stated as plainly as one that failed: the reader of a model file's
timings learns that its backends computed the same numbers first, and how close the closest
came to its allowance.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from tabulate import tabulate

from harness.records import PARITY
from harness.reporting.formatting import DASH


def load(run_dirs: Iterable[Path]) -> dict[str, dict[str, dict[str, Any]]]:
    """The runs' parity outcomes by workload, then adapter (empty where no run checked any)."""
    kept: dict[str, dict[str, dict[str, Any]]] = {}
    for run_dir in run_dirs:
        path = Path(run_dir) / PARITY
        if path.is_file():
            for workload, outcomes in json.loads(path.read_text()).items():
                kept.setdefault(workload, {}).update(outcomes)
    return kept


def note(workload: str, kept: dict[str, dict[str, dict[str, Any]]]) -> list[str]:
    """The workload's parity line and, where several backends were held to each other, the table of
    their outcomes (each followed by a blank line); nothing where it was not checked."""
    outcomes = kept.get(workload)
    if not outcomes:
        return []
    rule = next(iter(outcomes.values()))
    if len(outcomes) == 1:
        alone = next(iter(outcomes))
        return [
            f"Backend parity: {alone} is the only Keras backend that runs this model here, so no backend "
            "was held to another (harness/checks/backends.py).",
            "",
        ]
    agree = sorted(a for a, o in outcomes.items() if o["ok"])
    said = (
        "Backend parity, checked before anything was timed (harness/checks/backends.py): over "
        f"{rule['steps']} training steps from the same weights and batches, each backend's losses and weight "
        f"updates are held to the backends' median within {rule['factor']:g} times the float32 rounding "
        "spread they measured (at least "
        f"{rule['floor_ulps']} ulps). "
    )
    trained = [a for a, o in outcomes.items() if o["of_allowance"] is not None]
    if agree and len(trained) < 2:  # the others' workers failed: nothing to hold it to
        said += f"{_names(agree)} trained, with no other backend left to hold it to. "
    elif agree:
        closest = max(agree, key=lambda a: outcomes[a]["of_allowance"])
        said += f"{_names(agree)} {'agrees' if len(agree) == 1 else 'agree'}"
        if outcomes[closest]["of_allowance"] > 0:
            share = outcomes[closest]["of_allowance"]
            said += f"; the closest to its allowance, {closest}, reached {share:.2g} of it"
        said += ". "
    for adapter in sorted(set(outcomes) - set(agree)):
        said += f"{adapter} failed it and was not timed: {outcomes[adapter]['reason']}. "
    return [said.strip(), "", _table(outcomes), ""]


def _table(outcomes: dict[str, dict[str, Any]]) -> str:
    """Each backend's outcome and its closest approach to its allowance: the numbers the line quotes."""
    rows = []
    for adapter, o in sorted(outcomes.items()):
        share = o.get("of_allowance")
        rows.append(
            [
                adapter,
                "agrees" if o["ok"] else "failed, not timed",
                DASH if share is None else f"{share:.2g}",
                o.get("where") or DASH,
            ]
        )
    headers = ["backend", "parity", "closest approach, of its allowance", "where"]
    return tabulate(rows, headers, tablefmt="github", disable_numparse=True)


def _names(names: list[str]) -> str:
    return names[0] if len(names) == 1 else ", ".join(names[:-1]) + " and " + names[-1]
