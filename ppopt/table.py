"""The idealized table layer: a schedule laid out in unit time slots, and the metrics read from it.

Slot lengths: F = 1, B = ``backward`` (1 or 2), I = W = 1. Each op starts in the earliest slot that its
data dependencies and its device's order allow (no communication delay). The table's metrics:

- ``length``: slots from the first op's start to the last op's end (T);
- ``bubble_ratio``: idle cells / all cells = 1 - busy / (devices * length) (the "idle over total
  time" convention);
- ``peak_activations``: per device, the most microbatch activations alive at once; an activation is
  alive from the start of its F to the end of the op that frees it (B, or W when backward is split).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

from ppopt.errors import ScheduleError
from ppopt.ir import Kind, Op, Schedule, freeing_kind
from ppopt.validate import execution_order, predecessors


def unit_durations(backward: int = 1) -> dict[Kind, int]:
    """Slot length of each op kind in the unit model (F = 1, B = ``backward``, I = W = 1)."""
    if backward not in (1, 2):
        raise ScheduleError(f"--backward must be 1 or 2 slots, got {backward}")
    return {Kind.F: 1, Kind.B: backward, Kind.I: 1, Kind.W: 1}


def earliest_starts(
    schedule: Schedule,
    duration: Callable[[Op], float],
    delay: Callable[[Op, Op], float] | None = None,
) -> dict[Op, float]:
    """Start time of every op when each starts as soon as its predecessors allow.

    ``duration(op)`` gives each op's length; ``delay(dep, op)`` the extra wait between a data
    dependency ``dep`` ending and ``op`` starting (communication), zero when omitted. The device's
    previous op only has to end. Raises on a deadlocking order.
    """
    preds = predecessors(schedule)
    start: dict[Op, float] = {}
    end: dict[Op, float] = {}
    for op in execution_order(schedule):
        t = 0.0
        device = schedule.device_of(op)
        for dep in preds[op]:
            ready = end[dep]
            if delay is not None and schedule.device_of(dep) != device:
                ready += delay(dep, op)
            t = max(t, ready)
        start[op] = t
        end[op] = t + duration(op)
    return start


def peak_live(
    schedule: Schedule,
    start: Mapping[Op, float],
    end: Mapping[Op, float],
    size: Callable[[int], float] = lambda stage: 1,
) -> tuple[float, ...]:
    """Per device, the peak of stored activations: +size(stage) at F's start, -size at the freeing op's end.

    When one op ends exactly as another starts, the release is counted first.
    """
    free_kind = freeing_kind(schedule.split_backward)
    events: list[list[tuple[float, int, float]]] = [[] for _ in range(schedule.devices)]
    for op in schedule.ops():
        device = schedule.device_of(op)
        if op.kind is Kind.F:
            events[device].append((start[op], 1, size(op.stage)))
        elif op.kind is free_kind:
            events[device].append((end[op], 0, -size(op.stage)))
    peaks = []
    for device_events in events:
        live = peak = 0.0
        for _, _, change in sorted(device_events):
            live += change
            peak = max(peak, live)
        peaks.append(peak)
    return tuple(peaks)


@dataclass(frozen=True)
class Table:
    """A schedule placed in unit slots: ``start[op]`` is the op's first slot."""

    schedule: Schedule
    durations: Mapping[Kind, int]
    start: Mapping[Op, int]

    def end(self, op: Op) -> int:
        return self.start[op] + self.durations[op.kind]

    @property
    def length(self) -> int:
        return max((self.end(op) for op in self.start), default=0)

    def busy(self, device: int) -> int:
        return sum(self.durations[op.kind] for op in self.schedule.orders[device])

    @property
    def bubble_ratio(self) -> float:
        total = self.schedule.devices * self.length
        return 1 - sum(self.busy(d) for d in range(self.schedule.devices)) / total if total else 0.0

    @property
    def peak_activations(self) -> tuple[int, ...]:
        ends = {op: self.end(op) for op in self.start}
        return tuple(int(x) for x in peak_live(self.schedule, self.start, ends))

    def cells(self) -> list[list[Op | None]]:
        """The table itself: ``cells()[device][slot]`` is the op occupying that slot, or None."""
        length = self.length
        grid: list[list[Op | None]] = [[None] * length for _ in range(self.schedule.devices)]
        for op, t in self.start.items():
            device = self.schedule.device_of(op)
            for slot in range(t, self.end(op)):
                grid[device][slot] = op
        return grid


def build_table(schedule: Schedule, backward: int = 1) -> Table:
    """Lay ``schedule`` out in unit slots (see the module docstring)."""
    durations = unit_durations(backward)
    starts = earliest_starts(schedule, lambda op: durations[op.kind])
    return Table(schedule, durations, {op: int(t) for op, t in starts.items()})


@dataclass(frozen=True)
class TableMetrics:
    length: int
    bubble_ratio: float
    peak_activations: tuple[int, ...]


def table_metrics(table: Table) -> TableMetrics:
    return TableMetrics(table.length, table.bubble_ratio, table.peak_activations)
