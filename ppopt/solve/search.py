"""Search a space with CP-SAT: hint, solve, read back, re-time with the simulator, bound the gap.

``search(...)`` is the library entry point behind ``ppopt search``; ``gap`` and ``frontier`` call it.
The returned step time is always the simulator's (real durations), so the solver's answer and the
handcrafted schedules are measured by the same evaluator. The bound is the larger of the solver's
bound (in rounded-down ticks, so valid for the real problem) and the analytic bounds.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass, replace

from ortools.sat.python import cp_model

from ppopt.errors import InfeasibleError, ScheduleError
from ppopt.ir import Kind, Op, Schedule
from ppopt.simulate import Simulation, op_duration_s, simulate
from ppopt.solve.bounds import Bounds, lower_bounds
from ppopt.solve.greedy import GREEDY, greedy_schedule
from ppopt.solve.instance import Instance
from ppopt.solve.model import Built, build_model
from ppopt.solve.space import FAMILY_MEMBERS, Space, handcrafted_in, placement_of, stage_count
from ppopt.solve.ticks import resolution, to_ticks
from ppopt.table import earliest_starts
from ppopt.validate import validate

#: builds the instance of a space: (stages, stage weights) -> Instance
InstanceFactory = Callable[[int, "tuple[float, ...] | None"], Instance]
Progress = Callable[[str], None]

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


@dataclass(frozen=True)
class SearchResult:
    """What one search found. Times in the instance's unit (seconds, or slots in unit mode).

    ``step_time`` is the simulated step time of ``schedule`` (the best found: the solver's, or the
    best handcrafted one when the solver did not beat it); ``bound`` is a valid lower bound on every
    schedule of the space; ``gap`` = (step_time - bound) / bound.
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


class _Progress(cp_model.CpSolverSolutionCallback):
    """Reports each incumbent (and bound changes) to ``progress``; remembers when the last came."""

    def __init__(self, tick: float, unit: str, progress: Progress | None):
        super().__init__()
        self.tick, self.unit, self.progress = tick, unit, progress
        self.started = time.monotonic()
        self.last_solution_s: float | None = None

    def on_solution_callback(self) -> None:
        self.last_solution_s = time.monotonic() - self.started
        if self.progress:
            obj, bound = self.objective_value, self.best_objective_bound
            gap = (obj - bound) / bound if bound > 0 else math.inf
            self.progress(
                f"[{self.last_solution_s:7.2f}s] incumbent {obj * self.tick:.6g} {self.unit}, "
                f"bound {bound * self.tick:.6g} {self.unit}, gap {gap:.2%}"
            )


def _durations_s(instance: Instance) -> Callable[[int, Kind], float]:
    """Duration of (stage, kind) in the instance's time unit."""
    return lambda stage, kind: op_duration_s(Op(stage, kind, 0), instance.costs)


def minimum_memory(instance: Instance, space: Space, placement) -> tuple[float, str]:
    """The least per-device memory limit any schedule of the space can meet, and why.

    One microbatch at a time still keeps, on each device, the persistent state of its stages plus
    the activations of all its stages on that microbatch's route (an activation of a lower stage
    is freed only after the higher stages' backward).
    """
    costs = instance.costs
    bytes_mode = instance.memory_unit == "bytes"
    persistent = [c.persistent_bytes if bytes_mode else 0.0 for c in costs.stages]
    act = [c.activation_bytes for c in costs.stages]
    if placement is None:
        s = max(range(len(act)), key=lambda s: persistent[s] + act[s])
        return persistent[s] + act[s], f"stage {s} needs its persistent state plus one activation"
    worst, why = 0.0, ""
    for d in range(instance.devices):
        held = [s for s in range(len(placement)) if d in placement[s]]
        if not held:
            continue
        routes = {}
        for s in held:
            routes.setdefault(placement[s].index(d) if len(placement[s]) > 1 else 0, []).append(s)
        per_route = [sum(act[s] for s in stages) for stages in routes.values()]
        need_act = min(per_route) if space.directions == "free" else max(per_route)
        need = sum(persistent[s] for s in held) + need_act
        if need > worst:
            worst = need
            why = f"device {d}: persistent state of stages {held} plus one microbatch's activations"
    return worst, why


def _format_amount(value: float, unit: str) -> str:
    if unit == "bytes":
        return f"{value:.6g} bytes ({value / 2**30:.3f} GiB)"
    return f"{value:g} {unit}"


