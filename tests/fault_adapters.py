"""Test-only adapters that inject faults into real worker processes.

Loaded through ``DLCOMPARE_EXTRA_ADAPTERS=tests.fault_adapters``. ``fault-ok`` trains the MLP
with the NumPy reference (so it is a real, if slow, cell); each subclass breaks in one way.
"""

from __future__ import annotations

import os
import queue
import signal
import threading
import time
from typing import Any

import numpy as np

from adapters.base import Adapter
from workloads.mlp import mlp_loss_and_grads


class FaultOk(Adapter):
    name = "fault-ok"
    framework = "fault"
    graph = "dynamic"
    requires = ()
    extra = "dev"
    fault_step = -1

    def version(self):
        return {"numpy": np.__version__}

    def resolve_device(self, device):
        return "cpu" if device in ("cpu", "auto") else self._no_cuda()

    def _no_cuda(self):
        from adapters.base import no_cuda

        raise no_cuda("numpy")

    def setup(self, spec, params, device, threads):
        self.p = {k: v.astype(np.float64) for k, v in params.items()}
        self.lr, self.n_layers, self.step = spec.learning_rate, len(spec.layer_sizes) - 1, 0

    def to_device(self, batch):
        return batch

    def train_step(self, batch) -> Any:
        if self.step == self.fault_step:
            self.fault()
        loss, grads = mlp_loss_and_grads(self.p, batch, self.n_layers)
        for k in self.p:
            self.p[k] -= self.lr * grads[k]
        self.step += 1
        return loss

    def fault(self) -> float:
        return 0.0

    def sync(self, handle):
        return float(handle)

    def params(self):
        return {k: v.astype(np.float32) for k, v in self.p.items()}


class FaultSlow(FaultOk):
    """Trains like fault-ok with 0.1 s more a step: its block of the fewest steps lasts far longer
    than fault-ok's (about 30 ms) on any machine, so it is a slow worker (harness.running.turns)."""

    name = "fault-slow"

    def train_step(self, batch) -> Any:
        time.sleep(0.1)
        return super().train_step(batch)


class FaultSlowExit(FaultOk):
    """Trains like fault-ok; its interpreter's teardown then takes 10 minutes (an exit handler),
    as a framework's teardown can take seconds: a resident worker's parent takes its record
    without waiting for its exit."""

    name = "fault-slow-exit"

    def setup(self, spec, params, device, threads):
        import atexit

        atexit.register(time.sleep, 600)
        super().setup(spec, params, device, threads)


class FaultRaise(FaultOk):
    name, fault_step = "fault-raise", 3

    def fault(self):
        raise RuntimeError("injected failure at step 3")


class FaultAbort(FaultOk):
    name, fault_step = "fault-abort", 2

    def fault(self):
        os.abort()


class FaultKill(FaultOk):
    """Dies as the kernel's OOM killer would end it."""

    name, fault_step = "fault-kill", 2

    def fault(self):
        os.kill(os.getpid(), signal.SIGKILL)


class FaultLost(FaultOk):
    """Kills the process that started its worker, as a cluster loses a job (its node fails, the
    job is OOM-killed or cancelled with SIGKILL). For cluster executors only: under the local
    executor that process is the bench itself."""

    name, fault_step = "fault-lost", 2

    def fault(self):
        os.kill(os.getppid(), signal.SIGKILL)
        os._exit(1)


class FaultHang(FaultOk):
    name, fault_step = "fault-hang", 1

    def fault(self):
        time.sleep(3600)


class FaultExit(FaultOk):
    name, fault_step = "fault-exit", 0

    def fault(self):
        os._exit(3)


class FaultNan(FaultOk):
    name = "fault-nan"

    def sync(self, handle):
        return float("nan") if self.step > 4 else float(handle)


class FaultNoSync(FaultOk):
    """Computes on a background thread and never waits for it: the missing-sync bug that the
    physics check must catch (its steps look far faster than the hardware allows)."""

    name = "fault-nosync"

    def setup(self, spec, params, device, options):
        super().setup(spec, params, device, options)
        self.queue: queue.Queue = queue.Queue()
        threading.Thread(target=self._work, daemon=True).start()

    def _work(self):
        while True:
            self.queue.get()
            super().train_step(self.batch)

    def train_step(self, batch):
        self.batch = batch
        self.queue.put(None)
        return 1.0

    def sync(self, handle):
        return handle


class FaultBusy(FaultOk):
    """Claims a GPU whose queue is never empty after sync: the harness's sync check must fail it."""

    name = "fault-busy"

    def resolve_device(self, device):
        return device

    def device_busy(self):
        return True


class FaultGpuNoSync(Adapter):
    """A real CUDA adapter whose ``sync`` returns without waiting for the GPU (GPU machines only):
    each step queues a long chain of matmuls; the harness's stream query must catch it."""

    name = "fault-gpu-nosync"
    framework = "fault"
    graph = "dynamic"
    requires = ("torch",)
    extra = "torch"

    def version(self):
        import torch

        return {"torch": torch.__version__}

    def resolve_device(self, device):
        from adapters.kit import torch_resolve_device as resolve_device

        return resolve_device(device, "torch")

    def setup(self, spec, params, device, options):
        import torch

        self.torch, self.device = torch, torch.device(device)
        self.a = torch.randn(4096, 4096, device=self.device)

    def to_device(self, batch):
        return batch

    def train_step(self, batch):
        out = self.a
        for _ in range(20):
            out = out @ self.a
        return out

    def sync(self, handle):
        return 0.0  # the fault: no synchronisation

    def params(self):
        return {}

    def device_busy(self):
        from adapters.kit import torch_device_busy as device_busy

        return device_busy(self.torch, self.device)


class FaultKillLate(FaultOk):
    """Dies (SIGKILL) in the middle of its turns: at the first step that follows a pause of its
    steps (the cold window and block probe run back to back; only the turns wait
    between blocks for the other workers)."""

    name = "fault-kill-late"
    PAUSE_S = 0.05

    def setup(self, spec, params, device, threads):
        super().setup(spec, params, device, threads)
        self.armed = sum(v.size for v in params.values()) >= 100  # the dispatch floor's tiny twin must not fault
        self.last = None

    def train_step(self, batch):
        now = time.monotonic()
        if self.armed and self.last is not None and now - self.last > self.PAUSE_S:
            self.armed = False
            self.fault()
        self.last = now
        return super().train_step(batch)

    def fault(self):
        os.kill(os.getpid(), signal.SIGKILL)


class FaultHangLate(FaultKillLate):
    """Hangs in the middle of its turns."""

    name = "fault-hang-late"

    def fault(self):
        time.sleep(3600)


class FaultGarbageLate(FaultKillLate):
    """Writes garbage on its reply pipe in the middle of its turns (a worker gone wrong)."""

    name = "fault-garbage-late"

    def fault(self):
        import sys

        os.write(int(sys.argv[sys.argv.index("--fds") + 1].split(",")[1]), b"garbage\n")
