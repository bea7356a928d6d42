"""Plain-text renderings: the schedule grid and aligned tables."""

from __future__ import annotations

from collections.abc import Sequence

from ppopt.ir import Op, Schedule
from ppopt.table import Table


def cell_label(op: Op, schedule: Schedule) -> str:
    """``F3`` when every device holds one stage; the full action string ``3F12`` otherwise."""
    if schedule.stages == schedule.devices and schedule.replicas == 1:
        return f"{op.kind.value}{op.microbatch}"
    return str(op)


def grid(table: Table, idle: str = ".") -> str:
    """The table as text: one row per device, one column per slot; a multi-slot op shows its label
    in its first slot and ``-`` in the following ones; idle slots show ``idle``."""
    schedule = table.schedule
    rows = []
    for device, slots in enumerate(table.cells()):
        cells = []
        for t, op in enumerate(slots):
            if op is None:
                cells.append(idle)
            elif table.start[op] == t:
                cells.append(cell_label(op, schedule))
            else:
                cells.append("-")
        rows.append(cells)
    width = max((len(c) for row in rows for c in row), default=1)
    label_width = len(f"device {schedule.devices - 1}")
    lines = [f"{'device ' + str(d):<{label_width}} | " + " ".join(f"{c:<{width}}" for c in row) for d, row in enumerate(rows)]
    return "\n".join(line.rstrip() for line in lines)


def aligned(headers: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    """A left-aligned text table with a header rule."""
    text_rows = [[str(c) for c in row] for row in rows]
    widths = [max(len(h), *(len(r[i]) for r in text_rows)) if text_rows else len(h) for i, h in enumerate(headers)]
    line = lambda cells: "  ".join(f"{c:<{w}}" for c, w in zip(cells, widths)).rstrip()  # noqa: E731
    return "\n".join([line(headers), line(["-" * w for w in widths]), *(line(r) for r in text_rows)])


def per_device(values: Sequence[float]) -> str:
    """Per-device values compactly: ``4,3,2,1``; all-equal lists as ``8 (all)``."""
    text = [f"{v:g}" for v in values]
    if len(set(text)) == 1 and len(text) > 1:
        return f"{text[0]} (all)"
    return ",".join(text)
