"""A MILP baseline in the style of Zero Bubble's archived ILP, solved with HiGHS.

Zero Bubble (sail-sg/zero-bubble-pipeline-parallelism, ``auto_schedule.py``, PuLP + CBC, disabled in
their repository and limited to about 500 ops) schedules a pipeline as a disjunctive MILP: a start
time per op, a binary order variable for each pair of ops on one device, big-M constraints, and the
makespan as the objective. This module writes the same kind of model (our own code) for a ppopt
instance and a FIXED placement (``linear``, ``looped``, ``v``, ``zigzag``: every stage on one device),
so it can be compared with the CP-SAT search on the identical integer problem:

- **data**: durations and message delays in the ticks of the CP-SAT model
  (:func:`ppopt.solve.ticks.resolution` and :func:`~ppopt.solve.ticks.to_ticks`, exactly as
  :func:`ppopt.solve.search.search` computes them), so both solvers see the same integers;
- **variables**: a continuous start per op, an integer makespan (the optimum is integral: every
  datum is an integer and the constraints given the order binaries form a difference system), and a
  binary ``y[a, b]`` for every pair of ops on one device whose order is not already implied by the
  precedences below (as Zero Bubble's ILP, which creates order variables only for pairs that are not
  ancestors of each other: fixing an implied order adds nothing);
- **constraints**:
  data dependencies ``start(op) >= end(dep) + delay`` (delay ``instance.comm(stage, a, b)`` when the
  two stages sit on different devices);
  the microbatch-order **dominance rule** of the CP-SAT model (each stage runs each op kind in
  microbatch order: ``end(s, k, m) <= start(s, k, m + 1)``) -- this gives the MILP exactly the same
  dominance help as CP-SAT, and is what makes the memory cap a precedence;
  the **memory cap** on devices holding a single stage: K = floor((limit - persistent) / activation)
  live activations, i.e. ``start F(s, m + K) >= end free(s, m)`` with free = B (W when backward is
  split); caps on devices holding several stages would need a cumulative resource and are refused;
  **disjunctive** pairs: ``start_a + dur_a <= start_b + M (1 - y)`` and ``start_b + dur_b <= start_a + M y``,
  with ``M`` the horizon;
  ``makespan >= end`` of every freeing op (B, or W when split), and ``makespan >=`` the analytic lower
  bound of :mod:`ppopt.solve.bounds` in ticks (CP-SAT gets the same bound);
- **objective**: minimise the makespan;
- **solve**: HiGHS, one thread, a time limit, warm-started with the best handcrafted schedule of the
  space that satisfies the model (CP-SAT is hinted with it too); its makespan is also the horizon
  (big-M), as in the CP-SAT model. Without a fitting handcrafted schedule the horizon is the serial
  one (every op and message one after another).

``milp_solve(instance, space, time_limit_s)`` returns a dict: status, objective and bound in the
instance's unit (ticks * tick), gap, wall time and model sizes.
Run ``python benchmarks/milp_baseline.py`` for a small demonstration.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field

import highspy
import numpy as np

from ppopt.graph import topological_order
from ppopt.ir import Kind, Op, dependencies, freeing_kind, required_ops
from ppopt.solve.bounds import Shape, lower_bounds
from ppopt.solve.instance import Instance
from ppopt.solve.model import exact_rooms, memory_units  # the CP-SAT model's memory rounding, so K is identical
from ppopt.solve.space import Space, handcrafted_in, placement_of, stage_count
from ppopt.solve.ticks import resolution, to_ticks
from ppopt.table import earliest_starts

INF = highspy.kHighsInf


def _new_highs() -> highspy.Highs:
    """A Highs object, without the banner it prints on stdout when created."""
    import os
    import sys

    sys.stdout.flush()
    saved = os.dup(1)
    try:
        with open(os.devnull, "w") as null:
            os.dup2(null.fileno(), 1)
            h = highspy.Highs()
    finally:
        os.dup2(saved, 1)
        os.close(saved)
    return h


# ---- data ---------------------------------------------------------------------------------------
def _seconds(instance: Instance, stage: int, kind: Kind) -> float:
    c = instance.costs[stage]
    return {Kind.F: c.forward_s, Kind.B: c.backward_s, Kind.I: c.input_grad_s, Kind.W: c.weight_grad_s}[kind]


@dataclass
class Data:
    """The integer problem: ops, their device, durations and delays in ticks."""

    instance: Instance
    space: Space
    tick: float
    stages: int
    split: bool
    placement: tuple[tuple[int, ...], ...]
    ops: list[Op]
    device: dict[Op, int]
    duration: dict[Op, int]
    cap: dict[int, int] = field(default_factory=dict)  # single-stage device's stage -> K live activations

    def delay(self, dep: Op, op: Op) -> int:
        a, b = self.device[dep], self.device[op]
        return 0 if a == b else to_ticks(self.instance.comm(dep.stage, a, b), self.tick)


def problem_data(instance: Instance, space: Space) -> Data:
    """Ticks, ops and devices exactly as :func:`ppopt.solve.search.search` builds them."""
    p = instance.devices
    placement = placement_of(space, p)
    if placement is None or space.fixed:
        raise ValueError(f"the MILP baseline needs a fixed placement (linear, looped, v...), got {space.describe()}")
    if any(len(holders) != 1 for holders in placement):
        raise ValueError(f"the MILP baseline needs every stage on one device, got {space.describe()}")
    stages = stage_count(space, p)
    if stages != instance.stages:
        raise ValueError(f"instance has {instance.stages} stages, space {space.describe()} needs {stages}")
    split = space.split_backward
    values = [_seconds(instance, s, k) for s in range(stages) for k in Kind]
    values += [instance.comm(s, a, b) for s in range(stages) for a in range(p) for b in range(p) if a != b]
    tick = resolution(values)
    ops = required_ops(stages, instance.microbatches, split)
    device = {op: placement[op.stage][0] for op in ops}
    duration = {op: to_ticks(_seconds(instance, op.stage, op.kind), tick) for op in ops}
    data = Data(instance, space, tick, stages, split, placement, ops, device, duration)
    data.cap = _caps(data)
    return data


def _caps(data: Data) -> dict[int, int]:
    """K per single-stage device, rounded as the CP-SAT model rounds it."""
    inst = data.instance
    if inst.memory_limit is None:
        return {}
    demand, _, _, _ = memory_units(inst, inst.memory_limit)
    caps = {}
    for d in range(inst.devices):
        held = [s for s in range(data.stages) if data.placement[s][0] == d]
        if not held:
            continue
        if len(held) > 1:
            raise NotImplementedError(
                f"memory cap on device {d} holding stages {held}: needs a cumulative resource, not in this baseline"
            )
        s = held[0]
        if demand[s] > 0:
            caps[s] = exact_rooms(inst, [held])[0] // demand[s]
    return caps


# ---- constraints as rows ------------------------------------------------------------------------
@dataclass
class Rows:
    """Sparse rows ``lower <= sum(coef * x) <= upper``."""

    index: list[list[int]] = field(default_factory=list)
    value: list[list[float]] = field(default_factory=list)
    lower: list[float] = field(default_factory=list)
    upper: list[float] = field(default_factory=list)

    def add(self, terms: dict[int, float], lower: float, upper: float) -> None:
        self.index.append(list(terms))
        self.value.append(list(terms.values()))
        self.lower.append(lower)
        self.upper.append(upper)

    def violated(self, x: np.ndarray, tol: float = 1e-6) -> int:
        bad = 0
        for idx, val, lo, hi in zip(self.index, self.value, self.lower, self.upper):
            activity = float(np.dot(x[idx], val))
            bad += activity < lo - tol or activity > hi + tol
        return bad


def precedence_arcs(data: Data) -> list[tuple[Op, Op, int]]:
    """(a, b, lag): start(b) >= start(a) + lag. Dependencies, dominance and the memory cap."""
    arcs = []
    for op in data.ops:
        for dep in dependencies(op, data.stages, data.split):
            arcs.append((dep, op, data.duration[dep] + data.delay(dep, op)))
    kinds = (Kind.F, Kind.I, Kind.W) if data.split else (Kind.F, Kind.B)
    m = data.instance.microbatches
    for s in range(data.stages):
        for kind in kinds:  # dominance: microbatch order within (stage, kind)
            for mb in range(m - 1):
                a = Op(s, kind, mb)
                arcs.append((a, Op(s, kind, mb + 1), data.duration[a]))
    free = freeing_kind(data.split)
    for s, k in data.cap.items():  # memory: F(m + K) after free(m)
        for mb in range(m - k):
            a = Op(s, free, mb)
            arcs.append((a, Op(s, Kind.F, mb + k), data.duration[a]))
    return arcs


def unordered_pairs(data: Data, arcs: list[tuple[Op, Op, int]]) -> list[tuple[Op, Op]]:
    """Pairs of ops on one device that no chain of precedences orders (they get a binary)."""
    index = {op: i for i, op in enumerate(data.ops)}
    succ: dict[int, list[int]] = {i: [] for i in range(len(data.ops))}
    for a, b, _ in arcs:
        succ[index[a]].append(index[b])
    order = topological_order(succ)
    reach = [0] * len(data.ops)  # bitset of descendants
    for i in reversed(order):
        bits = 0
        for j in succ[i]:
            bits |= reach[j] | (1 << j)
        reach[i] = bits
    by_device: dict[int, list[int]] = {}
    for op in data.ops:
        by_device.setdefault(data.device[op], []).append(index[op])
    pairs = []
    for members in by_device.values():
        for x, i in enumerate(members):
            for j in members[x + 1 :]:
                if not (reach[i] >> j) & 1 and not (reach[j] >> i) & 1:
                    pairs.append((data.ops[i], data.ops[j]))
    return pairs


# ---- hint and horizon ---------------------------------------------------------------------------
def _hint_starts(data: Data) -> list[dict[Op, int]]:
    """Each handcrafted schedule of the space, timed in ticks (earliest starts)."""
    found = []
    for schedule in handcrafted_in(data.space, data.instance.devices, data.instance.microbatches):
        if schedule.placement != data.placement:
            continue
        starts = earliest_starts(
            schedule,
            lambda op: data.duration[op],
            lambda dep, op: data.delay(dep, op),
        )
        found.append({op: int(t) for op, t in starts.items()})
    return found


def serial_horizon(data: Data) -> int:
    """Every op and every message one after another: a makespan any schedule can reach."""
    return sum(data.duration.values()) + sum(
        data.delay(dep, op) for op in data.ops for dep in dependencies(op, data.stages, data.split)
    ) + 1


# ---- the model -------------------------------------------------------------------------------------
@dataclass
class Milp:
    data: Data
    column: dict[Op, int]
    makespan: int
    order: dict[tuple[Op, Op], int]
    rows: Rows
    lower: np.ndarray
    upper: np.ndarray
    integral: list[int]
    horizon: int
    lower_bound: int
    hint: np.ndarray | None
    hint_makespan: int | None


def build_milp(instance: Instance, space: Space, hint: bool = True, analytic_bound: bool = True) -> Milp:
    data = problem_data(instance, space)
    arcs = precedence_arcs(data)
    pairs = unordered_pairs(data, arcs)

    # variables: starts, makespan, order binaries
    column = {op: i for i, op in enumerate(data.ops)}
    makespan = len(data.ops)
    order = {pair: makespan + 1 + k for k, pair in enumerate(pairs)}
    n = makespan + 1 + len(pairs)

    # constraints (the horizon, i.e. big-M, is filled in once the hint is known)
    rows = Rows()
    for a, b, lag in arcs:
        rows.add({column[b]: 1.0, column[a]: -1.0}, lag, INF)
    last = freeing_kind(data.split)
    for op in data.ops:
        if op.kind is last:
            rows.add({makespan: 1.0, column[op]: -1.0}, data.duration[op], INF)
    lower_bound = 0
    if analytic_bound:
        ticks_of = lambda s, k: to_ticks(_seconds(instance, s, k), data.tick)  # noqa: E731
        delay_of = lambda s, a, b: to_ticks(instance.comm(s, a, b), data.tick)  # noqa: E731
        cap_of = (lambda s: data.cap.get(s)) if data.cap else (lambda s: None)
        shape = Shape(data.stages, instance.microbatches, instance.devices, data.placement, data.split)
        bounds = lower_bounds(shape, ticks_of, delay_of, cap_of)
        lower_bound = math.ceil(bounds.best - 1e-9)

    # hint: the best handcrafted schedule that satisfies the model so far (with its order binaries)
    best_x, best_end = None, None
    if hint:
        for starts in _hint_starts(data):
            end = max(t + data.duration[op] for op, t in starts.items())
            x = np.zeros(n)
            for op, t in starts.items():
                x[column[op]] = t
            x[makespan] = max(end, lower_bound)
            for (a, b), k in order.items():
                x[k] = 1.0 if starts[a] + data.duration[a] <= starts[b] else 0.0
            if rows.violated(x) == 0 and (best_end is None or x[makespan] < best_end):
                best_x, best_end = x, int(x[makespan])
    horizon = best_end if best_end is not None else max(serial_horizon(data), lower_bound)
    big_m = float(horizon)
    for (a, b), k in order.items():
        ia, ib = column[a], column[b]
        # y = 1: a before b; y = 0: b before a
        rows.add({ia: 1.0, ib: -1.0, k: big_m}, -INF, big_m - data.duration[a])
        rows.add({ib: 1.0, ia: -1.0, k: -big_m}, -INF, -data.duration[b])
    if best_x is not None and rows.violated(best_x):  # cannot happen: the pairs agree with the starts
        best_x, best_end = None, None

    lower = np.zeros(n)
    upper = np.ones(n)
    for op, i in column.items():
        upper[i] = horizon - data.duration[op]
    lower[makespan], upper[makespan] = lower_bound, horizon
    integral = [makespan] + list(order.values())
    return Milp(data, column, makespan, order, rows, lower, upper, integral, horizon, lower_bound, best_x, best_end)


# ---- solve -----------------------------------------------------------------------------------------
def solve_milp(milp: Milp, time_limit_s: float, threads: int = 1, log: bool = False) -> dict:
    h = _new_highs()
    h.setOptionValue("output_flag", log)
    h.setOptionValue("threads", threads)
    h.setOptionValue("time_limit", float(time_limit_s))
    h.setOptionValue("mip_rel_gap", 0.0)
    h.setOptionValue("mip_abs_gap", 0.999)  # the optimum is an integer: a gap below 1 tick proves it
    h.setOptionValue("random_seed", 0)
    n = len(milp.lower)
    cost = np.zeros(n)
    cost[milp.makespan] = 1.0
    h.addVars(n, milp.lower, milp.upper)
    h.changeColsCost(n, np.arange(n, dtype=np.int32), cost)
    integ = np.array(milp.integral, dtype=np.int32)
    h.changeColsIntegrality(len(integ), integ, np.full(len(integ), highspy.HighsVarType.kInteger))
    rows = milp.rows
    starts = np.zeros(len(rows.index), dtype=np.int32)
    total = 0
    for r, idx in enumerate(rows.index):
        starts[r] = total
        total += len(idx)
    index = np.fromiter((i for idx in rows.index for i in idx), dtype=np.int32, count=total)
    value = np.fromiter((v for vals in rows.value for v in vals), dtype=np.float64, count=total)
    h.addRows(len(rows.index), np.array(rows.lower), np.array(rows.upper), total, starts, index, value)
    if milp.hint is not None:
        solution = highspy.HighsSolution()
        solution.col_value = list(milp.hint)
        solution.value_valid = True
        h.setSolution(solution)
    began = time.monotonic()
    h.run()
    solve_s = time.monotonic() - began
    status = h.getModelStatus()
    info = h.getInfo()
    has_solution = info.primal_solution_status == 2  # kSolutionStatusFeasible
    tick = milp.data.tick
    objective = info.objective_function_value if has_solution else None
    bound = math.ceil(info.mip_dual_bound - 1e-6) if math.isfinite(info.mip_dual_bound) else milp.lower_bound
    if status == highspy.HighsModelStatus.kOptimal:
        name, bound = "optimal", round(objective)
    elif status == highspy.HighsModelStatus.kInfeasible:
        name = "infeasible"
    elif has_solution:
        name = "feasible"
    else:
        name = "unknown"
    return {
        "status": name,
        "objective": None if objective is None else round(objective) * tick,
        "bound": bound * tick,
        "gap": None if objective is None or bound <= 0 else max(0.0, (round(objective) - bound) / bound),
        "solve_time_s": solve_s,
        "highs_status": h.modelStatusToString(status),
    }


def milp_solve(instance: Instance, space: Space, time_limit_s: float, threads: int = 1, hint: bool = True, log: bool = False) -> dict:
    """Build and solve the baseline MILP (see the module docstring).

    Returns status (optimal / feasible / infeasible / unknown), objective and bound in the instance's
    unit, gap, wall_time_s (build + solve), solve_time_s, and the model's sizes.
    """
    began = time.monotonic()
    data = problem_data(instance, space)
    if any(k < 1 for k in data.cap.values()):
        return {"status": "infeasible", "objective": None, "bound": math.inf, "gap": None, "wall_time_s": time.monotonic() - began,
                "solve_time_s": 0.0, "ops": len(data.ops), "binaries": 0, "rows": 0, "tick": data.tick, "horizon": None,
                "hint_makespan": None, "highs_status": "not solved (no room for one activation)"}
    milp = build_milp(instance, space, hint=hint)
    build_s = time.monotonic() - began
    result = solve_milp(milp, time_limit_s, threads, log)  # the solve's limit; CP-SAT's covers its whole search
    result.update(
        wall_time_s=time.monotonic() - began,
        build_time_s=build_s,
        ops=len(milp.data.ops),
        binaries=len(milp.order),
        rows=len(milp.rows.lower),
        tick=milp.data.tick,
        horizon=milp.horizon * milp.data.tick,
        hint_makespan=None if milp.hint_makespan is None else milp.hint_makespan * milp.data.tick,
    )
    return result


if __name__ == "__main__":
    from ppopt.solve.instance import unit_instance
    from ppopt.solve.space import parse_space
    from ppopt.units import UnitCosts

    for spec, p, m, comm, limit in [("placement=linear", 4, 8, 1.0, 4), ("placement=linear,backward=split", 4, 8, 0.0, 4)]:
        space = parse_space(spec)
        units = UnitCosts(1.0, 2.0, 1.0 if space.split_backward else None, comm)
        inst = unit_instance(p, m, stage_count(space, p), units, limit)
        print(spec, f"p={p} m={m} comm={comm} cap={limit}", milp_solve(inst, space, 30))