def _candidates(instance_for: InstanceFactory, space: Space, devices: int, microbatches: int) -> tuple[Instance, list[Candidate]]:
    schedules = handcrafted_in(space, devices, microbatches)
    weights = schedules[0].stage_weights if schedules else None
    if space.split and not schedules:
        from ppopt.generators.chimera import split_weights

        weights = split_weights(devices, space.split)
    instance = instance_for(stage_count(space, devices) if not space.fixed else schedules[0].stages, weights)
    limit = instance.memory_limit
    placement = placement_of(space, devices)
    if not space.fixed and space.order == "free" and placement is not None:
        greedy = greedy_schedule(instance, placement, space.split_backward)
        if greedy is not None:
            schedules = [*schedules, greedy]
    candidates = []
    for schedule in schedules:
        sim = simulate(validate(schedule), instance.costs, instance.system)
        fits = limit is None or max(memory_use(sim, instance)) <= limit * (1 + 1e-12)
        candidates.append(Candidate(schedule.name, schedule, sim, fits))
    candidates.sort(key=lambda c: (not c.fits, c.simulation.step_time_s))
    return instance, candidates


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


def _to_schedule(built: Built, solver: cp_model.CpSolver, template: Schedule | None, instance: Instance, space: Space) -> Schedule:
    """The solver's answer as a schedule: placement from the space (or the solver), order by start."""
    p, m = instance.devices, instance.microbatches
    if built.placement is None:
        placement = tuple((next(d for d in range(p) if solver.value(built.on[s, d])),) for s in range(instance.stages))
    else:
        placement = built.placement
    replica_of = tuple(int(solver.value(built.direction[i])) for i in range(m)) if built.direction else ()
    device_of = lambda op: placement[op.stage][replica_of[op.microbatch] if len(placement[op.stage]) > 1 else 0]  # noqa: E731
    orders: list[list[tuple[int, int, Op]]] = [[] for _ in range(p)]
    for op in built.ops:
        start = solver.value(built.start[op])
        orders[device_of(op)].append((start, start + built.duration[op], op))
    name = "search" if template is None or not space.fixed else template.name
    weights = template.stage_weights if template is not None else None
    return Schedule(
        name, p, m, placement, tuple(tuple(op for _, _, op in sorted(order)) for order in orders), replica_of, weights,
        {"space": space.describe()},
    )


def _serial_horizon(instance: Instance, tick: float, split: bool) -> int:
    """A horizon any space admits: microbatches one after another, every op and message in turn."""
    kinds = (Kind.F, Kind.I, Kind.W) if split else (Kind.F, Kind.B)
    duration = _durations_s(instance)
    per_mb = sum(to_ticks(duration(s, k), tick) + 1 for s in range(instance.stages) for k in kinds)
    hops = 2 * instance.stages * max(to_ticks(instance.comm(s, 0, 1), tick) + 1 for s in range(instance.stages)) if instance.devices > 1 else 0
    return instance.microbatches * (per_mb + hops) + 1


