"""The one CP-SAT model builder: a space, an instance and a hint become a model.

Reads like the OR-Tools samples: data (ticks), variables, constraint families (each a small
function), objective. Durations and delays are rounded down to ticks (:mod:`ppopt.solve.ticks`).

Variables: a start per op; the op's device is fixed by the placement, or chosen through
``direction[m]`` (bidirectional spaces with free directions) or ``on[s][d]`` (``placement=any``),
with one optional interval per candidate device.

Dominance rule (``dominance=True``), without loss of optimality: within one stage and one op kind,
microbatches that take the same route (same replica) are run in microbatch order.
Argument: take any feasible schedule and, for each (stage, kind, route), give the k-th smallest of
that group's start times to microbatch k. Ops of one group have one device and one duration, so each
device runs the same set of intervals as before (no overlap). Every dependency is "op X of microbatch
m ends (plus a delay that does not depend on m) before op Y of the same m starts"; that holds for
every m, and sorting both sides of a pointwise inequality keeps it (the k-th smallest of a_m is at
least the k-th smallest of b_m when a_m >= b_m for all m). Memory use on a device at any time counts
the F starts and freeing-op ends before that time: multisets of times, which are unchanged. So the
relabelled schedule is feasible with the same makespan. With free directions microbatches are
interchangeable, so the down-going ones can be taken to be 0..k-1 (``direction`` sorted).
``tests/test_solve.py`` checks on small instances that the optimum is the same with and without.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from fractions import Fraction
from math import floor, gcd

from ortools.sat.python import cp_model

from ppopt.graph import topological_order
from ppopt.ir import FREEING_KINDS, Kind, Op, Schedule, Split, dependencies, is_split, required_ops
from ppopt.placement import stages_by_device
from ppopt.simulate import op_duration_s
from ppopt.solve.instance import FIT_TOLERANCE, Instance
from ppopt.solve.space import Space, placement_of, stage_count
from ppopt.solve.ticks import to_ticks


@dataclass(frozen=True)
class Frame:
    """The time frame of a model, in ticks: ``tick`` (instance time units per tick), the horizon, a
    lower bound on the makespan, and, for the second (memory) objective, the makespan cap within
    which the worst device's peak memory is minimised (None: minimise the makespan)."""

    tick: float
    horizon: int
    lower_bound: int = 0
    minimize_peak_within: int | None = None


@dataclass
class Built:
    """A built model and the handles needed to read a solution back."""

    model: cp_model.CpModel
    tick: float
    ops: list[Op]
    start: dict[Op, cp_model.IntVar]
    duration: dict[Op, int]
    makespan: cp_model.IntVar
    horizon: int
    placement: tuple[tuple[int, ...], ...] | None
    direction: dict[int, cp_model.IntVar] = field(default_factory=dict)  # microbatch -> 1 if "up"
    on: dict[tuple[int, int], cp_model.IntVar] = field(default_factory=dict)  # (stage, device) -> placed
    peak: cp_model.IntVar | None = None  # worst device's memory, in memory_step units (memory objective)
    memory_step: float = 1.0  # instance memory units per unit of ``peak``


def rehint(built: Built, model: cp_model.CpModel, starts: Mapping[Op, int], makespan: int) -> None:
    """Replace the hints of ``model`` (``built``'s model or a copy of it) by one schedule: every op's
    start and the makespan, in ticks."""
    model.clear_hints()
    for op in built.ops:
        model.add_hint(built.start[op], starts[op])
    model.add_hint(built.makespan, makespan)


def _op_ticks(instance: Instance, op: Op, tick: float) -> int:
    return to_ticks(op_duration_s(op, instance.costs), tick)


def integer_memory(sizes: list[float], limit: float) -> tuple[list[int], int, Fraction]:
    """Integers with the same ratios as ``sizes``, ``limit`` with the fit check's slack
    (:meth:`Instance.fits`) in the same unit, rounded down (2.9999999 activations admit two, 0.3
    three tenths), and the scale: integer units per unit of ``sizes``.

    Activation sizes are multiples of a common step in unit mode and whole bytes when modelled
    (:meth:`ppopt.solve.instance.Instance.memory_counts` rounds byte counts to whole bytes), so the scaling is exact.
    """
    demands, scale = _scaled(sizes)
    return demands, floor(Fraction(limit * (1 + FIT_TOLERANCE)) * scale), scale


