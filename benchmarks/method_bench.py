"""The search methods on the acceptance instances above 4,096 ops, in the same run: ``lns`` (the window
search alone, the default there before), ``cp`` (one CP-SAT solve of the whole model, hinted) and
``auto`` (the default: the window search for a third of the time, then, if it found nothing shorter
than the hint, one CP-SAT solve for the rest).

Instances: the unit acceptance instances of ``benchmarks/solve_bench.py`` with more than 4,096 ops
(32 x 128, 32 x 256, 8 x 512, 16 x 1024; cap p, one-slot messages). Timed: the whole ``search`` call
(instances, hints, bounds, solves, read-back), as a command runs it; not timed: building the instance
list. One worker, seed 0. Each line also gives 1F1B's step, the baseline every schedule is measured
against.

Run: ``python benchmarks/method_bench.py [--time-limit 60]`` (12 searches: about 12 minutes at 60 s).
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from solve_bench import INSTANCES, run_case  # noqa: E402

METHODS = ("lns", "cp", "auto")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--time-limit", type=float, default=60.0, help="seconds per search, the whole budget (default 60)")
    args = parser.parse_args(argv)
    cases = [c for c in INSTANCES if c.acceptance and c.costs == "unit" and c.space == "fb" and 2 * c.p * c.m > 4096]
    print(f"time limit {args.time_limit:g} s per search; CP-SAT 1 worker, seed 0; {len(cases)} instances; "
          f"load average at start {os.getloadavg()[0]:.2f} (1 min) on {os.cpu_count()} cores")
    lines = []
    for case in cases:
        cells = []
        for method in METHODS:
            outcome = run_case(case, args.time_limit, 1, method)
            gap = "-" if outcome.gap is None else f"{outcome.gap:.2%}"
            cells.append(f"{method}: {outcome.step:g} (gap {gap}, {outcome.wall_s:.1f} s)")
        lines.append(f"{case.name:28} 1f1b {outcome.one_f_one_b:g}   " + "   ".join(cells))
    print("\n".join(["", "instance                     baseline     methods (step, gap to the bound, wall time)", *lines]))
    print(f"load average at end {os.getloadavg()[0]:.2f} (1 min)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
