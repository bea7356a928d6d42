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
run (:class:`ppopt.solve.options.SolveOptions`; with ``deterministic_time`` set, the total
deterministic time decides, so the result is the same on any machine).
Only placements where every stage has one device (linear, looped, V, zig-zag) are supported.
"""

from __future__ import annotations

import random
import time
from dataclasses import dataclass

from ortools.sat.python import cp_model

from ppopt.ir import Op
from ppopt.solve.model import Built
from ppopt.solve.options import SolveOptions

TARGET_FREE = 240
"""Free ops a neighbourhood starts with (grown by :data:`GROWTH` after :data:`PATIENCE` failures)."""
GROWTH = 1.5
PATIENCE = 4
RESERVE_SHARE = 0.05
"""Share of the command's budget the search leaves for what follows it (validating and simulating the
best schedule at tens of thousands of ops takes seconds); a step also starts only when at least twice
the last neighbourhood's model-building time remains."""
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
    model.clear_hints()
    for op in built.ops:
        model.add_hint(built.start[op], starts[op])
    model.add_hint(built.makespan, best)
    return model


def improve(built: Built, starts: dict[Op, int], device_of, options: SolveOptions) -> Improved:
    """Large-neighbourhood search from ``starts`` (ticks, a feasible schedule of ``built``) until the
    budget of ``options`` is spent (see the module docstring). ``device_of(op)`` is the op's device."""
    began = time.monotonic()
    rng = random.Random(options.seed)
    microbatches = 1 + max(op.microbatch for op in built.ops)
    best = _makespan(built, starts)
    size, failures, step, improvements, when = TARGET_FREE, 0, 0, 0, None
    deterministic_left = options.deterministic_time
    reserve = RESERVE_SHARE * options.time_limit_s  # for reading the best back, validating and simulating it
    building = 0.0  # wall time the last neighbourhood model took to build
    while options.remaining_s() > reserve + 2 * building and best > 0 and (deterministic_left is None or deterministic_left > 0):
        free = _neighbourhood(rng, step, built, starts, size, microbatches)
        built_at = time.monotonic()
        model = _restricted(built, starts, free, device_of, best)
        building = time.monotonic() - built_at
        if options.remaining_s() <= reserve:
            break
        solver = cp_model.CpSolver()
        solver.parameters.num_workers = options.workers
        solver.parameters.random_seed = options.seed + step
        solver.parameters.max_time_in_seconds = options.remaining_s() - reserve
        dt = STEP_DETERMINISTIC_S if deterministic_left is None else min(STEP_DETERMINISTIC_S, deterministic_left)
        solver.parameters.max_deterministic_time = dt
        solver.parameters.cp_model_presolve = False  # the frozen chains leave little to presolve, at a high cost
        code = solver.solve(model)
        if deterministic_left is not None:
            deterministic_left -= solver.deterministic_time
        step += 1
        found = round(solver.objective_value) if code in (cp_model.OPTIMAL, cp_model.FEASIBLE) else None
        if found is not None:
            starts = {op: solver.value(built.start[op]) for op in built.ops}
        if found is not None and code == cp_model.OPTIMAL and len(free) == len(built.ops):
            return Improved(starts, found, step, improvements + (found < best), time.monotonic() - began if found < best else when, True)
        if found is not None and found < best:
            best, failures, improvements = found, 0, improvements + 1
            when = time.monotonic() - began
            options.note(f"[{when:7.2f}s] lns step {step}: makespan {best} ticks ({len(free)} ops free)")
        else:
            failures += 1
            if failures >= PATIENCE:
                size, failures = min(len(built.ops), int(size * GROWTH)), 0
    return Improved(starts, best, step, improvements, when)
