"""The one schedule validator, shared by generators' tests, file readers, the solver and the simulator.

``validate(schedule)`` raises :class:`ScheduleValidationError` on the first problem found, in this
order: placement, ops on the wrong device, missing or duplicated ops, a dependency placed after its
dependent on the same device, and a deadlocking order across devices. The error's message is one
line; ``error.details`` shows the per-device order grid with the offending cell marked.

How it runs: :func:`validated` flattens the schedule (:func:`ppopt.flat.flatten`, integer checks,
linear in the number of ops) and returns the flat form for the table layer and the simulator to
reuse. Only when that screen finds a problem do the detailed checks below run, to name the
offending op and mark it in the grid; they hash ops and are slower, but run on failure only.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import fields

from ppopt.errors import ScheduleError
from ppopt.flat import Flat, Unflattenable, flatten
from ppopt.graph import topological_order
from ppopt.ir import Kind, Op, Schedule, check_size, dependencies, iter_required_ops


class ScheduleValidationError(ScheduleError):
    """An invalid schedule. ``str()`` is one line; ``details`` is the order grid with a marker."""

    def __init__(self, message: str, details: str = ""):
        super().__init__(message)
        self.details = details


def order_grid(schedule: Schedule, mark: tuple[int, int] | None = None, limit: int = 24, devices: int = 9,
               centre: int | None = None) -> str:
    """The per-device op order as text, one row per device; ``mark=(device, index)`` is bracketed.

    Long rows are cut to ``limit`` cells around the marked one, and at most ``devices`` rows are
    shown, centred on the marked device, else on ``centre`` (the device a missing op belongs on),
    else from device 0 (a file of 64 ranks gave 64 lines after the error); a last line counts the
    devices left out.
    """
    lo = 0
    if mark is not None:
        lo = max(0, mark[1] - limit // 2)
    count = len(schedule.orders)
    middle = mark[0] if mark is not None else centre
    first = 0 if middle is None else max(0, min(middle - devices // 2, count - devices))
    shown = range(first, min(count, first + devices))
    rows = []
    for d in shown:
        cells = []
        order = schedule.orders[d]
        for i, op in enumerate(order[lo : lo + limit], start=lo):
            text = str(op)
            cells.append(f">{text}<" if mark == (d, i) else f" {text} ")
        prefix = "... " if lo > 0 else ""
        suffix = " ..." if len(order) > lo + limit else ""
        rows.append(f"device {d}: {prefix}{''.join(f'{c:>8}' for c in cells)}{suffix}")
    if len(shown) < count:
        rows.append(f"({count - len(shown)} more devices not shown)")
    return "\n".join(rows)


def _position(schedule: Schedule) -> dict[Op, tuple[int, int]]:
    return {op: (d, i) for d, order in enumerate(schedule.orders) for i, op in enumerate(order)}


def _second_place(schedule: Schedule, op: Op) -> tuple[int, int]:
    """Where ``op`` appears the second time, reading device by device (the first repeat: what a
    file reader names)."""
    places = ((d, i) for d, order in enumerate(schedule.orders) for i, other in enumerate(order) if other == op)
    next(places)
    return next(places)


def _fail(schedule: Schedule, message: str, mark: tuple[int, int] | None = None, centre: int | None = None) -> None:
    raise ScheduleValidationError(message, order_grid(schedule, mark, centre=centre))


def _check_placement(schedule: Schedule) -> None:
    p = schedule.devices
    if p < 1:
        _fail(schedule, f"devices must be >= 1, got {p}")
    if len(schedule.orders) != p:
        _fail(schedule, f"schedule has {len(schedule.orders)} device rows but devices = {p}")
    if schedule.stages < 1:
        _fail(schedule, "placement is empty: no stage is placed")
    for s, holders in enumerate(schedule.placement):
        if not holders:
            _fail(schedule, f"stage {s} is placed on no device")
        for d in holders:
            if not 0 <= d < p:
                _fail(schedule, f"stage {s} is placed on device {d}, outside 0..{p - 1}")
    if schedule.replica_of:
        if len(schedule.replica_of) != schedule.microbatches:
            _fail(schedule, f"replica_of has {len(schedule.replica_of)} entries for {schedule.microbatches} microbatches")
        for m, r in enumerate(schedule.replica_of):
            for s, holders in enumerate(schedule.placement):
                if len(holders) > 1 and not 0 <= r < len(holders):
                    _fail(schedule, f"microbatch {m} belongs to replica {r}, but stage {s} has {len(holders)} replicas")


def _check_devices(schedule: Schedule) -> None:
    for d, order in enumerate(schedule.orders):
        for i, op in enumerate(order):
            if not isinstance(op, Op) or not isinstance(op.kind, Kind):  # a hand-built op of another kind than F, B, I, W
                _fail(schedule, f"{op!r} on device {d} is not an op: build it as Op(stage, Kind.F|B|I|W, microbatch)", (d, i))
            if not (0 <= op.stage < schedule.stages and 0 <= op.microbatch < schedule.microbatches):
                _fail(schedule, f"op {op} on device {d} names a stage or microbatch outside the schedule", (d, i))
            if schedule.device_of(op) != d:
                _fail(schedule, f"op {op} is on device {d}, but its placement says device {schedule.device_of(op)}", (d, i))


def _check_complete(schedule: Schedule) -> None:
    counts = Counter(schedule.ops())
    position = _position(schedule)
    for op, n in counts.items():
        if n > 1:
            _fail(schedule, f"op {op} appears {n} times", _second_place(schedule, op))
    split = schedule.split_pairs
    both = next((op for op in counts if op.kind is Kind.B and (op.stage, op.microbatch) in split), None)
    if both is not None:
        _fail(schedule, f"op {both} is a full backward, but stage {both.stage} also splits microbatch {both.microbatch}'s "
                        "backward into I and W (each stage and microbatch needs B, or I and W, never both)", position[both])
    stray_w = next((op for op in counts if op.kind is Kind.W and (op.stage, op.microbatch) not in split), None)
    if stray_w is not None:
        _fail(schedule, f"op {stray_w} is a weight-gradient W, but stage {stray_w.stage} has no I for microbatch "
                        f"{stray_w.microbatch} (its backward is not split)", position[stray_w])
    for op in iter_required_ops(schedule.stages, schedule.microbatches, split):
        if op not in counts:
            _fail(schedule, f"op {op} is missing (stage {op.stage}, microbatch {op.microbatch}, kind {op.kind})",
                  centre=schedule.device_of(op))


def _check_local_order(schedule: Schedule) -> None:
    split = schedule.split_pairs
    for d, order in enumerate(schedule.orders):
        index = {op: i for i, op in enumerate(order)}
        for i, op in enumerate(order):
            for dep in dependencies(op, schedule.stages, split):
                j = index.get(dep)
                if j is not None and j > i:
                    _fail(schedule, f"op {op} runs before its dependency {dep} on device {d}", (d, i))


def predecessors(schedule: Schedule) -> dict[Op, tuple[Op, ...]]:
    """For each op: its data dependencies plus the op before it on its device."""
    split = schedule.split_pairs
    preds: dict[Op, tuple[Op, ...]] = {}
    for order in schedule.orders:
        previous: tuple[Op, ...] = ()
        for op in order:
            preds[op] = dependencies(op, schedule.stages, split) + previous
            previous = (op,)
    return preds


def execution_order(schedule: Schedule) -> list[Op]:
    """A topological order of the ops under data dependencies and per-device order (Kahn's FIFO
    order over hashed ops; it also serves schedules that are otherwise incomplete).

    Raises :class:`ScheduleValidationError` naming, per device, the op it waits on when the order
    deadlocks (a cycle of cross-device waits).
    """
    preds = predecessors(schedule)
    successors: dict[Op, list[Op]] = {op: [] for op in preds}
    for op, deps in preds.items():
        for dep in deps:
            successors[dep].append(op)
    done = topological_order(successors)
    if len(done) < len(preds):
        finished = set(done)
        stuck = []
        mark = None
        for d, order in enumerate(schedule.orders):
            blocked = next((op for op in order if op not in finished), None)
            if blocked is None:
                continue
            missing = [str(dep) for dep in preds[blocked] if dep not in finished]
            stuck.append(f"device {d} waits at {blocked} for {', '.join(missing)}")
            mark = mark or (d, order.index(blocked))
        _fail(schedule, "deadlock: " + "; ".join(stuck), mark)
    return done


def validated(schedule: Schedule | Flat) -> Flat:
    """Check a schedule completely and return its flat form (a :class:`Flat` is returned as is), or
    raise :class:`ScheduleValidationError` with the detailed message.

    The flat form is kept with the schedule object (which is immutable), so validating the same
    schedule again, or handing it to the table layer or the simulator after validating it, costs
    nothing. What is kept is the flat form without its ``schedule`` field (:func:`_kept`): a flat
    form refers to its schedule, and keeping that way back too made a reference cycle, which held
    every schedule `evaluate -s all` built in memory until a full garbage collection (2.21 GB at
    64 x 2,048 in unit mode, against 0.40 GB). A schedule over :data:`ppopt.ir.MAX_OPS` ops is
    refused before anything is allocated.
    """
    if isinstance(schedule, Flat):
        return schedule
    if not isinstance(schedule, Schedule):  # None, a family's name, a list of orders: not one to check
        raise ScheduleValidationError(f"schedule: must be a Schedule (ppopt.generate builds one by name), got {schedule!r}")
    known = schedule.__dict__.get(_FLAT)
    if known is not None:
        return Flat(schedule, **known)
    try:
        check_size(schedule.stages * schedule.microbatches * 2, f"{schedule.stages} stages x {schedule.microbatches} microbatches",
                   memory=False)  # built already: its memory was checked before
    except ScheduleError as error:
        raise ScheduleValidationError(str(error)) from None
    try:
        flat = flatten(schedule)
    except Unflattenable as problem:
        try:
            explain(schedule)
        except ScheduleValidationError:
            raise
        except Exception:  # noqa: BLE001  (the detailed checks tripped over it: report the screen's finding)
            pass
        try:
            grid = order_grid(schedule)
        except Exception:  # noqa: BLE001  (an order of what is not an op cannot be drawn: the reason stands alone)
            grid = ""
        raise ScheduleValidationError(f"invalid schedule: {problem}", grid) from None
    schedule.__dict__[_FLAT] = _kept(flat)  # a schedule is immutable: flatten it once (see Schedule.__getstate__)
    return flat


_FLAT = "_flat"
"""Where :func:`validated` keeps a schedule's flat form, in the schedule's own ``__dict__``."""


def _kept(flat: Flat) -> dict[str, object]:
    """``flat``'s fields but its schedule: what a schedule keeps of its flat form, with no way back to it."""
    return {f.name: getattr(flat, f.name) for f in fields(flat) if f.name != "schedule"}


def explain(schedule: Schedule) -> None:
    """The detailed checks, in the order of the module docstring: raise on the first problem found."""
    _check_placement(schedule)
    _check_devices(schedule)
    _check_complete(schedule)
    _check_local_order(schedule)
    execution_order(schedule)


def validate(schedule: Schedule) -> Schedule:
    """Check a schedule completely; return it unchanged, or raise :class:`ScheduleValidationError`."""
    validated(schedule)
    return schedule
