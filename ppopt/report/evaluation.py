"""Formatting of evaluations (formula, table and simulation layers) as text and JSON-ready dicts."""

from __future__ import annotations

from collections.abc import Sequence

from ppopt.evaluate import Evaluation, MemoryOver, Ranking, memory_over
from ppopt.formula import Formula
from ppopt.ir import Schedule
from ppopt.report.text import csv_gib, csv_number, distinct_digits, gib, per_device, render_table, seconds, with_context
from ppopt.simulate import Simulation
from ppopt.table import Table
from ppopt.units import UnitCosts


def timeline_json(sim: Simulation) -> dict:
    """The step time, idle share and per-device memory of one simulated step."""
    return {
        "step_time_s": sim.step_time_s,
        "idle_ratio": sim.idle_ratio,
        "peak_activation_bytes": list(sim.peak_activation_bytes),
        "persistent_bytes": list(sim.persistent_bytes),
        "peak_memory_bytes": list(sim.peak_memory_bytes),
    }


def orders_json(schedule: Schedule) -> dict:
    """The devices of each stage (``placement``), each device's ops in order (``orders``) and the
    (forward, backward) pairs that run as one overlapped action (``overlapped``; DualPipe(V)'s), as
    action strings: enough to rebuild the schedule."""
    return {"placement": [list(holders) for holders in schedule.placement],
            "orders": [[str(op) for op in order] for order in schedule.orders],
            "overlapped": [[str(forward), str(backward)] for forward, backward in schedule.overlapped]}


def simulation_json(result: Evaluation) -> dict:
    """The simulation of ``result`` (:func:`timeline_json`) with its fit in the system's memory
    (:func:`capacity_json`)."""
    sim = result.simulation
    assert sim is not None and result.memory_capacity_bytes is not None
    return timeline_json(sim) | capacity_json(sim.peak_memory_bytes, result.memory_capacity_bytes)


def capacity_json(peaks: Sequence[float], capacity_bytes: float) -> dict:
    """``memory_capacity_bytes``, ``over_memory`` (the worst device's peak exceeds it),
    ``memory_excess_bytes`` (by how much; 0 when it fits) and ``over_memory_device``."""
    over = memory_over(peaks, capacity_bytes)
    return {
        "memory_capacity_bytes": capacity_bytes,
        "over_memory": over is not None,
        "memory_excess_bytes": 0.0 if over is None else over.excess_bytes,
        "over_memory_device": None if over is None else over.device,
    }


OVER_MEMORY = "#"
"""Marks a peak memory above the system's memory per device."""


def peak_memory_cell(result: Evaluation, fmt: str = "text") -> str:
    """The worst-device peak memory, marked when it exceeds the system's memory (not in CSV, which
    has no footnotes: its ``over memory`` column says it)."""
    assert result.simulation is not None
    peak = max(result.simulation.peak_memory_bytes)
    if fmt == "csv":  # a bare number: the header says GiB
        return csv_gib(peak)
    mark = f" {OVER_MEMORY}" if result.memory_over is not None else ""
    return gib(peak) + mark


def yes_no(flag: bool) -> str:
    """A yes/no cell: CSV's column for a mark the text explains in a footnote (``!``, ``#``, ``*``)."""
    return "yes" if flag else "no"


def capacity_text(capacity_bytes: float) -> str:
    """A GPU's memory in GiB, with the GB it is sold as when that is the round figure (80 GB is
    74.51 GiB: seen alone it looked like a wrong preset)."""
    whole_gb = capacity_bytes % 1e9 == 0 and capacity_bytes % 2**30 != 0
    return f"{gib(capacity_bytes)} ({capacity_bytes / 1e9:g} GB)" if whole_gb else gib(capacity_bytes)


def over_memory_text(over: MemoryOver) -> str:
    """``device D peaks at X GiB, Y GiB over the system's Z GiB per device``."""
    return (f"device {over.device} peaks at {gib(over.peak_bytes)}, {gib(over.excess_bytes)} over the system's "
            f"{capacity_text(over.capacity_bytes)} per device")


def memory_footnotes(results: Sequence[Evaluation]) -> list[str]:
    """One footnote line per result over the memory capacity, naming the device and the excess."""
    lines = []
    for r in results:
        over = r.memory_over
        if over is not None:
            lines.append(f"{OVER_MEMORY} {r.label}: {over_memory_text(over)}")
    return [""] + lines if lines else []


def skipped_json(skipped: dict[str, str]) -> list[dict]:
    """The families that did not apply, to follow the evaluated rows of ``evaluate -s all --json`` and
    ``compare --json``, so a JSON reader sees every family stderr names: ``{"schedule": name,
    "skipped": reason}``."""
    return [{"schedule": name, "skipped": reason} for name, reason in skipped.items()]


