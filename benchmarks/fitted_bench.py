"""Handcrafted schedules fitted to a memory cap against the greedy hint, in the same run: the step
each reaches and the time it takes to build.

Baseline: ``best_greedy_schedule`` (the greedy list schedule and its spaced variants, the shortest by
its own timing), the hint of ppopt's own for a space whose handcrafted schedules exceed the cap
before ``ppopt.solve.fitted`` existed. Measured: ``fitted_schedule`` of every handcrafted schedule
of the space over the cap (``-`` where its dispatch cannot progress). Steps are the simulator's, in
slots (unit costs F = 1, B = 2), with the instance's message delay and cap. Timed: building the
schedules (best of three); not timed: generating the handcrafted schedules, the instance, the
simulation and validation of the results.

Run: ``python benchmarks/fitted_bench.py`` (about a minute on 2 cores).
"""

from __future__ import annotations

import os
from functools import partial

from greedy_bench import best_of_three  # run as a script: benchmarks/ is on the path

from ppopt.ir import Schedule
from ppopt.simulate import simulate
from ppopt.solve.fitted import fitted_schedule
from ppopt.solve.greedy import best_greedy_schedule
from ppopt.solve.instance import Instance, unit_instance
from ppopt.solve.space import handcrafted_in, parse_space, placement_of
from ppopt.units import UnitCosts
from ppopt.validation import validate

INSTANCES = (  # (space, p, m, message delay in slots, cap in live activations of a 1/p share)
    ("placement=looped", 16, 64, 0, 16),
    ("placement=looped", 16, 64, 1, 16),
    ("placement=looped", 32, 256, 0, 32),
    ("placement=looped", 32, 256, 1, 32),
    ("placement=looped", 8, 64, 1, 6),
    ("placement=linear", 16, 64, 1, 16),
    ("placement=linear,backward=split", 16, 64, 1, 12),
    ("placement=v", 16, 64, 1, 12),
    ("placement=zigzag", 8, 64, 1, 8),
)


def _step(schedule: Schedule | None, instance: Instance) -> float | None:
    """The simulated step of a schedule (validated first), slots; None for no schedule."""
    return None if schedule is None else simulate(validate(schedule), instance.costs, instance.system).step_time_s


def main() -> int:
    print(f"load average at start {os.getloadavg()[0]:.2f} (1 min) on {os.cpu_count()} cores")
    print(f"{'space':32} {'p x m':>9} {'comm':>4} {'cap':>4} {'schedule (over the cap)':>24} {'own':>8} {'fitted':>8} "
          f"{'greedy':>8} {'change':>8} {'fitted s':>9} {'greedy s':>9}")
    for text, p, m, comm, cap in INSTANCES:
        space = parse_space(text)
        where = placement_of(space, p)
        assert where is not None
        instance = unit_instance(p, m, len(where), UnitCosts(1, 2, 1 if space.split_backward else None, comm), memory_limit=float(cap))
        greedy, greedy_s = best_of_three(partial(best_greedy_schedule, instance, where, space.split_backward))
        greedy_step = _step(greedy, instance)
        for handcrafted in handcrafted_in(space, p, m):
            own = simulate(handcrafted, instance.costs, instance.system)
            if instance.fits(max(own.peak_activation_bytes)):
                continue
            fitted, fitted_s = best_of_three(partial(fitted_schedule, handcrafted, instance))
            fitted_step = _step(fitted, instance)
            change = "-" if fitted_step is None or greedy_step is None else f"{fitted_step / greedy_step - 1:+.1%}"
            print(f"{text:32} {f'{p} x {m}':>9} {comm:>4} {cap:>4} {handcrafted.name:>24} {own.step_time_s:>8g} "
                  f"{fitted_step if fitted_step is not None else '-'!s:>8} {greedy_step!s:>8} {change:>8} {fitted_s:>9.3f} "
                  f"{greedy_s:>9.3f}", flush=True)
    print(f"load average at end {os.getloadavg()[0]:.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
