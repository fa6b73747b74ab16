"""What the conformance checks run: the variants of each workload, their shapes, steps and ids.

A variant is a workload and its overrides (``Variant``): every loop strategy where a workload
has them, the further CHECK_EXTRA variants, and the bf16 variants of BF16_WORKLOADS, all on the
small shapes of CHECK_OVERRIDES and CHECK_SIZES.
"""

from __future__ import annotations

from collections.abc import Sequence

from harness.records import spec_of as _spec_of
from harness.running.plan import variants
from workloads import STRATEGIES, WORKLOADS, Workload

#: Training steps compared with float64 shadow steps, from the first (tolerance.shadow).
SNAPSHOT = 5
#: Workloads whose training is also checked under ``--precision bf16`` (every adapter, small
#: shapes, about 6 steps each). rnn-caption stays out: rounding only parameters and inputs gives
#: its output bias an allowance (1.5e-4) below what rounding its hidden states to bfloat16 in
#: every step does, so its check would measure the emulation, not the adapter.
BF16_WORKLOADS = ("mlp", "cnn")
#: The bf16 variants' smaller shapes (on top of CHECK_OVERRIDES): half the default batch halves
#: the shadow steps and the bf16 compiles that the bf16 checks add to the suite.
BF16_OVERRIDES = ("batch_size=16",)
#: How a conformance variant asks for a precision (kept with its overrides; never a spec field).
PRECISION = "precision="

#: Checks train on a 4-batch dataset (3 for the variable-length workloads, CHECK_SIZES): numerics
#: are the same, few caption lengths (not 16) keep static-graph compiles few, and the loss falls
#: fast. A workload's CHECK_SIZES replace these fields where they name them (``check_base``).
CHECK_OVERRIDES = ["num_batches=4"]
#: Workloads checked on smaller shapes than their defaults (the numerics are the same), so each
#: adapter's extra check time stays a few seconds: the transformer at width 16, sequences of 4..12.
#: The variable-length workloads check three batches of three lengths (rnn-caption's 27, 25 and
#: 13 long, the transformer's 12, 9 and 4): an ``exact`` check compiles each length once in a
#: static graph, and its fourth length cost a quarter of the dearest checks (torch.compile's
#: transformer about 24 CPU-s, 2026-12-04, 2-core AMD EPYC), while three still hold a new length
#: and a repeated one. The buckets of the ``bucketed`` checks pad batches to lengths the ``exact``
#: checks already ran: a static graph then compiles no shape twice in a worker (its compiler
#: cache serves the second). Each still spreads its batches over two buckets and pads some
#: (tests/test_conformance.py holds both to this).
CHECK_SIZES = {
    "rnn-caption": ["num_batches=3", "buckets=13,27,40"],
    "transformer": [
        "num_batches=3", "vocab=32", "width=16", "heads=2", "layers=2", "topics=4", "batch_size=4",
        "min_len=4", "max_len=12", "buckets=4,12", "attention=naive",
    ],
}  # fmt: skip
#: Further variants checked beside each loop strategy's: the fused attention kernel once, padded
#: (one compile: its maths is the naive one's, which every strategy checks; static graphs
#: compile each variant's shapes anew, and torch.compile takes seconds per shape).
CHECK_EXTRA = {"transformer": [("attention=fused", "strategy=padded")]}

Variant = tuple[str, tuple[str, ...]]


def all_variants(workloads: list[str] | None = None) -> list[Variant]:
    """Every workload, each loop strategy where the workload has them, and its CHECK_EXTRA; then
    the bf16 variants of the chosen BF16_WORKLOADS."""
    chosen = workloads or list(WORKLOADS)
    out = []
    for w in chosen:
        base = check_base(w)
        out += [(w, tuple(o)) for o in variants(w, base, list(STRATEGIES))]
        out += [(w, tuple(_replaced(base, extra))) for extra in CHECK_EXTRA.get(w, [])]
    for w in BF16_WORKLOADS:
        if w in chosen:
            out.append((w, (*check_base(w), *BF16_OVERRIDES, f"{PRECISION}bf16")))
    return out


def check_base(workload: str) -> list[str]:
    """The overrides every check of ``workload`` starts from: CHECK_OVERRIDES, each field its
    CHECK_SIZES name replaced, then its CHECK_SIZES."""
    return _replaced(CHECK_OVERRIDES, CHECK_SIZES.get(workload, []))


def _replaced(base: Sequence[str], new: Sequence[str]) -> list[str]:
    """``base``'s ``field=value`` overrides less the fields ``new`` names, then ``new``."""
    named = {o.split("=")[0] for o in new}
    return [*(o for o in base if o.split("=")[0] not in named), *new]


def precision_of(variant: Variant) -> str:
    """The precision a variant checks: ``fp32`` unless its overrides name another."""
    return next((o.removeprefix(PRECISION) for o in variant[1] if o.startswith(PRECISION)), "fp32")


def overrides_of(variant: Variant) -> list[str]:
    """A variant's spec overrides (its precision is the cell's own key, not a spec field)."""
    return [o for o in variant[1] if not o.startswith(PRECISION)]


def spec_of(variant: Variant) -> Workload:
    """The spec a variant checks, rebuilt as every cell's is (harness.records.spec_of)."""
    return _spec_of({"workload": variant[0], "overrides": overrides_of(variant)})


def variant_id(variant: Variant) -> str:
    workload, overrides = variant
    fixed = [*check_base(workload), *BF16_OVERRIDES]
    return "-".join([workload, *(o.split("=")[1] for o in overrides if o not in fixed)])


def check_steps(spec: Workload, precision: str = "fp32") -> int:
    """Training steps a check runs: enough for the loss to fall clearly on the learnable data
    (on their check batches the caption decoder drops from 6.9 to 3.9 in 20 steps, the convnet
    from 2.31 to 2.19 in 30). A padding strategy only runs the compared steps: held to the exact
    strategy's reference on every batch, it trains as the exact strategy does, whose check
    covers the falling loss (and eager adapters step these decoders slowly). A bf16 variant
    likewise runs only the compared steps: its float32 twin covers the falling loss."""
    if not falls_checked(spec, precision):
        return SNAPSHOT + 1
    if spec.family in ("rnn-caption", "transformer"):
        return 20
    return 30


def falls_checked(spec: Workload, precision: str = "fp32") -> bool:
    """Whether the "loss falls" check applies: not to padding strategies nor bf16 variants (see
    check_steps)."""
    return spec.strategy == "exact" and precision != "bf16"


def is_training(spec: Workload) -> bool:
    return spec.task == "train"
