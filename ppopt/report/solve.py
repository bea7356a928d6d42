"""Text and JSON for solver results (search, gap, frontier).

JSON keys say seconds (``step_time_s``, ``bound_s``) whatever the mode; in unit mode the values
are slots and ``time_unit`` says so.
"""

from __future__ import annotations

import math

from ppopt.evaluate import memory_over
from ppopt.report.evaluation import OVER_MEMORY, capacity_json, capacity_text, orders_json, over_memory_text, timeline_json, yes_no
from ppopt.report.text import (
    amount,
    csv_gib,
    csv_number,
    gib,
    markdown_line,
    per_device,
    percent,
    percent_header,
    render_table,
    seconds,
    timeline_grid,
    with_context,
)
from ppopt.solve.gap import Frontier, GapReport, GapRow
from ppopt.solve.search import SearchResult, format_amount, relative_gap


def _num(value: float | None) -> float | None:
    return None if value is None or not math.isfinite(value) else value


def _amount(value: float | None, unit: str, up: bool = False) -> str:
    """A time or memory amount in its unit; ``up``: bytes rounded up (a limit or need that works as
    a ``--memory-limit``: :func:`ppopt.report.text.gib`)."""
    if value is None or not math.isfinite(value):
        return "-"
    if unit == "s":
        return seconds(value)
    if unit == "bytes":
        return gib(value, up)
    return amount(value)  # slots or activations


CSV_UNITS = {"s": "s", "slots": "slots", "bytes": "GiB", "activations": "activations"}
"""The unit a CSV column's header names for each time or memory unit (its cells are bare numbers)."""


def _cell(value: float | None, unit: str, fmt: str) -> str:
    """A time or memory amount as a cell: text with its unit (:func:`_amount`), or in CSV a bare
    number in the header's unit (:data:`CSV_UNITS`; bytes as GiB), empty for none."""
    if fmt != "csv":
        return _amount(value, unit)
    if value is None or not math.isfinite(value):
        return ""
    return csv_gib(value) if unit == "bytes" else csv_number(value)


def _header(name: str, unit: str, fmt: str) -> str:
    """A column header, with the unit of its cells in CSV (text cells carry their own)."""
    return f"{name} {CSV_UNITS.get(unit, unit)}" if fmt == "csv" else name


def search_json(result: SearchResult, capacity_bytes: float | None = None) -> dict:
    """`search --json`: the result, its bound and gap, and the simulated schedule's figures, with
    its fit in ``capacity_bytes`` (the system's memory per device, in a modelled search) as
    ``evaluate --json`` gives it."""
    sim = result.simulation
    schedule = result.schedule
    return {
        "status": result.status,
        "space": result.space,
        "time_unit": result.time_unit,
        "memory_unit": result.memory_unit,
        "step_time_s": _num(result.step_time),
        "bound_s": _num(result.bound),
        "gap": result.gap,
        "solver_bound_s": _num(result.solver_bound or None),  # 0: no CP-SAT bound (no solve, or none proved), as the text's "-"
        "solver_objective_s": result.solver_objective,
        "analytic_bounds_s": {
            "critical_path": result.analytic.critical_path,
            "device_load": result.analytic.device_load,
            "memory": result.analytic.memory,
            "warmup": result.analytic.warmup,
            "round_trip": result.analytic.round_trip,
            "one_machine": result.analytic.one_machine,
            "relaxation": result.analytic.relaxation,
            "capped_warmup": result.analytic.capped_warmup,
        },
        "from_solver": result.from_solver,
        "peak_memory": result.peak_memory,
        "peak_memory_status": result.memory_status,
        "hint": result.hint,
        "hint_step_time_s": result.hint_step_time,
        "hint_fits": result.hint_fits,
        "tick_s": result.tick,
        "rounding_cost": _num(result.rounding_cost),
        "period": result.period,
        "period_bound_s": _num(result.period_bound),
        "memory_semantics": result.memory_semantics,
        "wall_time_s": result.wall_time_s,
        "note": result.note,
        "time_to_best_s": result.time_to_best_s,
        "handcrafted": [
            {"schedule": c.name, "step_time_s": c.simulation.step_time_s, "fits": c.fits,
             "gap": relative_gap(c.simulation.step_time_s, result.bound) if c.fits else None}
            for c in result.handcrafted
        ],
        "schedule": None if schedule is None else {
            "name": schedule.name,
            "replica_of": list(schedule.replica_of),
            **orders_json(schedule),
        },
        "simulation": None if sim is None else timeline_json(sim) | (
            {} if capacity_bytes is None else capacity_json(sim.peak_memory_bytes, capacity_bytes)),
    }


