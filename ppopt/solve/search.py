"""Search a space with CP-SAT: hint, solve, read back, re-time with the simulator, bound the gap.

``search(spec, space, options)`` is the library entry point behind ``ppopt search``; ``gap`` and
``frontier`` call it. It runs in steps, each a small function: prepare (candidates, hint, ticks,
bounds), solve (unless the hint is proven optimal or the time budget is spent), pick the best of the
solver's answer and the hint, and optionally lower the peak memory in a second solve. The whole
request shares one deadline (:class:`ppopt.solve.options.SolveOptions`).
The returned step time is always the simulator's (real durations), so the solver's answer and the
handcrafted schedules are measured by the same evaluator. The bound is the larger of the solver's
bound (in rounded-down ticks, so valid for the real problem) and the analytic bounds.
"""

from __future__ import annotations

import functools
import itertools
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import astuple, dataclass, fields, replace

import numpy as np
from ortools.sat.python import cp_model

from ppopt.config import ModelConfig
from ppopt.errors import ConfigError, InfeasibleError, ScheduleError, counted, require_bool
from ppopt.flat import KIND_CODE
from ppopt.flat import earliest_starts as flat_earliest_starts
from ppopt.ir import Kind, Op, Schedule
from ppopt.job import Parallelism
from ppopt.placement import placement as named_placement
from ppopt.placement import split_weights, stages_by_device
from ppopt.simulate import Simulation, op_duration_s, simulate
from ppopt.solve import options as solve_options
from ppopt.solve.bounds import Bounds, Shape, graph_applies, lower_bounds
from ppopt.solve.fitted import fitted_schedule
from ppopt.solve.greedy import best_greedy_schedule
from ppopt.solve.instance import Instance, InstanceSpec
from ppopt.solve.lns import Timing, improve, improve_windows
from ppopt.solve.model import Built, Frame, build_model, device_rooms, rehint
from ppopt.solve.options import AUTO_CP_OPS, AUTO_LNS_OPS, CP_MAX_OPS, READBACK_SHARE, Progress, SolveOptions
from ppopt.solve.periodic import Pattern, composed, period_bound, periodic_pattern
from ppopt.solve.relaxation import TAIL_ROUNDS, Chain, block_bound, block_cuts, cut_sizes, relaxation_bound, tail_bound
from ppopt.solve.space import (
    FAMILY_MEMBERS,
    Space,
    handcrafted_in,
    largest_stage_count,
    parse_space,
    placement_of,
    size_key,
    stage_count,
    with_backward,
)
from ppopt.solve.ticks import resolution, rounding_cost, to_ticks
from ppopt.solve.timeindexed import (
    MAX_STEP_LITERALS,
    MIN_RADIUS,
    Graph,
    Refutation,
    chain_graph,
    lags_hold,
    shorten,
    step_radius,
    time_indexed_bound,
)
from ppopt.validation import validate, validated

STATUS = {
    cp_model.OPTIMAL: "optimal",
    cp_model.FEASIBLE: "feasible",
    cp_model.INFEASIBLE: "infeasible",
    cp_model.MODEL_INVALID: "invalid",
    cp_model.UNKNOWN: "unknown",
}


@dataclass(frozen=True)
class Candidate:
    """A handcrafted schedule of the space, simulated."""

    name: str
    schedule: Schedule
    simulation: Simulation
    fits: bool  # meets the memory limit
    given: bool = False
    """Built from the caller's ``hints`` (a schedule of the user's may bear a family's name)."""
    own: bool = False
    """One of ppopt's own hints (greedy, steady-state or fitted), not a handcrafted schedule: told
    apart by this mark, not by name (a user's file may be named greedy.csv)."""

    @property
    def rank(self) -> tuple[bool, float, float]:
        """Sort key, best first: fitting ones, then the shorter step, then (between steps equal to 12
        significant digits: sums of the same durations in another order differ in the last bit) the
        lower worst-device peak, so that a tie goes to the schedule that needs less memory (GPipe and
        1F1B tie without messages; a frontier point names the least memory its step needs)."""
        return (not self.fits, float(f"{self.simulation.step_time_s:.12g}"), self.simulation.max_peak_memory_bytes)


@dataclass(frozen=True)
class SearchResult:
    """What one search found. Times in the instance's unit (``time_unit``: seconds, or slots in unit
    mode), memory in ``memory_unit`` (bytes, or live activations of a 1/p model share in unit mode).

    Attributes:
        status: ``optimal`` (the step equals the bound, up to ``rounding_cost``), ``feasible`` (a
            schedule, not proven best), ``infeasible`` (no schedule of the space meets the limit),
            ``unknown`` (no schedule found in time) or ``invalid`` (CP-SAT refused its model).
        space: the space searched, described (``placement=linear,backward=split``).
        schedule: the best schedule found (the solver's, or the best handcrafted one when the solver
            did not beat it), or None.
        simulation: ``schedule`` simulated on the instance (its ``step_time_s`` is in ``time_unit``).
        step_time: the simulated step of ``schedule``, or None without one.
        bound: a lower bound on the step of every schedule of the space under the memory limit: the
            largest of ``solver_bound``, ``analytic.best`` and ``period_bound`` (inf when infeasible).
        solver_bound: CP-SAT's proven bound (0: none proved, or no solve).
        solver_objective: the makespan of CP-SAT's schedule in its ticks, times ``tick`` (so in
            ``time_unit``), before simulation; None without one.
        analytic: the closed-form lower bounds (:class:`ppopt.solve.bounds.Bounds`), each proven in
            its function's docstring; 0 for a bound that does not apply.
        gap: ``(step_time - bound) / bound``, or None without a schedule.
        hint: the schedule that hinted the solve (a handcrafted family, or ppopt's greedy list
            schedule), or None.
        hint_step_time: the hint's simulated step.
        hint_fits: whether the hint meets the memory limit (if not, it was only the solver's start).
        hint_own: whether the hint is one of ppopt's own schedules (greedy, steady-state, fitted).
        handcrafted: the handcrafted schedules of the space, simulated (:class:`Candidate`).
        tick: the length of one solver tick, in ``time_unit`` (1 in unit mode with integer costs).
        time_unit: ``s`` (seconds) or ``slots``.
        memory_semantics: one sentence on what the memory limit counts.
        wall_time_s: seconds the whole search took, model building and simulation included.
        time_to_best_s: seconds from the search's start to its last improving schedule (CP-SAT's or the
            large-neighbourhood search's), or None.
        from_solver: whether ``schedule`` is the solver's (False: a handcrafted one or the hint).
        peak_memory: with ``minimize_memory``, the least worst-device peak any schedule of the best
            step has (proven when ``memory_status`` is optimal); None otherwise. When the memory
            solve's schedule is the one reported, it is that schedule's simulated peak (the model
            counts fractional byte sizes, a distributed optimizer's state or an activation split
            over t ranks, rounded down, so its optimum may lie a few bytes under; "proven" then holds
            within that rounding); otherwise the model's optimum, a lower bound.
        memory_status: the status of that second solve, or None.
        note: why the search stopped short (its time budget spent), if it did.
        rounding_cost: at most this share of the step is lost to rounding durations to ticks (0 when
            every duration is a whole number of ticks; inf: unbounded).
        period: the steady-state pattern found (linear placement, full backward), described, or None.
        period_bound: the period-based bound for this m, valid for every schedule; None without a cap.
        memory_unit: the unit of ``peak_memory`` and the simulation's memory figures.
    """

    status: str
    space: str
    schedule: Schedule | None
    simulation: Simulation | None
    step_time: float | None
    bound: float
    solver_bound: float
    solver_objective: float | None
    analytic: Bounds
    gap: float | None
    hint: str | None  # the schedule that hinted the solve: handcrafted, or ppopt's greedy list schedule
    hint_step_time: float | None
    handcrafted: tuple[Candidate, ...]  # the handcrafted schedules of the space, simulated
    tick: float
    time_unit: str
    memory_semantics: str
    wall_time_s: float
    time_to_best_s: float | None
    from_solver: bool
    peak_memory: float | None = None  # with minimize_memory: the worst device's proven-minimal peak (memory unit)
    memory_status: str | None = None  # status of that second solve
    note: str | None = None  # why the search stopped short (time budget spent), if it did
    rounding_cost: float = 0.0  # at most this share of the step is lost to rounding times down to ticks (inf: unbounded)
    period: str | None = None  # the steady-state pattern found (linear placement, full backward), described
    period_bound: float | None = None  # the period-based bound for this m (instance unit), valid for every schedule; None without a cap
    memory_unit: str = "bytes"  # of peak_memory and the simulation's memory: "activations" (1/p model shares) in unit mode
    hint_fits: bool = True  # whether the hint meets the memory limit (else only a start for the solver, not a schedule of the space)
    hint_own: bool = False  # whether the hint is one of ppopt's own (greedy, steady-state, fitted), not a handcrafted one

    def __repr__(self) -> str:
        """The figures a reader looks for first: the whole result (a simulation per handcrafted
        schedule, per-device tuples) ran to kilobytes at 16 devices; its fields hold the rest."""
        gap = "None" if self.gap is None else f"{self.gap:.4%}"
        return (f"SearchResult(status={self.status!r}, space={self.space!r}, schedule={self.schedule!r}, "
                f"step_time={self.step_time!r}, bound={self.bound!r}, gap={gap}, time_unit={self.time_unit!r}, "
                f"wall_time_s={self.wall_time_s:.3g})")


class _Progress(cp_model.CpSolverSolutionCallback):
    """Reports each incumbent (and bound changes) to ``progress``; remembers when the last came."""

    def __init__(self, tick: float, unit: str, progress: Progress | None, started: float | None = None):
        super().__init__()
        self.tick, self.unit, self.progress = tick, unit, progress
        self.started = time.monotonic() if started is None else started
        self.last_solution_s: float | None = None

    def on_solution_callback(self) -> None:
        self.last_solution_s = time.monotonic() - self.started
        if self.progress:
            obj, bound = self.objective_value, self.best_objective_bound
            gap = (obj - bound) / bound if bound > 0 else math.inf
            self.progress(
                f"[{self.last_solution_s:7.2f}s] incumbent {obj * self.tick:.6g} {self.unit}, "
                f"bound {bound * self.tick:.6g} {self.unit}, gap {100 * gap:.2f} %"
            )


def _durations_s(instance: Instance) -> Callable[[int, Kind], float]:
    """Duration of (stage, kind) in the instance's time unit."""
    return lambda stage, kind: op_duration_s(Op(stage, kind, 0), instance.costs)


