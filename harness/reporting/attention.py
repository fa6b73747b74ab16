"""The report's "Attention implementations" section: for workloads with an ``attention`` setting
(the transformer), each adapter's naive and fused cells side by side, and where a sweep ran,
the swept value at which fused overtakes naive (or naive fused) for each adapter."""

from __future__ import annotations

from typing import cast

from tabulate import tabulate

from harness.records import Record, strategy_override
from harness.reporting.cells import strategy, tokens_per_s
from harness.reporting.formatting import DASH, compiles_text, device_label, sig, verdict_text
from harness.reporting.sweeps import crossovers
from harness.reporting.workload_tables import live
from harness.stats.verdicts import PairVerdict, pair_verdict

KINDS = ("naive", "fused")


def attention(rec: Record) -> str | None:
    return (rec.get("spec") or {}).get("attention")


def _others(rec: Record) -> tuple:
    """Every setting but the attention kernel and the swept field: cells equal in these pair up."""
    swept = (rec.get("sweep") or {}).get("field")
    keep = (o for o in rec.get("overrides", []) if o.split("=")[0] not in ("attention", "strategy", swept))
    return (rec["workload"], tuple(sorted(keep)), rec.get("precision", "fp32"), rec.get("data", "resident"))


def _loop(rec: Record) -> str:
    """The loop strategy, also of a cell that did not run (its record may lack the spec's task)."""
    return strategy(rec) or strategy_override(rec) or DASH


def _cell(rec: Record | None) -> tuple[str, str, str]:
    """ms/step, tokens/s and compiles of one cell; a cell that did not run gives its status."""
    if rec is None:
        return DASH, DASH, DASH
    if rec["status"] != "ok":
        reason = " ".join(str(rec.get("reason", "")).split())
        return f"{rec['status']}: {reason}", DASH, DASH
    return sig(rec["median_s"] * 1e3), sig(tokens_per_s(rec)), compiles_text(rec)


def _ratio(naive: Record | None, fused: Record | None) -> str:
    """naive time over fused time (above 1: fused is faster) with its interval and verdict, as every
    table prints a pair (formatting.verdict_text)."""
    if not naive or not fused or naive["status"] != "ok" or fused["status"] != "ok":
        return DASH
    return verdict_text(pair_verdict(fused, naive))


def section(recs: list[Record]) -> list[str]:
    """``## Attention implementations``, or nothing where no cell has an attention setting."""
    cells = [r for r in recs if attention(r) in KINDS and r.get("data", "resident") == "resident"]
    if not any(attention(r) == "fused" for r in cells):  # naive alone: nothing to set beside it
        return []
    out = ["## Attention implementations", ""]
    out += _side_by_side([r for r in cells if not r.get("sweep")])
    out += _crossover_lengths([r for r in cells if r.get("sweep") and r["status"] == "ok"])
    return out if len(out) > 2 else []


