"""Starting a process of the harness: the one way every launcher does it (a cell's worker, a
resident worker, the device peak, a library's kernel floors, the export steps, gpu-check's steps,
a cluster job's environment).

Every process runs from the repository with it importable (``repo_env``), in a session and
process group of its own (``start``), so that a timeout or an interruption (Ctrl-C, SIGTERM) kills
it with every helper it started (``kill_group``: Inductor's compile pool, a loader's workers) and
nothing outlives the run. What it said on stderr is kept as its last STDERR_TAIL_LINES lines
(``tail``). ``run`` waits for it, with an optional measurement of other load around it. Every
process shares one setting of the driver's compute cache (``compute_cache_env``), whichever
launcher starts it.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, Protocol

import psutil

#: The repository: every process runs from it and imports the harness and adapters from it.
REPO = Path(__file__).resolve().parents[1]
#: Lines of a process's stderr a record or an error keeps.
STDERR_TAIL_LINES = 20
#: The driver's compute cache (CUDA_CACHE_MAXSIZE, bytes; the most the driver accepts): the PTX it
#: JIT-compiles is kept between processes. TensorFlow 2.21 ships sm_90 as PTX only, so on an H100
#: its first process compiles its kernels (the kernel JIT warm-up, harness.running.kernel_jit);
#: the default 256 MiB would evict them and every later process would compile them again.
COMPUTE_CACHE_BYTES = 4 << 30


class Load(Protocol):
    """What other processes do while one runs (harness.measuring.contention.OtherLoad)."""

    def start(self) -> None: ...

    def stop(self, pid: int) -> None: ...


def compute_cache_env(env: Mapping[str, str] | None = None) -> dict[str, str]:
    """The compute-cache variables every process the harness starts gets, so that a kernel one
    process JIT-compiled (the warm-up, a kernel floor, a peak, a cell) is found by the next:
    ``CUDA_CACHE_MAXSIZE`` at COMPUTE_CACHE_BYTES, or as ``env`` (default: this process's
    environment) already sets it. The cache's folder is the driver's default or ``env``'s
    CUDA_CACHE_PATH, inherited alike."""
    env = os.environ if env is None else env
    return {"CUDA_CACHE_MAXSIZE": env.get("CUDA_CACHE_MAXSIZE") or str(COMPUTE_CACHE_BYTES)}


def repo_env(env: Mapping[str, str] | None = None) -> dict[str, str]:
    """``env`` (default: this process's environment) with the repository first on PYTHONPATH and
    the shared compute cache (``compute_cache_env``): what every launcher starts a process with."""
    found = dict(os.environ if env is None else env)
    found["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), found.get("PYTHONPATH")]))
    found.update(compute_cache_env(found))
    return found


def age_s() -> float:
    """Seconds since this process started (a bench command: what a run's time budget counts)."""
    return time.time() - psutil.Process().create_time()


def tail(text: str, lines: int = STDERR_TAIL_LINES) -> str:
    """The last ``lines`` non-blank-trimmed lines of a process's output."""
    return "\n".join(text.strip().splitlines()[-lines:])


def start(args: Sequence[str], env: Mapping[str, str], **popen: Any) -> subprocess.Popen:
    """``args`` started from the repository in a session (and process group) of its own;
    ``popen``: Popen's other arguments (its pipes, ``pass_fds``)."""
    return subprocess.Popen(list(args), env=dict(env), cwd=REPO, start_new_session=True, **popen)


@contextlib.contextmanager
def terminated_as_interrupt() -> Iterator[None]:
    """Meanwhile SIGTERM (``timeout``, ``kill``, a scheduler's stop) raises KeyboardInterrupt in the
    main thread, so it runs Ctrl-C's cleanup. The processes ``start`` made are in sessions of their
    own, which a signal to this process's group does not reach: without this, a terminated launcher
    leaves them running (a killed ``make gpu-check`` left its bench's workers loading the GPU
    machine's next command). Outside the main thread, where no handler can be set, it does nothing."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.signal(signal.SIGTERM, _raise_interrupt)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def _raise_interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


def kill_group(proc: subprocess.Popen) -> None:
    """SIGKILL the process group ``start`` gave ``proc`` (it and every helper it started), then
    reap it."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)
    proc.communicate()


def kill_tree(pid: int) -> None:
    """SIGKILL a process and every process under it, whatever their groups."""
    try:
        root = psutil.Process(pid)
        procs = [*root.children(recursive=True), root]
    except psutil.Error:
        return
    for proc in procs:
        with contextlib.suppress(psutil.Error):
            proc.kill()


def run(
    args: Sequence[str], env: Mapping[str, str], timeout_s: float, load: Load | None = None
) -> subprocess.CompletedProcess:
    """Run ``args`` (``start``) to its end, its stdout and stderr captured as text; ``load``, if
    given, measures what other processes used meanwhile. Raises subprocess.TimeoutExpired past
    ``timeout_s``; on that or any interruption the whole group is killed first."""
    if load is not None:
        load.start()
    proc = start(args, env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        stdout, stderr = proc.communicate(timeout=timeout_s)
    except BaseException:
        kill_group(proc)
        raise
    if load is not None:
        load.stop(proc.pid)
    return subprocess.CompletedProcess(list(args), proc.returncode, stdout, stderr)