def search(
    instance_for: InstanceFactory,
    space: Space,
    devices: int,
    microbatches: int,
    time_limit_s: float = 60.0,
    workers: int = 1,
    seed: int = 0,
    progress: Progress | None = None,
    dominance: bool = True,
    deterministic_time: float | None = None,
    minimize_memory: bool = False,
) -> SearchResult:
    """Search ``space`` for the shortest step (see the module docstring).

    ``minimize_memory``: then, in a second solve (same limits), minimise the worst device's peak
    memory among schedules no slower (in ticks) than the best found: a lexicographic objective.

    Raises InfeasibleError when the memory limit is below what any schedule of the space needs.
    """
    if devices < 1:
        raise ScheduleError(f"devices must be >= 1, got {devices}")
    if microbatches < 1:
        raise ScheduleError(f"microbatches must be >= 1, got {microbatches}")
    if time_limit_s <= 0:
        raise ScheduleError(f"--time-limit must be positive, got {time_limit_s:g}")
    if workers < 1:
        raise ScheduleError(f"--workers must be >= 1, got {workers}")
    if space.placement == "family" and not space.fixed:
        if minimize_memory:
            raise ScheduleError("--minimize-memory needs one placement, not placement=family")
        return _search_family(instance_for, space, devices, microbatches, time_limit_s, workers, seed, progress, dominance, deterministic_time)
    if space.placement == "bidirectional" and space.directions == "even" and microbatches % 2 and not space.fixed:
        raise ScheduleError(f"placement=bidirectional with directions=even needs an even number of microbatches, got {microbatches}")
    began = time.monotonic()
    instance, candidates = _candidates(instance_for, space, devices, microbatches)
    if space.fixed and not candidates:
        raise ScheduleError(f"space fixed:{space.fixed} has no schedule for p = {devices}, m = {microbatches}")
    template = candidates[0].schedule if candidates else None
    placement = template.placement if space.fixed else placement_of(space, devices)
    split = template.split_backward if space.fixed else space.split_backward
    unit = instance.time_unit

    if instance.memory_limit is not None:
        need, why = minimum_memory(instance, space, placement)
        if instance.memory_limit < need * (1 - 1e-12):
            raise InfeasibleError(
                f"memory limit {_format_amount(instance.memory_limit, instance.memory_unit)} is below the minimum "
                f"{_format_amount(need, instance.memory_unit)} any schedule of {space.describe()} needs ({why})"
            )

    tick, tick_duration, tick_delay = _ticks(instance)
    even = not (space.placement == "bidirectional" and space.directions == "free")
    cap = _cap_of_stage(instance, placement)
    analytic = lower_bounds(instance.stages, microbatches, devices, _durations_s(instance), instance.comm, placement, split, cap, even)
    analytic_ticks = lower_bounds(instance.stages, microbatches, devices, tick_duration, tick_delay, placement, split, cap, even)

    hint = candidates[0] if candidates else None
    hint_starts, hint_end = _ticked(hint.schedule, tick_duration, tick_delay) if hint else (None, None)
    horizon = _serial_horizon(instance, tick, split)
    if hint is not None:
        # a fitting hint is a feasible point, so no optimum lies beyond it
        horizon = hint_end if hint.fits else max(horizon, hint_end)
    lower = math.ceil(analytic_ticks.best - 1e-9)
    callback = _Progress(tick, unit, progress)
    # a fitting hint that meets the analytic bound is optimal: no model to build or solve
    proven_by_hint = hint is not None and hint.fits and not space.fixed and not minimize_memory and hint_end <= lower
    if proven_by_hint:
        code, status, solver_bound = None, "optimal", lower * tick
        if progress:
            progress(f"hint {hint.name} meets the analytic bound {analytic.best:.6g} {unit}: optimal without search")
    else:
        built = build_model(instance, space, tick, horizon, min(lower, horizon), hint.schedule if hint else None, hint_starts, dominance)
        solver = _solver(time_limit_s, workers, seed, deterministic_time)
        if progress:
            progress(
                f"searching {space.describe()} on p = {devices}, m = {microbatches}: {len(built.ops)} ops, tick {tick:.6g} {unit}, "
                f"hint {hint.name if hint else 'none'}"
                + (f" ({hint.simulation.step_time_s:.6g} {unit})" if hint else "")
            )
        code = solver.solve(built.model, callback)
        status = STATUS.get(code, "unknown")
        solver_bound = solver.best_objective_bound * tick if code in (cp_model.OPTIMAL, cp_model.FEASIBLE) else 0.0
        if code == cp_model.INFEASIBLE:
            solver_bound = math.inf
    wall = time.monotonic() - began

    best_schedule, best_sim, solver_objective, from_solver = None, None, None, False
    if code in (cp_model.OPTIMAL, cp_model.FEASIBLE):
        solver_objective = solver.objective_value * tick
        found = validate(_to_schedule(built, solver, template, instance, space))
        found_sim = simulate(found, instance.costs, instance.system)
        best_schedule, best_sim, from_solver = found, found_sim, True
    if hint is not None and hint.fits and (best_sim is None or hint.simulation.step_time_s < best_sim.step_time_s - 1e-12):
        best_schedule, best_sim, from_solver = hint.schedule, hint.simulation, False
        if status in ("unknown", "infeasible"):  # the model found nothing, but the hint is a valid point
            status, solver_bound = "feasible", solver_bound if math.isfinite(solver_bound) else 0.0

    bound = max(solver_bound, analytic.best) if status != "infeasible" else math.inf
    step = best_sim.step_time_s if best_sim is not None else None
    gap = relative_gap(step, bound)
    if gap is not None and gap <= 1e-9 and status == "feasible":
        status = "optimal"
    if progress:
        progress(f"[{wall:7.2f}s] {status}: step {step if step is not None else '-'} {unit}, bound {bound:.6g} {unit}")
    peak_memory = memory_status = None
    if minimize_memory and best_schedule is not None:
        cap = round(solver.objective_value) if from_solver else hint_end
        starts = {op: solver.value(built.start[op]) for op in built.ops} if from_solver else hint_starts
        lowered = _minimize_peak(instance, space, tick, cap, best_schedule, starts, dominance,
                                 _solver(time_limit_s, workers, seed, deterministic_time), progress)
        if lowered is not None:
            memory_status, peak_memory, schedule_low, sim_low = lowered
            if schedule_low is not None and sim_low.step_time_s <= step + 1e-9:
                best_schedule, best_sim, step = schedule_low, sim_low, sim_low.step_time_s
                gap = relative_gap(step, bound)
        wall = time.monotonic() - began
    return SearchResult(
        status=status,
        space=space.describe(),
        schedule=best_schedule,
        simulation=best_sim,
        step_time=step,
        bound=bound,
        solver_bound=solver_bound,
        solver_objective=solver_objective,
        analytic=analytic,
        gap=gap,
        hint=hint.name if hint else None,
        hint_step_time=hint.simulation.step_time_s if hint else None,
        handcrafted=tuple(c for c in candidates if c.name != GREEDY),
        tick=tick,
        time_unit=unit,
        memory_semantics=instance.memory_semantics(),
        wall_time_s=wall,
        time_to_best_s=callback.last_solution_s,
        from_solver=from_solver,
        peak_memory=peak_memory,
        memory_status=memory_status,
    )