def table_json(table: Table) -> dict:
    """The JSON object of one unit-slot table (``ppopt table --json``; keys as in the README).

    ``ops[d]`` lists device d's ops in execution order as ``{"op": "1F0", "start": 3, "end": 4}``
    (PyTorch action strings; slots, end exclusive). ``comm`` is the message delay in slots, which the
    length depends on as much as on the ``durations``.
    """
    schedule = table.schedule
    return {
        "schedule": schedule.name,
        "devices": schedule.devices,
        "stages": schedule.stages,
        "microbatches": schedule.microbatches,
        "durations": {kind.value: slots for kind, slots in table.durations.items()},
        "comm": table.units.comm,
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
        "formula": None if f is None else {  # outside the forms' range their figures are null, as text and CSV leave them out
            "bubble_ratio": f.bubble_ratio if f.valid else None,
            "length": f.length if f.valid else None,
            "peak_activations": list(f.peak_activations) if f.valid else None,
            "weight_copies": list(f.weight_copies),
            "source": f.source,
            "valid": f.valid,
            "outside_range": f.outside,
        },
        "table": {"length": t.length, "bubble_ratio": t.bubble_ratio, "peak_activations": list(t.peak_activations),
                  "weight_copies": list(t.weight_copies)},
    }
    if result.simulation is not None:
        data["simulation"] = simulation_json(result)
    return data


def units_text(units: UnitCosts) -> str:
    """The unit model in one phrase: durations of a 1/p model share, in slots."""
    w = units.weight_slots
    comm = f", comm = {units.comm:g}" if units.comm else ""
    return (f"unit slots of a 1/p model share F = {units.forward:g}, B = {units.backward:g} "
            f"(I = {units.backward - w:g}, W = {w:g}){comm}, chunk ops scaled by p/S")


def _header(results: Sequence[Evaluation], units: UnitCosts, weights: bool = False) -> str:
    """The line above evaluate's and compare's tables: sizes and units (``weights``: evaluate's table,
    whose peak activations are counted and whose weights column compare has not; compare's peaks are
    in GiB, as its header says)."""
    p, m = results[0].devices, results[0].microbatches
    devices, microbatches = ("device" if p == 1 else "devices"), ("microbatch" if m == 1 else "microbatches")
    return (f"p = {p} {devices}, m = {m} {microbatches}; lengths in {units_text(units)}; bubble = idle / total"
            + ("; peak act. in stage-chunk activations (1/S of the model each); weights in copies of a 1/p model share"
               if weights else ""))


def _ratio(value: float, fmt: str) -> str:
    """A bubble or idle ratio: four decimals to read, :func:`csv_number`'s digits in CSV."""
    return csv_number(value) if fmt == "csv" else f"{value:.4f}"


def _length(value: float, fmt: str) -> str:
    """A length in slots: six significant digits to read, :func:`csv_number`'s digits in CSV."""
    return csv_number(value) if fmt == "csv" else f"{value:g}"


def closed_form_cell(f: Formula | None, text: str, fmt: str = "text") -> str:
    """``text`` (a closed-form value), "n/a (reason)" outside the forms' range, "-" without forms;
    in CSV an empty cell for either (a cell of a numeric column holds a number or nothing)."""
    if f is None or not f.valid:
        return "" if fmt == "csv" else "-" if f is None else f"n/a ({f.outside})"
    return text


