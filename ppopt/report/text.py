"""Plain-text renderings: the schedule grid and aligned tables."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

from ppopt.errors import counted
from ppopt.ir import Op, Schedule
from ppopt.table import Table


def cell_label(op: Op, schedule: Schedule, short: bool | None = None) -> str:
    """``F3`` when every device holds one stage; the action string ``3F12`` otherwise, with the
    direction (``d`` down / ``u`` up, i.e. replica 0 / 1) appended for replicated stages: ``3F2u``.
    ``short``: whether every device holds one stage (:func:`short_labels`), when already known."""
    if short is None:
        short = short_labels(schedule)
    if short:
        return f"{op.kind.value}{op.microbatch}"
    if len(schedule.placement[op.stage]) > 1:
        replica = schedule.replica_of[op.microbatch] if schedule.replica_of else 0
        return f"{op}{'du'[replica] if replica < 2 else replica}"
    return str(op)


def short_labels(schedule: Schedule) -> bool:
    """Whether every device holds exactly one stage, once, so a cell's label can omit the stage."""
    return schedule.stages == schedule.devices and schedule.replicas == 1


#: Terminal colours of the op kinds (ANSI names, as click.style takes them).
KIND_COLOURS = {"F": "blue", "B": "red", "I": "yellow", "W": "green"}


def grid(table: Table, idle: str = ".", colour: bool = False) -> str:
    """The unit-slot table as text (see :func:`timeline_grid`), one column per :attr:`Table.column`
    (every op lands exactly on its columns)."""
    slot = table.column
    length = round(table.length / slot)
    devices, shown = drawn(table.schedule.devices, length)
    if (devices, shown) != (table.schedule.devices, length):  # cut: only the ops in the drawn window become spans
        return draw_spans(table.schedule, table.spans(devices, shown * slot), idle, colour, slot=slot, length=length)
    return draw_spans(table.schedule, table.spans(), idle, colour, slot=slot)


MAX_GRID_CELLS = 250_000
"""Most cells a text grid draws; a larger timeline is cut to its first devices and columns, with a note."""
MAX_GRID_DEVICES = 64
"""Most device rows a cut text grid keeps."""
MAX_CUT_COLUMNS = 1_000
"""Most columns a cut text grid keeps: 64 rows of 3,900 columns made lines of 12,000 characters,
which no terminal shows (the whole table is in the CSV and trace exports)."""


