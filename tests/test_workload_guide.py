"""docs/adding-a-workload.md stays true: its example spec keeps the workload contract, and its
table of family dispatches names every file that dispatches on a workload's family.

The example (section 3.1) is taken from the page and loaded as a module of its own; it is never
registered, so no other test sees it. Files, modules and ``make`` commands the page mentions are
checked by tests/test_docs.py with every other page.
"""

from __future__ import annotations

import dataclasses
import re
import sys
import types
from collections.abc import Iterator

import numpy as np
import pytest

from harness.checks import conformance
from tests.conftest import REPO
from workloads import WORKLOADS, Workload, override
from workloads.spec import kernel_flops

GUIDE = REPO / "docs" / "adding-a-workload.md"
TEXT = GUIDE.read_text()
#: The harness's words for the workload family where they decide something (section 4's grep).
DISPATCH = re.compile(r'spec\.family|"family"\) ==|_FAMILIES|_MASKED|families =')
#: Hits of that grep that use "family" for something else: a group's verdicts judged together
#: (harness.stats.verdicts.family) and the framework families FRAMEWORK= selects.
OTHER_FAMILIES = {"harness/reporting/model.py", "harness/running/plan.py"}


def example_source() -> str:
    """The source of the guide's example spec module (section 3.1)."""
    section = TEXT.split("### 3.1 The spec module", 1)[1]
    found = re.search(r"```python\n(.*?)```", section, re.S)
    assert found, "section 3.1 of docs/adding-a-workload.md has no python block"
    return found.group(1)


@pytest.fixture(scope="module")
def example() -> Iterator[type[Workload]]:
    """The example's class, from a module of its own (dataclasses and ``override`` resolve its
    annotations through ``sys.modules``)."""
    module = types.ModuleType("workload_guide_example")
    sys.modules[module.__name__] = module
    try:
        exec(compile(example_source(), str(GUIDE), "exec"), module.__dict__)
        (cls,) = [
            v for v in vars(module).values() if isinstance(v, type) and issubclass(v, Workload) and v is not Workload
        ]
        yield cls
    finally:
        del sys.modules[module.__name__]


@pytest.fixture(scope="module")
def spec(example) -> Workload:
    return example(name="guide-example")


def test_the_example_imports_numpy_and_the_workload_contract_only():
    imported = set(re.findall(r"^(?:from|import) ([\w.]+)", example_source(), re.M))
    assert imported <= {"__future__", "dataclasses", "numpy", "workloads.spec"}, imported


def test_the_example_is_a_frozen_spec_of_a_new_family(example, spec):
    assert dataclasses.is_dataclass(example) and example.__dataclass_params__.frozen
    assert example.family and example.family not in {w.family for w in WORKLOADS.values()}
    assert f'family = "{example.family}"' in TEXT and f"`{example.family}`" in TEXT
    spec.validate()
    with pytest.raises(dataclasses.FrozenInstanceError):
        spec.batch_size = 1


def test_its_fields_can_be_overridden_and_are_validated(spec):
    changed = override(spec, ["features=8", "outputs=2", "noise=0"])
    assert (changed.features, changed.outputs, changed.noise) == (8, 2, 0.0)
    with pytest.raises(ValueError, match="features must be > 0"):
        override(spec, ["features=0"])


def test_its_parameters_and_data_are_deterministic_float32_and_seeded(spec):
    a, b = spec.init_params(), spec.init_params()
    assert all(np.array_equal(a[k], b[k]) and a[k].dtype == np.float32 for k in a)
    assert all(np.any(a[k] != 0) for k in a), "biases are non-zero, so a dropped one shows"
    first, again = spec.batches(), spec.batches()
    assert len(first) == spec.num_batches
    assert all(np.array_equal(p[k], q[k]) for p, q in zip(first, again, strict=True) for k in p)
    assert all(v.dtype == np.float32 for batch in first for v in batch.values())
    other = dataclasses.replace(spec, seed=1)
    assert not np.array_equal(other.init_params()["dense0/kernel"], a["dense0/kernel"])


def test_its_reference_gradients_match_finite_differences(spec):
    small = dataclasses.replace(spec, features=5, outputs=3, batch_size=4, num_batches=1)
    params = {k: v.astype(np.float64) for k, v in small.init_params().items()}
    batch = small.batches()[0]
    _, grads = small.reference_loss_and_grads(params, batch)
    eps = 1e-6
    for name, value in params.items():
        for idx in [(0,) * value.ndim, tuple(s - 1 for s in value.shape)]:
            plus = {k: v.copy() for k, v in params.items()}
            minus = {k: v.copy() for k, v in params.items()}
            plus[name][idx] += eps
            minus[name][idx] -= eps
            up, down = small.reference_loss_and_grads(plus, batch)[0], small.reference_loss_and_grads(minus, batch)[0]
            assert grads[name][idx] == pytest.approx((up - down) / (2 * eps), rel=1e-5, abs=1e-8), (name, idx)


def test_its_reference_keeps_the_parameters_dtype(spec):
    p32 = spec.init_params()
    loss, grads = spec.reference_loss_and_grads(p32, spec.batches()[0])
    assert np.isfinite(loss) and all(g.dtype == np.float32 for g in grads.values())


def test_its_kernels_add_up_to_its_flops_and_its_tiny_spec_is_tiny(spec):
    for batch in spec.batches():
        assert sum(kernel_flops(k) * n for k, n in spec.kernels(batch)) == spec.flops(batch)
    tiny = spec.tiny()
    tiny.validate()
    assert type(tiny) is type(spec) and tiny.param_count() < 2000 < spec.param_count()
    assert len(tiny.batches()) == len(spec.batches())


def test_its_loss_falls_as_the_conformance_check_asks(spec):
    """The "loss falls" check: the mean of the last 5 losses at least 0.05 below the first 5's,
    over check_steps on the checks' 4 batches, as the guide says its reference does."""
    checked = override(spec, conformance.CHECK_OVERRIDES)
    losses, _ = checked.reference_train(checked.init_params(), conformance.check_steps(checked))
    first, last = float(np.mean(losses[:5])), float(np.mean(losses[-5:]))
    assert last < first - 0.05
    assert f"{first:.2f} to {last:.2f}" in " ".join(TEXT.split()), "the figures section 3.1 quotes"


def test_the_dispatch_table_names_every_file_that_dispatches_on_the_family():
    section = TEXT.split("## 4. Every place", 1)[1].split("\n## ", 1)[0]
    roots = [REPO / "adapters", REPO / "harness"]
    files = sorted(p for root in roots for p in root.rglob("*.py")) + [REPO / "workloads" / "images.py"]
    dispatching = [
        path
        for p in files
        if (path := p.relative_to(REPO).as_posix()) not in OTHER_FAMILIES and DISPATCH.search(p.read_text())
    ]
    assert len(dispatching) >= 15, dispatching
    missing = [p for p in dispatching if p not in section and p.rsplit("/", 1)[1] not in section]
    assert not missing, f"docs/adding-a-workload.md section 4 leaves out {missing}"
