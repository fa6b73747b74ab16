"""The one process launcher (harness/processes.py): the repository importable, a process group of
its own killed whole on a timeout, one stderr tail."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import psutil
import pytest

from harness import processes

# A child that starts a grandchild (as Inductor's compile pool or a loader's workers do), writes
# the grandchild's pid to a file and sleeps.
PARENT = (
    "import subprocess, sys, time;"
    "p = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)']);"
    "open(OUT, 'w').write(str(p.pid)); time.sleep(60)"
)


@pytest.mark.slow  # waits 10 s for its timeout
def test_a_timeout_kills_the_process_with_everything_it_started(tmp_path):
    out = tmp_path / "pid"
    script = PARENT.replace("OUT", repr(str(out)))
    with pytest.raises(subprocess.TimeoutExpired):
        # 10 s: on a busy machine the child may start its grandchild late
        processes.run([sys.executable, "-c", script], processes.repo_env(), timeout_s=10.0)
    grandchild = int(out.read_text())
    deadline = time.monotonic() + 10
    while _alive(grandchild):
        assert time.monotonic() < deadline, "the grandchild outlived its group"
        time.sleep(0.05)


def test_sigterm_to_a_launcher_kills_what_it_started_in_other_sessions(tmp_path):
    """``timeout`` or ``kill`` signals the launcher's group; the processes it started are in
    sessions of their own and would run on (a killed gpu-check's bench did, into the next command)."""
    out = tmp_path / "pid"
    child = PARENT.replace("OUT", repr(str(out)))
    launcher = (
        "import sys; from harness import processes\n"
        "try:\n"
        "    with processes.terminated_as_interrupt():\n"
        f"        processes.run([sys.executable, '-c', {child!r}], processes.repo_env(), timeout_s=120)\n"
        "except KeyboardInterrupt:\n"
        "    sys.exit(130)\n"
    )
    proc = processes.start([sys.executable, "-c", launcher], processes.repo_env())
    deadline = time.monotonic() + 60
    while not (out.exists() and out.read_text()):
        assert time.monotonic() < deadline and proc.poll() is None, "the grandchild never started"
        time.sleep(0.05)
    grandchild = int(out.read_text())
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=60) == 130
    deadline = time.monotonic() + 10
    while _alive(grandchild):
        assert time.monotonic() < deadline, "the grandchild outlived its terminated launcher"
        time.sleep(0.05)


def _alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def test_a_process_runs_from_the_repository_with_it_importable():
    env = processes.repo_env({"PATH": os.environ.get("PATH", ""), "PYTHONPATH": "/elsewhere"})
    assert env["PYTHONPATH"].split(os.pathsep) == [str(processes.REPO), "/elsewhere"]
    probe = "import harness.processes, os; print(os.getcwd())"
    proc = processes.run([sys.executable, "-c", probe], env, timeout_s=60)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == str(processes.REPO)


def test_the_stderr_tail_keeps_the_last_lines():
    text = "\n".join(f"line {i}" for i in range(50)) + "\n\n"
    assert processes.tail(text).splitlines() == [f"line {i}" for i in range(30, 50)]
    assert processes.tail(text, 1) == "line 49"
    assert processes.tail("") == ""
