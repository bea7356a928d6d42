"""Formatting of evaluations (formula, table and simulation layers) as text and JSON-ready dicts."""

from __future__ import annotations

from collections.abc import Sequence

from ppopt.evaluate import Evaluation, Ranking
from ppopt.report.text import gib, per_device, render_table, seconds, with_context
from ppopt.table import Table
from ppopt.units import UnitCosts


def simulation_json(sim) -> dict:
    return {
        "step_time_s": sim.step_time_s,
        "idle_ratio": sim.idle_ratio,
        "peak_activation_bytes": list(sim.peak_activation_bytes),
        "persistent_bytes": list(sim.persistent_bytes),
        "peak_memory_bytes": list(sim.peak_memory_bytes),
    }


def table_json(table: Table) -> dict:
    """The JSON object of one unit-slot table (``ppopt table --json``; keys as in the README).

    ``ops[d]`` lists device d's ops in execution order as ``{"op": "1F0", "start": 3, "end": 4}``
    (PyTorch action strings; slots, end exclusive).
    """
    schedule = table.schedule
    return {
        "schedule": schedule.name,
        "devices": schedule.devices,
        "stages": schedule.stages,
        "microbatches": schedule.microbatches,
        "durations": {kind.value: slots for kind, slots in table.durations.items()},
        "length": table.length,
        "bubble_ratio": table.bubble_ratio,
        "peak_activations": list(table.peak_activations),
        "ops": [[{"op": str(op), "start": table.start[op], "end": table.end(op)} for op in order] for order in schedule.orders],
    }


def units_json(units: UnitCosts) -> dict:
    """The unit model as JSON: slots of F, B, I, W of a 1/p model share and of a message."""
    w = units.weight_slots
    return {"forward": units.forward, "backward": units.backward, "input_grad": units.backward - w, "weight_grad": w,
            "comm": units.comm, "chunk_ops_scaled_by": "p/S"}


def evaluation_json(result: Evaluation, units: UnitCosts) -> dict:
    """The JSON object of one evaluation (keys as in the README). Formula and table lengths are in
    ``length_unit`` (unit slots) of the unit model ``unit_model``, the same for every schedule."""
    f, t = result.formula, result.table
    data = {
        "schedule": result.schedule,
        "devices": result.devices,
        "microbatches": result.microbatches,
        "options": result.options,
        "length_unit": "slots",
        "unit_model": units_json(units),
        "formula": None if f is None else {
            "bubble_ratio": f.bubble_ratio,
            "length": f.length,
            "peak_activations": list(f.peak_activations),
            "weight_copies": list(f.weight_copies),
            "source": f.source,
        },
        "table": {"length": t.length, "bubble_ratio": t.bubble_ratio, "peak_activations": list(t.peak_activations)},
    }
    if result.simulation is not None:
        data["simulation"] = simulation_json(result.simulation)
    return data


def units_text(units: UnitCosts) -> str:
    """The unit model in one phrase: durations of a 1/p model share, in slots."""
    w = units.weight_slots
    comm = f", comm = {units.comm:g}" if units.comm else ""
    return (f"unit slots of a 1/p model share F = {units.forward:g}, B = {units.backward:g} "
            f"(I = {units.backward - w:g}, W = {w:g}){comm}, chunk ops scaled by p/S")


def _header(results: Sequence[Evaluation], units: UnitCosts) -> str:
    p, m = results[0].devices, results[0].microbatches
    return f"p = {p} devices, m = {m} microbatches; lengths in {units_text(units)}; bubble = idle / total"


def evaluation_text(results: Sequence[Evaluation], units: UnitCosts, fmt: str = "text") -> str:
    """Formula and table metrics side by side (and simulation metrics when present), one row per schedule."""
    rows = []
    simulated = all(r.simulation is not None for r in results)
    for r in results:
        f, t = r.formula, r.table
        differs = "" if f is None or abs(f.bubble_ratio - t.bubble_ratio) < 1e-12 else " *"
        row = [
            r.schedule,
            "-" if f is None else f"{f.bubble_ratio:.4f}",
            f"{t.bubble_ratio:.4f}{differs}",
            "-" if f is None else f"{f.length:g}",
            f"{t.length:g}",
            "-" if f is None else per_device(f.peak_activations),
            per_device(t.peak_activations),
            "-" if f is None else per_device(f.weight_copies),
        ]
        sim = r.simulation
        if simulated and sim is not None:
            row += [seconds(sim.step_time_s), f"{sim.idle_ratio:.4f}", gib(max(sim.peak_memory_bytes))]
        rows.append(row)
    headers = ["schedule", "bubble formula", "bubble table", "length formula", "length table", "peak act. formula", "peak act. table", "weights"]
    if simulated:
        headers += ["sim step", "sim idle", "sim peak memory"]
    table = render_table(headers, rows, fmt)
    note = "* the table differs from the closed form (see README: formula vs table)"
    after = ["", note] if any(row[2].endswith("*") for row in rows) else []
    return with_context([_header(results, units), ""], table, after, fmt)


def compare_text(results: Sequence[Evaluation], ranking: Ranking, units: UnitCosts, context: str, fmt: str = "text") -> str:
    """All schedules ranked in the three layers; ``!`` marks a schedule whose rank changes."""
    order = sorted(results, key=lambda r: (ranking.simulation.get(r.schedule, 0), r.schedule))
    rows = []
    for r in order:
        f, sim = r.formula, r.simulation
        assert f is not None and sim is not None, "compare evaluates the formula and simulation layers"
        rows.append(
            (
                r.schedule + (" !" if r.schedule in ranking.flips else ""),
                f"{ranking.formula[r.schedule]}  ({f.bubble_ratio:.4f})",
                f"{ranking.table[r.schedule]}  ({r.table.bubble_ratio:.4f})",
                f"{ranking.simulation[r.schedule]}  ({seconds(sim.step_time_s)})",
                f"{sim.idle_ratio:.4f}",
                gib(max(sim.peak_activation_bytes)),
                gib(max(sim.peak_memory_bytes)),
            )
        )
    table = render_table(
        ("schedule", "formula rank (bubble)", "table rank (bubble)", "simulated rank (step)", "idle", "peak activations", "peak memory"),
        rows,
        fmt,
    )
    after = ["", f"! rank changes between layers: {', '.join(ranking.flips)}"] if ranking.flips else []
    return with_context([_header(results, units), context, ""], table, after, fmt)


def compare_json(results: Sequence[Evaluation], ranking: Ranking, units: UnitCosts) -> list[dict]:
    rows = []
    for r in results:
        data = evaluation_json(r, units)
        data["rank"] = {
            "formula": ranking.formula[r.schedule],
            "table": ranking.table[r.schedule],
            "simulation": ranking.simulation.get(r.schedule),
        }
        data["rank_changes"] = r.schedule in ranking.flips
        rows.append(data)
    return rows
