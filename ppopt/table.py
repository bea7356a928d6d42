"""The idealized table layer: a schedule laid out in unit time slots, and the metrics read from it.

Units (:mod:`ppopt.units`): a slot is one forward of a 1/p share of the model at the default
``forward = 1``; op durations come from
:class:`~ppopt.units.UnitCosts` (default F = 1, B = 2, I = W = 1 slots), scaled by p/S for a schedule
with S stages on p devices, so an interleaved schedule with v chunks per device has ops of 1/v of
those figures and its length is comparable with 1F1B's. Each op starts as soon as its data
dependencies and its device's order allow; a message between devices adds ``units.comm`` slots
(default 0). The table's metrics:

- ``length``: slots from the first op's start to the last op's end (T);
- ``bubble_ratio``: idle time / total time = 1 - busy / (devices * length) (the "idle over total
  time" convention);
- ``peak_activations``: per device, the most microbatch activations alive at once (counted per
  stage chunk); an activation is alive from the start of its F to the end of the op that frees it
  (B, or W where that microbatch's backward is split).

The layout is computed on the flat integer form of :mod:`ppopt.flat` (shared with validation and the
simulator) in integer *ticks*: the tick is the greatest common divisor of the schedule's op durations
(durations are taken as fractions with denominators up to 10^6), so starts are exact. The drawn grid,
:meth:`Table.cells`, has one column per tick: an interleaved table still shows one cell per chunk
forward. A grid over :data:`MAX_CELLS` cells is refused.
"""

from __future__ import annotations

import math
from bisect import bisect_left
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from fractions import Fraction
from functools import cached_property
from operator import add

from ppopt.errors import ConfigError, ScheduleError
from ppopt.flat import KIND_CODE, KINDS, Flat, Unflattenable, flatten, paused_gc, peak_per_device
from ppopt.flat import earliest_starts as flat_earliest_starts
from ppopt.ir import Kind, Op, Schedule
from ppopt.units import UnitCosts
from ppopt.validation import execution_order, predecessors, validated

MAX_CELLS = 20_000_000
"""Most cells (devices x columns) a drawn table grid may have; larger grids are refused."""


def peak_live(
    schedule: Schedule,
    start: Mapping[Op, float],
    end: Mapping[Op, float],
    size: Callable[[int], float] = lambda stage: 1,
    early: Callable[[int], float] = lambda stage: 0,
) -> tuple[float, ...]:
    """Per device, the peak of stored activations (:func:`activation_changes`)."""
    peaks = []
    for device_changes in activation_changes(schedule, start, end, size, early):
        live = peak = 0.0
        for _, _, change in device_changes:
            live += change
            peak = max(peak, live)
        peaks.append(peak)
    return tuple(peaks)


def activation_changes(
    schedule: Schedule,
    start: Mapping[Op, float],
    end: Mapping[Op, float],
    size: Callable[[int], float] = lambda stage: 1,
    early: Callable[[int], float] = lambda stage: 0,
) -> list[list[tuple[float, int, float]]]:
    """Per device, the changes of its stored activations in time order, as ``(time, 0 for a release
    or 1 for an allocation, change)``: +size(stage) at an F's start, -size at the end of the op that
    frees it (B, or W where the backward is split), of which a split backward frees early(stage)
    already at the end of I (:attr:`ppopt.costs.StageCost.input_grad_release_bytes`). The ops are those of
    ``start`` (every op of the schedule, or a part of it); when one op ends exactly as another
    starts, the release comes first."""
    changes: list[list[tuple[float, int, float]]] = [[] for _ in range(schedule.devices)]
    for op in start:
        device = schedule.device_of(op)
        if op.kind is Kind.F:
            changes[device].append((start[op], 1, size(op.stage)))
        elif op.kind is Kind.B:
            changes[device].append((end[op], 0, -size(op.stage)))
        elif op.kind is Kind.I:
            if released := early(op.stage):
                changes[device].append((end[op], 0, -released))
        else:  # W
            changes[device].append((end[op], 0, early(op.stage) - size(op.stage)))
    return [sorted(device_changes) for device_changes in changes]


