"""The idealized table layer: a schedule laid out in unit time slots, and the metrics read from it.

Slot lengths come from the unit model :class:`ppopt.units.UnitCosts` (default F = 1, B = 2, I = W = 1
slots of a 1/p model share, chunk ops scaled by p/S; ``comm`` slots per message between devices). For
backward compatibility an integer ``backward`` (1 or 2) still gives the old chunk slots F = 1,
B = ``backward``, I = W = 1. Each op starts as early as its data dependencies (plus the message
delay) and its device's order allow. The table's metrics:

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
from ppopt.units import UnitCosts
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
    durations: Mapping[Kind, float]
    start: Mapping[Op, float]
    activation: float = 1.0  # size of one stage's activation, in activations of a 1/p model share (p/S)

    def end(self, op: Op) -> float:
        return self.start[op] + self.durations[op.kind]

    @property
    def length(self) -> float:
        return max((self.end(op) for op in self.start), default=0)

    def busy(self, device: int) -> float:
        return sum(self.durations[op.kind] for op in self.schedule.orders[device])

    @property
    def bubble_ratio(self) -> float:
        total = self.schedule.devices * self.length
        return 1 - sum(self.busy(d) for d in range(self.schedule.devices)) / total if total else 0.0

    @property
    def peak_activations(self) -> tuple[float, ...]:
        """Per device, the peak of live activations (chunk activations count p/S each)."""
        ends = {op: self.end(op) for op in self.start}
        peaks = peak_live(self.schedule, self.start, ends, lambda stage: self.activation)
        return tuple(int(x) if float(x).is_integer() else x for x in peaks)

    def cells(self) -> list[list[Op | None]]:
        """The table itself: ``cells()[device][k]`` is the op occupying column k (one column per
        shortest op's length), or None."""
        width = min(d for d in self.durations.values() if d > 0)
        grid: list[list[Op | None]] = [[None] * round(self.length / width) for _ in range(self.schedule.devices)]
        for op, t in self.start.items():
            device = self.schedule.device_of(op)
            for column in range(round(t / width), round(self.end(op) / width)):
                grid[device][column] = op
        return grid


def build_table(schedule: Schedule, units: UnitCosts | int = 1, *, backward: int | None = None) -> Table:
    """Lay ``schedule`` out in unit slots (see the module docstring); ``backward`` is the old
    spelling of an integer ``units``."""
    if backward is not None:
        units = backward
    if isinstance(units, int):
        durations: dict[Kind, float] = dict(unit_durations(units))
        comm, activation = 0.0, 1.0
    else:
        durations = units.durations(schedule.devices, schedule.stages)
        comm, activation = units.comm, schedule.devices / schedule.stages
    starts = earliest_starts(schedule, lambda op: durations[op.kind], (lambda dep, op: comm) if comm else None)
    ticked = {op: int(t) if float(t).is_integer() else t for op, t in starts.items()}
    return Table(schedule, durations, ticked, activation)


@dataclass(frozen=True)
class TableMetrics:
    length: float
    bubble_ratio: float
    peak_activations: tuple[float, ...]


def table_metrics(table: Table) -> TableMetrics:
    return TableMetrics(table.length, table.bubble_ratio, table.peak_activations)