def _ties_the_hint(result: SearchResult) -> bool:
    """Whether the step found is the hint's, to rounding (1e-9 relative)."""
    found, hint = result.step_time, result.hint_step_time
    return found is not None and hint is not None and abs(found - hint) <= 1e-9 * max(1.0, abs(hint))


def search_text(result: SearchResult, show_grid: bool = True, colour: bool = False, context: str | None = None,
                capacity_bytes: float | None = None, limit_bytes: float | None = None) -> str:
    """The search's report; ``context`` (what a modelled search simulated) goes under its header;
    ``capacity_bytes``: the GPU's memory, named when the schedule's peak is over it, with the
    search's own limit ``limit_bytes`` (None: none given)."""
    unit = result.time_unit
    members = (" (the best of linear, looped, v and zigzag; the replicated placement is searched with "
               "placement=bidirectional)" if "placement=family" in result.space else "")
    lines = [f"space: {result.space}{members}", f"memory: {result.memory_semantics}", *([context] if context else []), ""]
    if result.schedule is not None and result.simulation is not None and show_grid:
        sim = result.simulation
        lines += [timeline_grid(result.schedule, *sim.op_times(), colour=colour), ""]
    where = "solver" if result.from_solver else (f"ppopt's {result.hint} schedule" if result.hint_own else f"handcrafted {result.hint}")
    if result.from_solver and _ties_the_hint(result):  # the solver's own schedule, but no shorter than its hint
        where += ", the same length as the hint"
    u = " slots" if unit == "slots" else ""
    lines.append(f"status     {result.status}")
    lines.append(f"step time  {_amount(result.step_time, unit)}{u} (best from {where})" if result.step_time is not None
                 else "step time  - (no schedule found within the memory limit)")
    lines.append(
        f"bound      {_amount(result.bound, unit)}{u} (solver {_amount(result.solver_bound or None, unit)}, "  # 0: none
        f"analytic {_amount(result.analytic.best, unit)})"
    )
    lines.append(f"gap        {percent(result.gap, 'text', decimals=2)}")
    if result.period is not None or result.period_bound is not None:
        bound = "" if result.period_bound is None else (
            f"; period bound for m = {result.schedule.microbatches if result.schedule else '-'}: "
            f"{_amount(result.period_bound, unit)}{u}")
        lines.append(f"period     {result.period or 'no pattern found in time'}{bound}")
    if result.hint is not None:
        lines.append(f"hint       {result.hint}: {_amount(result.hint_step_time, unit)}{u}"
                     + ("" if result.hint_fits else " (over the memory limit: a start for the solver, not a schedule of the space)"))
    if result.simulation is not None:
        sim = result.simulation
        memory = per_device(sim.peak_activation_bytes) if unit == "slots" else per_device(sim.peak_memory_bytes, show=lambda b: f"{b / 2**30:.2f}") + " GiB"
        label = "peak memory"
        if unit == "slots":  # counted in 1/p model shares, which the table's chunks differ from with several per device
            chunks = result.schedule is not None and result.schedule.stages != result.schedule.devices
            label = "peak live activations" + (" (1/p model shares)" if chunks else "")
        lines.append(f"simulated  idle ratio {sim.idle_ratio:.4f}; {label} per device {memory}")
        over = None if capacity_bytes is None or unit == "slots" else memory_over(sim.peak_memory_bytes, capacity_bytes)
        if over is not None:  # the GPU's memory is no limit of the search (``--memory-limit`` is): said, as evaluate says it
            advice = ("give --memory-limit to search within it" if limit_bytes is None else
                      f"the search's --memory-limit of {gib(limit_bytes)} is above it")
            lines.append(f"memory     {over_memory_text(over)}; {advice}")
    if result.memory_status is not None and result.peak_memory is None:
        lines.append(f"peak       - (memory solve: {result.memory_status})")
    elif result.memory_status is not None and result.peak_memory is not None:
        amount = f"{result.peak_memory:g} live activations" if result.time_unit == "slots" else gib(result.peak_memory)
        lines.append(f"peak       {amount} on the worst device ({result.memory_status} for this step time)")
    ttb = "-" if result.time_to_best_s is None else f"{result.time_to_best_s:.2f} s"
    rounding = "exact" if result.rounding_cost == 0 else (
        "delays below one tick dropped" if math.isinf(result.rounding_cost) else f"rounding costs at most {percent(result.rounding_cost, 'text', decimals=3)}")
    tick_unit = "slot" if unit == "slots" and result.tick == 1 else unit
    lines.append(f"solved in  {result.wall_time_s:.2f} s (last improvement at {ttb}, tick {result.tick:.4g} {tick_unit}, {rounding})")
    if result.note:
        lines.append(f"note       {result.note}")
    return "\n".join(lines)