def earliest_starts(
    schedule: Schedule,
    duration: Callable[[Op], float],
    delay: Callable[[Op, Op], float] | None = None,
) -> dict[Op, float]:
    """Start time of every op when each starts as soon as its predecessors allow.

    ``duration(op)`` gives each op's length; ``delay(dep, op)`` the extra wait between a data
    dependency ``dep`` ending and ``op`` starting (communication), zero when omitted. The device's
    previous op only has to end. Raises on a deadlocking order. A valid schedule is laid out on its
    flat form (:mod:`ppopt.flat`); any other (e.g. incomplete) one through the general dependency graph.
    """
    try:
        flat = flatten(schedule)
    except Unflattenable:
        return _earliest_starts_graph(schedule, duration, delay)
    ops = flat.ops
    cross = None
    if delay is not None:
        cross = [delay(ops[w], op) if w >= 0 else 0 for w, op in zip(flat.wait, ops)]
    return dict(zip(ops, flat_earliest_starts(flat, list(map(duration, ops)), cross)))


def _earliest_starts_graph(
    schedule: Schedule,
    duration: Callable[[Op], float],
    delay: Callable[[Op, Op], float] | None = None,
) -> dict[Op, float]:
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




MAX_COLUMNS_PER_OP = 4
"""Most text-grid columns the shortest op spans (:attr:`Table.column`)."""