def minimum_memory(instance: Instance, space: Space, placement, fixed: Simulation | None = None) -> tuple[float, str]:
    """The least per-device memory limit any schedule of the space can meet, and why.

    ``fixed``: the simulation of the one schedule of a ``fixed:NAME`` space. Its order is fixed on
    every device, and a device's live activations change only at its own ops, so every timing of
    that order has the same peaks: its worst device's peak is the minimum.

    One microbatch at a time still keeps, on each device, the persistent state of its stages plus
    the activations of all its stages on that microbatch's route (an activation of a lower stage
    is freed only after the higher stages' backward). With free directions a schedule may send
    every microbatch down one route, and must send one down some route: the least over routes of
    the worst device. Without a placement (``placement=any``) some device holds at least
    ceil(S/p) of the S stages, all live for one microbatch: at least the sum of the ceil(S/p)
    smallest stage needs (exact when the stages are alike).
    """
    if fixed is not None:
        use = memory_use(fixed, instance)
        device = max(range(len(use)), key=use.__getitem__)
        return use[device], f"device {device}'s peak, which the fixed order has at any timing"
    costs = instance.costs
    bytes_mode = instance.memory_unit == "bytes"
    persistent = instance.persistent_state()
    act = [c.activation_bytes for c in costs.stages]
    if placement is None:
        each = sorted(persistent[s] + act[s] for s in range(len(act)))
        k = -(-len(act) // instance.devices)
        if sum(each[:k]) > each[-1]:
            return sum(each[:k]), (f"some device holds {k} of the {len(act)} stages, each with "
                                   f"{'its persistent state and ' if bytes_mode else ''}one microbatch's activation")
        s = max(range(len(act)), key=lambda s: persistent[s] + act[s])
        return each[-1], f"stage {s} needs {'its persistent state plus ' if bytes_mode else ''}one activation"
    routes = range(max(len(p) for p in placement))
    need_on = [[0.0] * instance.devices for _ in routes]  # [route][device]: activations of one microbatch
    for s, devices in enumerate(placement):
        for r in routes:
            need_on[r][devices[r] if len(devices) > 1 else devices[0]] += act[s]
    held = [[s for s in range(len(placement)) if d in placement[s]] for d in range(instance.devices)]

    def worst_device(activations: Callable[[int], float]) -> tuple[float, int]:
        return max((sum(persistent[s] for s in held[d]) + activations(d), d) for d in range(instance.devices) if held[d])

    free = space.directions == "free"
    if free:  # one route for every microbatch is allowed: the route that needs least
        need, d = min(worst_device(need_on[r].__getitem__) for r in routes)
    else:  # every route is taken: each device's worst route
        need, d = worst_device(lambda d: max(need_on[r][d] for r in routes))
    what = f"persistent state of stages {held[d]} plus one microbatch's activations" if bytes_mode else \
        f"one microbatch's activations of stages {held[d]}"  # unit mode counts activations only
    return need, f"device {d}: {what}" + (" on the route that needs least" if free and len(routes) > 1 else "")


def format_amount(value: float, unit: str, least: bool = False) -> str:
    """A memory amount; ``least``: a minimum, rounded *up* (whole bytes, GiB to the next thousandth)
    so that the figure passed back as ``--memory-limit`` is accepted."""
    if unit == "bytes":  # GiB first, as the limit is usually given (`60GiB`)
        if least:
            return f"{math.ceil(value / 2**30 * 1000) / 1000:.3f} GiB ({math.ceil(value)} bytes)"
        return f"{value / 2**30:.3f} GiB ({value:.15g} bytes)"  # the bytes whole, as the least's (not 2.14748e+10)
    if unit == "activations" and value == 1:
        unit = "activation"
    return f"{value:.12g} {unit}" if least else f"{value:g} {unit}"


SCHEDULE_S_PER_OP = 1.5e-5
"""Wall time one candidate schedule costs per op, generously: generating, validating, simulating it
and timing it in ticks (seconds; measured on 2 cores at p = 64, m = 4,096, load 1: 1F1B 1.7 s for
524,288 ops, of which the ticks 0.4 s; DualPipeV 8.3 s for 1,054,688 ops, 7.9 µs per op, the most of
five families; twice that leaves room for a loaded machine)."""
GREEDY_VARIANT_SHARE = 0.1
"""A greedy hint's further variant (:func:`ppopt.solve.greedy.best_greedy_schedule`) is built only
while it costs at most this share of the time left (:data:`GREEDY_S_PER_OP` per op): at 1.57 M ops
each takes about 12 s, which the search itself needs more."""
TIE_HINT_SHARE = 0.1
"""Once a hint meets the analytic bound, a further handcrafted hint is still built while it costs at
most this share of the time left (:data:`SCHEDULE_S_PER_OP` per op), for a tie with less memory; at
64 x 4,096 (a second or more per hint) the search stops at the first optimal one."""


FITTED_S_PER_OP = 3e-5
"""Wall time fitting a handcrafted schedule to the memory limit costs per op (:mod:`ppopt.solve.fitted`),
generously (seconds; measured on 2 cores at p = 32, m = 256, two chunks per device: 8 to 15 µs per op)."""
GREEDY_S_PER_OP = 1.2e-5
"""Wall time the greedy hint (:mod:`ppopt.solve.greedy`) costs per op, generously (seconds; measured
on 2 cores at p = 64, m = 4,096, load 0.3 to 1: 6.7 to 8.0 µs per op, 3.5 s for the linear
placement under a cap of 64, 12.6 s for the V placement's 1.57 M ops)."""
REPORT_S_PER_OP = 1e-5
"""Wall time per op of what follows a search in a command, generously: printing the schedule's grid
(2.7 s at 524,288 ops on 2 cores) and freeing its objects at exit. :func:`search` ends this much
before the deadline."""


GRAPH_BOUNDS_S_PER_OP = 3e-5
"""Wall time the graph bounds (:func:`ppopt.solve.bounds.graph_applies`: heads and tails, Jackson's
one-machine bound, the capped warm-up) cost per op and pass, generously (seconds; 5 s at p = 64,
m = 1,500, 192,000 ops, on 2 cores). A search computes them once in ticks when the ticks are exact,
else twice (seconds and ticks), and skips them when the time left does not cover that."""


SEARCH_BYTES_PER_OP = 3_400
"""Memory a search holds per op: its candidate schedules, their simulations and the greedy hint's
bookkeeping (measured: 3.4 GB at p = 64, m = 8,192, 1,048,576 ops)."""
SCHEDULE_BYTES_PER_OP = 1_100
"""Memory per op of each further schedule a command keeps with its simulation (measured when `gap`
kept every schedule it reported: 9.8 GB for 15 schedules and their searches at 524,288 ops; it now
keeps one at a time)."""
MAX_SEARCH_BYTES = 7e9
"""The memory the solver commands may plan to hold (bytes): what sets their largest request."""


def max_search_ops(held: int = 1) -> int:
    """Most ops (stages x microbatches x kinds) a solver command that holds ``held`` schedules at once
    (a search counting as one) takes within :data:`MAX_SEARCH_BYTES` (2,058,823 for a search)."""
    return int(MAX_SEARCH_BYTES // (SEARCH_BYTES_PER_OP + (held - 1) * SCHEDULE_BYTES_PER_OP))


def minimum_time_s(ops: int) -> float:
    """The least budget (seconds) a search of ``ops`` ops can honour: one schedule from its
    generation to its printed grid."""
    return ops * (SCHEDULE_S_PER_OP + REPORT_S_PER_OP)


def space_ops(spec: InstanceSpec, space: Space) -> int:
    """Ops of every schedule of ``space`` on ``spec`` (stages x microbatches x kinds)."""
    return _op_count(stage_count(space, spec.devices), spec.microbatches, space.split_backward)


def too_late(options: SolveOptions, spec: InstanceSpec, space: Space) -> bool:
    """Whether the time left is below what one search of ``space`` needs (:func:`minimum_time_s`):
    then a command running several searches starts no further one."""
    return not options.allows(minimum_time_s(space_ops(spec, space)), f"a search of {space.describe()} not started")


def _phase(options: SolveOptions, began: float, what: str) -> None:
    """Note that a step of the search is done, once the search has run
    :data:`ppopt.solve.options.PROGRESS_AFTER_S` (only large searches take that long before solving)."""
    elapsed = time.monotonic() - began
    if elapsed >= solve_options.PROGRESS_AFTER_S:
        options.note(f"[{elapsed:7.2f}s] {what}")


OVERLAP_REFUSED = ("runs overlapped F&B pairs, which the system's overlap_f_b_share = {share:g} shortens; the solver "
                   "times a pair as its two ops, so its bounds do not hold for it (set the share to 0, or use ppopt evaluate)")


def overlap_outside_model(schedule: Schedule, instance: Instance) -> bool:
    """Whether the simulator shortens ``schedule``'s overlapped F&B pairs (``overlap_f_b_share`` > 0):
    the solver's model and bounds time a pair as its two ops, so such a schedule can beat them."""
    return bool(schedule.overlapped) and instance.system.overlap_f_b_share > 0


def _candidates(spec: InstanceSpec, space: Space, options: SolveOptions, began: float | None = None,
                hints: Sequence[Schedule] = ()) -> tuple[Instance, list[Candidate]]:
    """The instance of ``space`` and its handcrafted (and greedy) schedules, simulated, best first;
    ``hints`` (schedules of the space given by the caller, such as a user's file) come first.

    The first handcrafted schedule is always taken; each further one only while the time left covers
    it and the ticks of the hint that follow (:data:`SCHEDULE_S_PER_OP` per op each), the greedy
    one only while it covers :data:`GREEDY_S_PER_OP` per op more, so that on a short budget the
    command still ends in time at hundreds of thousands of ops. Until one of them fits the memory
    limit, they are all tried (the greedy one always fits), since a search without a fitting hint may
    end with no schedule at all; but when the time left covers the greedy one and not a further
    handcrafted one before it, the greedy one comes next (at p = 64, m = 4,096 under 16 activations
    the handcrafted ones, none fitting, took 20 s of a 30 s budget). With less time still, the
    handcrafted ones go first, each cheaper than the greedy one. Once a fitting one meets the analytic
    bound (:func:`_meets_cheap_bound`) no further hint is built, unless ``options.every_hint`` or
    the next handcrafted one costs at most :data:`TIE_HINT_SHARE` of the time left (then a tie with less memory
    wins: :attr:`Candidate.rank`).
    ``began``: when the search started (``time.monotonic()``; None: now), for the progress lines
    (:func:`_phase`)."""
    began = time.monotonic() if began is None else began
    devices = spec.devices
    generated = handcrafted_in(space, devices, spec.microbatches)
    first = next(generated, None)
    # a fixed space is its schedule's; a free one has the space's stages (and split: space_instance)
    instance = spec.instance(first.stages, first.stage_weights, first.placement) if space.fixed and first is not None else space_instance(spec, space)
    ops = _op_count(instance.stages, instance.microbatches, space.split_backward)
    candidates = []

    def add(schedule: Schedule, given: bool = False, own: bool = False) -> None:
        sim = simulate(validate(schedule), instance.costs, instance.system)
        fits = instance.fits(peak_use(instance, sim))
        candidates.append(Candidate(schedule.name, schedule, sim, fits, given, own))

    def affordable(s_per_op: float) -> bool:  # a check only: a hint left out is recorded where it is
        return options.remaining_s() >= ops * (s_per_op + SCHEDULE_S_PER_OP)

    def fitting() -> bool:
        return any(c.fits for c in candidates)

    placement = placement_of(space, devices)
    # a free placement's greedy hints take the stage maps of its members (no handcrafted one may fit)
    greedy_maps = [placement] if placement is not None else _member_maps(space, devices)
    # with replicas, the greedy schedule sends every microbatch down one route: free directions only
    greedy_applies = not space.fixed and space.order == "free" and bool(greedy_maps) \
        and all(all(len(h) == 1 for h in stage_map) or (space.placement == "bidirectional" and space.directions == "free")
                for stage_map in greedy_maps)

    def another() -> bool:
        """Whether to try one more handcrafted schedule: while the time left covers it, or, while none
        fits, unless the time left covers the greedy one (it always fits) but not both."""
        if fitting() or not greedy_applies:
            return affordable(SCHEDULE_S_PER_OP) or not fitting()
        return affordable(SCHEDULE_S_PER_OP + GREEDY_S_PER_OP) or not affordable(GREEDY_S_PER_OP)

    optimal = False  # whether a fitting candidate meets the analytic bound (then no hint can beat it)

    def cheap() -> bool:
        """Whether a further hint costs at most :data:`TIE_HINT_SHARE` of the time left: then one that
        ties an optimal hint is built too, so that the tie goes to the one needing less memory
        (:attr:`Candidate.rank`; GPipe and 1F1B tie without messages)."""
        return ops * SCHEDULE_S_PER_OP <= TIE_HINT_SHARE * options.remaining_s()

    def add_hint(schedule: Schedule, given: bool = False, own: bool = False) -> None:
        nonlocal optimal
        add(schedule, given, own)
        _phase(options, began, f"hint {schedule.name}")
        optimal = not space.fixed and placement is not None and _meets_cheap_bound(instance, placement, space, candidates)

    # a fixed space is its schedule, whose overlapped pairs the solver cannot time (a relaxed space's
    # hints run such pairs as plain ops: with_backward)
    if space.fixed and first is not None and overlap_outside_model(first, instance):
        raise ConfigError(f"{first.name} " + OVERLAP_REFUSED.format(share=instance.system.overlap_f_b_share), field="overlap_f_b_share")
    for given in hints:  # timed as the solver's model times them (search refuses hints for a fixed space)
        check_in_space(given, space, devices, instance.microbatches, "hints")
        add_hint(with_backward(given, space.split_backward), given=True)
    if first is not None:
        add_hint(first)
    # a fixed space has one schedule; otherwise the next one is generated only when there is room,
    # since generating it can take seconds (so a space whose schedules are all tried may count a cut)
    room, exhausted = True, False
    while not space.fixed and not (optimal and not (options.every_hint or cheap())) and (room := another()):
        schedule = next(generated, None)
        if schedule is None:
            exhausted = True
            break
        add_hint(schedule)
    if not space.fixed and not room:
        options.cut("a handcrafted hint not built")
        options.note("time limit: no further handcrafted hints tried")
    elif optimal and not (space.fixed or exhausted or options.every_hint):
        best = min((c for c in candidates if c.fits), key=lambda c: c.rank)
        options.note(f"no further handcrafted hints built: {best.name} meets the analytic bound")
    if greedy_applies:
        if optimal:
            options.note("greedy hint skipped: a handcrafted one meets the analytic bound")
        elif not fitting() or affordable(GREEDY_S_PER_OP):
            for k, stage_map in enumerate(greedy_maps):
                if k and fitting() and not affordable(GREEDY_S_PER_OP):  # each further map only while its time is left
                    options.note("time limit: a further greedy hint skipped")
                    break
                greedy = best_greedy_schedule(instance, stage_map, space.split_backward, lambda: affordable(GREEDY_S_PER_OP)
                                              and ops * GREEDY_S_PER_OP <= GREEDY_VARIANT_SHARE * options.remaining_s())
                if greedy is not None:
                    add(greedy, own=True)
                    _phase(options, began, f"hint {greedy.name}")
        else:
            options.cut("the greedy hint not built")
            options.note("time limit: greedy hint skipped")
    if greedy_applies and not optimal:  # the handcrafted hints over the memory limit, fitted to it
        # after the greedy one, which wins a tie (the hint the solver's figures were measured with)
        for over in [c for c in candidates if not c.fits and not c.own]:
            if fitting() and not affordable(FITTED_S_PER_OP):
                options.cut("a fitted hint not built")
                options.note(f"time limit: {over.name} not fitted to the memory limit")
                break
            fitted = fitted_schedule(over.schedule, instance)
            if fitted is not None:
                add_hint(fitted, own=True)
            if optimal:
                break
    candidates.sort(key=lambda c: c.rank)
    return instance, candidates


def _member_maps(space: Space, devices: int) -> list:
    """The stage maps of a free placement's usual members, for its greedy hints: with c stages per
    device the looped map (stage s on device s mod p) and, at c = 2, the V; none for a family space
    (searched map by map)."""
    if space.placement != "any":
        return []
    maps = [named_placement("looped", devices, chunks=space.chunks)]  # (``placement`` names the local maps elsewhere here)
    if space.chunks == 2 and devices > 1:
        maps.append(named_placement("v", devices))
    return maps


def _even(space: Space) -> bool:
    """Whether the space's replicas split the microbatches evenly (all but free directions)."""
    return not (space.placement == "bidirectional" and space.directions == "free")


def cheap_bound(instance: Instance, placement, space: Space) -> float:
    """The analytic bound of ``space`` on ``instance`` without the graph bounds: milliseconds even at
    524,288 ops, so a caller can ask it before building any hint."""
    return analytic_bounds(instance, placement, space.split_backward, _even(space), graph_bounds=False).best


def space_instance(spec: InstanceSpec, space: Space) -> Instance:
    """The instance a search of the (not fixed) ``space`` works on: its stage count, with the layer
    split of an asymmetric placement (the weights its handcrafted member, chimera-asym, carries)."""
    return spec.instance(stage_count(space, spec.devices), split_weights(spec.devices, space.split) if space.split else None,
                         placement_of(space, spec.devices))


def _meets_cheap_bound(instance: Instance, placement, space: Space, candidates: list[Candidate]) -> bool:
    """Whether a fitting candidate's step already meets the analytic bounds without the graph bounds
    (:func:`cheap_bound`): then it is optimal, and no further hint can beat it (at 64 x 4,096
    in the split space, where ZB-H1 meets the load bound, the greedy hint took about 15 of a 30 s
    search and the other handcrafted ones 11 s of what was left)."""
    steps = [c.simulation.step_time_s for c in candidates if c.fits]
    return bool(steps) and min(steps) <= cheap_bound(instance, placement, space) * (1 + 1e-9)


def within_rounding(gap: float | None, rounding: float) -> bool:
    """Whether a step ``gap`` above its bound (relative) is no more than what rounding the durations to
    ticks can cost, ``rounding`` (README, Conventions, Solver ticks): then a schedule the solver proved
    optimal in ticks stays optimal."""
    return gap is not None and gap <= rounding + 1e-9


def never_above(bound: float, step: float | None) -> float:
    """``bound``, or ``step`` where the bound lies above it by the last bits of two float sums (ticks
    scaled back, seconds summed): a bound that a schedule meets is reported as its step."""
    return step if step is not None and step < bound <= step * (1 + 1e-9) else bound


def with_known_step(result: SearchResult, step: float | None) -> tuple[float | None, float, str]:
    """The best step of ``result``'s space, its bound and status, once ``step`` (a schedule of that
    space known to fit, e.g. the handcrafted one; None: none) is counted: the shorter of it and the
    search's, the bound never above it (:func:`never_above`), and ``optimal`` where the best meets the
    bound, else the search's status. A search short of time may find nothing, or only a slower
    schedule; the known one is still a point of the space (``gap`` and ``plan`` report it so)."""
    steps = [s for s in (result.step_time, step) if s is not None]
    best = min(steps) if steps else None
    bound = never_above(result.bound, best)
    return best, bound, "optimal" if best is not None and best <= bound * (1 + 1e-9) else result.status


def relative_gap(step: float | None, bound: float) -> float | None:
    """The optimality gap (step - bound) / bound, or None without a step or a finite positive bound."""
    if step is None or not (bound > 0 and math.isfinite(bound)):
        return None
    return max(0.0, (step - bound) / bound)


def memory_use(sim: Simulation, instance: Instance) -> tuple[float, ...]:
    """Per device, the simulated peak in the instance's memory unit (activations, or bytes with
    persistent state)."""
    if instance.memory_unit == "bytes":
        return sim.peak_memory_bytes
    return sim.peak_activation_bytes


def peak_use(instance: Instance, sim: Simulation) -> float:
    """The worst device's simulated peak, in the instance's memory unit (:func:`memory_use`)."""
    return max(memory_use(sim, instance))


def _to_schedule(built: Built, solver: cp_model.CpSolver, template: Schedule | None, instance: Instance, space: Space) -> Schedule:
    """The solver's answer as a schedule: placement from the space (or the solver), order by start."""
    p, m = instance.devices, instance.microbatches
    placement: tuple[tuple[int, ...], ...]
    if built.placement is None:
        placement = tuple((next(d for d in range(p) if solver.value(built.on[s, d])),) for s in range(instance.stages))
    else:
        placement = built.placement
    replica_of = tuple(int(solver.value(built.direction[i])) for i in range(m)) if built.direction else ()
    starts = {op: solver.value(built.start[op]) for op in built.ops}
    return _ordered(starts, built.duration, placement, replica_of, template, instance, space)


def _ordered(starts: dict[Op, int], duration: dict[Op, int], placement, replica_of: tuple[int, ...], template: Schedule | None, instance: Instance,
             space: Space) -> Schedule:
    """The schedule that runs each device's ops in the order of their start times."""
    p, m = instance.devices, instance.microbatches
    device_of = lambda op: placement[op.stage][replica_of[op.microbatch] if len(placement[op.stage]) > 1 else 0]  # noqa: E731
    stages = instance.stages

    def chain(op: Op) -> int:
        """The op's place in its microbatch's dependency chain (F up the stages, then B or I down, W
        after I): ops shorter than a tick last 0 ticks, and several can start at one tick, so
        their order on a device must follow their dependencies, not their names."""
        if op.kind is Kind.F:
            return op.stage
        down = stages + (stages - 1 - op.stage)
        return down + stages if op.kind is Kind.W else down

    orders: list[list[tuple[int, int, int, Op]]] = [[] for _ in range(p)]
    for op, start in starts.items():
        orders[device_of(op)].append((start, start + duration[op], chain(op), op))
    name = "search" if template is None or not space.fixed else template.name
    weights = template.stage_weights if template is not None else None
    return Schedule(
        name, p, m, placement, tuple(tuple(op for *_, op in sorted(order)) for order in orders), replica_of, weights,
        {"space": space.describe()},
    )


def _serial_horizon(instance: Instance, tick: float, split: bool) -> int:
    """A horizon any space admits: microbatches one after another, every op and message in turn."""
    kinds = (Kind.F, Kind.I, Kind.W) if split else (Kind.F, Kind.B)
    duration = _durations_s(instance)
    per_mb = sum(to_ticks(duration(s, k), tick) + 1 for s in range(instance.stages) for k in kinds)
    hops = 2 * instance.stages * max(to_ticks(instance.comm(s, 0, 1), tick) + 1 for s in range(instance.stages)) if instance.devices > 1 else 0
    return instance.microbatches * (per_mb + hops) + 1



@dataclass
class _Setup:
    """What one search fixes before solving: instance, candidates, ticks, bounds, hint and horizon."""

    space: Space
    instance: Instance
    candidates: list[Candidate]
    template: Schedule | None  # the best candidate (the fixed schedule of fixed:NAME)
    placement: tuple[tuple[int, ...], ...] | None
    split: bool
    tick: float
    analytic: Bounds
    lower: int  # analytic bound, ticks
    hint: Candidate | None
    hint_starts: dict[Op, int] | None
    hint_end: int | None
    horizon: int
    rounding: float = 0.0  # what rounding to ticks can cost, relative (ppopt.solve.ticks.rounding_cost)
    ticked: tuple | None = None  # the duration and delay functions in ticks
    pattern: Pattern | None = None  # the steady-state search's best pattern (ticks)
    period_bound: float | None = None  # the period-based bound (instance unit), where it applies
    began: float = 0.0  # time.monotonic() when the search began: progress lines and time to best count from it

    @property
    def ops(self) -> int:
        """Ops of every schedule of the space (:func:`_op_count`)."""
        return _op_count(self.instance.stages, self.instance.microbatches, self.split)

    def shown(self, ticks: float) -> str:
        """``ticks`` in the instance's unit, for a progress line (``695 slots``, ``352.8 s``)."""
        return f"{ticks * self.tick:.6g} {self.instance.time_unit}"


@dataclass
class _Solved:
    """The outcome of the makespan solve (or of skipping it)."""

    status: str
    solver_bound: float
    solver_objective: float | None = None
    schedule: Schedule | None = None
    simulation: Simulation | None = None
    objective_ticks: int | None = None
    starts: dict[Op, int] | None = None
    time_to_best_s: float | None = None
    note: str | None = None
    peak_memory: float | None = None  # from the memory solve: the worst device's least peak (memory unit)
    memory_status: str | None = None  # that solve's status


def _check_size(spec: InstanceSpec, space: Space, method: str = "auto", minimize_memory: bool = False) -> None:
    """Raise ScheduleError, before any placement is built, when the largest schedule of ``space``
    (:func:`ppopt.solve.space.largest_stage_count`) is over :func:`max_search_ops` (the error names
    the space key that sets its size, field ``space``, else the microbatches), or when ``--method
    cp`` or ``minimize_memory`` asks for a CP-SAT solve of the whole space over :data:`CP_MAX_OPS`
    ops (CP-SAT would run past the time limit on it)."""
    stages = largest_stage_count(space, spec.devices)
    ops = _op_count(stages, spec.microbatches, space.split_backward)
    if ops > max_search_ops():
        key = size_key(space)
        raise ScheduleError(f"search too large: {space.describe()} on {spec.devices} devices has {stages:,} stages; with "
                            f"{spec.microbatches} microbatches that makes {ops:,} ops (stages x microbatches x kinds), "
                            f"and a search takes at most {max_search_ops():,}", field="space" if key else "microbatches")
    too_many = f"{ops:,} ops is more than one CP-SAT solve of the whole space takes within a time limit ({CP_MAX_OPS:,})"
    if ops > CP_MAX_OPS and method == "cp" and not space.fixed:
        raise ScheduleError(f"cp: {too_many}; use auto or lns", field="method")
    if ops > CP_MAX_OPS and minimize_memory:
        raise ScheduleError(too_many, field="minimize_memory")


def _check(spec: InstanceSpec, space: Space) -> None:
    if space.placement == "bidirectional" and space.directions == "even" and spec.microbatches % 2 and not space.fixed:
        raise ScheduleError(
            f"placement=bidirectional with directions=even needs an even number of microbatches, got {spec.microbatches}",
            field="microbatches",
        )


def _require_memory(instance: Instance, space: Space, placement, fixed: Simulation | None = None,
                    parallel: Parallelism | None = None) -> None:
    """Raise InfeasibleError when the memory limit is below what any schedule of the space needs
    (:func:`minimum_memory`; ``fixed``: the simulation of a fixed space's schedule), naming the
    job settings that would need less, those of ``parallel`` already at their least left out."""
    limit = instance.memory_limit
    if limit is None:
        return
    need, why = minimum_memory(instance, space, placement, fixed)
    if limit < need * (1 - 1e-12):
        unit = instance.memory_unit
        job = parallel or Parallelism()
        levers = ["more tensor parallelism"]  # and those of the job's settings not at their least
        if job.recompute != "full":
            levers.append("recomputation" if job.recompute == "none" else "full recomputation")
        if instance.costs.microbatch_size > 1:
            levers.append("a smaller micro batch")
        if not job.distributed_optimizer:
            levers.append("a distributed optimizer over data-parallel replicas")
        listed = levers[0] if len(levers) == 1 else f"{', '.join(levers[:-1])}{',' if len(levers) > 2 else ''} or {levers[-1]}"
        hint = f"; {listed} need{'s' if len(levers) == 1 else ''} less per device" if unit == "bytes" else ""
        raise InfeasibleError(f"memory limit {format_amount(limit, unit)} is below the minimum "
                              f"{format_amount(need, unit, least=True)} any schedule of {space.describe()} needs ({why})"
                              f"{hint}", minimum=need)


def analytic_bounds(instance: Instance, placement, split: bool, even: bool = True, ticked=None,
                    graph_bounds: bool = True) -> Bounds:
    """The analytic bounds (:mod:`ppopt.solve.bounds`) of every schedule with this placement (None:
    any) and kind of backward on ``instance``, in its time unit, or in ticks with ``ticked`` (the
    duration and delay functions of :func:`_ticks`). ``even``: replicas split microbatches evenly.
    ``graph_bounds`` False: without the costly graph bounds (see :func:`ppopt.solve.bounds.lower_bounds`)."""
    shape = Shape(instance.stages, instance.microbatches, instance.devices, placement, split, even)
    duration, delay = ticked if ticked is not None else (_durations_s(instance), instance.comm)
    return lower_bounds(shape, duration, delay, _cap_of_stage(instance, placement, split), graph_bounds)


def _both_bounds(instance: Instance, placement, split: bool, even: bool, ticks: tuple, options: SolveOptions) -> tuple[Bounds, Bounds]:
    """The analytic bounds in the instance's time unit and in ticks (``ticks``: tick, duration and
    delay functions in ticks, rounding cost). Exact ticks (rounding cost 0) give both from one pass;
    the graph bounds are left out when the time left does not cover them
    (:data:`GRAPH_BOUNDS_S_PER_OP` per op and pass)."""
    tick, tick_duration, tick_delay, rounding = ticks
    exact = rounding == 0
    shape = Shape(instance.stages, instance.microbatches, instance.devices, placement, split, even)
    cost = (1 if exact else 2) * GRAPH_BOUNDS_S_PER_OP * _op_count(instance.stages, instance.microbatches, split)
    graph = not graph_applies(shape) or options.allows(cost, "the graph bounds skipped")
    if not graph:
        options.note(f"time limit: graph bounds (round trip, one machine, capped warm-up) skipped: they take up to "
                     f"{cost:.1f} s here")
    in_ticks = analytic_bounds(instance, placement, split, even, (tick_duration, tick_delay), graph)
    if exact:
        return Bounds(*(getattr(in_ticks, f.name) * tick for f in fields(Bounds))), in_ticks
    return analytic_bounds(instance, placement, split, even, graph_bounds=graph), in_ticks


def _prepare(spec: InstanceSpec, space: Space, options: SolveOptions, began: float | None = None,
             hints: Sequence[Schedule] = ()) -> _Setup:
    """Candidates (``hints`` among them: :func:`_candidates`), memory check, ticks, analytic bounds,
    hint and horizon of one search (``began``: when the search started, None: now; for the progress
    lines)."""
    began = time.monotonic() if began is None else began
    instance, candidates = _candidates(spec, space, options, began, hints)
    if space.fixed and not candidates:
        raise ScheduleError(f"space fixed:{space.fixed} has no schedule for p = {spec.devices}, m = {spec.microbatches}")
    template = candidates[0].schedule if candidates else None
    placement: tuple[tuple[int, ...], ...] | None
    if space.fixed:
        assert template is not None
        # a mixed schedule (B for some microbatches, I + W for others) is a point of the split space,
        # its B an I with its W right after, so that space's bounds hold for it
        placement, split = template.placement, template.split_backward
    else:
        placement, split = placement_of(space, spec.devices), space.split_backward
    _require_memory(instance, space, placement, candidates[0].simulation if space.fixed else None, spec.parallel)
    ticks = _ticks(instance)
    tick, tick_duration, tick_delay, rounding = ticks
    analytic, analytic_ticks = _both_bounds(instance, placement, split, _even(space), ticks, options)
    _phase(options, began, f"analytic bounds: {analytic.best:.6g} {instance.time_unit}")
    hint = candidates[0] if candidates else None
    hint_starts, hint_end = _ticked(hint.schedule, tick_duration, tick_delay) if hint else (None, None)
    horizon = _serial_horizon(instance, tick, split)
    if hint is not None and hint_end is not None:
        # a fitting hint is a feasible point, so no optimum lies beyond it
        horizon = hint_end if hint.fits else max(horizon, hint_end)
    lower = math.ceil(analytic_ticks.best - 1e-9)
    return _Setup(space, instance, candidates, template, placement, split, tick, analytic, lower, hint, hint_starts,
                  hint_end, horizon, rounding, (tick_duration, tick_delay), began=began)


BUILD_S_PER_OP = 2.5e-4
"""Wall time building the CP-SAT model takes per op, roughly (seconds, 2 loaded cores: 7 s at 32,768 ops)."""
BUILD_S_PER_PLACEMENT = 2.5e-5
"""Wall time per op and device of a free placement's model (an optional interval for each), roughly
(seconds; 3.5 s for 8,192 ops on 32 devices, 262,144 intervals, on an idle core: doubled for load)."""


LNS_BUILDS = 3
"""A model-based large-neighbourhood search starts only with this many times the whole model's build
time left (its model, a step on a copy of it, reading the best back)."""


def _build_s(setup: _Setup) -> float:
    """Seconds building the CP-SAT model of the whole space takes, roughly: per op, and under a free
    placement per op and device (p = 256, m = 8 ran 105 s past a 5 s limit before this counted)."""
    free = setup.placement is None
    return BUILD_S_PER_OP * setup.ops + (BUILD_S_PER_PLACEMENT * setup.ops * setup.instance.devices if free else 0.0)


def _time_to_build(setup: _Setup, options: SolveOptions) -> bool:
    """Whether the budget left covers building the CP-SAT model of the whole space."""
    return options.allows(_build_s(setup), "a CP-SAT model not built")


def _op_count(stages: int, microbatches: int, split: bool) -> int:
    """Ops of every schedule of a space: stages x microbatches x kinds (F, B; or F, I, W when split)."""
    return stages * microbatches * (3 if split else 2)


def _linear(setup: _Setup) -> bool:
    """Stage s alone on device s, for every device."""
    return setup.placement == tuple((s,) for s in range(setup.instance.devices))


def _periodic_applies(setup: _Setup) -> bool:
    """The steady-state search covers the linear placement with full backward."""
    return not setup.space.fixed and setup.space.order == "free" and not setup.split and _linear(setup)


def _with_periodic(setup: _Setup, options: SolveOptions) -> _Setup:
    """The setup with the steady-state search's schedule among the candidates (and as the hint when
    it is the best), its pattern, and the period bound (:mod:`ppopt.solve.periodic`). The search
    gets at most an eighth of the time left. When the hint already meets the analytic bound, only
    the pattern is found (for the report): composing, simulating and timing its schedule took 5.5 s
    of a 14 s search at 64 x 4,096 whose GPipe hint was optimal."""
    ticked = setup.ticked
    if not _periodic_applies(setup) or ticked is None:
        return setup
    assert setup.placement is not None
    instance = setup.instance
    caps = [_cap_of_stage(instance, setup.placement)(s) for s in range(instance.stages)]
    bound = period_bound(instance.microbatches, _durations_s(instance), instance.comm, caps)
    setup = replace(setup, period_bound=bound if bound > 0 else None)  # 0: no device has a cap, no bound
    # composing, simulating and timing its schedule
    if not options.allows(2 * SCHEDULE_S_PER_OP * setup.ops, "the steady-state search skipped"):
        options.note("time limit: steady-state search skipped")
        return setup
    tick_duration, tick_delay = ticked
    tick_caps = [None if c is None else math.floor(c + 1e-9) for c in caps]
    pattern = periodic_pattern(instance.devices, instance.microbatches, tick_duration, tick_delay, tick_caps, options.share(8))
    if pattern is None:
        return setup
    options.note(f"steady state: {_every(setup, pattern)}"
                 + (" (the rate bound: optimal)" if pattern.optimal else ""))
    if _hint_meets_bound(setup):  # no schedule beats the hint: the pattern is reported, its schedule not built
        return replace(setup, pattern=pattern)
    schedule = composed(pattern, instance.devices, instance.microbatches, tick_duration, tick_delay)
    sim = simulate(validate(schedule), instance.costs, instance.system)
    fits = instance.fits(peak_use(instance, sim))
    candidate = Candidate(schedule.name, schedule, sim, fits, own=True)
    setup = replace(setup, pattern=pattern, candidates=sorted([*setup.candidates, candidate], key=lambda c: c.rank))
    hint = setup.hint
    if fits and (hint is None or not hint.fits or sim.step_time_s < hint.simulation.step_time_s - 1e-12):
        starts, end = _ticked(schedule, tick_duration, tick_delay)
        setup = replace(setup, hint=candidate, hint_starts=starts, hint_end=end, horizon=end)
    return setup


RELAXATION_SHARE = (6, 3)
"""The reduced-problem bound (:mod:`ppopt.solve.relaxation`) gets at most 1/6 of the time left, or 1/3
above :data:`AUTO_LNS_OPS` ops: there the steady state is usually rate-optimal already and the window
search rarely improves it, so the bound is where the gap is."""
MEETING_PAIRS = 2
"""Up to :data:`AUTO_CP_OPS` ops the reduced problem keeps the two end devices only, with the meetings
of microbatches one and two apart on the devices between (:func:`ppopt.solve.relaxation.reduced_model`):
the full solve's own bound covers the rest, but not the waits those meetings force. Measured on the
llama3-70b acceptance instance (p = 8, m = 64), pairs three apart raise the bound no further in the
same time."""


BLOCK_SHARE = 6
"""Up to :data:`AUTO_CP_OPS` ops, where blocks tile the step (:func:`_block_size`), their bound replaces
the reduced problem of all m microbatches, in the same 1/6 of the time left (a proof returns the rest
to the search); above, it comes first in half of the reduced problems' share. It is solved by CP-SAT's
default search, which proves it (:func:`ppopt.solve.relaxation.relaxation_bound`). Measured on the
llama3-70b acceptance instance (K = 3, m = 64): the block of 31 microbatches is proven optimal in
5.2 s on an idle core, 9 s beside another solve (88.78 s; two of them 177.55 s, where the reduced
problem of all 64 microbatches reached 175.91 s in its 10 s of a 60 s command). With 20 s the block
gets 3.3 s, unproven (87.84 s, so 175.68 s for the step), and the search keeps the time its
unhinted dive needs (a larger share found 179.81 s there instead of 178.88 s)."""
BLOCK_ROUNDS = 10
"""A block holds at most this many rounds of device 0's cap, plus one microbatch: 31 microbatches at
K = 3, which CP-SAT's default search proves in about 5 s on llama3-70b (the reduced problem of all
64 stays at its chain's bound for 40 s)."""


def _block_size(microbatches: int, cap: int | None) -> int | None:
    """The block size n of the block bound (:func:`ppopt.solve.relaxation.chain_with_blocks`): the
    largest n with n = 1 modulo device 0's cap K (so each block ends on a whole round of the chain),
    at most :data:`BLOCK_ROUNDS` rounds, such that two blocks fit in the step (n + K - 1 + n <= m);
    None without a cap or when a block would hold fewer than :data:`TAIL_ROUNDS` rounds (then the
    waits a block proves are too few to pay for its solve)."""
    if cap is None:
        return None
    n = min((microbatches - cap + 1) // 2, BLOCK_ROUNDS * cap + 1)
    n -= (n - 1) % cap
    return n if n >= TAIL_ROUNDS * cap else None


BLOCK_CUTS_RESERVE_S = 1.0
"""Seconds the block cuts' bound leaves at the end of the budget (at least; or :data:`READBACK_SHARE`
of what is left): it is the command's last CP-SAT work, and a core-based solve can overrun its
limit by a fraction of a second."""
BLOCK_CUTS_MIN_S = 15.0
"""Least time (s) left after ``cp+lns``'s CP-SAT solve for the block cuts to take it from the
large-neighbourhood search (:func:`_with_block_cuts`). Measured at 16 x 64 (cap 16, one-slot
messages, one worker): the four blocks' solves take about 12 s on an idle core; with a 10 s command
they get about 2 s, prove none (the block of 32 microbatches reaches 190 of its 205 slots) and the
bound stays below the reduced problems' own."""


def _last_work(options: SolveOptions) -> SolveOptions:
    """``options`` for the command's last CP-SAT work (the block cuts, the time-indexed refutation):
    ending :data:`BLOCK_CUTS_RESERVE_S` (or :data:`READBACK_SHARE` of what is left) early."""
    return options.reserve(max(BLOCK_CUTS_RESERVE_S, READBACK_SHARE * options.remaining_s()))


def _block_cut_chain(setup: _Setup, options: SolveOptions) -> Chain | None:
    """The chain whose block cuts (:func:`_with_block_cuts`) take the time left after ``cp+lns``'s
    solve, or None: where they apply (:func:`_cuts_apply`), the hint does not meet the bound and at
    least :data:`BLOCK_CUTS_MIN_S` remain (when fewer do, the clock decided: a cut of ``options``)."""
    chain = _relaxation_chain(setup)
    if chain is None or not _cuts_apply(setup.ops, chain.devices, setup.instance.microbatches, chain.caps[0]) \
            or _hint_meets_bound(setup) or not options.allows(BLOCK_CUTS_MIN_S, "the block cuts skipped"):
        return None
    return chain


def _cuts_apply(ops: int, devices: int, microbatches: int, cap: int | None) -> bool:
    """Block cuts (:func:`ppopt.solve.relaxation.block_cuts`) apply to a chain of at least 3 devices
    (linear placement, full backward, :func:`_relaxation_chain`) between
    :data:`ppopt.solve.options.AUTO_CP_OPS` and :data:`ppopt.solve.options.AUTO_LNS_OPS` ops, where
    ``auto`` runs ``cp+lns``, under a cap K on device 0 with more than two rounds of it (m > 2K).
    There one core-based solve of the whole chain with them gets further than the reduced problems:
    measured with one worker and a 60 s command (unit costs, one-slot messages, cap p), 365 slots at
    16 x 64 where the reduced problems reach 362, and 485 at 8 x 96 (a 20 s command) where they reach
    482. Above AUTO_LNS_OPS the whole chain is too large for a share of a minute, and at p = 32 the
    blocks of 33 to 40 microbatches are not proven within 20 s each."""
    return cap is not None and AUTO_CP_OPS < ops <= AUTO_LNS_OPS and microbatches > 2 * cap and devices >= 3


def _relaxation_chain(setup: _Setup) -> Chain | None:
    """The chain the reduced problems see (:class:`ppopt.solve.relaxation.Chain`, ticks): only for the
    linear placement (stage s alone on device s) with full backward and ticked costs, else None."""
    placement, ticked, instance = setup.placement, setup.ticked, setup.instance
    if not _linear(setup) or setup.split or ticked is None:
        return None
    assert placement is not None
    cap = _cap_of_stage(instance, placement)
    caps = [None if (c := cap(s)) is None else max(1, math.floor(c + 1e-9)) for s in range(instance.devices)]
    return Chain(instance.devices, ticked[0], ticked[1], caps)


def _hint_meets_bound(setup: _Setup) -> bool:
    """Whether the hint fits and already meets the lower bound (ticks): no bound can do better."""
    return setup.hint_end is not None and setup.hint is not None and setup.hint.fits and setup.hint_end <= setup.lower


def _with_block_cuts(setup: _Setup, chain: Chain, options: SolveOptions) -> _Setup:
    """The setup with the bound of one core-based CP-SAT solve of the whole chain with block cuts
    (:func:`ppopt.solve.relaxation.block_cuts`, in half of ``options``), when it beats the bound so
    far. ``search`` runs it after ``cp+lns``'s solve, in the large-neighbourhood search's time
    (:func:`_block_cut_chain`): at 16 x 64 the solve's last improvement comes 11 to 21 s into its
    25 s and the large-neighbourhood search found nothing in any of four 60 s runs."""
    assert chain.caps[0] is not None
    cuts = block_cuts(chain, cut_sizes(chain.caps[0]), options.share(2))
    if cuts:
        options.note("block cuts: " + ", ".join(f"{n} microbatches {setup.shown(t)}" for n, t in cuts.items()))
    ticks = relaxation_bound(setup.instance.microbatches, chain.devices, chain.duration, chain.delay, chain.caps, options,
                             setup.lower, sets=[tuple(range(chain.devices))], blocks=cuts)
    options.note(f"bound with the block cuts: {setup.shown(ticks)}")
    if ticks <= setup.lower:
        return setup
    return replace(setup, lower=ticks, analytic=replace(setup.analytic, relaxation=ticks * setup.tick))


TIME_INDEXED_MIN_S = 15.0
"""Least time (s) left after ``cp+lns``'s CP-SAT solve for the time-indexed refutation
(:mod:`ppopt.solve.timeindexed`) to come before the block cuts: at 16 x 64 (cap 16, one-slot
messages, one worker) it refutes 367 slots in about 3 s and 369 in 8 s, where the block cuts
reach 365 in about 20 s. A 60 s search there has about 25 s left after its solve. A rung cut short
proves nothing; when no rung is refuted, the block cuts get what is left, if
:data:`BLOCK_CUTS_MIN_S` are."""
GAP_RUNGS = (0.01, 0.005, 0.0)
"""The gaps whose bounds the time-indexed refutation proves in turn: for a best step S (ticks), the
horizon ceil(S / (1 + g)) - 1 refuted proves a gap of at most g (the last, S - 1, proves S optimal)."""


def _rungs(best: int, lower: int) -> list[int]:
    """The horizons to refute, ascending: those of :data:`GAP_RUNGS` for a best step of ``best``
    ticks, and on the way to them ``lower`` + 1, + 3, + 7, + 15, ... (the bound plus steps that
    double), all at or above ``lower`` (refuting less proves nothing new) and under ``best``.
    ``lower`` itself, the cheapest rise, is left out: at 16 x 64 the minute leaves the refutation
    about 25 s, and 2 s more before 367 would often cost the 1 % rung.

    A refutation costs more the nearer its horizon lies to the optimum, steeply: at 16 x 128 (cap 16,
    one-slot messages, one worker), where the search's bound is 672 and its best 695 slots, 673, 675
    and 679 are refuted in 3.1, 5.2 and 12.3 s, and the 1 % rung, 688, is not in 19 s. Doubling the
    steps from the bound spends on the rungs below the first that fails about what the last that
    succeeds costs, and a gap rung out of reach no longer takes the time with nothing proven."""
    gaps = {horizon for g in GAP_RUNGS if (horizon := math.ceil(best / (1 + g) - 1e-9) - 1) >= lower}
    doubling = set(itertools.takewhile(lambda horizon: horizon < best, (lower + 2 ** k - 1 for k in itertools.count(1))))
    return sorted(gaps | doubling)


def _time_indexed_graph(setup: _Setup, chain: Chain, best: _Solved, options: SolveOptions) -> Graph | None:
    """The chain's graph for the time-indexed refutation, when it applies: a best schedule in ticks
    above the bound and at least :data:`TIME_INDEXED_MIN_S` left (each rung's model must also be
    small enough: :func:`ppopt.solve.timeindexed.time_indexed_bound`)."""
    if best.objective_ticks is None or best.objective_ticks <= setup.lower or options.remaining_s() < TIME_INDEXED_MIN_S:
        return None
    return chain_graph(chain, setup.instance.microbatches)


def _with_time_indexed(setup: _Setup, graph: Graph, best: _Solved, from_solver: bool,
                       options: SolveOptions) -> tuple[_Setup, _Solved, bool]:
    """The setup with the bound the time-indexed refutation proves (:func:`_rungs`), and the best
    schedule with the one a feasible rung finds, when shorter."""
    assert best.objective_ticks is not None and setup.placement is not None
    lower = max(setup.lower, math.ceil(best.solver_bound / setup.tick - 1e-9))
    setup, found = _refutation_bound(setup, graph, _rungs(best.objective_ticks, lower), options)
    if found is not None:
        best, from_solver = _refuted_schedule(setup, found, best, from_solver)
    return setup, best, from_solver


def _refutation_bound(setup: _Setup, graph: Graph, rungs: list[int], options: SolveOptions) -> tuple[_Setup, Refutation | None]:
    """The setup with the bound the time-indexed refutation of ``rungs`` proves (when higher), and
    the first rung's feasible model, if one is (:func:`ppopt.solve.timeindexed.time_indexed_bound`)."""
    began = time.monotonic()

    def said(horizon: int, status: str) -> None:
        outcome = {"infeasible": "none", "feasible": "one found", "unknown": "not proven in the time left",
                   "too large": f"not asked: its model would hold {graph.literals(horizon):,} Booleans, over the limit",
                   "no time": "not asked: less time is left than the last one took"}[status]
        timed = "" if status in ("too large", "no time") else f" ({time.monotonic() - began:.1f} s)"  # nothing was solved
        options.note(f"time-indexed refutation: a schedule of {setup.shown(horizon)} or less? {outcome}{timed}")

    proven, found = time_indexed_bound(graph, rungs, options, said)
    if proven is not None and proven > setup.lower:
        setup = replace(setup, lower=proven, analytic=replace(setup.analytic, relaxation=proven * setup.tick))
    return setup, found


def _tail_bound_applies(setup: _Setup) -> bool:
    """Whether the chain's device 0 has a cap K and more than :data:`ppopt.solve.relaxation.TAIL_ROUNDS`
    rounds of it, so that the tail bound (:func:`ppopt.solve.relaxation.tail_bound`, over the last
    TAIL_ROUNDS · K microbatches) has a tail shorter than the whole run."""
    chain = _relaxation_chain(setup)
    cap = None if chain is None else chain.caps[0]
    return cap is not None and TAIL_ROUNDS * cap < setup.instance.microbatches


def _with_refutation(setup: _Setup, graph: Graph, options: SolveOptions) -> _Setup:
    """Where the time-indexed search runs (:func:`_time_indexed_start`): the bound of the
    time-indexed refutation from the hint's end (:func:`_rungs`), in the share the reduced problems
    get (:data:`RELAXATION_SHARE`): instead of them, or, where the tail bound applies
    (:func:`_tail_bound_applies`), after them, from their bound up (``search`` decides). The tail
    bound's small problems hold their level on a loaded machine (at 16 x 1024 the tail bound proved
    5,044 where the refutation alone proved 5,041, one acceptance run each), and the refutation's
    rungs a few ticks above it are cheap: at 8 x 512 it proves 2,462 and 2,464 slots out in 10 s
    after the tail bound's 2,461, so the 2,465-slot hint is optimal. Measured with one worker, cap 32, one-slot messages:
    ``benchmarks/refute_bench.py`` refutes 1,364 slots at 32 x 256 in 7.0 s (162,304 Booleans; the
    interval model's bound in the same time, its baseline: nothing); in the acceptance runs (README,
    "Benchmarks") the bound at 32 x 256 rose from the reduced problems' 1,364 to 1,365, and at
    32 x 128 from 731 to 733, in the same share (and to 734 once the ladder went on past a rung over
    the size limit)."""
    if setup.hint_end is None or _hint_meets_bound(setup) or options.expired:
        return setup
    setup, _ = _refutation_bound(setup, graph, _rungs(setup.hint_end, setup.lower), options.share(RELAXATION_SHARE[True]))
    return setup


def _refuted_schedule(setup: _Setup, found: Refutation, best: _Solved, from_solver: bool) -> tuple[_Solved, bool]:
    """``best``, or the schedule of a feasible time-indexed model when its simulation is shorter."""
    assert found.starts is not None
    return _indexed_schedule(setup, found.starts, best, from_solver, time.monotonic() - setup.began)


def _indexed_schedule(setup: _Setup, found: dict[tuple[Kind, int, int], int], best: _Solved, from_solver: bool,
                      when: float | None) -> tuple[_Solved, bool]:
    """``best``, or the schedule of the time-indexed model's starts ``found`` (ticks, by (kind,
    microbatch, stage)) when its simulation is shorter; found ``when`` seconds into the search."""
    assert setup.placement is not None and best.simulation is not None and setup.ticked is not None
    duration = setup.ticked[0]
    starts = {Op(stage, kind, microbatch): t for (kind, microbatch, stage), t in found.items()}
    schedule = validate(_ordered(starts, {op: duration(op.stage, op.kind) for op in starts}, setup.placement, (),
                                 setup.template, setup.instance, setup.space))
    simulation = simulate(schedule, setup.instance.costs, setup.instance.system)
    if simulation.step_time_s >= best.simulation.step_time_s - 1e-12:
        return best, from_solver
    ticks = max(t + duration(op.stage, op.kind) for op, t in starts.items())
    return replace(best, schedule=schedule, simulation=simulation, solver_objective=ticks * setup.tick, objective_ticks=ticks,
                   starts=starts, time_to_best_s=when), True


@dataclass(frozen=True)
class _IndexedStart:
    """Where the time-indexed search (:func:`ppopt.solve.timeindexed.shorten`) starts: the chain's
    graph, a schedule's name and its starts (ticks, by (kind, microbatch, stage)), the first radius."""

    graph: Graph
    name: str
    starts: dict[tuple[Kind, int, int], int]
    radius: int


def _time_indexed_start(setup: _Setup) -> _IndexedStart | None:
    """The start of the time-indexed search, where it applies: the linear placement with full
    backward (:func:`_relaxation_chain`), a fitting candidate whose ticks meet the graph's lags
    (the shortest handcrafted one, else the shortest fitted one, the greedy hint last), and a first
    radius over the longest op's ticks (so that ops can pass each other: not with real durations,
    whose ticks are a thousandth of the longest op). Else None, and ``auto`` keeps the window
    search (:func:`_windows_then_cp`).

    Handcrafted first, though ppopt's own hints are often shorter: measured at p = 32, m = 128
    (cap 32, one-slot messages, one worker, windows of 6 ticks, 38 s of search), from 1F1B (785
    slots) the search reaches 755 slots; from the greedy hint or the fitted GPipe (770) none of its
    steps finds a shorter schedule: their burst of forwards leaves windows of a few ticks nothing to
    gain (with windows of 12 ticks they reached 765 or 766 in a minute)."""
    chain = _relaxation_chain(setup)
    # a step's windows hold about 2·radius Booleans per op (fewer at the head and tail: 3.17 per op at
    # radius 3 on 5 x 12): with even MIN_RADIUS per op over the limit no step fits (step_radius), and
    # building the graph would only spend the budget (30 s of a 5 s search at p = 4, m = 8,192)
    if chain is None or setup.ops * MIN_RADIUS > MAX_STEP_LITERALS:
        return None
    assert setup.ticked is not None
    graph = chain_graph(chain, setup.instance.microbatches)
    handcrafted_first = sorted((c for c in setup.candidates if c.fits), key=lambda c: (c.own, c.name == "greedy", c.rank))
    for candidate in handcrafted_first:
        ticks = _ticked(candidate.schedule, *setup.ticked)[0]
        starts = {(op.kind, op.microbatch, op.stage): t for op, t in ticks.items()}
        if lags_hold(graph, starts):
            radius = step_radius(graph, starts)
            return None if radius is None or radius <= max(graph.duration) else _IndexedStart(graph, candidate.name, starts, radius)
    return None


def _improve_time_indexed(setup: _Setup, start: _IndexedStart, best: _Solved, from_solver: bool,
                          options: SolveOptions) -> tuple[_Solved, bool]:
    """``auto`` above :data:`ppopt.solve.options.AUTO_LNS_OPS` ops on a chain: the time-indexed
    search from ``start`` for the time left (:func:`ppopt.solve.timeindexed.shorten`), whose best
    schedule replaces ``best`` when its simulation is shorter. Measured against the window search
    and the whole-model solve it replaces (60 s searches, one worker, the acceptance runs in README
    "Benchmarks"): 755 slots instead of 763 at 32 x 128, 1,402 instead of 1,415 at 32 x 256."""
    end = max(start.starts[op] + d for op, d in zip(start.graph.ops, start.graph.duration))
    options.note(f"time-indexed search from {start.name} ({setup.shown(end)}), windows of {start.radius} ticks either way")
    # its last step is core-based CP-SAT work, which can overrun its limit (BLOCK_CUTS_RESERVE_S), and
    # the schedule is then read back, validated and simulated
    reserve = BLOCK_CUTS_RESERVE_S + 3 * SCHEDULE_S_PER_OP * setup.ops
    improved = shorten(start.graph, start.starts, start.radius, options.reserve(reserve),
                       setup.lower, setup.shown, setup.began)
    options.note(f"time-indexed search: {counted(improved.steps, 'step')}, {counted(improved.improvements, 'improvement')}, "
                 f"makespan {setup.shown(improved.end)}")
    if improved.improvements == 0:
        return best, from_solver
    return _indexed_schedule(setup, improved.starts, best, from_solver, improved.time_to_best_s)


def _with_relaxation(setup: _Setup, options: SolveOptions) -> _Setup:
    """The setup with the reduced-problem bound (linear placement, full backward) in its analytic
    bounds and its lower bound in ticks, unless the hint already meets the bound. Up to
    :data:`AUTO_CP_OPS` ops, where one CP-SAT solve of the whole problem bounds at least as well as
    the reduced problems of more devices, only the two ends with their meetings are solved. Above,
    half of the share first goes to the tail bound (:func:`ppopt.solve.relaxation.tail_bound`), whose
    small reduced problems are proven optimal, so the bound holds its level on a loaded machine."""
    instance, ops = setup.instance, setup.ops
    small = ops <= AUTO_CP_OPS
    chain = _relaxation_chain(setup)
    if chain is None or (small and instance.devices < 3) or _hint_meets_bound(setup) or options.expired:
        return setup  # last: a spent budget counts as a cut only when the bound was wanted
    assert setup.ticked is not None
    ticked, caps, lower = setup.ticked, chain.caps, setup.lower
    ends = [(0, instance.devices - 1)]
    block = _block_size(instance.microbatches, caps[0])
    if small and block is not None:  # instead of the reduced problem of all m microbatches (BLOCK_SHARE)
        ticks = max(lower, block_bound(chain, instance.microbatches, block, options.share(BLOCK_SHARE),
                                       MEETING_PAIRS, ends, core=False))
        options.note(f"block bound: {setup.shown(ticks)}")
    else:
        budget = options.share(RELAXATION_SHARE[ops > AUTO_LNS_OPS])
        if block is not None:
            lower = max(lower, block_bound(chain, instance.microbatches, block, budget.share(2), MEETING_PAIRS, ends,
                                           core=False))
            options.note(f"block bound: {setup.shown(lower)}")
        if not small and _tail_bound_applies(setup):
            assert caps[0] is not None
            lower = max(lower, tail_bound(chain, instance.microbatches, TAIL_ROUNDS * caps[0], budget.share(2)))
            options.note(f"tail bound: {setup.shown(lower)}")
        ticks = relaxation_bound(instance.microbatches, instance.devices, ticked[0], ticked[1], caps, budget,
                                 lower, MEETING_PAIRS if small else 0, ends if small else None)
        options.note(f"reduced-problem bound: {setup.shown(ticks)}")
    if ticks <= setup.lower:
        return setup
    return replace(setup, lower=ticks, analytic=replace(setup.analytic, relaxation=ticks * setup.tick))


def _every(setup: _Setup, pattern: Pattern) -> str:
    """``4 microbatches every 18 slots``: a steady-state pattern's rate in the instance's unit."""
    return f"{counted(pattern.k, 'microbatch')} every {setup.shown(pattern.period)}"


def _describe(setup: _Setup) -> str | None:
    pattern = setup.pattern
    if pattern is None:
        return None
    return (f"{_every(setup, pattern)} "
            f"(rate bound {setup.shown(pattern.rate_bound)}{': optimal' if pattern.optimal else ''})")


def _lns_applies(setup: _Setup) -> bool:
    """The large-neighbourhood search needs a free order and one device per stage."""
    return lns_applies(setup.space, setup.placement)


def lns_applies(space: Space, placement) -> bool:
    """Whether ``--method lns`` can search ``space`` with its stage → devices map ``placement``
    (:func:`ppopt.solve.space.placement_of`): a free order and one device per stage."""
    return placement is not None and all(len(h) == 1 for h in placement) and not space.fixed and space.order == "free"


def _method(setup: _Setup, method: str) -> str:
    """``cp``, ``lns``, or what ``auto`` picks: ``cp``, ``cp+lns`` or ``lns+cp`` (see
    :data:`ppopt.solve.options.METHODS`)."""
    if method == "lns" and not _lns_applies(setup):
        raise ScheduleError(f"lns needs a free order and one device per stage, not {setup.space.describe()}", field="method")
    if method != "auto":
        return method
    ops = setup.ops
    if ops <= AUTO_CP_OPS or not _lns_applies(setup):
        return "cp"
    if ops <= AUTO_LNS_OPS:
        return "cp+lns"
    return "lns+cp" if ops <= CP_MAX_OPS else "lns"  # the window search, then the whole model


def _improve(setup: _Setup, best: _Solved, from_solver: bool, options: SolveOptions) -> tuple[_Solved, bool]:
    """The large-neighbourhood search (:mod:`ppopt.solve.lns`) from the best schedule so far."""
    start, previous = best.starts, best.simulation
    if start is None or best.objective_ticks is None or previous is None or options.expired:
        return best, from_solver
    end = best.objective_ticks
    assert setup.placement is not None and best.schedule is not None and setup.ticked is not None
    if len(start) > AUTO_LNS_OPS and _lns_applies(setup):  # windows of time alone: no full model
        return _improve_windows(setup, best, from_solver, options)
    if not options.allows(LNS_BUILDS * BUILD_S_PER_OP * len(start), "the large-neighbourhood search skipped"):
        options.note("large-neighbourhood search skipped: too little time left for a model of this size")
        return best, from_solver
    frame = Frame(setup.tick, end, min(setup.lower, end))
    built = build_model(setup.instance, setup.space, frame, best.schedule, best.starts, options.dominance)
    options.note(f"large-neighbourhood search from {setup.shown(end)}")
    placement = setup.placement
    improved = improve(built, start, lambda op: placement[op.stage][0], options, setup.shown, setup.began)
    options.note(_lns_summary(setup, improved.steps, improved.improvements, improved.makespan))
    if improved.proven:
        best = replace(best, status="optimal", solver_bound=improved.makespan * setup.tick)
    if improved.makespan >= end:
        return best, from_solver
    found = validate(_ordered(improved.starts, built.duration, placement, (), setup.template, setup.instance, setup.space))
    simulation = simulate(found, setup.instance.costs, setup.instance.system)
    if simulation.step_time_s >= previous.step_time_s - 1e-12:
        return best, from_solver
    status = "optimal" if improved.proven else "feasible"
    return replace(best, status=status, schedule=found, simulation=simulation, solver_objective=improved.makespan * setup.tick,
                   objective_ticks=improved.makespan, starts=improved.starts, time_to_best_s=improved.time_to_best_s,
                   note=None), True


LNS_TRIAL_SHARE = 3
"""Above :data:`ppopt.solve.options.AUTO_LNS_OPS` ops, ``auto`` gives the window search this share
(a third) of the time left; when it finds nothing shorter than the hint there, one CP-SAT solve of
the whole model gets the rest (:func:`_windows_then_cp`)."""


def _windows_then_cp(setup: _Setup, best: _Solved, from_solver: bool, options: SolveOptions,
                     minimize_memory: bool) -> tuple[_Solved, bool]:
    """``auto`` above :data:`ppopt.solve.options.AUTO_LNS_OPS` ops, where the time-indexed search
    does not apply (:func:`_time_indexed_start`): the window search for a third of
    the time left; if it shortens the hint it goes on to the end, otherwise one CP-SAT solve of the
    whole model, hinted with the hint, gets the rest (the windows do, when building that model would
    not fit in it).

    Windows gain where the hint's ends are poor (32 x 128: the greedy hint's 770 slots to 764). A
    schedule that beats a hint with an optimal steady state, as 1F1B's at 32 x 256, changes every
    round at once (one F and B swapped per round on each device), which no window of a few hundred
    ops can do alone and the whole model can: it finds 1,415 slots against 1F1B's 1,417 about 14 s
    into its solve on one worker (README, "Methods")."""
    tried, tried_from_solver = _improve(setup, best, from_solver, options.share(LNS_TRIAL_SHARE))
    if tried is not best:  # shorter (or proven): the windows go on
        return (tried, tried_from_solver) if tried.status == "optimal" else _improve(setup, tried, tried_from_solver, options)
    if options.expired:
        return best, from_solver
    if not _time_to_build(setup, options):  # the windows go on
        return _improve(setup, best, from_solver, options)
    options.note("the window search found nothing shorter: one CP-SAT solve of the whole model for the rest")
    return _pick(setup, _solve(setup, options, minimize_memory))


def _lns_summary(setup: _Setup, steps: int, improvements: int, makespan: float) -> str:
    """The progress line closing a neighbourhood search. Its makespan is in the solver's ticks, which
    round durations down: with real durations it can lie under the schedule's simulated step."""
    rounded = "" if setup.instance.time_unit == "slots" else " in the solver's ticks (durations rounded down)"
    return f"large-neighbourhood search: {steps} steps, {improvements} improvements, makespan {setup.shown(makespan)}{rounded}"


def _improve_windows(setup: _Setup, best: _Solved, from_solver: bool, options: SolveOptions) -> tuple[_Solved, bool]:
    """The window search of :mod:`ppopt.solve.lns`: no full model to build."""
    assert best.schedule is not None and best.simulation is not None and setup.ticked is not None and setup.placement is not None
    if not options.allows(3 * SCHEDULE_S_PER_OP * setup.ops, "the window search skipped"):  # set-up, a step, final check
        options.note("large-neighbourhood search skipped: too little time left for a schedule of this size")
        return best, from_solver
    tick_duration, tick_delay = setup.ticked
    rooms = device_rooms(setup.instance, setup.placement)
    device = [holders[0] for holders in setup.placement]
    timing = Timing(
        lambda op: tick_duration(op.stage, op.kind),
        lambda dep, op: tick_delay(dep.stage, device[dep.stage], device[op.stage]) if device[dep.stage] != device[op.stage] else 0,
        lambda op: device[op.stage],
        {s: k for room in rooms.values() for s, k in room.shares().items()},
        setup.instance.stages,
        setup.split,
        {d: room for d, room in rooms.items() if len(room.demand) > 1},
    )
    options.note(f"large-neighbourhood search (windows of time) from {best.simulation.step_time_s:.6g} {setup.instance.time_unit}")
    schedule, improved = improve_windows(best.schedule, timing, options, setup.shown, setup.began)
    options.note(_lns_summary(setup, improved.steps, improved.improvements, improved.makespan))
    if improved.improvements == 0:
        return best, from_solver
    found = validate(replace(schedule, name="search", options={"space": setup.space.describe()}))
    simulation = simulate(found, setup.instance.costs, setup.instance.system)
    fits = setup.instance.fits(peak_use(setup.instance, simulation))
    if not fits or simulation.step_time_s >= best.simulation.step_time_s - 1e-12:
        return best, from_solver
    return replace(best, status="feasible", schedule=found, simulation=simulation, solver_objective=improved.makespan * setup.tick,
                   objective_ticks=improved.makespan, starts=improved.starts, time_to_best_s=improved.time_to_best_s,
                   note=None), True


def _solve(setup: _Setup, options: SolveOptions, minimize_memory: bool, full: bool = True) -> _Solved:
    """The makespan solve, skipped when the hint meets the analytic bound or the budget is spent
    (or, with ``full`` False, left to the large-neighbourhood search)."""
    hint, space, unit = setup.hint, setup.space, setup.instance.time_unit
    if hint is not None and _hint_meets_bound(setup) and not space.fixed and not minimize_memory:
        options.note(f"hint {hint.name} meets the analytic bound {setup.analytic.best:.6g} {unit}: optimal without search")
        return _Solved("optimal", setup.lower * setup.tick)
    if not full:
        return _Solved("unknown", 0.0)
    reported = _what_is_reported(setup)
    spent = _Solved("unknown", 0.0, note="time limit reached before the solve" + reported)
    if options.expired:
        return spent
    if setup.ops > CP_MAX_OPS:
        options.note(f"no CP-SAT solve: {setup.ops:,} ops is more than one solve takes within a time limit ({CP_MAX_OPS:,})")
        return replace(spent, note=f"no CP-SAT solve above {CP_MAX_OPS:,} ops" + reported)
    if not _time_to_build(setup, options):
        build_s = _build_s(setup)  # "about 0 s" read as a contradiction for a small model
        building = (f"building the model of {setup.ops:,} ops takes about "
                    f"{f'{build_s:.0f}' if build_s >= 10 else f'{build_s:.2g}'} s, more than the time left")
        options.note(f"time limit: {building}")
        return replace(spent, note=building + reported)
    hint_schedule = hint.schedule if hint else None
    frame = Frame(setup.tick, setup.horizon, min(setup.lower, setup.horizon))
    built = build_model(setup.instance, space, frame, hint_schedule, setup.hint_starts, options.dominance)
    if options.expired:
        return spent
    p, m = setup.instance.devices, setup.instance.microbatches
    options.note(
        f"searching {space.describe()} on p = {p}, m = {m}: {len(built.ops)} ops, tick {setup.tick:.6g} {unit}, "
        f"hint {hint.name if hint else 'none'}" + (f" ({hint.simulation.step_time_s:.6g} {unit})" if hint else "")
        + ("; the incumbents and bounds below are in ticks (times rounded down), the result is simulated again"
           if setup.rounding > 0 else "")
    )
    began = setup.began  # the incumbents' times count from the search's start, as its result's do
    diving = hint is not None and not space.fixed and len(built.ops) <= UNHINTED_DIVE_OPS
    dive = _unhinted_dive(setup, built, options, began) if diving else None
    if dive is not None and dive.proven:
        return _read_back(setup, built, dive.solver, dive.callback.last_solution_s, "optimal")
    solver = options.solver(len(built.ops))
    callback = _Progress(setup.tick, unit, options.progress, began)
    code = options.run(solver, built.model, callback)
    status = STATUS.get(code, "unknown")
    if code == cp_model.INFEASIBLE:
        return _Solved(status, math.inf)
    dive_bound = 0.0 if dive is None else dive.solver.best_objective_bound
    bound = max(dive_bound, solver.best_objective_bound) * setup.tick
    main_found = code in (cp_model.OPTIMAL, cp_model.FEASIBLE)
    if dive is not None and dive.found and (not main_found or dive.shorter_by(solver, 1)):
        return replace(_read_back(setup, built, dive.solver, dive.callback.last_solution_s, "feasible"), solver_bound=bound)
    if not main_found:
        limit = "its deterministic time" if solver.deterministic_time >= solver.parameters.max_deterministic_time \
            else "the time limit"
        note = f"CP-SAT found no schedule within {limit}{_what_is_reported(setup)}" if code == cp_model.UNKNOWN else None
        return _Solved(status, dive_bound * setup.tick, note=note)
    last = callback.last_solution_s
    if dive is not None and dive.shorter_by(solver, 0):  # hinted with the dive's schedule, it found it again
        last = dive.callback.last_solution_s
    return replace(_read_back(setup, built, solver, last, status), solver_bound=bound)


def _what_is_reported(setup: _Setup) -> str:
    """What a search that ends without the solver's schedule reports, for its note: the best hint
    when one fits the memory limit; none when the only hints are over it (the note said "the best
    hint is reported" beside a step of "-")."""
    if setup.hint is None:
        return ""
    if setup.hint.fits:
        return ": the best hint is reported"
    return ": no schedule within the memory limit to report (the hints are over it)"


UNHINTED_DIVE_SHARE = 6
"""The unhinted dive (:func:`_unhinted_dive`) gets 1/6 of the time left for the solve."""
UNHINTED_DIVE_OPS = AUTO_CP_OPS
"""Models up to this many ops get the unhinted dive (larger ones rarely find a first schedule in a
sixth of the budget without a hint, and the window search covers them)."""


@dataclass
class _Dive:
    """An unhinted solve and what it found."""

    solver: cp_model.CpSolver
    callback: _Progress
    code: cp_model.CpSolverStatus

    @property
    def found(self) -> bool:
        return self.code in (cp_model.OPTIMAL, cp_model.FEASIBLE)

    @property
    def proven(self) -> bool:
        return self.code == cp_model.OPTIMAL

    def shorter_by(self, solver: cp_model.CpSolver, ticks: int) -> bool:
        """The dive found a makespan at least ``ticks`` shorter than ``solver``'s."""
        return self.found and self.solver.objective_value <= solver.objective_value - ticks


def _unhinted_dive(setup: _Setup, built: Built, options: SolveOptions, began: float) -> _Dive | None:
    """A short solve of a copy of ``built``'s model without its hint; when it finds a schedule shorter
    than the hint (or the hint is over the memory limit, so no schedule), that schedule becomes the
    hint of ``built``'s model for the main solve.

    A hint steers CP-SAT's single worker into the hint's neighbourhood, and with real durations that
    neighbourhood can be a poor one: on llama3-70b, dgx-h100, p = 8, m = 64 under 220 GiB, the greedy
    hint (179.92 s) led to 179.47 s in 60 s, while the same model without it reaches 178.80 s in
    under 3 s. A sixth of the budget without the hint, then the rest with the better of the two,
    keeps both. Returns None when the budget is spent."""
    share = options.share(UNHINTED_DIVE_SHARE)
    if share.expired:
        return None
    unhinted = built.model.clone()
    unhinted.clear_hints()
    solver = share.solver()
    callback = _Progress(setup.tick, setup.instance.time_unit, options.progress, began)
    dive = _Dive(solver, callback, share.run(solver, unhinted, callback))
    fitting_end = setup.hint_end if setup.hint is not None and setup.hint.fits else None
    if dive.found and (fitting_end is None or solver.objective_value < fitting_end - 0.5):
        if not dive.proven:
            options.note(f"unhinted dive: {setup.shown(solver.objective_value)}, "
                         "the hint of the main solve")
        rehint(built, built.model, {op: solver.value(built.start[op]) for op in built.ops}, round(solver.objective_value))
    return dive


def _read_back(setup: _Setup, built: Built, solver: cp_model.CpSolver, time_to_best: float | None, status: str) -> _Solved:
    """The schedule of a solve that found one, validated and simulated; none when it is over the
    memory limit, which a model whose persistent state is rounded down (a free placement's, see
    :func:`ppopt.solve.model.memory_units`) may admit by a few bytes: its bound still holds."""
    found = validate(_to_schedule(built, solver, setup.template, setup.instance, setup.space))
    simulation = simulate(found, setup.instance.costs, setup.instance.system)
    if not setup.instance.fits(peak_use(setup.instance, simulation)):
        return _Solved("unknown", solver.best_objective_bound * setup.tick,
                       note="the solver's schedule is a few bytes over the memory limit (rounding), left out")
    return _Solved(
        status, solver.best_objective_bound * setup.tick, solver.objective_value * setup.tick, found,
        simulation, round(solver.objective_value), {op: solver.value(built.start[op]) for op in built.ops}, time_to_best,
    )


def _pick(setup: _Setup, solved: _Solved) -> tuple[_Solved, bool]:
    """The better of the solver's answer and a fitting hint; True when the solver's answer wins."""
    hint = setup.hint
    if hint is None or not hint.fits:
        return solved, solved.schedule is not None
    if solved.simulation is not None and hint.simulation.step_time_s >= solved.simulation.step_time_s - 1e-12:
        return solved, True
    status, bound = solved.status, solved.solver_bound
    if status in ("unknown", "infeasible"):  # the model found nothing, but the hint is a valid point
        status, bound = "feasible", bound if math.isfinite(bound) else 0.0
    return replace(solved, status=status, solver_bound=bound, schedule=hint.schedule, simulation=hint.simulation,
                   objective_ticks=setup.hint_end, starts=setup.hint_starts), False


def _lower_peak(setup: _Setup, best: _Solved, options: SolveOptions) -> _Solved:
    """Second solve: the least worst-device peak memory with makespan <= the best found (ticks).

    Returns the best, replaced by the solve's schedule when that is no slower, with the proven peak
    (memory units) and the solve's status.
    """
    spent = replace(best, memory_status="unknown (time limit reached before the memory solve)")
    if best.schedule is None or best.objective_ticks is None:
        return best
    if not _time_to_build(setup, options):
        return spent
    cap = best.objective_ticks
    frame = Frame(setup.tick, cap, 0, minimize_peak_within=cap)
    built = build_model(setup.instance, setup.space, frame, best.schedule, best.starts, options.dominance)
    if options.expired:
        return spent
    solver = options.solver(len(built.ops))
    code = options.run(solver, built.model)
    status = STATUS.get(code, "unknown")
    options.note(f"peak memory at step <= {setup.shown(cap)}: {status}")
    if code not in (cp_model.OPTIMAL, cp_model.FEASIBLE):
        return replace(best, memory_status=status)
    found = validate(_to_schedule(built, solver, best.schedule, setup.instance, setup.space))
    simulation = simulate(found, setup.instance.costs, setup.instance.system)
    assert best.simulation is not None
    least = solver.objective_value * built.memory_step
    if simulation.step_time_s <= best.simulation.step_time_s + 1e-9 and setup.instance.fits(peak := peak_use(setup.instance, simulation)):
        # the schedule's own peak: the model counts byte sizes rounded down, a few bytes under it
        best, least = replace(best, schedule=found, simulation=simulation), peak
    return replace(best, peak_memory=least, memory_status=status)


def check_sizes(given: Schedule, devices: int, microbatches: int, field: str | None = None) -> None:
    """ConfigError unless the caller's schedule ``given`` has the request's p and m (its step would
    be another problem's), naming ``field`` (None: the size that differs)."""
    if (given.devices, given.microbatches) != (devices, microbatches):
        named = field or ("devices" if given.devices != devices else "microbatches")
        raise ConfigError(f"{_called(given, field)} has p = {given.devices}, m = {given.microbatches}, the request p = {devices}, "
                          f"m = {microbatches}", field=named)


def check_in_space(given: Schedule, space: Space, devices: int, microbatches: int, field: str) -> None:
    """ConfigError naming ``field`` unless the caller's schedule ``given`` is a point of the relaxed
    ``space`` on the request's p and m (:func:`check_sizes`; its stages and their devices): what
    :func:`search` takes as a hint, :func:`ppopt.solve.gap.frontier` as its given schedule."""
    check_sizes(given, devices, microbatches, field)
    if space.fixed or space.placement == "family":
        raise ConfigError(f"{space.describe()} searches its own schedules only: {_called(given, field)} needs a relaxed space of its "
                          "placement (ppopt.solve.space.space_of)", field=field)
    placement = placement_of(space, devices)
    if given.stages != stage_count(space, devices) or (placement is not None and given.placement != placement):
        raise ConfigError(f"{_called(given, field)} is not a schedule of the space {space.describe()} (its stages or their "
                          "devices differ; ppopt.solve.space.space_of gives a schedule's space)", field=field)


def _called(given: Schedule, field: str | None) -> str:
    """How the checks name the caller's schedule: ``hint NAME`` among search's hints, else its name."""
    return f"hint {given.name}" if field == "hints" else given.name


def check_arguments(spec: object, space: object = ..., options: object = None, given: Sequence[object] = (),
                    given_field: str = "hints") -> None:
    """ConfigError naming the argument a library call of the solver (:func:`search`,
    :func:`ppopt.solve.gap.gap_report`, :func:`ppopt.solve.gap.frontier`) was given of another
    type: an AttributeError deep inside said nothing of which one. ``given``: hints or a schedule
    (``given_field``: the argument's name);
    ``space`` is checked when given (``...``: the call takes none)."""
    def refuse(field: str, wanted: str, value: object) -> None:
        shown = repr(value)
        raise ConfigError(f"must be {wanted}, got {shown if len(shown) <= 60 else shown[:57] + '...'}", field=field)

    if not isinstance(spec, InstanceSpec):
        refuse("spec", "an InstanceSpec (ppopt.solve.instance)", spec)
    if space is not ... and not isinstance(space, (Space, str)):
        refuse("space", "a Space or its text (ppopt.solve.space.parse_space)", space)
    if options is not None and not isinstance(options, SolveOptions):
        refuse("options", "a SolveOptions (ppopt.solve.options)", options)
    for schedule in given:
        if not isinstance(schedule, Schedule):
            refuse(given_field, "schedules (ppopt.Schedule)", schedule)


def search(spec: InstanceSpec, space: Space | str, options: SolveOptions | None = None, minimize_memory: bool = False,
           hints: Sequence[Schedule] | Schedule = ()) -> SearchResult:
    """Search ``space`` for the shortest step on ``spec``'s instances (see the module docstring).

    ``options.time_limit_s`` bounds the whole search (from ``options.start()``, or from now).
    ``minimize_memory``: then, in a second solve (same limits), minimise the worst device's peak
    memory among schedules no slower (in ticks) than the best found: a lexicographic objective.
    ``hints``: further schedules of the space (with its placement, :func:`ppopt.solve.space.space_of`)
    tried as hints before the handcrafted ones, so the result is never worse than the best of them;
    a fixed or family space searches its own schedules only and refuses hints.
    ``space`` may be its text (``"placement=linear,backward=split"``, :func:`ppopt.solve.space.parse_space`).

    Raises InfeasibleError when the memory limit is below what any schedule of the space needs.
    """
    if isinstance(hints, Schedule):  # one hint given alone
        hints = (hints,)
    check_arguments(spec, space, options, hints if isinstance(hints, (list, tuple)) else [hints])
    require_bool(minimize_memory, "minimize_memory")
    options = (options or SolveOptions()).start()
    if isinstance(space, str):
        space = parse_space(space)
    if hints and (space.fixed or space.placement == "family"):  # they would be dropped without a word
        raise ConfigError(f"{space.describe()} searches its own schedules only: hints need a relaxed space of their "
                          "placement (ppopt.solve.space.space_of)", field="hints")
    _check_size(spec, space, options.method, minimize_memory)
    if space.placement == "family" and not space.fixed:
        if minimize_memory:
            raise ScheduleError("needs one placement, not placement=family", field="minimize_memory")
        return _search_family(spec, space, options)
    _check(spec, space)
    began = time.monotonic()
    options = options.reserve(space_ops(spec, space) * REPORT_S_PER_OP)  # the grid's printing comes after
    setup = _with_periodic(_prepare(spec, space, options, began, hints), options)
    method = _method(setup, options.method)
    # no time-indexed graph to build when a hint is already at the bound or the budget is spent
    start = (_time_indexed_start(setup) if method == "lns+cp" and not _hint_meets_bound(setup) and options.remaining_s() > 0
             else None)
    # with the time-indexed search, the refutation replaces the reduced problems, or follows the tail bound
    if start is None or _tail_bound_applies(setup):
        setup = _with_relaxation(setup, options)
    if start is not None:
        setup = _with_refutation(setup, start.graph, options)
    # with a second (memory) solve to come, the makespan search gets half of what is left
    main = options.share(2) if minimize_memory else options
    if method == "cp+lns" and main.remaining_s() / 2 <= LNS_BUILDS * _build_s(setup):
        # the second half could not build the neighbourhoods' model: it went unused (at 16 x 128, 4,096
        # ops, a 3 s search returned its hint after 1.7 s where one solve of 3 s improved it)
        method = "cp"
    solved = _solve(setup, main.share(2) if method == "cp+lns" else main, minimize_memory,
                    full=method not in ("lns", "lns+cp"))
    best, from_solver = _pick(setup, solved)
    chain = _block_cut_chain(setup, main) if method == "cp+lns" and best.status != "optimal" else None
    graph = None if chain is None else _time_indexed_graph(setup, chain, best, main)
    if graph is not None:  # with the time it needs, before the block cuts (TIME_INDEXED_MIN_S)
        setup, best, from_solver = _with_time_indexed(setup, graph, best, from_solver, _last_work(main))
    # the block cuts take what the refutation left: all of it when its first rung's model was too large
    below_best = best.objective_ticks is None or setup.lower < best.objective_ticks
    if chain is not None and below_best and (graph is None or main.remaining_s() >= BLOCK_CUTS_MIN_S):
        setup = _with_block_cuts(setup, chain, _last_work(main))
    if method == "lns+cp" and best.status != "optimal":
        if start is not None:
            best, from_solver = _improve_time_indexed(setup, start, best, from_solver, main)
        else:
            best, from_solver = _windows_then_cp(setup, best, from_solver, main, minimize_memory)
    elif method != "cp" and best.status != "optimal" and chain is None:
        best, from_solver = _improve(setup, best, from_solver, main)
    if minimize_memory:
        best = _lower_peak(setup, best, options)
    return _result(setup, best, from_solver, time.monotonic() - began, options)


def _result(setup: _Setup, best: _Solved, from_solver: bool, wall: float, options: SolveOptions) -> SearchResult:
    """The search result: bound, gap and status from the best schedule and the bounds."""
    status = best.status
    bound = max(best.solver_bound, setup.analytic.best, setup.period_bound or 0.0) if status != "infeasible" else math.inf
    step = best.simulation.step_time_s if best.simulation is not None else None
    bound = never_above(bound, step)
    gap = relative_gap(step, bound)
    if within_rounding(gap, 0.0) and status == "feasible":
        status = "optimal"
    note = best.note
    if status == "optimal" and gap is not None and not within_rounding(gap, setup.rounding):
        status = "feasible"  # the ticked model's optimum, but the simulation adds more than the rounding
        note = "; ".join(filter(None, (note, f"optimal in the solver's ticks, but the simulated step lies {100 * gap:.2f} % above the bound, "
                                       f"more than the rounding's {100 * setup.rounding:.2f} %: the simulation adds what the solver leaves out "
                                       "(link contention, replica all-reduce, blocked senders)")))
    for over in (c for c in setup.candidates if c.given and not c.fits):  # the report names another hint: say why
        need = format_amount(peak_use(setup.instance, over.simulation), setup.instance.memory_unit)
        note = "; ".join(filter(None, (note, f"hint {over.name} needs {need} on its worst device, over the memory limit: "
                                             "not a schedule of the space (only a version fitted to the limit can start the search)")))
    unit, hint = setup.instance.time_unit, setup.hint
    options.note(f"[{wall:7.2f}s] {status}: step {f'{step:.6g}' if step is not None else '-'} {unit}, bound {bound:.6g} {unit}"
                 + (f" ({note})" if note else ""))
    return SearchResult(
        status=status,
        space=setup.space.describe(),
        schedule=best.schedule,
        simulation=best.simulation,
        step_time=step,
        bound=bound,
        solver_bound=never_above(best.solver_bound, step),
        solver_objective=best.solver_objective,
        analytic=Bounds(*(never_above(value, step) for value in astuple(setup.analytic))),  # each part as the bound
        gap=gap,
        hint=hint.name if hint else None,
        hint_step_time=hint.simulation.step_time_s if hint else None,
        hint_fits=hint.fits if hint else True,
        hint_own=hint.own if hint else False,
        handcrafted=tuple(c for c in setup.candidates if not c.own),
        tick=setup.tick,
        time_unit=unit,
        memory_semantics=setup.instance.memory_semantics(),
        wall_time_s=wall,
        time_to_best_s=best.time_to_best_s,
        from_solver=from_solver,
        peak_memory=best.peak_memory,
        memory_status=best.memory_status,
        note=note,
        rounding_cost=setup.rounding,
        period=_describe(setup),
        # as the bound: a period bound met by the step is reported as the step, not 1e-14 above it
        period_bound=None if setup.period_bound is None else never_above(setup.period_bound, step),
        memory_unit=setup.instance.memory_unit,
    )


def _ticks(instance: Instance):
    """The tick (see :mod:`ppopt.solve.ticks`), the duration and delay functions in ticks, and what
    the rounding can cost (relative)."""
    duration = _durations_s(instance)
    values = [duration(s, k) for s in range(instance.stages) for k in Kind]
    # every delay of every pair of devices is one of these pairs' (a list of S x p^2 delays took 30 s at p = 300)
    values += [instance.comm(s, a, b) for s in range(instance.stages) for a, b in instance.link_pairs()]
    tick = resolution(values)
    # both are asked millions of times per search (every op of every hint, every window step) for a
    # few hundred distinct arguments: each is worked out once
    return (
        tick,
        functools.cache(lambda s, k: to_ticks(duration(s, k), tick)),
        functools.lru_cache(maxsize=1 << 16)(lambda s, a, b: to_ticks(instance.comm(s, a, b), tick)),
        rounding_cost(values, tick),
    )


def _ticked(schedule: Schedule, tick_duration, tick_delay) -> tuple[dict[Op, int], int]:
    """Earliest start (ticks) of every op of ``schedule`` in its order, and the makespan.

    Laid out on the schedule's flat form, with each duration looked up once per (stage, kind) and
    each delay once per (stage, sending device, receiving device): calling both per op took 31 s of
    a 38 s search setup at 64 x 4,096 in the split space."""
    flat = validated(schedule)
    columns = flat.columns
    per_stage_kind = np.zeros(4 * schedule.stages, np.int64)
    for s in range(schedule.stages):
        for kind in Kind:
            per_stage_kind[4 * s + KIND_CODE[kind]] = tick_duration(s, kind)
    duration = per_stage_kind[columns.stage_kind]
    delay = np.zeros(flat.size, np.int64)
    has_input = columns.wait >= 0
    sender = columns.wait[has_input]
    devices = len(schedule.orders)
    key = (columns.stage[sender] * devices + columns.dev[sender]) * devices + columns.dev[has_input]
    distinct, which = np.unique(key, return_inverse=True)
    by_key = [tick_delay(int(k) // devices**2, int(k) // devices % devices, int(k) % devices) for k in distinct]
    delay[has_input] = np.array(by_key, np.int64)[which]
    starts = flat_earliest_starts(flat, duration.tolist(), delay.tolist())
    end = int((np.array(starts, np.int64) + duration).max()) if starts else 0
    return dict(zip(flat.ops, starts)), end


def _cap_of_stage(instance: Instance, placement, split: bool = False) -> Callable[[int], float | None]:
    """How many live activations of stage s fit on its device beside the persistent state of every
    stage there (of s alone when s has replicas), with the fit's slack (:meth:`Instance.room`); a count,
    possibly fractional. With a split backward, a stage that frees part of each activation at I
    (:attr:`ppopt.costs.StageCost.input_grad_release_bytes`) counts only the rest, what every live
    activation holds until its W: more of them may be live, so the bounds stay valid."""
    limit = instance.memory_limit
    if limit is None or placement is None:
        return lambda s: None
    on_device = stages_by_device(placement, instance.devices)

    def cap(s: int) -> float | None:
        c = instance.costs[s]
        beside = [t for t in on_device[placement[s][0]] if placement[t] == placement[s]] if len(placement[s]) == 1 else [s]
        held = c.activation_bytes - (c.input_grad_release_bytes if split else 0.0)
        return instance.room(beside) / held if held > 0 else None  # the fit's slack included

    return cap


def _model_layers(spec: InstanceSpec) -> int | None:
    """The modelled instance's layers (None in unit mode)."""
    return spec.model.num_layers if isinstance(spec.model, ModelConfig) else None


def _search_family(spec: InstanceSpec, space: Space, options: SolveOptions) -> SearchResult:
    """``placement=family``: search each member placement in turn, each with an equal share of the
    time left among those still to search; the best schedule wins and the bound is the smallest
    member bound (the optimum over a union). Left out first, each with a note: a member with the
    stage map of one before it (zigzag with one wave is the V) and, with a model, one with more
    stages than it has layers (the union is then over the others). Members not reached within the
    time limit (:func:`too_late`) are skipped; the union then has no proven bound (reported as 0,
    gap unknown)."""
    results: list[SearchResult] = []
    unsearched = []
    least: tuple[float, str] | None = None  # the smallest member memory minimum, and its refusal
    maps: dict[tuple, str] = {}  # stage -> devices maps already taken: zigzag with one wave is the V
    pending = []  # the members to search, decided first: the time is shared among them alone
    for member in FAMILY_MEMBERS:
        member_space = replace(space, placement=member)
        stages, layers = stage_count(member_space, spec.devices), _model_layers(spec)
        if layers is not None and stages > layers:
            options.note(f"skipped placement={member}: its {stages} stages exceed the model's {layers} layers")
            continue
        stage_map = placement_of(member_space, spec.devices) or (member,)
        if stage_map in maps:
            options.note(f"skipped placement={member}: the same stage map as placement={maps[stage_map]}")
            continue
        maps[stage_map] = member
        pending.append((member, member_space))
    for k, (member, member_space) in enumerate(pending):
        if results and too_late(options, spec, member_space):
            options.note(f"skipped placement={member}: time limit reached")
            unsearched.append(member)
            continue
        try:
            results.append(search(spec, member_space, options.share(len(pending) - k)))
        except (InfeasibleError, ScheduleError) as error:
            options.note(f"skipped placement={member}: {error}")
            minimum = error.minimum if isinstance(error, InfeasibleError) else None
            if minimum is not None and (least is None or minimum < least[0]):
                least = minimum, error.reason
    if not results:
        reason = f"no placement of {space.describe()} admits p = {spec.devices}, m = {spec.microbatches} under the memory limit"
        if least is not None:
            reason += f"; the least demanding: {least[1]}"
        raise InfeasibleError(reason, minimum=None if least is None else least[0])
    found = [r for r in results if r.step_time is not None]
    best = min(found, key=lambda r: r.step_time or 0.0) if found else results[0]
    # the union's bound is its weakest member's, and so are the parts shown beside it (solver,
    # analytic, period): the winner's would claim its placement's bound for every placement
    weakest = min(results, key=lambda r: r.bound)
    bound = 0.0 if unsearched else weakest.bound
    solver_bound = 0.0 if unsearched else weakest.solver_bound
    analytic = Bounds(0.0, 0.0, 0.0) if unsearched else weakest.analytic
    period_bound = None if unsearched else weakest.period_bound
    gap = relative_gap(best.step_time, bound)
    # optimal as its member is, where the union's bound is the member's: met up to the rounding of the ticks
    met = within_rounding(gap, 0.0) or (best.status == "optimal" and within_rounding(gap, best.rounding_cost))
    status = best.status if met else ("feasible" if found else "unknown")
    note = f"time limit reached before placements {', '.join(unsearched)}" if unsearched else best.note
    return replace(best, space=space.describe(), bound=bound, gap=gap, status=status, note=note,
                   solver_bound=solver_bound, analytic=analytic, period_bound=period_bound,
                   period=None if period_bound is None else weakest.period,
                   handcrafted=tuple(c for r in results for c in r.handcrafted),
                   wall_time_s=sum(r.wall_time_s for r in results))
