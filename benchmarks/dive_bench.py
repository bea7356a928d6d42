"""What the unhinted dive of the CP-SAT solve buys: each instance searched without it (the baseline)
and with it, one after the other in the same run.

The dive (``ppopt.solve.search._unhinted_dive``): up to ``UNHINTED_DIVE_OPS`` ops, a sixth of the solve
first runs on the same model without its hint, and the shorter of its schedule and the hint hints the
rest. The baseline sets ``UNHINTED_DIVE_OPS`` to 0, which is the search as it was before the dive.

Instances: those of ``benchmarks/solve_bench.py`` up to 1,500 ops that the hint or the analytic bound do
not settle at once (capped or with messages, unit and modelled costs), and the llama3-70b acceptance
case. Timed: the whole ``search`` call (instances, hints, bounds, both solves, read-back), as a command
runs it; not timed: building the instance list. One worker, seed 0, so CP-SAT's search is the same on
every run up to where the wall-clock limit cuts it.

Run: ``python benchmarks/dive_bench.py [--time-limit 20] [--only NAME]`` (about 13 x 2 x the limit at
most; under 5 minutes at 20 s on 2 cores).
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

from ppopt.solve import search as search_module
from ppopt.solve.options import SolveOptions

sys.path.insert(0, str(Path(__file__).resolve().parent))
from solve_bench import INSTANCES, spec_of  # noqa: E402

NAMES = (
    "unit-fb-p8-m32-cap-comm", "unit-fb-p8-m32-comm", "unit-zb-p8-m32-cap", "unit-zb-p8-m32-cap-comm", "unit-zb-p8-m32",
    "unit-loop-p8-m32-comm", "unit-v-p8-m32", "llama-fb-p8-m32-cap", "llama-zb-p8-m32-cap", "study-fb-p8-m32-cap",
    "study-fb-p8-m32", "llama70-fb-p8-m64-cap-220GiB", "unit-vfb-p8-m16-cap-F2",
)


def run(case, time_limit: float, dive: bool) -> tuple[str, float, float, float | None, float]:
    """Status, step, bound, gap and wall time of one search, with or without the dive."""
    saved = search_module.UNHINTED_DIVE_OPS
    search_module.UNHINTED_DIVE_OPS = saved if dive else 0
    try:
        space, spec = spec_of(case)
        began = time.monotonic()
        result = search_module.search(spec, space, SolveOptions(time_limit, workers=1, seed=0))
        wall = time.monotonic() - began
    finally:
        search_module.UNHINTED_DIVE_OPS = saved
    return result.status, result.step_time, result.bound, result.gap, wall


def _value(x: float, unit: str) -> str:
    return f"{x * 1e3:.2f}ms" if unit == "s" else f"{x:g}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--time-limit", type=float, default=20.0, help="seconds per search, the whole budget (default 20)")
    parser.add_argument("--only", default=None, help="run instances whose name contains this substring")
    args = parser.parse_args(argv)
    cases = [c for c in INSTANCES if c.name in NAMES and (args.only is None or args.only in c.name)]
    print(f"time limit {args.time_limit:g} s per search; CP-SAT 1 worker, seed 0; {len(cases)} instances; "
          f"load average at start {os.getloadavg()[0]:.2f} (1 min) on {os.cpu_count()} cores")
    print(f"{'instance':32} {'baseline (no dive)':>44}   {'with the dive':>44}")
    wins = losses = 0
    for case in cases:
        cells = []
        outcomes = []
        for dive in (False, True):
            status, step, bound, gap, wall = run(case, args.time_limit, dive)
            unit = "s" if case.costs != "unit" else "slots"
            outcomes.append(step)
            gap_text = "-" if gap is None else f"{gap:.2%}"
            cells.append(f"{status:9} {_value(step, unit):>11} {_value(bound, unit):>11} {gap_text:>6} {wall:5.1f}s")
        wins += outcomes[1] < outcomes[0] - 1e-9
        losses += outcomes[1] > outcomes[0] + 1e-9
        print(f"{case.name:32} {cells[0]:>44}   {cells[1]:>44}", flush=True)
    print(f"columns: status, step, bound, gap, wall time of the whole search; the dive gave a shorter step on "
          f"{wins} and a longer one on {losses} of {len(cases)} instances")
    print(f"load average at end {os.getloadavg()[0]:.2f} (1 min)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