@dataclass(frozen=True, eq=False)
class Table:
    """A schedule laid out in unit slots (module docstring); build it with :func:`build_table`.

    Attributes:
        flat: the schedule's flat form.
        units: the unit model of the durations.
        tick: slots per tick, the greatest common divisor of the op durations (an exact fraction).
        ticks: duration of each op kind in ticks, indexed by kind code (F, B, I, W).
        start_ticks: start of each op, by flat id, in ticks.
    """

    flat: Flat
    units: UnitCosts
    tick: Fraction
    ticks: tuple[int, int, int, int]
    start_ticks: list[int]

    def __repr__(self) -> str:
        """A short summary: the schedule, the length (slots) and the bubble ratio (idle / total)."""
        return f"Table({self.schedule!r}, length={self.length}, bubble_ratio={self.bubble_ratio:.4f})"

    @property
    def schedule(self) -> Schedule:
        return self.flat.schedule

    def _slots(self, ticks: int) -> int | float:
        """Ticks as slots: an int when whole, else the nearest float."""
        value = ticks * self.tick
        return value.numerator if value.denominator == 1 else float(value)

    def _all_slots(self, ticks: list[int]) -> list[int] | list[float]:
        """Ticks as slots: ints when the tick is whole, else the nearest floats (exact int division)."""
        num, den = self.tick.numerator, self.tick.denominator
        if den == 1:
            return [t * num for t in ticks]
        return [t * num / den for t in ticks]

    @cached_property
    def durations(self) -> dict[Kind, int | float]:
        """Slots of each op kind (an int when whole)."""
        exact = _exact_durations(self.flat.schedule, self.units)
        return {kind: x.numerator if x.denominator == 1 else float(x) for kind, x in zip(KINDS, exact)}

    @property
    def used_durations(self) -> dict[Kind, int | float]:
        """Slots of the op kinds this schedule has (F with B, I and W as present), in F, B, I, W order."""
        return {kind: self.durations[kind] for kind in _used_kinds(self.flat)}

    @cached_property
    def start(self) -> dict[Op, int | float]:
        """First slot of every op (slots, an int when whole)."""
        return dict(zip(self.flat.ops, self._all_slots(self.start_ticks)))

    @cached_property
    def ends(self) -> dict[Op, int | float]:
        """Last slot + 1 of every op (slots, an int when whole)."""
        ticks, kinds = self.ticks, self.flat.kind
        return dict(zip(self.flat.ops, self._all_slots([t + ticks[k] for t, k in zip(self.start_ticks, kinds)])))

    @cached_property
    def column(self) -> int | float:
        """The widest text-grid column (slots) that every op's start and length fill a whole number
        of: the greatest common divisor of the used durations and every start (ticks). The shortest
        op's length when starts fall on its multiples; narrower when messages of a fraction of a slot
        put starts in between (a column of one slot drew an F at 1.5 and a B at 2.5 in one cell), down
        to :data:`MAX_COLUMNS_PER_OP` columns for the shortest op."""
        widths = [w for w in (self.ticks[KIND_CODE[kind]] for kind in _used_kinds(self.flat)) if w > 0]
        shortest = min(widths, default=1)
        column = math.gcd(shortest, *widths, *self.start_ticks) or 1
        # durations such as 2.27 slots make the exact column a hundredth of a slot: then one column per
        # shortest op, each time rounded to the nearest column (as a simulated step is drawn)
        return self._slots(column if shortest <= MAX_COLUMNS_PER_OP * column else shortest)

    def spans(self, devices: int | None = None, before: float | None = None) -> list[tuple[Op, int, int | float, int | float]]:
        """``(op, device, start, end)`` of every op, slots, by flat id (no per-op dictionary); only
        the ops on devices below ``devices`` starting before slot ``before``, when given."""
        flat, ticks = self.flat, self.ticks
        ids: Sequence[int] = range(flat.size)
        if devices is not None or before is not None:
            limit = math.inf if before is None else math.ceil(Fraction(before) / self.tick)  # t < x iff t < ceil(x)
            shown = flat.orders[:devices] if devices else flat.orders
            # A device's starts never decrease along its order, so its ops starting before the limit are a prefix.
            ids = [i for o in shown for i in range(o.start, bisect_left(self.start_ticks, limit, o.start, o.stop))]
        start = [self.start_ticks[i] for i in ids]
        end = [t + ticks[flat.kind[i]] for t, i in zip(start, ids)]
        return list(zip([flat.ops[i] for i in ids], [flat.dev[i] for i in ids], self._all_slots(start), self._all_slots(end)))

    def end(self, op: Op) -> int | float:
        """The slot at which ``op`` ends (its start plus its duration, slots)."""
        return self.start[op] + self.durations[op.kind]

    @cached_property
    def length_ticks(self) -> int:
        """:attr:`length` in ticks (``tick`` slots each), an exact integer."""
        ticks, kinds = self.ticks, self.flat.kind
        return max(map(add, self.start_ticks, map(ticks.__getitem__, kinds)), default=0)  # map: no per-op bytecode

    @property
    def length(self) -> int | float:
        """Slots from 0 to the end of the last op."""
        return self._slots(self.length_ticks)

    def _busy_ticks(self, device: int) -> int:
        ticks, order = self.ticks, self.flat.orders[device]
        return sum(map(ticks.__getitem__, self.flat.kind[order.start : order.stop]))

    def busy(self, device: int) -> int | float:
        """Slots of compute on ``device``."""
        return self._slots(self._busy_ticks(device))

    @property
    def bubble_ratio(self) -> float:
        """Idle over total device time, 1 - Σ busy / (devices · length), dimensionless; idle before a
        device's first op and after its last counts (README, Conventions)."""
        total = self.schedule.devices * self.length_ticks
        busy = sum(self._busy_ticks(d) for d in range(self.schedule.devices))
        return float(1 - Fraction(busy, total)) if total else 0.0

    @cached_property
    def peak_activations(self) -> tuple[int, ...]:
        """Per device, the most activations live at once (an activation lives from its F to its B,
        or W when split), counted in stage activations of one microbatch."""
        return tuple(int(x) for x in peak_per_device(self.flat, [1] * self.schedule.stages))

    def cells(self) -> list[list[Op | None]]:
        """The drawn table: ``cells()[device][column]`` is the op occupying that column, or None.

        One column per tick (``tick`` slots), so every op fills a whole number of columns. Raises
        :class:`ScheduleError` when the grid would exceed :data:`MAX_CELLS` cells.
        """
        devices, length = self.schedule.devices, self.length_ticks
        if devices * length > MAX_CELLS:
            raise ScheduleError(
                f"table grid too large to draw: {devices} devices x {length} columns = {devices * length:,} cells "
                f"(limit {MAX_CELLS:,})"
            )
        grid: list[list[Op | None]] = [[None] * length for _ in range(devices)]
        flat, ticks = self.flat, self.ticks
        for i, t in enumerate(self.start_ticks):
            row = grid[flat.dev[i]]
            row[t : t + ticks[flat.kind[i]]] = [flat.ops[i]] * ticks[flat.kind[i]]
        return grid


