"""The greedy hint's variants against its default, in the same run: the step each reaches and the time
it takes to build.

Baseline: ``greedy_schedule`` with its defaults (all of a microbatch's activations on a device
reserved when it is admitted, no entry spacing), the only greedy hint before 5 December 2026.
Measured: ``best_greedy_schedule`` (that one and the variants of ``ENTRY_SPACINGS``, the shortest by
its own timing). Steps are the simulator's, in slots (unit costs F = 1, B = 2, one-slot messages, a
cap of p live activations). Timed: building the schedules (best of three); not timed: the instance,
the simulation and validation of the result.

Run: ``python benchmarks/greedy_bench.py`` (about half a minute on 2 cores).
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from functools import partial

from ppopt.ir import Schedule
from ppopt.simulate import simulate
from ppopt.solve.greedy import best_greedy_schedule, greedy_schedule
from ppopt.solve.instance import unit_instance
from ppopt.solve.space import parse_space, placement_of
from ppopt.units import UnitCosts
from ppopt.validation import validate

INSTANCES = (  # (space, p, m)
    ("placement=linear", 16, 64),
    ("placement=linear", 32, 256),
    ("placement=linear,backward=split", 8, 64),
    ("placement=looped", 8, 160),
    ("placement=looped", 32, 256),
    ("placement=v", 8, 32),
    ("placement=v", 32, 256),
    ("placement=v,backward=split", 8, 64),
    ("placement=zigzag", 16, 80),
)


def best_of_three(build: Callable[[], Schedule | None]) -> tuple[Schedule | None, float]:
    """The result of ``build()`` and its best wall time of three, seconds."""
    best, result = float("inf"), None
    for _ in range(3):
        began = time.perf_counter()
        result = build()
        best = min(best, time.perf_counter() - began)
    return result, best


def main() -> int:
    print(f"load average at start {os.getloadavg()[0]:.2f} (1 min) on {os.cpu_count()} cores")
    print(f"{'space':34} {'p x m':>9} {'default':>9} {'best':>9} {'change':>8} {'default s':>10} {'best s':>8}")
    for text, p, m in INSTANCES:
        space = parse_space(text)
        where = placement_of(space, p)
        assert where is not None
        instance = unit_instance(p, m, len(where), UnitCosts(1, 2, None, 1), memory_limit=float(p))
        steps, seconds = [], []
        for build in (greedy_schedule, best_greedy_schedule):
            schedule, spent = best_of_three(partial(build, instance, where, space.split_backward))
            steps.append(None if schedule is None else simulate(validate(schedule), instance.costs, instance.system).step_time_s)
            seconds.append(spent)
        default, best = steps
        change = "-" if default is None or best is None else f"{best / default - 1:+.1%}"
        print(f"{text:34} {f'{p} x {m}':>9} {default!s:>9} {best!s:>9} {change:>8} {seconds[0]:>10.3f} {seconds[1]:>8.3f}")
    print(f"load average at end {os.getloadavg()[0]:.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