def _scaled(sizes: list[float]) -> tuple[list[int], Fraction]:
    """``sizes`` as the smallest integers with their ratios (each size's nearest fraction of
    denominator at most 10**6: 1/3 of a share is 1/3), and the scale: integer units per unit of ``sizes``."""
    fractions = [Fraction(x).limit_denominator(10**6) for x in sizes]
    denominator = 1
    for f in fractions:
        denominator = denominator * f.denominator // gcd(denominator, f.denominator)
    demands = [int(f * denominator) for f in fractions]
    divisor = 0
    for d in demands:
        divisor = gcd(divisor, d)
    divisor = divisor or 1
    return [d // divisor for d in demands], Fraction(denominator, divisor)


def memory_units(instance: Instance, limit: float | None) -> tuple[list[int], list[int], list[int], int]:
    """Activation demand per stage, the part of it a split backward frees at the end of I
    (:meth:`ppopt.solve.instance.Instance.input_grad_releases`), persistent state per stage, and the
    capacity ``limit`` (the total a device could ever hold when None), as integers in one memory
    unit (see :func:`integer_memory`).
    The persistent state and the activations are rounded down (a distributed optimizer's state, and
    an activation split over t ranks, are fractional in bytes; :meth:`Instance.memory_counts` with
    ``relaxed``), so the model admits every schedule that fits and perhaps one a few bytes over: the
    search checks what it reads back (:meth:`Instance.fits`), and a device's room where the
    placement is known is the limit less the exact state (:func:`exact_rooms`)."""
    sizes, rounded = instance.memory_counts(relaxed=True)
    early = instance.input_grad_releases(relaxed=True)
    scaled, capacity, scale = integer_memory(sizes + rounded + early, instance.most_held if limit is None else min(limit, instance.most_held))
    persistent = [floor(Fraction(state) * scale) for state in instance.persistent_state()]
    return scaled[: len(sizes)], scaled[len(sizes) + len(rounded):], persistent, capacity


def memory_step(instance: Instance) -> float:
    """The size of :func:`memory_units`' unit in the instance's memory unit (bytes or activations)."""
    return float(1 / _unit_scale(instance))


def _unit_scale(instance: Instance) -> Fraction:
    """:func:`memory_units`' integer units per byte (or activation)."""
    sizes, rounded = instance.memory_counts(relaxed=True)
    return _scaled(sizes + rounded + instance.input_grad_releases(relaxed=True))[1]


def exact_rooms(instance: Instance, helds: Sequence[Sequence[int]]) -> list[int]:
    """For each device's stages in ``helds``, the room for activations under the memory limit, in
    the unit of :func:`memory_units`: :meth:`Instance.room` (the limit with the fit check's slack,
    less the stages' persistent state as the simulator counts it), rounded down once. Rounding each
    stage's state up and the limit down left a byte short of two activations at a limit set exactly
    at them beside a fractional state (a distributed optimizer's), and the solver "proved" a bound
    above a schedule that fits."""
    scale = _unit_scale(instance)  # once: it weighs every stage's sizes
    return [floor(Fraction(instance.room(held)) * scale) for held in helds]


@dataclass(frozen=True)
class DeviceRoom:
    """A device's memory under a limit, in one integer memory unit (:func:`memory_units`): the room
    for activations beside the persistent state of every stage it holds, and each of those stages'
    activation size and the part of it a split backward frees at the end of I."""

    room: int
    demand: dict[int, int]
    early: dict[int, int] = field(default_factory=dict)

    def shares(self) -> dict[int, int]:
        """Stage -> how many of its own activations fit in the room (the others' live ones only take
        room), for the stages with activations."""
        return {s: self.room // d for s, d in self.demand.items() if d > 0}


def device_rooms(instance: Instance, placement: Sequence[Sequence[int]]) -> dict[int, DeviceRoom]:
    """Device -> its :class:`DeviceRoom`, for every device under ``instance``'s memory limit whose
    stages (by ``placement``: stage -> its devices) have no replicas elsewhere; empty without a limit."""
    if instance.memory_limit is None:
        return {}
    demand, early, _, _ = memory_units(instance, instance.memory_limit)
    alone = {device: held for device, held in enumerate(stages_by_device(placement, instance.devices))
             if held and all(len(placement[s]) == 1 for s in held)}
    return {device: DeviceRoom(room, {s: demand[s] for s in alone[device]}, {s: early[s] for s in alone[device]})
            for device, room in zip(alone, exact_rooms(instance, list(alone.values())), strict=True)}


def backward_of(schedule: Schedule) -> Split:
    """``schedule``'s backward kinds for the model: True or False when uniform, else the split (stage,
    microbatch) pairs (a mixed schedule, as DualPipeV, is only ever a fixed space: the relaxed spaces
    and their bounds have one kind)."""
    split = schedule.split_pairs
    if split and len(split) != schedule.stages * schedule.microbatches:
        return split
    return bool(split)


class _Builder:
    def __init__(self, instance: Instance, space: Space, tick: float, hint: Schedule | None, horizon: int, dominance: bool):
        self.instance, self.space, self.tick, self.hint, self.dominance = instance, space, tick, hint, dominance
        self.model = cp_model.CpModel()
        self.p, self.m = instance.devices, instance.microbatches
        self.stages = stage_count(space, self.p) if hint is None else hint.stages
        self.split = space.split_backward if hint is None else backward_of(hint)
        self.placement = hint.placement if (hint is not None and space.fixed) else placement_of(space, self.p)
        self.ops = required_ops(self.stages, self.m, self.split)
        self.duration = {op: _op_ticks(instance, op, tick) for op in self.ops}
        self.horizon = horizon
        earliest, latest = self.time_windows()
        self.start = {op: self.model.new_int_var(earliest[op], max(earliest[op], latest[op]), str(op)) for op in self.ops}
        self.makespan = self.model.new_int_var(0, horizon, "makespan")
        self.intervals: dict[int, list] = {d: [] for d in range(self.p)}
        self.direction: dict[int, cp_model.IntVar] = {}
        self._fixed_directions: tuple[int, ...] | None = None  # hint_direction's, made once
        self.on: dict[tuple[int, int], cp_model.IntVar] = {}
        self.peak: cp_model.IntVar | None = None
        self.memory_step = 1.0
        self.tail: cp_model.IntVar | None = None  # horizon - makespan, set by add_no_overlap
        self._free_delays: dict[tuple[int, int], cp_model.LinearExprT | int] = {}  # delay_expr's, per stage pair

    # ---- time windows ------------------------------------------------------------------------------
    def route_delays(self, dep: Op, op: Op) -> list[int]:
        """Message delay (ticks) of dependency dep -> op on each route (replica), for a fixed placement.

        A microbatch takes the same route through every stage: replica r of a replicated stage, the
        only device of an unreplicated one. Stages on the same device exchange nothing.
        """
        assert self.placement is not None
        a_devs, b_devs = self.placement[dep.stage], self.placement[op.stage]
        routes = max(len(a_devs), len(b_devs))
        devices = [(a_devs[min(r, len(a_devs) - 1)], b_devs[min(r, len(b_devs) - 1)]) for r in range(routes)]
        return [to_ticks(self.instance.comm(dep.stage, a, b), self.tick) for a, b in devices]

    def min_delay(self, dep: Op, op: Op) -> int:
        """The least message delay (ticks) the dependency dep -> op can cost in this space."""
        if dep.stage == op.stage or self.placement is None:
            return 0
        return min(self.route_delays(dep, op))

    def time_windows(self) -> tuple[dict[Op, int], dict[Op, int]]:
        """Earliest and latest start of every op (ticks): longest paths over the dependencies (and
        the microbatch order, when the dominance rule applies) from time 0 and to the horizon.

        They only restate what the constraints imply, so the optimum is unchanged; CP-SAT's presolve
        no longer has to derive them (a large share of its time on big instances).
        """
        edges: dict[Op, list[tuple[Op, int]]] = {op: [] for op in self.ops}
        for op in self.ops:
            for dep in dependencies(op, self.stages, self.split):
                edges[dep].append((op, self.duration[dep] + self.min_delay(dep, op)))
        single_route = self.placement is not None and all(len(h) == 1 for h in self.placement)
        if self.dominance and self.space.order != "fixed" and single_route:
            kinds = (Kind.F, Kind.I, Kind.W) if self.split else (Kind.F, Kind.B)
            for s in range(self.stages):
                for kind in kinds:
                    for m in range(self.m - 1):
                        a = Op(s, kind, m)
                        edges[a].append((Op(s, kind, m + 1), self.duration[a]))
            for s, k in self.memory_caps().items():
                for m in range(self.m - k):
                    a = self.freeing(s, m)
                    edges[a].append((Op(s, Kind.F, m + k), self.duration[a]))
        order = topological_order({op: [b for b, _ in edges[op]] for op in self.ops})
        earliest = {op: 0 for op in self.ops}
        for a in order:
            for b, lag in edges[a]:
                earliest[b] = max(earliest[b], earliest[a] + lag)
        to_end = {op: self.duration[op] for op in self.ops}
        for a in reversed(order):
            for b, lag in edges[a]:
                to_end[a] = max(to_end[a], lag + to_end[b])
        return earliest, {op: self.horizon - to_end[op] for op in self.ops}

    def memory_caps(self) -> dict[int, int]:
        """Stage -> how many of its activations fit (the k of :meth:`add_memory_precedence`) beside
        the persistent state of every stage on its device, when there is a memory limit and the
        device's stages are unreplicated with microbatches in order. On a device holding one stage
        that is the cap; on one holding several, each stage's own share of it (the others' live
        activations only take room), implied by the device's cumulative."""
        if self.placement is None:
            return {}
        caps = {}
        for room in device_rooms(self.instance, self.placement).values():
            if self.in_order(list(room.demand)):
                # a stage whose split backward frees part at I: each live microbatch holds at least the rest
                held = {s: d - room.early[s] if self.early_release(s) else d for s, d in room.demand.items()}
                caps.update({s: room.room // h for s, h in held.items() if h > 0})
        return {s: k for s, k in caps.items() if k >= 1}

    def early_release(self, stage: int) -> bool:
        """Whether a split backward frees part of ``stage``'s activations at the end of I (a last
        stage's loss softmax, modelled): then its activations are freed in two parts."""
        return bool(self.split) and self.instance.costs.stages[stage].input_grad_release_bytes > 0

    # ---- where ops run ---------------------------------------------------------------------------
    def end(self, op: Op):
        return self.start[op] + self.duration[op]

    def free_directions(self) -> bool:
        return self.space.placement == "bidirectional" and self.space.directions == "free" and not self.space.fixed

    def add_directions(self) -> None:
        """Bidirectional spaces: each microbatch goes down (0) or up (1)."""
        if self.free_directions():
            self.direction = {m: self.model.new_bool_var(f"up{m}") for m in range(self.m)}
            for m in range(self.m - 1):
                self.model.add(self.direction[m] <= self.direction[m + 1])  # relabelling, see docstring
        else:
            for m in range(self.m):
                self.direction[m] = self.model.new_constant(self.hint_direction(m))

    def add_free_placement(self) -> None:
        """``placement=any``: ``on[s, d]`` says stage s sits on device d; exactly one per stage."""
        for s in range(self.stages):
            for d in range(self.p):
                self.on[s, d] = self.model.new_bool_var(f"on{s}_{d}")
            self.model.add_exactly_one(self.on[s, d] for d in range(self.p))
        self.model.add(self.on[0, 0] == 1)  # devices are interchangeable in unit/uniform links

    def device_literals(self, op: Op) -> list[tuple[int, object]]:
        """(device, presence literal or True) pairs for the devices that may run ``op``."""
        if self.placement is None:
            return [(d, self.on[op.stage, d]) for d in range(self.p)]
        holders = self.placement[op.stage]
        if len(holders) == 1:
            return [(holders[0], True)]
        up = self.direction[op.microbatch]
        return [(holders[0], up.Not()), (holders[1], up)]

    def add_intervals(self) -> None:
        for op in self.ops:
            for d, present in self.device_literals(op):
                name = f"{op}@{d}"
                if present is True:
                    interval = self.model.new_fixed_size_interval_var(self.start[op], self.duration[op], name)
                else:
                    interval = self.model.new_optional_fixed_size_interval_var(
                        self.start[op], self.duration[op], present, name  # type: ignore[arg-type]  # a literal
                    )
                self.intervals[d].append(interval)

    # ---- constraint families -----------------------------------------------------------------------
    def add_precedences(self) -> None:
        """Data dependencies, plus the message delay when the two stages are on different devices."""
        for op in self.ops:
            for dep in dependencies(op, self.stages, self.split):
                self.model.add(self.start[op] >= self.end(dep) + self.delay_expr(dep, op))

    def delay_expr(self, dep: Op, op: Op):
        """The message delay of dep -> op: a constant, or an expression of the route or placement."""
        if dep.stage == op.stage:
            return 0
        if self.placement is None:
            pair = (dep.stage, op.stage)
            if pair not in self._free_delays:  # one expression per stage pair, shared by every microbatch
                self._free_delays[pair] = self._free_delay(*pair)
            return self._free_delays[pair]
        delays = self.route_delays(dep, op)
        if len(delays) == 1:
            return delays[0]
        down, up = delays
        return down + (up - down) * self.direction[op.microbatch]

    def _free_delay(self, sender: int, receiver: int) -> cp_model.LinearExprT | int:
        """Under free placement, a message from stage ``sender`` to ``receiver`` pays the smallest
        inter-device delay unless both stages share a device."""
        pairs = [to_ticks(self.instance.comm(sender, a, b), self.tick) for a in range(self.p) for b in range(self.p) if a != b]
        c = min(pairs, default=0)
        if c == 0:
            return 0
        same = self.model.new_bool_var(f"same{sender},{receiver}")
        shared = [self.model.new_bool_var("") for _ in range(self.p)]
        for d in range(self.p):
            self.model.add_multiplication_equality(shared[d], [self.on[sender, d], self.on[receiver, d]])
        self.model.add(same == sum(shared))
        return c * (1 - same)

    def add_no_overlap(self) -> None:
        """One compute stream per device; the interval [makespan, horizon) closes each device
        (the job-shop trick: it lets the makespan's bound reason about each device's load)."""
        size = self.tail = self.model.new_int_var(0, self.horizon, "tail")
        self.model.add(size == self.horizon - self.makespan)
        closing = self.model.new_interval_var(self.makespan, size, self.horizon, "closing")
        for d in range(self.p):
            self.model.add_no_overlap(self.intervals[d] + [closing])

    def add_makespan(self, lower_bound: int) -> None:
        last = {Kind.W} if self.split is True else {Kind.B} if self.split is False else FREEING_KINDS
        for op in self.ops:
            if op.kind in last or (self.split is False and op.stage == 0):
                self.model.add(self.makespan >= self.end(op))
        self.model.add(self.makespan >= lower_bound)

    def add_dominance(self) -> None:
        """Run each (stage, kind, route) group in microbatch order (see the module docstring)."""
        if not self.dominance or self.space.order == "fixed":
            return
        kinds = (Kind.F, Kind.I, Kind.W) if self.split else (Kind.F, Kind.B)
        if self.free_directions():
            # directions are sorted, so each route is a run of consecutive microbatches
            routes = [list(range(self.m))]
        elif self.direction:
            routes = [[m for m in range(self.m) if self.hint_direction(m) == r] for r in (0, 1)]
        else:
            routes = [list(range(self.m))]
        for s in range(self.stages):
            for kind in kinds:
                for route in routes:
                    for m, n in zip(route, route[1:]):
                        constraint = self.model.add(self.end(Op(s, kind, m)) <= self.start[Op(s, kind, n)])
                        if self.free_directions():
                            constraint.only_enforce_if(self.same_direction(m, n))

    def hint_direction(self, m: int) -> int:
        """The fixed direction of microbatch m. A fixed space's is its schedule's; otherwise
        (``directions=even``) half the microbatches go each way: the hint's directions when they
        halve them, else Chimera's rule (the second half of each p goes up) when it does (p | m),
        else the first half down. Microbatches are alike, so every halving is the same space up to
        their names; a rule that does not halve them (Chimera's at p = 4, m = 6) left a smaller
        space than the one the bounds assume (m/2 each way), and reported its optimum as optimal."""
        return self._directions()[m]

    def _directions(self) -> tuple[int, ...]:
        if self._fixed_directions is None:
            hinted = self.hint.replica_of if self.hint is not None else ()
            chimera = tuple(int(k % self.p >= self.p // 2) for k in range(self.m))
            halves = tuple(int(k >= self.m // 2) for k in range(self.m))
            self._fixed_directions = next((d for d in (hinted, chimera, halves)
                                           if d and (d is hinted and self.space.fixed or 2 * sum(d) == self.m)), halves)
        return self._fixed_directions

    def same_direction(self, m: int, n: int):
        same = self.model.new_bool_var(f"same_route{m}_{n}")
        self.model.add(self.direction[m] == self.direction[n]).only_enforce_if(same)
        self.model.add(self.direction[m] != self.direction[n]).only_enforce_if(same.Not())
        return same

    def add_fixed_order(self) -> None:
        """Keep the hint's per-device order (the fixed point of a handcrafted schedule)."""
        if self.space.order != "fixed" or self.hint is None:
            return
        for order in self.hint.orders:
            for a, b in zip(order, order[1:]):
                self.model.add(self.end(a) <= self.start[b])

    def add_memory(self, minimize_peak: bool = False) -> None:
        """Per device: persistent bytes + live activations <= limit (cumulative over lifetimes), or,
        for a device holding exactly one stage, the equivalent precedence F(m+K) after free(m). A
        device holding several stages keeps the cumulative and also gets each stage's precedence
        (:meth:`memory_caps`): implied, so the optimum is unchanged, but CP-SAT propagates it.

        ``minimize_peak``: the capacity of every device becomes one variable ``peak`` (the worst
        device's memory), which the objective then minimises.
        """
        limit = self.instance.memory_limit
        if limit is None and not minimize_peak:
            return
        demand, early, kept, capacity = memory_units(self.instance, limit)
        ceiling: cp_model.IntVar | int = capacity
        caps = {} if minimize_peak else self.memory_caps()  # each stage's share of a device's cap
        if minimize_peak:
            self.peak = ceiling = self.model.new_int_var(0, capacity, "peak_memory")
            self.memory_step = memory_step(self.instance)
        helds = [] if self.placement is None else stages_by_device(self.placement, self.p)
        rooms = exact_rooms(self.instance, helds) if helds and not minimize_peak else []
        for d in range(self.p):
            lifetimes, weights = [], []
            if self.placement is None:  # a stage's state is on d when it is: an interval over the whole horizon
                held = list(range(self.stages))
                room: cp_model.LinearExprT = ceiling  # a cumulative's capacity must be affine, not a sum over the free placement
                for s in held:
                    if kept[s] > 0:
                        lifetimes.append(self.model.new_optional_fixed_size_interval_var(0, self.horizon, self.on[s, d], ""))
                        weights.append(kept[s])
            else:
                held = list(helds[d])
                if minimize_peak:
                    room = ceiling - sum(kept[s] for s in held)
                else:
                    room = rooms[d]
                    if self.single_stage(held) and demand[held[0]] > 0 and not self.early_release(held[0]):
                        self.add_memory_precedence(held[0], room // demand[held[0]])
                        continue
                for s in held:
                    if s in caps:  # implied by the cumulative below (see memory_caps)
                        self.add_memory_precedence(s, caps[s])
            for s in held:
                for m in range(self.m):
                    present = self._presence(Op(s, Kind.F, m), d)
                    if present is None:
                        continue
                    if self.early_release(s) and is_split(self.split, s, m):  # freed in two parts: at I, then at W
                        lifetimes.append(self.lifetime(s, m, present, Op(s, Kind.I, m)))
                        weights.append(early[s])
                        lifetimes.append(self.lifetime(s, m, present))
                        weights.append(demand[s] - early[s])
                    else:
                        lifetimes.append(self.lifetime(s, m, present))
                        weights.append(demand[s])
            self.model.add_cumulative(lifetimes, weights, room)

    def single_stage(self, held: list[int]) -> bool:
        """A device holding one unreplicated stage, with microbatches in order (dominance)."""
        return len(held) == 1 and self.in_order(held)

    def in_order(self, held: list[int]) -> bool:
        """Stages ``held`` by one device, none replicated, with microbatches in order (dominance)."""
        assert self.placement is not None
        return all(len(self.placement[s]) == 1 for s in held) and self.dominance and self.space.order != "fixed"

    def freeing(self, stage: int, m: int) -> Op:
        """The op that frees microbatch m's activation on ``stage``: its W when split, else its B."""
        return Op(stage, Kind.W if is_split(self.split, stage, m) else Kind.B, m)

    def add_memory_precedence(self, stage: int, k: int) -> None:
        """At most k live activations of ``stage``: F(m + k) starts after microbatch m is freed."""
        for m in range(self.m - max(k, 0)):
            self.model.add(self.start[Op(stage, Kind.F, m + k)] >= self.end(self.freeing(stage, m)))
        if k < 1:
            self.model.add_bool_or([])  # no room for even one activation: infeasible

    def lifetime(self, stage: int, m: int, present, last: Op | None = None):
        """Interval from the start of F to the end of the freeing op of (stage, m), or of ``last``."""
        first, last = Op(stage, Kind.F, m), self.freeing(stage, m) if last is None else last
        length = self.model.new_int_var(0, self.horizon, "")
        self.model.add(length == self.end(last) - self.start[first])
        if present is True:
            return self.model.new_interval_var(self.start[first], length, self.end(last), "")
        return self.model.new_optional_interval_var(self.start[first], length, self.end(last), present, "")

    def _presence(self, op: Op, device: int):
        """True, a literal, or None (op can't be on device)."""
        for d, present in self.device_literals(op):
            if d == device:
                return present
        return None

    # ---- hint ----------------------------------------------------------------------------------------
    def add_hint(self, starts: Mapping[Op, int] | None) -> None:
        if self.hint is None or starts is None:
            return
        for op, t in starts.items():
            if op in self.start:
                self.model.add_hint(self.start[op], t)
        hinted_makespan = max(t + self.duration[op] for op, t in starts.items())
        self.model.add_hint(self.makespan, hinted_makespan)
        if self.tail is not None:
            self.model.add_hint(self.tail, max(0, self.horizon - hinted_makespan))
        if self.free_directions() and self.hint.replica_of:
            for m, var in self.direction.items():
                self.model.add_hint(var, self.hint.replica_of[m])
        if self.on:
            for s in range(self.stages):
                for d in range(self.p):
                    self.model.add_hint(self.on[s, d], int(self.hint.placement[s][0] == d) if s < self.hint.stages else 0)


def build_model(
    instance: Instance,
    space: Space,
    frame: Frame,
    hint: Schedule | None = None,
    hint_starts: Mapping[Op, int] | None = None,
    dominance: bool = True,
) -> Built:
    """Build the CP-SAT model of ``space`` on ``instance`` in ``frame`` (see module docs).

    With ``frame.minimize_peak_within``, instead of the makespan, minimise the worst device's peak
    memory among schedules whose makespan is at most that many ticks (the second, lexicographic
    objective).
    """
    tick, horizon, lower_bound, minimize_peak_within = frame.tick, frame.horizon, frame.lower_bound, frame.minimize_peak_within
    b = _Builder(instance, space, tick, hint, horizon, dominance)
    if b.placement is None:
        b.add_free_placement()
    elif any(len(holders) > 1 for holders in b.placement):
        b.add_directions()
    b.add_intervals()
    b.add_precedences()
    b.add_no_overlap()
    b.add_makespan(lower_bound)
    b.add_dominance()
    b.add_fixed_order()
    b.add_memory(minimize_peak=minimize_peak_within is not None)
    b.add_hint(hint_starts)
    if minimize_peak_within is None:
        b.model.minimize(b.makespan)
    else:
        assert b.peak is not None
        b.model.add(b.makespan <= minimize_peak_within)
        b.model.minimize(b.peak)
    return Built(b.model, tick, b.ops, b.start, b.duration, b.makespan, horizon, b.placement, b.direction, b.on,
                 b.peak, b.memory_step)