def drawn(devices: int, length: int) -> tuple[int, int]:
    """The device rows and columns a grid of ``devices`` x ``length`` cells draws: all of them, or,
    over :data:`MAX_GRID_CELLS`, the first :data:`MAX_GRID_DEVICES` devices and the columns that fit,
    at most :data:`MAX_CUT_COLUMNS`."""
    if devices * length <= MAX_GRID_CELLS:
        return devices, length
    devices = min(devices, MAX_GRID_DEVICES)
    return devices, min(length, MAX_CUT_COLUMNS, max(1, MAX_GRID_CELLS // devices))


def timeline_grid(
    schedule: Schedule, ops: Sequence[Op], devices: Sequence[int], starts: Sequence[float], ends: Sequence[float],
    idle: str = ".", colour: bool = False,
) -> str:
    """A timed schedule as text: one row per device, one column per slot of the shortest op's length.

    ``ops`` run on ``devices`` from ``starts`` to ``ends`` (parallel sequences, e.g.
    :meth:`ppopt.simulate.Simulation.op_times`). An op shows its label in its first column and ``-``
    in the following ones; idle columns show ``idle``. Times are rounded to the nearest column.
    ``colour`` adds ANSI colours per op kind (click.echo drops them when the output is not a
    terminal). A grid over :data:`MAX_GRID_CELLS` cells is cut to its first :data:`MAX_GRID_DEVICES`
    devices and as many columns as fit, and a last line says so (nothing of size devices x length is
    allocated, and only the ops that start in the drawn columns become spans).
    """
    slot = _column_width(starts, ends)
    length = max((round(t / slot) + _columns(t, e, slot) for t, e in zip(starts, ends)), default=0)
    _, shown = drawn(schedule.devices, length)
    spans = [(op, d, t, e) for op, d, t, e in zip(ops, devices, starts, ends) if round(t / slot) < shown]
    return draw_spans(schedule, spans, idle, colour, slot=slot, length=length)


def _column_width(starts: Sequence[float], ends: Sequence[float]) -> float:
    """A text grid's column: the shortest op's length (1 when no op takes time)."""
    return min((e - t for t, e in zip(starts, ends) if e > t), default=1.0)


def _columns(start: float, end: float, slot: float) -> int:
    """The columns an op from ``start`` to ``end`` covers: at least one if it takes any time, none if
    it takes none (a W of ``--weight 0``: drawn in a column, it hid the op after it)."""
    return max(1, round((end - start) / slot)) if end > start else 0


def _off_grid(value: float, slot: float) -> bool:
    """Whether ``value`` (a time) falls between two columns of width ``slot``."""
    return abs(value / slot - round(value / slot)) > 1e-6


def draw_spans(
    schedule: Schedule,
    spans: Sequence[tuple[Op, int, float, float]],
    idle: str = ".",
    colour: bool = False,
    slot: float | None = None,
    length: int | None = None,
) -> str:
    """:func:`timeline_grid` of ``(op, device, start, end)`` spans. ``slot`` (the column width) and
    ``length`` (columns of the whole timeline) default to those of the spans; give them when the
    spans are only the part of a larger timeline that will be drawn."""
    if slot is None:
        slot = _column_width([t for _, _, t, _ in spans], [e for _, _, _, e in spans])
    placed = [(op, d, round(t / slot), _columns(t, e, slot)) for op, d, t, e in spans]
    rounded = any(_off_grid(t, slot) or _off_grid(e, slot) for _, _, t, e in spans)
    zero = sum(width == 0 for *_, width in placed)
    if length is None:
        length = max((first + width for _, _, first, width in placed), default=0)
    devices, shown = drawn(schedule.devices, length)
    note = ""
    if (devices, shown) != (schedule.devices, length):
        note = (f"(grid cut to devices 0..{devices - 1} of {schedule.devices} and columns 0..{shown - 1} of {length}: "
                f"{schedule.devices * length:,} cells are over the {MAX_GRID_CELLS:,} drawn)")
        length = shown
    rows = [[idle] * length for _ in range(devices)]
    kinds: list[list[str | None]] = [[None] * length for _ in range(devices)]
    short = short_labels(schedule)
    for op, device, first, width in placed:
        if first >= length or device >= devices or width == 0:
            continue
        row, kind_row = rows[device], kinds[device]
        row[first] = cell_label(op, schedule, short)
        for c in range(first, min(first + width, length)):
            kind_row[c] = op.kind.value
            if c > first:
                row[c] = "-"
    width = max((len(c) for row in rows for c in row), default=1)
    label_width = len(f"device {devices - 1}")

    styles = _styles() if colour else {}

    def paint(text: str, kind: str | None) -> str:
        if kind is None or not styles:
            return text
        before, after = styles[kind]
        return before + text + after

    lines = []
    for d, (row, kind_row) in enumerate(zip(rows, kinds)):
        cells = [paint(f"{c:<{width}}", k) for c, k in zip(row, kind_row)]
        lines.append((f"{'device ' + str(d):<{label_width}} | " + " ".join(cells)).rstrip())
    if note:
        lines.append(note)
    if rounded:
        lines.append("(a column is the shortest op's length; ops starting or ending between columns are drawn at the nearest one)")
    if zero:
        lines.append(f"({counted(zero, 'op')} of zero length not drawn)")
    return "\n".join(lines)


def no_colour() -> bool:
    """Whether the user turned colours off: the NO_COLOR environment variable set and not empty
    (the no-color.org convention) or TERM=dumb. click already drops them when stdout is no terminal;
    the command line asks this before it asks for colours (a library caller's ``colour`` stands)."""
    import os

    return bool(os.environ.get("NO_COLOR")) or os.environ.get("TERM") == "dumb"


def _styles() -> dict[str, tuple[str, str]]:
    """Per op kind, the ANSI codes click.style puts before and after a text of that kind's colour
    (computed once, not per cell)."""
    import click

    return {kind: tuple(click.style("\0", fg=colour).split("\0")) for kind, colour in KIND_COLOURS.items()}  # type: ignore[misc]


FORMATS = ("text", "markdown", "csv")


def render_table(headers: Sequence[str], rows: Sequence[Sequence[object]], fmt: str = "text") -> str:
    """A table as aligned text, a markdown pipe table, or CSV (``fmt`` in :data:`FORMATS`)."""
    if fmt == "csv":
        import csv
        import io

        buffer = io.StringIO()
        writer = csv.writer(buffer, lineterminator="\n")
        writer.writerow(headers)
        writer.writerows([[str(c) for c in row] for row in rows])
        return buffer.getvalue().rstrip("\n")
    if fmt == "markdown":  # a '|' in a header or a cell (a system's name, a file's) would add a column
        escape = lambda cell: str(cell).replace("|", "\\|")  # noqa: E731
        lines = ["| " + " | ".join(escape(h) for h in headers) + " |", "|" + "|".join("---" for _ in headers) + "|"]
        lines += ["| " + " | ".join(escape(c) for c in row) + " |" for row in rows]
        return "\n".join(lines)
    return aligned(headers, rows)


def with_context(lines_before: Sequence[str], table: str, lines_after: Sequence[str], fmt: str) -> str:
    """A table with its explanatory lines around it; CSV output is the bare table."""
    if fmt == "csv":
        return table
    if fmt == "markdown":
        lines_before, lines_after = [markdown_line(x) for x in lines_before], [markdown_line(x) for x in lines_after]
    return "\n".join([*lines_before, table, *lines_after])


def markdown_line(line: str) -> str:
    """A line of explanation as Markdown shows it: a leading ``#`` (the over-memory mark of a
    footnote) escaped, which would otherwise make the line a heading."""
    return "\\" + line if line.startswith("#") else line


def aligned(headers: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    """A left-aligned text table with a header rule."""
    text_rows = [[str(c) for c in row] for row in rows]
    widths = [max(len(h), *(len(r[i]) for r in text_rows)) if text_rows else len(h) for i, h in enumerate(headers)]
    line = lambda cells: "  ".join(f"{c:<{w}}" for c, w in zip(cells, widths)).rstrip()  # noqa: E731
    return "\n".join([line(headers), line(["-" * w for w in widths]), *(line(r) for r in text_rows)])


def per_device(values: Sequence[float], fmt: str = "text", show: Callable[[float], str] | None = None) -> str:
    """Per-device values compactly: ``4,3,2,1``; all-equal lists as ``8 (all)`` (in CSV every value,
    separated by ``;``, as a sweep's rows.csv writes lists, so that a cell holds numbers only).
    ``show`` writes one value [default: :func:`amount`]."""
    text = [(show or amount)(v) for v in values]
    if fmt == "csv":
        return ";".join(text)
    if len(set(text)) == 1 and len(text) > 1:
        return f"{text[0]} (all)"
    return ",".join(text)


def amount(value: float) -> str:
    """A count of slots or activations, to three decimals, never in exponent form: 1603.5 and
    3000001, not 1604 and 3e+06."""
    return f"{round(value, 3):.12g}"


def table_summary(table: Table) -> str:
    """The line under a table's grid. Its peaks count stage chunks (the table's memory semantics),
    so with more stages than devices the line says how large a chunk is: the solver's reports count
    the same memory in activations of a 1/p model share instead. A grid column of other than one slot
    (:attr:`ppopt.table.Table.column`, e.g. half a slot for ZB-V's chunk ops) is named."""
    stages, devices, column = table.schedule.stages, table.schedule.devices, table.column
    unit = "" if stages == devices else f" (stage chunks, 1/{stages} of the model each)"
    width = "" if column == 1 else f" (one column = {column:g} slot)"
    return (f"length {amount(table.length)} slots{width}, bubble ratio {table.bubble_ratio:.4f}, peak live activations per "
            f"device{unit} {per_device(table.peak_activations)}")


def seconds(value: float, digits: int = 4) -> str:
    """A duration with a readable unit and ``digits`` significant digits: ``57.42 s``, ``12.3 ms``, ``45.1 us``."""
    for unit, scale in (("s", 1.0), ("ms", 1e-3), ("us", 1e-6)):
        if abs(value) >= scale or unit == "us":
            return f"{value / scale:.{digits}g} {unit}"
    return f"{value:g} s"  # pragma: no cover


def span(value: float) -> str:
    """A duration in a refusal: ``1,500.0 s``, ``12.3 s``, ``44 ms`` (never an exponent)."""
    return f"{value:,.1f} s" if value >= 0.1 else seconds(value, 3)


def time_left(left: float) -> str:
    """The time a deadline leaves, for a refusal: ``no time is left``, ``44 ms left``, ``1,500.0 s left``."""
    return "no time is left" if left <= 0 else f"{span(left)} left"


def distinct_digits(values: Sequence[float], distinct: int, least: int = 4, most: int = 9) -> int:
    """The fewest significant digits, from ``least`` up to ``most``, at which :func:`seconds` prints
    ``values`` as at least ``distinct`` different texts (ranked values that differ must not print alike)."""
    for digits in range(least, most + 1):
        if len({seconds(v, digits) for v in values}) >= distinct:
            return digits
    return most


LARGEST_FIXED = 1e12
"""From this magnitude on, :func:`fixed` prints significant digits (a 1e300 value would be 300 digits)."""


def percent(value: float | None, fmt: str, signed: bool = False, decimals: int = 1) -> str:
    """A fraction as a percentage: ``+1.5 %`` in text and markdown, the bare number (no sign or
    ``%``, :func:`csv_number`'s ten significant digits) in CSV, whose header names the unit
    (:func:`percent_header`); ``-`` for no value (None, or not a finite number), an empty cell in CSV
    (a numeric column holds numbers only)."""
    if value is None or not math.isfinite(value):
        return "" if fmt == "csv" else "-"
    if fmt == "csv":
        return csv_number(round(100 * value, 9) + 0.0)  # a tiny negative error prints as 0, not -1e-15 or -0
    amount = round(100 * value, decimals) or 0.0  # a tiny negative error prints as 0, not -0.0
    sign = "+" if signed and amount else ""  # and without a sign: -0.048 % read "+0.0 %"
    return f"{amount:{sign}.{decimals}f} %"


def percent_header(name: str, fmt: str) -> str:
    """``name``, with `` %`` in CSV, where :func:`percent` writes bare numbers."""
    return f"{name} %" if fmt == "csv" else name


def fixed(value: float, decimals: int, width: int = 0) -> str:
    """``value`` with ``decimals`` decimals, right-aligned in ``width``; from :data:`LARGEST_FIXED`
    on, four significant digits instead, and three for a value that is not zero but under the last
    decimal's unit, where it would read 0 or one digit (a toy model's peak of 7.39e-07 GB read 0.00,
    a 1 MB limit 0.00 GB)."""
    if abs(value) >= LARGEST_FIXED:
        return f"{value:{width}.4g}"
    if 0 < abs(value) < 10.0**-decimals:
        return f"{value:{width}.3g}"
    return f"{value:{width}.{decimals}f}"


def tokens_per_s(value: float) -> str:
    """A throughput in tokens per second, to read: a whole number with thousands separators, or two
    significant digits under 1, never a bare 0 for a slow job (a CSV cell takes :func:`csv_number`)."""
    if value >= 1 or value == 0:
        return f"{value:,.0f}"
    return f"{value:.2g}"


def gib(value: float, up: bool = False) -> str:
    """Bytes as GiB with four significant digits, with thousands separators (1,080 GiB beside
    447,616 GiB), whole GiB from 10,000 on (27,830 GiB, not 2.783e+04 GiB); ``up``: rounded up, for a limit that must work as a
    ``--memory-limit`` (80.745 GiB shows as 80.75, not 80.74)."""
    amount = value / 2**30
    if up and amount > 0:
        scale = 10.0 ** (3 - math.floor(math.log10(amount))) if amount < 1e4 else 1.0
        amount = math.ceil(amount * scale * (1 - 1e-12)) / scale  # an amount already at 4 digits stays
    return f"{amount:,.0f} GiB" if abs(amount) >= 1e4 else f"{amount:,.4g} GiB"


def csv_number(value: float) -> str:
    """A bare number for a CSV cell, ten significant digits, to compute with (a measured 372.160408
    ms stays that; the column's header names the unit)."""
    return f"{value:.10g}"


def csv_gib(value: float) -> str:
    """Bytes as a bare number of GiB for a CSV cell (:func:`csv_number`; the header says GiB)."""
    return csv_number(value / 2**30)