def _ticks(instance: Instance):
    """The tick (see :mod:`ppopt.solve.ticks`) and the duration and delay functions in ticks."""
    duration = _durations_s(instance)
    p = instance.devices
    values = [duration(s, k) for s in range(instance.stages) for k in Kind]
    values += [instance.comm(s, a, b) for s in range(instance.stages) for a in range(p) for b in range(p) if a != b]
    tick = resolution(values)
    return (
        tick,
        lambda s, k: to_ticks(duration(s, k), tick),
        lambda s, a, b: to_ticks(instance.comm(s, a, b), tick),
    )


def _ticked(schedule: Schedule, tick_duration, tick_delay) -> tuple[dict[Op, int], int]:
    """Earliest start (ticks) of every op of ``schedule`` in its order, and the makespan."""
    starts = earliest_starts(
        schedule,
        lambda op: tick_duration(op.stage, op.kind),
        lambda dep, op: tick_delay(dep.stage, schedule.device_of(dep), schedule.device_of(op)),
    )
    ticked = {op: int(t) for op, t in starts.items()}
    return ticked, max(t + tick_duration(op.stage, op.kind) for op, t in ticked.items())


def _solver(time_limit_s: float, workers: int, seed: int, deterministic_time: float | None) -> cp_model.CpSolver:
    solver = cp_model.CpSolver()
    solver.parameters.max_time_in_seconds = time_limit_s
    solver.parameters.num_workers = workers
    solver.parameters.random_seed = seed
    if deterministic_time is not None:
        solver.parameters.max_deterministic_time = deterministic_time
    return solver


def _minimize_peak(instance, space, tick, cap, schedule, starts, dominance, solver, progress):
    """Second solve: the least worst-device peak memory with makespan <= ``cap`` ticks.

    Returns (status, peak in memory units, schedule or None, simulation or None), or None when the
    solve found nothing.
    """
    built = build_model(instance, space, tick, cap, 0, schedule, starts, dominance, minimize_peak_within=cap)
    code = solver.solve(built.model)
    status = STATUS.get(code, "unknown")
    if progress:
        progress(f"peak memory at step <= {cap * tick:.6g} {instance.time_unit}: {status}")
    if code not in (cp_model.OPTIMAL, cp_model.FEASIBLE):
        return None
    found = validate(_to_schedule(built, solver, schedule, instance, space))
    return status, solver.objective_value * built.memory_step, found, simulate(found, instance.costs, instance.system)


def _cap_of_stage(instance: Instance, placement) -> Callable[[int], float | None]:
    """Live activations of stage s that fit on its device (single-stage devices only)."""
    limit = instance.memory_limit
    if limit is None or placement is None:
        return lambda s: None
    bytes_mode = instance.memory_unit == "bytes"

    def cap(s: int) -> float | None:
        c = instance.costs[s]
        room = limit - (c.persistent_bytes if bytes_mode else 0.0)
        return room / c.activation_bytes if c.activation_bytes > 0 else None

    return cap


def _search_family(instance_for, space, devices, microbatches, time_limit_s, workers, seed, progress, dominance, deterministic_time) -> SearchResult:
    """``placement=family``: search each member placement with an equal share of the time; the
    best schedule wins and the bound is the smallest member bound (the optimum over a union)."""
    results = []
    for member in FAMILY_MEMBERS:
        member_space = replace(space, placement=member)
        try:
            results.append(
                search(instance_for, member_space, devices, microbatches, time_limit_s / len(FAMILY_MEMBERS), workers, seed, progress, dominance,
                       None if deterministic_time is None else deterministic_time / len(FAMILY_MEMBERS))
            )
        except (InfeasibleError, ScheduleError) as error:
            if progress:
                progress(f"skipped placement={member}: {error}")
    if not results:
        raise InfeasibleError(f"no placement of {space.describe()} admits p = {devices}, m = {microbatches} under the memory limit")
    found = [r for r in results if r.step_time is not None]
    best = min(found, key=lambda r: r.step_time) if found else results[0]
    bound = min(r.bound for r in results)
    gap = relative_gap(best.step_time, bound)
    status = best.status if gap is not None and gap <= 1e-9 else ("feasible" if found else "unknown")
    return replace(best, space=space.describe(), bound=bound, gap=gap, status=status,
                   handcrafted=tuple(c for r in results for c in r.handcrafted),
                   wall_time_s=sum(r.wall_time_s for r in results))
