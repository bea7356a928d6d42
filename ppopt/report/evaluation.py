"""Formatting of :class:`ppopt.evaluate.Evaluation` as text and JSON-ready dicts."""

from __future__ import annotations

from collections.abc import Sequence

from ppopt.evaluate import Evaluation
from ppopt.report.text import aligned, per_device


def evaluation_json(result: Evaluation) -> dict:
    """The JSON object of one evaluation (keys as in the README)."""
    f, t = result.formula, result.table
    return {
        "schedule": result.schedule,
        "devices": result.devices,
        "microbatches": result.microbatches,
        "options": result.options,
        "formula": {
            "bubble_ratio": f.bubble_ratio,
            "length": f.length,
            "peak_activations": list(f.peak_activations),
            "weight_copies": list(f.weight_copies),
            "source": f.source,
        },
        "table": {"length": t.length, "bubble_ratio": t.bubble_ratio, "peak_activations": list(t.peak_activations)},
    }


def evaluation_text(results: Sequence[Evaluation], backward: int) -> str:
    """Formula and table metrics side by side, one row per schedule."""
    rows = []
    for r in results:
        f, t = r.formula, r.table
        differs = "" if abs(f.bubble_ratio - t.bubble_ratio) < 1e-12 else " *"
        rows.append(
            (
                r.schedule,
                f"{f.bubble_ratio:.4f}",
                f"{t.bubble_ratio:.4f}{differs}",
                f"{f.length:g}",
                f"{t.length}",
                per_device(f.peak_activations),
                per_device(t.peak_activations),
                per_device(f.weight_copies),
            )
        )
    p, m = results[0].devices, results[0].microbatches
    header = f"p = {p} devices, m = {m} microbatches; unit slots F = 1, B = {backward}, I = W = 1; bubble = idle / total"
    table = aligned(
        ("schedule", "bubble formula", "bubble table", "length formula", "length table", "peak act. formula", "peak act. table", "weights"),
        rows,
    )
    note = "* the table differs from the closed form (see README: formula vs table)"
    return "\n".join([header, "", table] + ([ "", note] if any(row[2].endswith("*") for row in rows) else []))