def _side_by_side(cells: list[Record]) -> list[str]:
    pairs: dict[tuple, dict[str | None, Record]] = {}
    for r in cells:
        key = (*_others(r), r["adapter"], _loop(r), device_label(r))
        pairs.setdefault(key, {})[attention(r)] = r
    if not pairs:
        return []
    rows = []
    for key in sorted(pairs, key=lambda k: [str(x) for x in k]):
        workload, setting, precision, _data, adapter, loop, device = key
        naive, fused = pairs[key].get("naive"), pairs[key].get("fused")
        kernel = ((fused.get("settings") if fused else None) or {}).get("attention_kernel", DASH)
        n_ms, n_tok, n_comp = _cell(naive)
        f_ms, f_tok, f_comp = _cell(fused)
        what = ", ".join([*setting, *([precision] if precision != "fp32" else [])])
        rows.append(
            [
                adapter,
                loop,
                device,
                what or DASH,
                n_ms,
                f_ms,
                _ratio(naive, fused),
                n_tok,
                f_tok,
                n_comp,
                f_comp,
                kernel,
            ]
        )
    headers = [
        "adapter",
        "strategy",
        "device",
        "settings",
        "naive (ms/step)",
        "fused (ms/step)",
        "fused speed-up",
        "naive tokens/s",
        "fused tokens/s",
        "naive traces / compiles",
        "fused traces / compiles",
        "fused kernel",
    ]
    headers, rows = live(headers, rows)
    speedup = (
        "Speed-up is naive time over fused time (above 1: the fused kernel is faster) with its interval, as "
        "the workload tables print a pair: `same speed` where the interval lies within [0.952, 1.05], `unresolved` "
        "where it neither does nor excludes 1 (with why), faster or slower where it excludes 1 otherwise. "
        if "fused speed-up" in headers
        else "No cell of this run used the fused kernel (`--strategy all` or `--set attention=fused` runs them). "
    )
    intro = (
        "Each adapter's cells with attention written out (`naive`: matmul, causal mask, softmax, matmul) and "
        "with its framework's own attention kernel (`fused`), same model, data and strategy. "
        + speedup
        + "Tokens/s counts the predicted tokens (padding excluded) at the steady step time beside it; compiles are "
        "the framework's own counts over the whole run, one per sequence length under `exact`, per bucket under "
        "`bucketed`, one under `padded`."
    )
    return [intro, "", tabulate(rows, headers, tablefmt="github", disable_numparse=True), ""]


def _crossover_lengths(cells: list[Record]) -> list[str]:
    """Per adapter, strategy and device: where along the sweep the faster kernel changes."""
    series: dict[tuple, dict[str, list[Record]]] = {}
    for r in sorted(cells, key=lambda r: r["sweep"]["value"]):
        key = (*_others(r), r["sweep"]["field"], r["adapter"], _loop(r), device_label(r))
        series.setdefault(key, {}).setdefault(cast(str, attention(r)), []).append(r)  # one of KINDS (section)
    rows = []
    for key in sorted(series, key=lambda k: [str(x) for x in k]):
        *_, field, adapter, loop, device = key
        both = series[key]
        if set(both) != set(KINDS):
            continue
        found = crossovers(both)
        values = sorted({r["sweep"]["value"] for rs in both.values() for r in rs})
        if found:
            where = "; ".join(
                f"{c['faster_after']} faster from {field}={c['after']:g} ({c['faster_before']} at {c['before']:g})"
                for c in found
            )
        else:
            won = {v: w for v in values if (w := _winner(both, v))}
            where = f"no crossover over {field}={values[0]:g}..{values[-1]:g}"
            if won:
                kind = next(iter(won.values()))[0]
                at = ", ".join(f"{v:g} ({verdict_text(w[1])})" for v, w in won.items())
                where += f": {kind} faster where separated, at {field}={at}"
            else:
                where += ": never separated"
        rows.append([adapter, loop, device, where])
    if not rows:
        return []
    intro = (
        "Where the fused kernel overtakes the naive one along the sweep, per adapter: the first swept value "
        "at which the other kernel is faster, separated (values where the two are not separated are not counted)."
    )
    headers = ["adapter", "strategy", "device", "naive / fused crossover"]
    return ["### Crossover along the sweep", "", intro, "", tabulate(rows, headers, tablefmt="github"), ""]


def _winner(both: dict[str, list[Record]], value: float) -> tuple[str, PairVerdict] | None:
    """The separated faster kernel at one swept value with the verdict of the slower's time over the
    faster's, or None (not separated, or a missing cell)."""
    at = {k: next((r for r in rs if r["sweep"]["value"] == value), None) for k, rs in both.items()}
    naive, fused = at.get("naive"), at.get("fused")
    if naive is None or fused is None:
        return None
    v = pair_verdict(fused, naive)  # time(naive) / time(fused)
    if not v.separated:
        return None
    return ("fused", v) if v.point > 1 else ("naive", pair_verdict(naive, fused))
