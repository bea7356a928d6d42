"""The steady-state search (``ppopt.solve.periodic.periodic_pattern``) on the chains of the unit
acceptance rows of ``benchmarks/solve_bench.py`` (F = 1, B = 2, one-slot messages, a cap of p), against
the model it replaced, in the same run.

ppopt's model keeps each pair of offsets' difference off the residues at which two microbatches
meet (``periodic._clashes``). The baseline, kept here only, places every op of the pattern as an
interval in a circular no-overlap per device (each interval and its copy shifted by the period), the
memory caps as a circular cumulative on every device. Both search the same periods upward from the
rate bound with the same budget; each line gives the period found (or none), whether it meets the
rate bound, and the wall time of the whole ``periodic_pattern`` call (model building and CP-SAT, one
worker, seed 0). The load average is printed at the start and the end.

Run: ``python benchmarks/periodic_bench.py [--budget 7]`` (7 s: about the eighth of a 60 s search the
steady-state search gets).
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from ortools.sat.python import cp_model  # noqa: E402

from ppopt.ir import Kind  # noqa: E402
from ppopt.solve import periodic  # noqa: E402
from ppopt.solve.options import SolveOptions  # noqa: E402

ROWS = ((16, 64), (32, 128), (32, 256), (8, 512), (16, 1024))


def interval_model(k, period, a, b, forward, backward, caps, last, options):
    """The baseline: offsets for k microbatches with this period, every op an interval modulo the period."""
    model = cp_model.CpModel()
    t = [model.new_int_var(0, period - 1, f"t{j}") for j in range(k)]
    model.add(t[0] == 0)
    for j in range(k - 1):
        model.add(t[j] < t[j + 1])
    for s in range(len(a)):
        busy, lives = [], []
        whole, rest = divmod(b[s] + backward[s] - a[s], period)
        room = None if caps[s] is None else caps[s] - k * whole
        if room is not None and room < 0:
            return None
        for j in range(k):
            for kind, offset, length in ((Kind.F, a[s], forward[s]), (Kind.B, b[s], backward[s])):
                x = model.new_int_var(0, period - 1, "")
                wraps = model.new_int_var(0, (offset + period) // period + 1, "")
                model.add(x == t[j] + offset - period * wraps)
                if length > 0:
                    busy += [model.new_fixed_size_interval_var(x, length, ""), model.new_fixed_size_interval_var(x + period, length, "")]
                if kind is Kind.F and room is not None and rest > 0:
                    lives += [model.new_fixed_size_interval_var(x, rest, ""), model.new_fixed_size_interval_var(x + period, rest, "")]
        model.add_no_overlap(busy)
        if lives and room is not None:
            model.add_cumulative(lives, [1] * len(lives), room)
    model.minimize(t[last])
    solver = options.solver()
    solver.parameters.max_time_in_seconds = min(solver.parameters.max_time_in_seconds, max(0.1, options.remaining_s() / 2))
    code = options.run(solver, model)
    return [solver.value(v) for v in t] if code in (cp_model.OPTIMAL, cp_model.FEASIBLE) else None


def load() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--budget", type=float, default=7.0, help="seconds for each steady-state search (default 7)")
    args = parser.parse_args()
    if not 0 < args.budget < float("inf"):
        parser.error(f"--budget: a finite number of seconds > 0, got {args.budget:g}")
    print(f"one worker, seed 0, {args.budget:g} s each; load average at start {load()} on {os.cpu_count()} cores")
    ours = periodic._solve_period
    for p, m in ROWS:
        for name, solve in (("pairwise differences (ppopt)", ours), ("intervals (baseline)", interval_model)):
            periodic._solve_period = solve
            began = time.perf_counter()
            pattern = periodic.periodic_pattern(p, m, lambda s, kind: 1 if kind is Kind.F else 2, lambda s, x, y: 1, [p] * p,
                                                SolveOptions(args.budget, workers=1, seed=0).start())
            seconds = time.perf_counter() - began
            found = ("none found" if pattern is None else
                     f"{pattern.k} every {pattern.period} slots (rate bound {pattern.rate_bound:g}{': optimal' if pattern.optimal else ''})")
            print(f"{p:>2} x {m:<5} {name:<29} {found:<45} {seconds:6.2f} s", flush=True)
    periodic._solve_period = ours
    print(f"load average at end {load()}")


if __name__ == "__main__":
    main()
