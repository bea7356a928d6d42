"""Large-neighbourhood search: improve a schedule by re-solving windows of it with CP-SAT.

For instances too large for one CP-SAT solve to improve on its hint (hundreds of microbatches, 32
stages), this keeps the full model (:func:`ppopt.solve.model.build_model`, built once with the
incumbent's makespan as horizon) and repeatedly solves a copy of it in which most of the schedule is
frozen: every op outside a *neighbourhood* keeps its incumbent order on its device (consecutive
frozen ops of a device stay in sequence, free to slide in time), while the ops inside it may move
and be re-ordered anywhere. The makespan may not exceed the incumbent's; a strictly shorter one
replaces it. Neighbourhoods alternate between

- a **window of microbatches**: every op of microbatches a..a+w-1, and
- a **window of time**: every op whose incumbent start lies in [t, t + d),

sized to about :data:`TARGET_FREE` free ops and grown after a run of failures (once a neighbourhood
holds every op and is solved to optimality, the makespan is proven optimal and the search stops) (Shaw, "Using
constraint programming and local search methods to solve vehicle routing problems", CP 1998,
introduced the scheme; Pisinger and Ropke, "Large neighborhood search", Handbook of Metaheuristics,
2010, section 13.2, describe the adaptive sizing).

Every neighbourhood model is a restriction of the full one, so every schedule found is feasible.
Reproducible: neighbourhoods come from ``random.Random(seed)`` and each solve is limited by
CP-SAT's *deterministic* time (:data:`STEP_DETERMINISTIC_S`), so with one worker the same seed
gives the same sequence of schedules; the command's wall-clock budget only decides how many steps
run (:class:`ppopt.solve.options.SolveOptions`; with ``deterministic_time`` set, what is left of it
decides, each step charged at least :data:`STEP_FLOOR_S`, so the result is the same on any machine).
Only placements where every stage has one device (linear, looped, V, zig-zag) are supported.

**Windows of time, alone** (:func:`improve_windows`, for large instances, where rebuilding the
full model per step costs seconds). A window of time is re-solved as a small model of its own ops:
the ops before it are fixed (each device free from the end of its last one), the ops after it keep
their order behind the window's on each device, and the objective is the largest "end of a window
op + longest path from its successor to the end of the step" in the incumbent's order graph. The
new per-device orders are then timed as early as they allow (:func:`ppopt.table.earliest_starts`),
and kept when the step is no longer. Memory stays within the limit because a device runs its ops
one at a time, so what is live on it depends on its order alone: on a device holding one stage
the window model keeps "F(i+K) after microbatch i's freeing op" and the microbatch order; on a
device holding several (V, looped, zig-zag) it also keeps a cumulative of the activations live in
the window (:func:`_add_shared_memory`), and the order after the window starts from the same live
set as before. Half the windows are anchored at the two ends of the step (:data:`ANCHORS`): with
the steady state already optimal (:mod:`ppopt.solve.periodic`), warm-up and cool-down are where
time is left.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace

from ortools.sat.python import cp_model

from ppopt.errors import ScheduleError
from ppopt.graph import topological_order
from ppopt.ir import Kind, Op, Schedule, dependencies, freeing_kind
from ppopt.solve.model import Built, DeviceRoom, rehint
from ppopt.solve.options import AUTO_LNS_OPS, SolveOptions
from ppopt.table import earliest_starts

TARGET_FREE = 240
"""Free ops a neighbourhood starts with (grown by :data:`GROWTH` after :data:`PATIENCE` failures)."""
GROWTH = 1.5
PATIENCE = 4
RESERVE_SHARE = 0.05
"""Share of the command's budget the search leaves for what follows it (validating and simulating the
best schedule at tens of thousands of ops takes seconds); a step also starts only when at least twice
the last neighbourhood's model-building time remains."""
RESERVE_MOST_LEFT = 0.25
"""The most of its own share's time left that the search reserves so (:func:`_reserve`)."""
STEP_FLOOR_S = 0.05
"""Deterministic time every step is charged at least (its own work outside CP-SAT is not counted
by CP-SAT), so a deterministic budget also bounds the number of steps."""
ANCHORS = ("end", "start", None, None)
"""Where the windows of time of :func:`improve_windows` lie, step after step: at the end of the step
(the cool-down), at its start (the warm-up), or anywhere (None). The two ends are where a schedule
with an optimal steady state still loses time; their windows grow after each failure."""
PRESOLVE_OPS = AUTO_LNS_OPS
"""From this many ops (the whole model's) a neighbourhood's solve keeps CP-SAT's presolve. Without
it CP-SAT loads the model before its search without watching the time limit: 24 s at 32,768 ops
(32 x 256, looped placement), so that a 60 s search ran 132 s, and at 16,384 ops a step started
with 0.5 s left took 28 s (a 30 s search ran 56 s). With presolve the same searches ended after
57 and 28.5 s. Below this size (the linear placement's model-based search; above it that placement
uses the window search) the steps are short and presolve costs more than it gives."""
STEP_DETERMINISTIC_S = 2.0
"""CP-SAT deterministic time per neighbourhood (a fraction of a second to a few seconds of wall time)."""


