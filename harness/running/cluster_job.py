"""What a cluster job runs on its node (harness.running.clusters submits it): ``run_job``, the
same ``runner.run_cell`` the local executor calls, so the worker's timeout, its stderr tail, the
other-load measurement and the machine fingerprint are all taken where the cell ran."""

from __future__ import annotations

import os
import signal
import threading
from typing import Any

import psutil

from adapters import discover
from harness import records
from harness.records import Cell, Record
from harness.running import runner


def run_job(cell: Cell, timeout_s: float) -> Record:
    """What a cluster job runs on its node: the cell's record, as ``runner.run_cell`` makes it.

    A cancelled job ends its worker first: SIGTERM (scancel, a preemption), SIGINT (submitit's
    local cancel), submitit's time-limit signal and Ray's cancel (a KeyboardInterrupt) all stop
    this function, which then kills the worker's process group. ``run_cell`` runs on a thread and
    the main thread waits in short steps because Ray raises its KeyboardInterrupt between Python
    bytecodes, never inside the long wait for the worker."""
    found: dict[str, Any] = {}

    def _run() -> None:
        try:
            found["record"] = runner.run_cell(discover()[records.base_adapter(cell)], cell, timeout_s)
        except BaseException as exc:  # noqa: BLE001 - handed to the main thread
            found["error"] = exc

    def _interrupt(signum: int, frame: object) -> None:
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGTERM, _interrupt)  # tasks run in the main thread (Ray, submitit)
    thread = threading.Thread(target=_run, daemon=True)
    thread.start()
    try:
        while thread.is_alive():
            thread.join(0.2)
    except BaseException:
        _kill_workers()
        raise
    finally:
        signal.signal(signal.SIGTERM, previous)
    if "error" in found:
        raise found["error"]
    return found["record"]


def _kill_workers() -> None:
    """Kill the process group of every child of this process (a worker leads its own group)."""
    for child in psutil.Process().children():
        try:
            os.killpg(child.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
