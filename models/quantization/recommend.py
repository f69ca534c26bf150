"""Choosing the variant to deploy from the evaluation rows, with the reasons in words."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from models.quantization.tolerance import DEFAULT_TOLERANCE, Tolerance


def recommend(rows: Sequence[Mapping[str, Any]], tolerance: Tolerance = DEFAULT_TOLERANCE) -> tuple[str, str]:
    """The smallest accepted variant that is not much slower than fp32, with the reasons
    in words. Rows come from ``evaluate_*_variants`` (optionally with ``artifact_bytes``)."""
    by_p = {r["precision"]: r for r in rows}
    ref = by_p.get("fp32")
    if ref is None:
        raise ValueError("recommend needs the fp32 row")
    size_key = "artifact_bytes" if all("artifact_bytes" in r for r in rows if r.get("supported")) else "state_dict_bytes"
    lat_key = _main_latency_key(ref)
    notes: list[str] = []
    candidates = []
    for r in rows:
        p = r["precision"]
        if p == "fp32":
            continue
        if not r.get("supported"):
            notes.append(f"{p} {r['reason']}")
        elif not r["accepted"]:
            notes.append(f"{p} rejected: {r['reason']}")
        elif lat_key and not _meets_latency(r, lat_key, tolerance):
            budget = f"batch 1 over {tolerance.latency_budget_ms} ms and " if tolerance.latency_budget_ms else ""
            notes.append(
                f"{p} within tolerance but too slow: {budget}{r[f'latency_ratio_{lat_key}']:.2f}x fp32 "
                f"latency at {lat_key.replace('b', 'batch ')} (max {tolerance.max_slowdown:.2f}x)"
            )
        else:
            candidates.append(r)
    if not ref.get("accepted", True):
        notes.insert(0, f"fp32 itself not deployable: {ref.get('reason', '')}")
    if not candidates:
        return "fp32", "fp32: no other variant qualifies; " + "; ".join(notes)
    best = min(candidates, key=lambda r: (r[size_key], r.get(f"latency_ms_{lat_key}", 0.0)))
    ratio = ref[size_key] / best[size_key]
    words = (
        f"{best['precision']}: {ratio:.2f}x smaller than fp32 ({_kb(ref[size_key])} -> "
        f"{_kb(best[size_key])}), {best['reason']}"
    )
    if lat_key:
        words += f", {best[f'latency_ratio_{lat_key}']:.2f}x fp32 latency at {lat_key.replace('b', 'batch ')}"
        if "latency_ms_b1" in best:
            words += f" ({best['latency_ms_b1']:.2f} ms at batch 1)"
    others = [f"{r['precision']} also accepted but larger" for r in candidates if r is not best]
    return best["precision"], "; ".join([words, *others, *notes])


def _meets_latency(row: Mapping[str, Any], lat_key: str, tolerance: Tolerance) -> bool:
    if row.get(f"latency_ratio_{lat_key}", 1.0) <= tolerance.max_slowdown:
        return True
    b1 = row.get("latency_ms_b1")
    return tolerance.latency_budget_ms is not None and b1 is not None and b1 <= tolerance.latency_budget_ms


def _main_latency_key(row: Mapping[str, Any]) -> str | None:
    keys = sorted(int(k.removeprefix("latency_ms_b")) for k in row if k.startswith("latency_ms_b"))
    if not keys:
        return None
    return f"b{32 if 32 in keys else keys[-1]}"


def _kb(n: float) -> str:
    return f"{n / 1024:.1f} KiB" if n < 1024**2 else f"{n / 1024**2:.2f} MiB"