@dataclass(frozen=True)
class Improved:
    """The result of a large-neighbourhood search, in ticks."""

    starts: dict[Op, int]
    makespan: int
    steps: int  # neighbourhoods solved
    improvements: int
    time_to_best_s: float | None  # since the search began, None when nothing improved
    proven: bool = False  # a neighbourhood holding every op was solved to optimality: makespan is optimal


def _reserve(options: SolveOptions) -> float:
    """Seconds a large-neighbourhood search leaves at its end (:data:`RESERVE_SHARE` of the command's
    budget), but at most :data:`RESERVE_MOST_LEFT` of what its own share has left: in one of a
    frontier's many shares the command's 5 % (15 s of 300) left its steps 0.075 s each."""
    return min(RESERVE_SHARE * options.time_limit_s, RESERVE_MOST_LEFT * options.remaining_s())


def _makespan(built: Built, starts: dict[Op, int]) -> int:
    return max(starts[op] + built.duration[op] for op in built.ops)


def _neighbourhood(rng: random.Random, step: int, built: Built, starts: dict[Op, int], size: int, microbatches: int) -> set[Op]:
    """The ops freed in this step: a window of microbatches (even steps) or of time (odd steps)."""
    per_microbatch = max(1, len(built.ops) // microbatches)
    if step % 2 == 0:
        width = max(1, min(microbatches, size // per_microbatch))
        first = rng.randrange(0, microbatches - width + 1)
        return {op for op in built.ops if first <= op.microbatch < first + width}
    end = _makespan(built, starts)
    width = max(1, end * size // max(1, len(built.ops)))
    first = rng.randrange(0, max(1, end - width + 1))
    return {op for op in built.ops if first <= starts[op] < first + width}


Shown = Callable[[int], str]
"""Writes a makespan given in ticks for a progress line."""


def _in_ticks(ticks: int) -> str:
    return f"{ticks} ticks"


def _restricted(built: Built, starts: dict[Op, int], free: set[Op], device_of, best: int) -> cp_model.CpModel:
    """A copy of the model with frozen ops kept in their incumbent order and makespan <= best."""
    model = built.model.clone()
    chains: dict[int, list[Op]] = {}
    for op in sorted((op for op in built.ops if op not in free), key=lambda op: (starts[op], op)):
        chains.setdefault(device_of(op), []).append(op)
    for chain in chains.values():
        for a, b in zip(chain, chain[1:]):
            model.add(built.start[a] + built.duration[a] <= built.start[b])
    model.add(built.makespan <= best)
    rehint(built, model, starts, best)
    return model


def improve(built: Built, starts: dict[Op, int], device_of, options: SolveOptions, shown: Shown = _in_ticks,
            since: float | None = None) -> Improved:
    """Large-neighbourhood search from ``starts`` (ticks, a feasible schedule of ``built``) until the
    budget of ``options`` is spent (see the module docstring). ``device_of(op)`` is the op's device;
    ``shown(ticks)`` writes a makespan in the progress lines (in the user's unit); their times and the
    time to the best count from ``since`` (``time.monotonic()``; None: this call's start)."""
    began = time.monotonic() if since is None else since
    rng = random.Random(options.seed)
    microbatches = 1 + max(op.microbatch for op in built.ops)
    best = _makespan(built, starts)
    size, failures, step, improvements, when = TARGET_FREE, 0, 0, 0, None
    reserve = _reserve(options)  # for reading the best back, validating and simulating it
    building = 0.0  # wall time the last neighbourhood model took to build
    # a step may outlast its time limit (at 4,096 ops, 15 s for a limit of 5.7: CP-SAT's presolve of
    # the model's copy does not watch it), so one starts only when the longest so far still fits
    longest = 0.0
    while best > 0 and (deterministic_left := options.deterministic_left()) != 0 \
            and options.allows(reserve + max(2 * building, longest), "the large-neighbourhood search stopped"):
        free = _neighbourhood(rng, step, built, starts, size, microbatches)
        built_at = time.monotonic()
        model = _restricted(built, starts, free, device_of, best)
        building = time.monotonic() - built_at
        if not options.allows(reserve, "the large-neighbourhood search stopped"):
            break
        solver = options.solver(len(built.ops))  # a copy of the whole model: its relaxation by the rule of a solve of it
        solver.parameters.random_seed = options.seed + step
        solver.parameters.max_time_in_seconds = options.remaining_s() - reserve
        dt = STEP_DETERMINISTIC_S if deterministic_left is None else min(STEP_DETERMINISTIC_S, deterministic_left)
        solver.parameters.max_deterministic_time = dt
        # the frozen chains leave little to presolve, at a high cost; but without presolve CP-SAT loads
        # a large model without watching its time limit (PRESOLVE_OPS)
        solver.parameters.cp_model_presolve = len(built.ops) >= PRESOLVE_OPS
        step_began = time.monotonic()
        code = options.run(solver, model)
        longest = max(longest, building + time.monotonic() - step_began)
        options.charge(STEP_FLOOR_S - solver.deterministic_time)  # every step costs at least the floor
        step += 1
        found = round(solver.objective_value) if code in (cp_model.OPTIMAL, cp_model.FEASIBLE) else None
        if found is not None:
            starts = {op: solver.value(built.start[op]) for op in built.ops}
        if found is not None and code == cp_model.OPTIMAL and len(free) == len(built.ops):
            return Improved(starts, found, step, improvements + (found < best), time.monotonic() - began if found < best else when, True)
        if found is not None and found < best:
            best, failures, improvements = found, 0, improvements + 1
            when = time.monotonic() - began
            options.note(f"[{when:7.2f}s] lns step {step}: makespan {shown(best)} ({len(free)} ops free)")
        else:
            failures += 1
            if failures >= PATIENCE:
                size, failures = min(len(built.ops), int(size * GROWTH)), 0
    return Improved(starts, best, step, improvements, when)


# ---- windows of time, re-solved alone, then the whole schedule compacted ----------------------------
@dataclass(frozen=True)
class Timing:
    """What the window search needs of an instance, in ticks: op durations, message delays between
    an op and its data successor, each op's device, the cap K_s of every stage (microbatches in
    order, so F(s, i+K) waits for the end of microbatch i's freeing op; on a device holding several
    stages, the K of the room beside them all, which alone does not keep the device's limit), and
    ``shared``: device -> its memory, for the devices holding several stages under a limit."""

    duration: Callable[[Op], int]
    delay: Callable[[Op, Op], int]
    device: Callable[[Op], int]
    caps: dict[int, int]
    stages: int
    split: bool
    shared: dict[int, DeviceRoom] = field(default_factory=dict)


def _orders_starts(schedule: Schedule, timing: Timing) -> dict[Op, int]:
    starts = earliest_starts(schedule, timing.duration, lambda dep, op: timing.delay(dep, op))
    return {op: int(t) for op, t in starts.items()}


def _to_end(schedule: Schedule, starts: dict[Op, int], timing: Timing, successors) -> dict[Op, int]:
    """Longest path from each op's start to the end of the step, in the schedule's order graph."""
    nxt: dict[Op, Op] = {}
    for order in schedule.orders:
        for a, b in zip(order, order[1:]):
            nxt[a] = b
    to_end: dict[Op, int] = {}
    # successors first: by the order graph, not by start times, which tie for ops lasting 0 ticks
    graph = {op: [*successors[op], *([nxt[op]] if op in nxt else [])] for op in starts}
    for op in reversed(topological_order(graph)):
        d = timing.duration(op)
        best = d
        for succ in successors[op]:
            best = max(best, d + timing.delay(op, succ) + to_end[succ])
        if op in nxt:
            best = max(best, d + to_end[nxt[op]])
        to_end[op] = best
    return to_end


def _window_model(schedule: Schedule, starts: dict[Op, int], timing: Timing, free: dict[Op, None], successors, to_end,
                  horizon: int):
    """CP-SAT model of the free ops alone: everything before them fixed, everything after kept in
    order behind them (its longest path to the end charged to the objective). ``free`` is ordered (a
    dict used as an ordered set): the model's variables follow its order, and a set's order would
    follow the process's string hashes, so the same seed would give different schedules from one
    process to the next."""
    model = cp_model.CpModel()
    opens = {d: min((starts[f] for f in order if f in free), default=horizon) for d, order in enumerate(schedule.orders)}
    free_from: dict[int, int] = {}  # device -> end of its last fixed op before the window
    for d, order in enumerate(schedule.orders):
        ends = [starts[op] + timing.duration(op) for op in order if op not in free and starts[op] < opens[d]]
        free_from[d] = max(ends, default=0)
    free_kind = freeing_kind(timing.split)
    lower: dict[Op, int] = {}
    for op in free:
        lb = free_from[timing.device(op)]
        for dep in dependencies(op, timing.stages, timing.split):
            if dep not in free:
                lb = max(lb, starts[dep] + timing.duration(dep) + timing.delay(dep, op))
        lower[op] = lb
    start = {op: model.new_int_var(lower[op], horizon, "") for op in free}
    end = {op: start[op] + timing.duration(op) for op in free}
    total = model.new_int_var(0, 2 * horizon, "z")
    devices: dict[int, list] = {}
    for op in free:
        devices.setdefault(timing.device(op), []).append(model.new_fixed_size_interval_var(start[op], timing.duration(op), ""))
        for dep in dependencies(op, timing.stages, timing.split):
            if dep in free:
                model.add(start[op] >= end[dep] + timing.delay(dep, op))
        before = Op(op.stage, op.kind, op.microbatch - 1)
        if before in free:
            model.add(start[op] >= end[before])
        elif op.microbatch > 0:
            model.add(start[op] >= starts[before] + timing.duration(before))
        k = timing.caps.get(op.stage)
        if op.kind is Kind.F and k is not None and op.microbatch >= k:
            freed = Op(op.stage, free_kind, op.microbatch - k)
            if freed in free:
                model.add(start[op] >= end[freed])
            else:
                model.add(start[op] >= starts[freed] + timing.duration(freed))
        model.add(total >= end[op])
        for succ in successors[op]:
            if succ not in free:
                model.add(total >= end[op] + timing.delay(op, succ) + to_end[succ])
    for d, order in enumerate(schedule.orders):
        after = [op for op in order if op not in free and starts[op] >= opens[d]]
        if after and d in devices:
            for op in free:
                if timing.device(op) == d:
                    model.add(total >= end[op] + to_end[after[0]])
    for intervals in devices.values():
        model.add_no_overlap(intervals)
    for d, memory in timing.shared.items():
        _add_shared_memory(model, schedule.orders[d], memory, free, starts, start, end, opens[d], free_kind, horizon)
    for op in free:
        model.add_hint(start[op], starts[op])
    model.minimize(total)
    return model, start


def _add_shared_memory(model: cp_model.CpModel, order, memory: DeviceRoom, free, starts, start, end, opens: int,
                       free_kind: Kind, horizon: int) -> None:
    """The limit of a device holding several stages, over the window's ops: a cumulative of the
    activations live in the window. One device runs its ops in sequence, so what is live depends on
    its order alone: the ops before the window (kept) leave some activations live, those freed
    after it take room throughout, those freed in it until their freeing op ends; an activation
    made in the window lives until its freeing op ends (in the window) or past the window's end."""
    made_before = {(op.stage, op.microbatch) for op in order if op.kind is Kind.F and op not in free and starts[op] < opens}
    freed_in = {(op.stage, op.microbatch): op for op in order if op.kind is free_kind and op in free}
    made_in = {(op.stage, op.microbatch): op for op in order if op.kind is Kind.F and op in free}
    if not made_in:
        return  # nothing made in the window: it only frees, and the order before it kept the limit
    freed_before = {(op.stage, op.microbatch) for op in order if op.kind is free_kind and op not in free and starts[op] < opens}
    beyond = 2 * horizon + 1  # past every op of the window
    room = memory.room
    intervals, demands = [], []
    for stage, microbatch in made_before - freed_before:
        if (stage, microbatch) in freed_in:
            last = end[freed_in[stage, microbatch]]
            intervals.append(model.new_interval_var(0, last, last, ""))
            demands.append(memory.demand[stage])
        else:
            room -= memory.demand[stage]
    for key, made in made_in.items():
        last = end[freed_in[key]] if key in freed_in else beyond
        length = model.new_int_var(0, beyond, "")
        model.add(length == last - start[made])
        intervals.append(model.new_interval_var(start[made], length, last, ""))
        demands.append(memory.demand[key[0]])
    model.add_cumulative(intervals, demands, max(room, 0))


def window_order(ops: list[Op], start: dict[Op, int], duration: Callable[[Op], int], rank: dict[Op, int]) -> list[Op]:
    """A device's window ops in the order of their new starts and ends; ops lasting 0 ticks may
    share both, and then come in ``rank`` order (a topological order of the data dependencies), so
    a dependency between them is never reversed (which would deadlock the device)."""
    return sorted(ops, key=lambda op: (start[op], start[op] + duration(op), rank[op]))


def improve_windows(schedule: Schedule, timing: Timing, options: SolveOptions,
                    shown: Shown = _in_ticks, since: float | None = None) -> tuple[Schedule, Improved]:
    """Large-neighbourhood search by windows of time re-solved alone (see the module docstring);
    ``shown`` and ``since`` as in :func:`improve`."""
    began = time.monotonic()
    since = began if since is None else since
    rng = random.Random(options.seed)
    ops = [op for order in schedule.orders for op in order]
    successors: dict[Op, list[Op]] = {op: [] for op in ops}
    for op in ops:
        for dep in dependencies(op, timing.stages, timing.split):
            successors[dep].append(op)
    rank = {op: k for k, op in enumerate(topological_order(successors))}  # ties of ops lasting 0 ticks
    starts = _orders_starts(schedule, timing)
    best = max(starts[op] + timing.duration(op) for op in ops)
    to_end = _to_end(schedule, starts, timing, successors)
    # a step's work outside CP-SAT (building the window's model, timing the new orders, the longest
    # paths) is about twice this timing of the whole schedule, or the most a step has taken so far:
    # seconds at hundreds of thousands of ops, so a step starts only when they remain
    outside = 2 * (time.monotonic() - began)
    step_began, solve_s = None, 0.0
    size, failures, step, improvements, when = TARGET_FREE, 0, 0, 0, None
    reserve = _reserve(options)
    anchored = {"end": TARGET_FREE, "start": TARGET_FREE}  # free ops of the windows at the two ends
    while True:
        if step_began is not None:
            outside = max(outside, time.monotonic() - step_began - solve_s)
        if (deterministic_left := options.deterministic_left()) == 0 \
                or not options.allows(reserve + outside, "the window search stopped"):
            break
        step_began, solve_s = time.monotonic(), 0.0
        anchor = ANCHORS[step % len(ANCHORS)]
        width = max(1, best * (size if anchor is None else anchored[anchor]) // len(ops))
        if anchor is None:
            first = rng.randrange(0, max(1, best - width + 1))
        else:
            first = 0 if anchor == "start" else max(0, best - width)
            anchored[anchor] = min(len(ops), int(anchored[anchor] * GROWTH))  # larger next time, unless it improves
        free = dict.fromkeys(op for op in ops if first <= starts[op] < first + width)
        step += 1
        if not free:
            continue
        model, start = _window_model(schedule, starts, timing, free, successors, to_end, best)
        solver = options.solver(len(free))  # the linear relaxation by the rule of a solve of its size
        solver.parameters.random_seed = options.seed + step
        solver.parameters.max_time_in_seconds = max(0.01, options.remaining_s() - reserve - outside)
        dt = STEP_DETERMINISTIC_S if deterministic_left is None else min(STEP_DETERMINISTIC_S, deterministic_left)
        solver.parameters.max_deterministic_time = dt
        solve_began = time.monotonic()
        code = options.run(solver, model)
        solve_s = time.monotonic() - solve_began
        options.charge(STEP_FLOOR_S - solver.deterministic_time)  # every step costs at least the floor
        changed = None
        if code in (cp_model.OPTIMAL, cp_model.FEASIBLE):
            moved = {op: solver.value(start[op]) for op in free}
            orders = []
            for order in schedule.orders:
                kept = [op for op in order if op not in free]
                head = [op for op in kept if starts[op] < first]
                tail = [op for op in kept if starts[op] >= first]
                mine = window_order([op for op in order if op in free], moved, timing.duration, rank)
                orders.append(tuple(head + mine + tail))
            candidate = replace(schedule, orders=tuple(orders), overlapped=())  # pairs are two ops to the solver
            try:
                new_starts = _orders_starts(candidate, timing)
            except ScheduleError:
                new_starts = None
            if new_starts is not None:
                span = max(new_starts[op] + timing.duration(op) for op in ops)
                if span <= best:
                    changed = (candidate, new_starts, span)
        if changed is not None and changed[2] < best:
            if anchor is not None:
                anchored[anchor] = max(TARGET_FREE, int(anchored[anchor] / GROWTH))  # same size again
            schedule, starts, best = changed
            to_end = _to_end(schedule, starts, timing, successors)
            failures, improvements, when = 0, improvements + 1, time.monotonic() - since
            options.note(f"[{when:7.2f}s] lns step {step}: makespan {shown(best)} ({len(free)} ops free)")
        else:
            if changed is not None:
                schedule, starts = changed[0], changed[1]
                to_end = _to_end(schedule, starts, timing, successors)
            if anchor is not None:
                continue
            failures += 1
            if failures >= PATIENCE:
                size, failures = min(len(ops), int(size * GROWTH)), 0
    return schedule, Improved(starts, best, step, improvements, when)