def gap_json(report: GapReport) -> dict:
    """`gap --json`: the units, then one object per schedule row (times in ``time_unit``)."""
    return {
        "time_unit": report.time_unit,
        "memory_unit": report.memory_unit,
        "memory_semantics": report.memory_semantics,
        "schedules": [
            {"schedule": r.schedule, "space": r.space, "step_time_s": r.step_time, "peak_memory": r.peak_memory, "fits": r.fits,
             "over_memory": report.over_memory(r), "best_found_s": _num(r.best), "bound_s": _num(r.bound), "gap": r.gap,
             "status": r.status}
            for r in report.rows
        ],
        "memory_capacity_bytes": report.memory_capacity,
        "skipped": report.skipped,
    }


def _fastest_and_best(report: GapReport, fmt: str) -> list[str]:
    """Under a table of several schedules: the fastest that fits and the best any search found.
    Each gap is against the schedule's own space, so a schedule can be optimal in its space (0.00 %)
    while another space holds faster schedules; this line says how far the best of them goes."""
    if fmt == "csv" or len(report.rows) < 2:
        return []
    unit = report.time_unit
    # a schedule over the GPU's memory (marked #) would not run: not the fastest one
    fitting = [r for r in report.rows if r.fits and not report.over_memory(r)]
    found = [r for r in report.rows if r.best is not None and math.isfinite(r.bound)]
    if not fitting or not found:
        return []
    fastest = min(fitting, key=lambda r: r.step_time)
    best = min(found, key=lambda r: (r.best, r.bound))
    limits = [*([" the limit"] if not all(r.fits for r in report.rows) else []),
              *([" the GPU's memory"] if any(report.over_memory(r) for r in report.rows) else [])]
    within = f" within{' and'.join(limits)}" if limits else ""
    return ["", f"fastest handcrafted{within}: {fastest.schedule} ({_amount(fastest.step_time, unit)}); best found by "
                f"the searches: {_amount(best.best, unit)} in {best.schedule}'s space (bound {_amount(best.bound, unit)}); "
                "each gap is against its own schedule's space"]


def _gap_note(report: GapReport, row: GapRow, fmt: str = "text") -> str:
    """A gap row's note: over the memory limit (no gap), or over the GPU's memory without a limit
    (in CSV its own yes/no column, ``over memory``, says that)."""
    if not row.fits:
        return "over the memory limit"
    if report.over_memory(row) and fmt != "csv":
        return f"{OVER_MEMORY} over the system's {capacity_text(report.memory_capacity or 0)} per device"
    return ""


def gap_text(report: GapReport, devices: int, microbatches: int, fmt: str = "text", context: str | None = None) -> str:
    """`gap`'s table in ``fmt`` (text, markdown or csv), with ``context`` (what was simulated) above it."""
    unit = report.time_unit
    marked = fmt == "csv" and report.memory_capacity is not None  # the GPU's memory (not in unit mode)
    rows = [
        (r.schedule, _cell(r.step_time, unit, fmt), _cell(r.best, unit, fmt), _cell(r.bound, unit, fmt),
         percent(r.gap, fmt, decimals=2),
         r.status, _gap_note(report, r, fmt), r.space, *([yes_no(bool(report.over_memory(r)))] if marked else []))
        for r in report.rows
    ]
    header = f"p = {devices}, m = {microbatches}; times in {'slots' if unit == 'slots' else 'seconds'}; memory: {report.memory_semantics}"
    table = render_table(("schedule", _header("step", unit, fmt), _header("best found", unit, fmt), _header("bound", unit, fmt),
                          percent_header("gap", fmt), "status", "note", "space of the bound",
                          *(["over memory"] if marked else [])), rows, fmt)
    rounded = any(r.status == "optimal" and r.best is not None and r.best > r.bound * (1 + 1e-9) for r in report.rows)
    after = ["", "optimal: proven in the solver's integer ticks (durations rounded down); where best found is above the "
                 "bound, the rounding is what lies between them (README: Solver ticks)"] if rounded else []
    after += _fastest_and_best(report, fmt)
    over = "" if report.memory_limit is None else " within the memory limit"
    if not all(r.fits for r in report.rows):
        over += " (a schedule over it may be shorter than the bound: no gap; status is the search's)"
    return with_context([header, *([context] if context else []),
                         f"gap = (schedule - bound) / bound, bound valid for every schedule of the space{over}", ""], table, after, fmt)