def _exact(slots: float) -> Fraction:
    return Fraction(slots).limit_denominator(10**6)


def build_table(schedule: Schedule | Flat, units: UnitCosts = UnitCosts()) -> Table:  # noqa: B008  (frozen, immutable default)
    """Lay ``schedule`` (or its flat form, already validated) out in unit slots (module docstring).

    Raises :class:`~ppopt.validation.ScheduleValidationError` for an invalid schedule.
    """
    if not isinstance(units, UnitCosts):
        raise ConfigError(f"must be a UnitCosts (ppopt.units), got {units!r:.60}", field="units")
    with paused_gc():
        return _build_table(schedule, units)


def _build_table(schedule: Schedule | Flat, units: UnitCosts) -> Table:
    flat = validated(schedule)
    exact = _exact_durations(flat.schedule, units)
    comm = _exact(units.comm)
    used = [KIND_CODE[kind] for kind in _used_kinds(flat)]
    positive = [exact[k] for k in used if exact[k] > 0] + ([comm] if comm > 0 else [])
    scale = math.lcm(*(x.denominator for x in positive))
    tick = Fraction(math.gcd(*(int(x * scale) for x in positive)), scale)
    f, b, i, w = (int(x / tick) for x in exact)  # exact for the kinds used
    delay = [int(comm / tick)] * flat.size if comm > 0 else None
    start = flat_earliest_starts(flat, [(f, b, i, w)[k] for k in flat.kind], delay)
    return Table(flat, units, tick, (f, b, i, w), start)


def _used_kinds(flat: Flat) -> tuple[Kind, ...]:
    """The kinds ``flat`` holds, in F, B, I, W order (a schedule may mix B with I and W per microbatch)."""
    present = set(flat.kind)
    return tuple(kind for code, kind in enumerate(KINDS) if code in present)


def _exact_durations(schedule: Schedule, units: UnitCosts) -> list[Fraction]:
    """Slots of F, B, I, W of one chunk op of ``schedule``, as exact fractions."""
    share = Fraction(schedule.devices, schedule.stages)
    return [_exact(units.durations()[kind]) * share for kind in KINDS]


@dataclass(frozen=True)
class TableMetrics:
    """The table layer's figures of one schedule (:func:`table_metrics`)."""

    length: int | float
    """Slots from the first op's start to the last op's end (an int when whole)."""
    bubble_ratio: float
    """Idle share of the devices x length slots: 1 - busy / (devices x length)."""
    peak_activations: tuple[int, ...]
    """Most live stage-chunk activations per device (1/S of the model's each), device 0 first."""
    weight_copies: tuple[int | float, ...]
    """Weights per device in copies of a 1/p model share (:meth:`ppopt.ir.Schedule.weight_copies`)."""


def table_metrics(table: Table) -> TableMetrics:
    """The table layer's figures of ``table``: length (slots), bubble ratio, peak activations,
    weight copies."""
    return TableMetrics(table.length, table.bubble_ratio, table.peak_activations, table.schedule.weight_copies())
