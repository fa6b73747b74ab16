"""Test doubles for harness logic only (timing, planning, reports); never for conformance."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from adapters import AdapterInfo
from adapters.base import Adapter


class FakeClock:
    """A clock that advances only when the fake adapter does work."""

    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


class FakeAdapter(Adapter):
    """Each step costs ``step_costs[i]`` fake seconds, paid in ``sync`` (as async dispatch does)."""

    name = "fake"
    framework = "fake"
    graph = "static"
    requires = ()
    extra = "fake"

    def __init__(self, clock: FakeClock, step_costs: list[float], losses: list[float] | None = None) -> None:
        self.clock, self.costs, self.losses = clock, step_costs, losses
        self.steps = self.syncs = 0
        self.batches_seen: list[Any] = []

    def version(self):
        return {"fake": "1"}

    def resolve_device(self, device):
        return "cpu"

    def setup(self, spec, params, device, threads):
        pass

    def to_device(self, batch):
        return batch

    def train_step(self, batch):
        self.batches_seen.append(batch)
        self.steps += 1
        return self.steps - 1

    def sync(self, handle):
        self.syncs += 1
        self.clock.now += self.costs[min(handle, len(self.costs) - 1)]
        return self.losses[handle] if self.losses else 1.0 / (handle + 1)

    def params(self):
        return {}


def fake_info(name: str, framework: str, unavailable: str | None = None) -> AdapterInfo:
    return AdapterInfo(name, framework, "static", "tests.fakes", FakeAdapter, unavailable)


def record(adapter: str, workload: str = "mlp", status: str = "ok", median_ms: float = 1.0, **extra: Any) -> dict:
    rec = {
        "schema_version": 1,
        "run_id": "r1",
        "adapter": adapter,
        "framework": adapter.split("-")[0],
        "graph": "dynamic",
        "workload": workload,
        "overrides": [],
        "device_requested": "cpu",
        "device": "cpu",
        "profile": "quick",
        "status": status,
        "reason": "" if status == "ok" else extra.pop("reason", "because"),
        "param_count": 266610,
        "spec": {"batch_size": 32, "optimizer": "sgd", "learning_rate": 0.01},
    }
    if status == "ok":
        rec.update(
            first_step_s=median_ms * 5e-3,
            median_s=median_ms * 1e-3,
            iqr_s=median_ms * 1e-4,
            samples_per_s=32 / (median_ms * 1e-3),
            loss_first=2.3,
            loss_last=1.1,
            steps=100,
            noisy=False,
            versions={adapter.split("-")[0]: "1.0"},
            settings={"tf32": False},
        )
    rec.update(extra)
    return rec


def process_levels(median_s: float, jitter: float, seed: int = 0, k: int = 5) -> dict[int, float]:
    """``k`` processes' levels (log step times) around ``median_s``, scattered by ``jitter`` (in log
    units) with a geometric mean of exactly ``median_s``: what a combined record carries."""
    import numpy as np

    z = np.random.default_rng(seed).standard_normal(k)
    z = z - z.mean()
    return {i + 1: float(np.log(median_s) + jitter * z[i]) for i in range(k)}


#: Drift of the machine over five rounds (mean 1), the same for every cell of a run (it cancels in pairs).
DRIFT = (1.0, 1.1, 0.9, 1.05, 0.95)


def as_rounds(rec: dict, drift: tuple[float, ...] = DRIFT, spread: float = 0.01, n: int = 21) -> list[dict]:
    """``rec`` as the records of its cell's rounds (fresh processes): round k's steps spread evenly
    around its median times ``drift[k - 1]``, for harness.stats.cells.combine_all."""
    import numpy as np

    median = rec["median_s"]
    cell_id = rec.get("cell_id") or "|".join(
        [rec["adapter"], rec["workload"], rec.get("device_requested", "cpu"), *sorted(rec.get("overrides", []))]
    )
    out = []
    for k, factor in enumerate(drift, start=1):
        times = list(median * factor * (1 + spread * np.linspace(-1, 1, n)))
        batch = rec.get("batch_size") or rec["spec"]["batch_size"]
        fields = {"cell_id": cell_id, "round": k, "step_times_s": times, "median_s": median * factor}
        out.append({"cold_s": 0.1, **rec, **fields, "batch_size": batch, "process_levels": None})
    return out


def report_text(run: Path) -> str:
    """A written report's whole text: report.md (the first page), then details.md where written."""
    details = run / "details.md"
    return (run / "report.md").read_text() + ("\n" + details.read_text() if details.is_file() else "")