def frontier_json(result: Frontier) -> dict:
    """`frontier --json`: the searched points and the handcrafted schedules, in the result's units."""
    return {
        "space": result.space,
        "time_unit": result.time_unit,
        "memory_unit": result.memory_unit,
        "minimum_memory": result.minimum,
        "most_held": _num(result.most_held),
        "points": [
            {"memory_limit": p.memory_limit, "status": p.status, "step_time_s": p.step_time, "bound_s": _num(p.bound), "peak_memory": p.peak_memory,
             "over_memory": result.over_memory(p.peak_memory)}
            for p in result.points
        ],
        "handcrafted": [
            {"schedule": name, "peak_memory": peak, "step_time_s": step, "on_frontier": on, "over_memory": result.over_memory(peak)}
            for name, peak, step, on in result.handcrafted
        ],
        "memory_capacity_bytes": result.memory_capacity,
    }


def frontier_text(result: Frontier, devices: int, microbatches: int, fmt: str = "text", context: str | None = None) -> str:
    """`frontier`'s tables in ``fmt`` (text, markdown, or one csv table with a row kind), for p =
    ``devices`` and m = ``microbatches``. A peak over the system's memory per device is marked
    :data:`OVER_MEMORY` (CSV: an ``over memory`` column, with a system only)."""
    t, m = result.time_unit, result.memory_unit
    if fmt == "csv":  # one table: the searched points and the handcrafted schedules, a row kind apart
        over = [] if result.memory_capacity is None else ["over memory"]

        def marked(peak: float | None) -> list[str]:
            return [] if not over else ["" if peak is None else yes_no(bool(result.over_memory(peak)))]

        rows = [("searched", "", _cell(p.memory_limit, m, fmt), _cell(p.step_time, t, fmt), _cell(p.bound, t, fmt), p.status,
                 _cell(p.peak_memory, m, fmt), "", *marked(p.peak_memory)) for p in result.points]
        rows += [("handcrafted", name, "", _cell(step, t, fmt), "", "", _cell(peak, m, fmt), yes_no(on), *marked(peak))
                 for name, peak, step, on in result.handcrafted]
        return render_table(("row", "schedule", _header("memory limit", m, fmt), _header("step", t, fmt),
                             _header("bound", t, fmt), "status", _header("peak memory", m, fmt), "on the frontier", *over),
                            rows, fmt)

    def peak_cell(peak: float | None) -> str:  # a need, rounded up as the limits are: one byte count, one figure
        return _amount(peak, m, up=True) + (f" {OVER_MEMORY}" if result.over_memory(peak) else "")

    points = render_table(
        ("memory limit", "best step", "bound", "status", "peak used"),
        [(_amount(p.memory_limit, m, up=True), _amount(p.step_time, t), _amount(p.bound, t), p.status, peak_cell(p.peak_memory))
         for p in result.points],
        fmt,
    )
    hand = render_table(
        ("handcrafted", "peak memory", "step", "on the frontier"),
        [(name, peak_cell(peak), _amount(step, t), "yes" if on else "no (dominated)") for name, peak, step, on in result.handcrafted],
        fmt,
    )
    peaks = [p.peak_memory for p in result.points] + [peak for _, peak, _, _ in result.handcrafted]
    over_note = ["", f"{OVER_MEMORY} a peak over the system's {capacity_text(result.memory_capacity or 0)} per device: it would not "
                     "run there"] if any(result.over_memory(peak) for peak in peaks) else []
    unit_note = f"times in {'slots' if t == 'slots' else 'seconds'}, memory in {'live activations' if m == 'activations' else 'GiB'}"
    # the search calls a step optimal within the rounding of its ticks (README, Solver ticks): say so where it shows
    rounded = any(p.status == "optimal" and p.step_time is not None and p.step_time > p.bound * (1 + 1e-9) for p in result.points)
    footnote = ["", "optimal: proven in the solver's ticks; a step above its bound differs from it by at most the rounding of "
                    "durations to ticks (README, Conventions, Solver ticks)"] if rounded else []
    if any(p.memory_limit >= result.most_held for p in result.points):
        state = ", and the persistent state" if m == "bytes" else ""
        footnote += ["", f"a limit at or above {_amount(result.most_held, m)}, the most a device can hold here (its stages' "
                         f"activations of every microbatch{state}), limits nothing: no search runs under it"]
    if fmt == "markdown":
        over_note = [markdown_line(x) for x in over_note]
    # rounded up, so that it works as a --memory-limit (46.24 GiB was below the 46.244 GiB minimum)
    minimum = format_amount(result.minimum, m, least=True) if m == "bytes" else _amount(result.minimum, m)
    return "\n".join([f"p = {devices}, m = {microbatches}; space: {result.space}; {unit_note}; minimum memory {minimum}", *([context] if context else []), "", points, *footnote, "", hand, *over_note])