def evaluation_text(results: Sequence[Evaluation], units: UnitCosts, fmt: str = "text", context: str | None = None) -> str:
    """Formula and table metrics side by side (and simulation metrics when present), one row per
    schedule; ``context`` (what was simulated) goes under the header."""
    rows = []
    simulated = all(r.simulation is not None for r in results)
    for r in results:
        f, t = r.formula, r.table
        differs = "" if f is None or not f.valid or abs(f.bubble_ratio - t.bubble_ratio) < 1e-12 else " *"
        csv_marks = [yes_no(bool(differs)) if f is not None and f.valid else ""]  # no closed form to differ from
        differs = "" if fmt == "csv" else differs  # CSV has no footnotes: a column says it
        row = [
            r.label,  # hanayo w2 with --waves 2, as a job names it
            closed_form_cell(f, "" if f is None else _ratio(f.bubble_ratio, fmt), fmt),
            f"{_ratio(t.bubble_ratio, fmt)}{differs}",
            closed_form_cell(f, "" if f is None else _length(f.length, fmt), fmt),
            _length(t.length, fmt),
            closed_form_cell(f, "" if f is None else per_device(f.peak_activations, fmt), fmt),
            per_device(t.peak_activations, fmt),
            per_device(t.weight_copies, fmt),
        ]
        sim = r.simulation
        if simulated and sim is not None:
            step = csv_number(sim.step_time_s) if fmt == "csv" else seconds(sim.step_time_s)
            row += [step, _ratio(sim.idle_ratio, fmt), peak_memory_cell(r, fmt)]
            csv_marks.append(yes_no(r.memory_over is not None))
        rows.append(row + csv_marks if fmt == "csv" else row)
    headers = ["schedule", "bubble formula", "bubble table", "length formula", "length table", "peak act. formula", "peak act. table", "weights"]
    if simulated:
        headers += ["sim step s", "sim idle", "sim peak memory GiB"] if fmt == "csv" else ["sim step", "sim idle", "sim peak memory"]
    if fmt == "csv":
        headers += ["table differs from formula", *(["over memory"] if simulated else [])]
    table = render_table(headers, rows, fmt)
    note = "* the table differs from the closed form (see README: formula vs table)"
    if units.comm > 0:  # the closed forms have no messages: with --comm every table is longer than its form
        note = (f"* the table differs from the closed form, which leaves out the messages (comm = {units.comm:g} slot{'' if units.comm == 1 else 's'}); "
                "some differ without them too (see README: formula vs table)")
    after = ["", note] if any(row[2].endswith("*") for row in rows) else []
    after += memory_footnotes(results)
    return with_context([_header(results, units, weights=True), *([context] if context else []), ""], table, after, fmt)


def compare_text(results: Sequence[Evaluation], ranking: Ranking, units: UnitCosts, context: str, fmt: str = "text") -> str:
    """All schedules ranked in the three layers; ``!`` marks a schedule whose rank changes."""
    order = sorted(results, key=lambda r: (ranking.simulation.get(r.schedule, 0), r.schedule))
    steps = [r.simulation.step_time_s for r in order if r.simulation is not None]
    digits = distinct_digits(steps, len({ranking.simulation.get(r.schedule) for r in order}))
    rows: list[tuple[str, ...]] = []
    for r in order:
        f, sim = r.formula, r.simulation
        assert sim is not None, "compare evaluates the simulation layer"
        rank = ranking.formula.get(r.schedule)
        flips = r.schedule in ranking.flips
        if fmt == "csv":  # one number per cell: each rank beside its value, units in the header
            formula_cells = ("", "") if f is None or not f.valid else (str(rank), csv_number(f.bubble_ratio))
            rows.append((r.label, *formula_cells, str(ranking.table[r.schedule]), csv_number(r.table.bubble_ratio),
                         str(ranking.simulation[r.schedule]), csv_number(sim.step_time_s), csv_number(sim.idle_ratio),
                         csv_gib(max(sim.peak_activation_bytes)), peak_memory_cell(r, fmt), yes_no(flips),
                         yes_no(r.memory_over is not None)))
            continue
        rows.append(
            (
                r.label + (" !" if flips else ""),
                closed_form_cell(f, f"{rank}  ({f.bubble_ratio:.4f})" if f is not None else ""),
                f"{ranking.table[r.schedule]}  ({r.table.bubble_ratio:.4f})",
                f"{ranking.simulation[r.schedule]}  ({seconds(sim.step_time_s, digits)})",
                f"{sim.idle_ratio:.4f}",
                gib(max(sim.peak_activation_bytes)),
                peak_memory_cell(r, fmt),
            )
        )
    headers: tuple[str, ...] = ("schedule", "formula rank (bubble)", "table rank (bubble)", "simulated rank (step)", "idle",
                                "peak activations", "peak memory")
    if fmt == "csv":
        headers = ("schedule", "formula rank", "formula bubble", "table rank", "table bubble", "simulated rank", "step s",
                   "idle", "peak activations GiB", "peak memory GiB", "rank changes", "over memory")
    table = render_table(headers, rows, fmt)
    labels = {r.schedule: r.label for r in results}
    after = ["", f"! rank changes between layers: {', '.join(labels[s] for s in ranking.flips)}"] if ranking.flips else []
    after += memory_footnotes(order)
    return with_context([_header(results, units), context, ""], table, after, fmt)


def compare_json(results: Sequence[Evaluation], ranking: Ranking, units: UnitCosts) -> list[dict]:
    """`compare --json`: each schedule's evaluation with its rank in every layer."""
    rows = []
    for r in results:
        data = evaluation_json(r, units)
        data["rank"] = {
            "formula": ranking.formula.get(r.schedule),
            "table": ranking.table[r.schedule],
            "simulation": ranking.simulation.get(r.schedule),
        }
        data["rank_changes"] = r.schedule in ranking.flips
        rows.append(data)
    return rows
