"""The parent's handle on one resident worker (harness.running.resident runs inside it): its
process, started in its own session with its output to a log file, and the two pipes the turns
go over (harness.running.turns drives them)."""

from __future__ import annotations

import json
import os
import select
import signal
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

from adapters import AdapterInfo
from harness import processes, records
from harness.records import Cell, Record
from harness.running import runner

#: How often ``collect`` looks for a finishing worker's record.
COLLECT_POLL_S = 0.02


class Gone(Exception):
    """The worker exited or stopped answering; the message says how."""


class Resident:
    """One resident worker process (harness.running.resident), driven over two pipes. Its output
    goes to a log file (never a pipe that could fill and block it)."""

    def __init__(self, info: AdapterInfo, cell: Cell) -> None:
        self.cell = cell
        self.dir = Path(tempfile.mkdtemp(prefix="dlcompare-"))
        (self.dir / "cell.json").write_text(json.dumps(cell))
        self.out = self.dir / "record.json"
        cmd_r, cmd_w = os.pipe()
        rep_r, rep_w = os.pipe()
        python = runner.interpreter(info, cell)
        args = [python, "-m", "harness.running.worker", "serve", str(self.dir / "cell.json"), str(self.out)]
        self.log = (self.dir / "log.txt").open("w+")
        self.proc = processes.start(
            [*args, "--fds", f"{cmd_r},{rep_w}"],
            runner.worker_env(info, cell),
            stdin=subprocess.DEVNULL,
            stdout=self.log,
            stderr=subprocess.STDOUT,
            pass_fds=(cmd_r, rep_w),
        )
        os.close(cmd_r)
        os.close(rep_w)
        self._cmd = os.fdopen(cmd_w, "w", buffering=1)
        self._rep, self._buf = rep_r, b""
        self.t0 = time.perf_counter()
        self.cold_s = 0.0
        self.block_steps = 1  #: synced steps in each of its blocks (its ``ready`` says)

    def _recv(self, timeout_s: float, named_s: float | None = None) -> dict[str, Any]:
        """The next reply, within ``timeout_s`` (a timeout is reported as ``named_s`` where given)."""
        deadline = time.monotonic() + timeout_s
        while b"\n" not in self._buf:
            left = deadline - time.monotonic()
            ready, _, _ = select.select([self._rep], [], [], max(left, 0))
            if not ready:
                raise Gone(f"timeout after {timeout_s if named_s is None else named_s:g} s")
            chunk = os.read(self._rep, 1 << 16)
            if not chunk:
                raise Gone(self._exit_text())
            self._buf += chunk
        line, self._buf = self._buf.split(b"\n", 1)
        try:
            msg = json.loads(line)
        except ValueError:
            msg = None
        if not isinstance(msg, dict) or "event" not in msg:
            raise Gone(f"worker sent {line[:80]!r}, not a reply")
        return msg

    def _send(self, msg: dict[str, Any]) -> None:
        try:
            self._cmd.write(json.dumps(msg) + "\n")
        except (BrokenPipeError, OSError):
            raise Gone(self._exit_text()) from None

    def _exit_text(self) -> str:
        try:
            code = self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            return "worker stopped answering"
        if code < 0:
            return f"worker killed by {signal.Signals(-code).name}"
        return f"worker exited with code {code} and no record"

    def fileno(self) -> int:
        """The reply pipe (for ``select``: readable once the worker said ``ready`` or ended)."""
        return self._rep

    def ready(self, timeout_s: float, since: float | None = None) -> bool:
        """Wait until the worker is set up and warm, at most ``timeout_s`` from its start (or from
        ``since``, a ``perf_counter`` time: a gated worker's warm); False if it ended instead (a
        skip, a failure: its record is then ``record()``)."""
        try:
            start = self.t0 if since is None else since
            msg = self._recv(max(start + timeout_s - time.perf_counter(), 0.0), timeout_s)
        except Gone as exc:
            self.reason = str(exc)
            return False
        self.cold_s = msg.get("cold_s", 0.0)
        self.block_steps = int(msg.get("block_steps") or 1)
        self.ready_s = time.perf_counter() - self.t0
        return True

    def set_up(self, timeout_s: float) -> bool:
        """Wait until a ``gated`` worker is imported and set up (its ``set``), at most ``timeout_s``
        from its start; False if it ended instead (its record is then ``record()``)."""
        try:
            self._recv(max(self.t0 + timeout_s - time.perf_counter(), 0.0), timeout_s)
        except Gone as exc:
            self.reason = str(exc)
            return False
        return True

    def warm(self, timeout_s: float) -> bool:
        """Let a set-up ``gated`` worker run its cold window, and wait until it is ``ready``, at
        most ``timeout_s`` from now (its wait for the others' warm-ups is not its own)."""
        since = time.perf_counter()
        return self.send_warm() and self.ready(timeout_s, since)

    def send_warm(self, beside: bool = False) -> bool:
        """Let a set-up ``gated`` worker run its cold window (``beside``: another warms up at the
        same time); ``ready`` waits for it. False if it ended instead."""
        try:
            self._send({"cmd": "warm", "beside": beside})
        except Gone as exc:
            self.reason = str(exc)
            return False
        return True

    def floor(self, timeout_s: float) -> None:
        """Prepare and time the worker's dispatch floor (if it was planned one), at most
        ``timeout_s``: the others wait idle meanwhile. Raises Gone."""
        self._send({"cmd": "floor"})
        self._recv(timeout_s)

    def turn(self, turn: int, timeout_s: float) -> float | None:
        """One turn's block; its step time (None if every step of it recompiled). Raises Gone."""
        self._send({"cmd": "turn", "turn": turn})
        msg = self._recv(timeout_s)
        return msg.get("block_s")

    def ask_finish(self, keep: list[int]) -> None:
        """Ask for the record built from the kept turns; ``collect`` waits for it. Workers asked
        one after another, before any is waited for, build their records and exit side by side:
        nothing is timed once the turns are over."""
        try:
            self._send({"cmd": "finish", "keep": keep})
        except Gone as exc:
            self.reason = str(exc)

    def collect(self, timeout_s: float) -> Record:
        """The record ``ask_finish`` asked for, once the worker has written it or ended (at most
        ``timeout_s``). A worker whose record is there is ended at once (``record``): its
        interpreter's teardown (up to about 1.3 s for TensorFlow or Keras on the 2-core VM, side by
        side with the generation's other workers) measures nothing."""
        if getattr(self, "reason", None) is None:
            deadline = time.monotonic() + timeout_s
            while self.proc.poll() is None and not self.out.is_file():
                if time.monotonic() > deadline:
                    self.reason = "timeout writing its record"
                    break
                time.sleep(COLLECT_POLL_S)
        return self.record()

    def record(self, reason: str | None = None) -> Record:
        """The worker's record (the one it wrote, else a failed one with ``reason`` and its
        output's tail); the worker is ended and its files removed."""
        self.kill()
        if self.out.is_file() and reason is None:
            rec = json.loads(self.out.read_text())
        else:
            reason = reason or getattr(self, "reason", None) or self._exit_text()
            rec = records.new_record(self.cell, "failed", reason)
        if rec["status"] == "failed":
            self.log.seek(0)
            tail = processes.tail(self.log.read())
            if tail:
                rec.setdefault("stderr_tail", tail)
        rec["wall_s"] = time.perf_counter() - self.t0
        if hasattr(self, "ready_s"):
            rec["ready_s"] = self.ready_s  # start-up: import, set-up, cold window (and the floor's preparation)
        self.close()
        return rec

    def kill(self) -> None:
        """End the worker and every helper it started (its process group)."""
        if self.proc.poll() is None:
            processes.kill_group(self.proc)

    def close(self) -> None:
        for f in (self._cmd, self.log):
            try:
                f.close()
            except OSError:
                pass
        try:
            os.close(self._rep)
        except OSError:
            pass
        for p in sorted(self.dir.iterdir()):
            p.unlink()
        self.dir.rmdir()
