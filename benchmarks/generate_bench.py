"""Generator throughput: ops per second of every schedule family's generator, beside 1F1B's.

Timed: ``ppopt.generators.generate(name, p, m)`` alone (the orders, before validation or tables),
the best of three runs per family and shape. Baseline: the 1F1B generator at the same shape in the
same run, so the ratio does not depend on the machine. Shapes: many devices and one microbatch
(p = 20,000, m = 1: the list-scheduling families used to visit every device in every slot, which
made them quadratic in p) and a square one (p = m = 400). Families that do not apply at a shape say
why. The machine's load average at the start and at the end is printed, since the machine may be shared.

Run: ``PYTHONPATH=. python benchmarks/generate_bench.py``.
"""

from __future__ import annotations

import gc
import os
import time

from ppopt.errors import PpoptError
from ppopt.generators import generate, names

SHAPES = ((20_000, 1), (400, 400))
RUNS = 3


def best_time(name: str, devices: int, microbatches: int) -> tuple[float, int]:
    """The best of :data:`RUNS` wall times (seconds) of one generation, and its op count."""
    best, ops = float("inf"), 0
    for _ in range(RUNS):
        gc.collect()
        began = time.perf_counter()
        schedule = generate(name, devices, microbatches)
        best = min(best, time.perf_counter() - began)
        ops = schedule.op_count
    return best, ops


def main() -> None:
    print(f"load average at start: {os.getloadavg()[0]:.2f} ({os.cpu_count()} cores)")
    for devices, microbatches in SHAPES:
        base_s, base_ops = best_time("1f1b", devices, microbatches)
        base_rate = base_ops / base_s
        print(f"\np = {devices:,}, m = {microbatches:,}; baseline 1f1b: {base_ops:,} ops in {base_s:.3f} s "
              f"({base_rate:,.0f} ops/s)")
        print(f"{'schedule':<18}{'ops':>12}{'seconds':>10}{'ops/s':>14}{'vs 1f1b':>9}")
        for name in names():
            try:
                seconds, ops = best_time(name, devices, microbatches)
            except PpoptError as error:
                print(f"{name:<18}not applicable: {error.reason[:70]}")
                continue
            rate = ops / seconds
            print(f"{name:<18}{ops:>12,}{seconds:>10.3f}{rate:>14,.0f}{rate / base_rate:>8.2f}x")
    print(f"\nload average at end: {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
