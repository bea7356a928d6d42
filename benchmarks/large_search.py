"""Does ``ppopt search`` keep its time limit at hundreds of thousands of ops?

Times, end to end (process start to exit, input validation and the printed grid included, as a user
runs it), ``ppopt search --unit -p 64 -m 4096`` (524,288 ops, no memory limit, no messages) with the
least time limit the command accepts there and with the default 60 s, and the same with a cap of 64
activations and one-slot messages. Baseline, in the same run: ``ppopt evaluate -s 1f1b`` at the same
size (generating and validating one schedule, its formula and unit-slot table layers, printed: in
unit mode there is no simulation; the least any command can do there). Also timed, in this process: the greedy hint alone (:mod:`ppopt.solve.greedy`), in ops per
second. The load average is printed at the start and the end (the machine may be shared).

Run: ``PYTHONPATH=. python benchmarks/large_search.py``.
"""

from __future__ import annotations

import math
import os
import subprocess
import sys
import time

from ppopt.placement import placement
from ppopt.solve.greedy import greedy_schedule
from ppopt.solve.instance import unit_instance
from ppopt.solve.search import minimum_time_s
from ppopt.units import UnitCosts

P, M = 64, 4096
OPS = P * M * 2


def wall(args: list[str]) -> float:
    """Seconds from process start to exit of ``python -m ppopt ARGS`` (output discarded); a command
    that fails stops the benchmark with its error (its time would look like a result)."""
    began = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "ppopt", *args], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    seconds = time.perf_counter() - began
    if done.returncode != 0:
        raise SystemExit(f"ppopt {' '.join(args)} failed (exit {done.returncode}): {done.stderr.strip().splitlines()[-1:]}")
    return seconds


def main() -> None:
    print(f"load average at start: {os.getloadavg()[0]:.2f} ({os.cpu_count()} cores)")
    size = ["-p", str(P), "-m", str(M)]
    seconds = wall(["evaluate", "-s", "1f1b", *size])
    print(f"baseline: evaluate -s 1f1b at {P} x {M} ({OPS:,} ops): {seconds:.2f} s")
    for extra in ([], ["--comm", "1", "--memory-limit", str(P)]):
        # the least limit the command accepts: one schedule, one more under a memory limit
        least = math.ceil((2 if extra else 1) * minimum_time_s(OPS))
        for limit in (least, 60):
            seconds = wall(["search", "--unit", *size, *extra, "--time-limit", str(limit)])
            label = " ".join(extra) or "no cap"
            print(f"search {label}, --time-limit {limit}: {seconds:.2f} s end to end "
                  f"({seconds / limit:.0%} of the limit)")
    instance = unit_instance(P, M, P, UnitCosts(1, 2, None, 1), memory_limit=P)
    began = time.perf_counter()
    greedy_schedule(instance, placement("linear", P), False)
    seconds = time.perf_counter() - began
    print(f"greedy hint alone (cap {P}, one-slot messages; its instance built before, not timed; no baseline, for scale): "
          f"{seconds:.2f} s, {OPS / seconds / 1e3:.0f}k ops/s")
    print(f"load average at end: {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
