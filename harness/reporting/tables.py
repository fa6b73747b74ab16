"""The framework settings, machines and environment tables (the per-workload tables:
harness.reporting.workload_tables)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from tabulate import tabulate

from harness.records import Record
from harness.reporting.formatting import DASH


def settings_table(recs: Sequence[Record]) -> str:
    """One row per adapter and distinct settings (the optimiser, for one, follows the workload),
    naming the workloads that ran with them."""
    seen: dict[tuple[str, str, str], list[str]] = {}
    for r in recs:
        if r["status"] != "ok":
            continue
        versions = ", ".join(f"{k} {v}" for k, v in sorted(r.get("versions", {}).items()))
        settings = ", ".join(f"{k}={v}" for k, v in sorted(r.get("settings", {}).items()))
        workloads = seen.setdefault((r["adapter"], versions, settings), [])
        if r["workload"] not in workloads:
            workloads.append(r["workload"])
    rows = [[adapter, ", ".join(w), versions, settings] for (adapter, versions, settings), w in seen.items()]
    if not rows:
        return ""
    return tabulate(rows, ["adapter", "workloads", "versions", "settings"], tablefmt="github")


def machines_table(recs: Sequence[Record]) -> str:
    """Where a report's cells ran, one row per machine (fingerprint): its nodes and cells; empty
    where every cell ran on one machine."""
    found: dict[str, tuple[set[str], list[Record]]] = {}
    for r in recs:
        nodes, cells = found.setdefault(r.get("machine") or DASH, (set(), []))
        nodes.update(r.get("nodes") or ([r["node"]] if r.get("node") else []))
        cells.append(r)
    if len(found) < 2:
        return ""
    rows = [
        [machine, ", ".join(sorted(nodes)) or DASH, len(cells), sum(c["status"] == "ok" for c in cells)]
        for machine, (nodes, cells) in sorted(found.items())
    ]
    return tabulate(rows, ["machine", "nodes", "cells", "ok"], tablefmt="github")


def environments_text(found: dict[str, Any]) -> str:
    """``main: /r/.venv (locks/cuda13.txt, CUDA 13); tf: /r/.venv-tf (locks/tf-cuda12.txt, CUDA 12, tensorflow)``."""
    parts = []
    for name, e in found.items():
        details = [e.get("lock") or "not installed by make", *([f"CUDA {e['cuda']}"] if e.get("cuda") else [])]
        details += [", ".join(e.get("frameworks") or [])] if e.get("frameworks") else []
        parts.append(f"{name}: {e.get('folder')} ({', '.join(details)})")
    return "; ".join(parts)


def env_table(env: dict[str, Any]) -> str:
    gpus = "; ".join(f"{g['name']} (driver {g['driver']}, {g['memory']})" for g in env.get("gpus", [])) or "none"
    packages = ", ".join(f"{k} {v}" for k, v in sorted(env.get("packages", {}).items()))
    rows = [
        ["CPU", f"{env.get('cpu')} ({env.get('cpu_logical')} logical cores, {env.get('cpu_physical')} physical)"],
        ["memory", f"{env.get('memory_gib')} GiB"],
        ["GPU", gpus],
        ["threads per framework", env.get("threads")],
        ["Python", env.get("python")],
        *([["environments", environments_text(env["environments"])]] if env.get("environments") else []),
        ["OS", env.get("platform")],
        ["packages", packages],
        ["git", f"{env.get('git_sha')}{' (dirty tree)' if env.get('git_dirty') else ''}"],
        ["command", f"`{env.get('command')}`"],
    ]
    return tabulate(rows, ["", ""], tablefmt="github")
