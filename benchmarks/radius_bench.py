"""The time-indexed search's window radius: how far ``shorten`` gets from 1F1B, and when, for each
radius, in the same run.

Instance: unit costs F = 1, B = 2, a cap of p live activations, one-slot messages, linear placement
with full backward (the 32-device acceptance rows of ``benchmarks/solve_bench.py``); p = 32, m = 128
unless ``--microbatches`` says otherwise. The start is what ``search`` starts from there
(``ppopt.solve.search._time_indexed_start``: 1F1B). For each radius one ``shorten`` call gets the
same budget; each improvement is printed with its time since the call began. Timed: ``shorten``
alone (its model builds and CP-SAT steps); not timed: the instance, the hints and the start, built
once before. The baseline is the radius the code picks (``step_radius``, from
``STEP_RADIUS`` and ``MAX_STEP_LITERALS``), run in the same process, marked ``(default)``. One
worker, seed 0; the load average is printed at the start and the end.

Run: ``python benchmarks/radius_bench.py [--microbatches 256] [--radii 4,6,8,12] [--budget 42]``.
"""

from __future__ import annotations

import argparse
import os
import re
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from ppopt.solve import search as search_module  # noqa: E402
from ppopt.solve.instance import InstanceSpec  # noqa: E402
from ppopt.solve.options import SolveOptions  # noqa: E402
from ppopt.solve.space import parse_space  # noqa: E402
from ppopt.solve.timeindexed import shorten  # noqa: E402
from ppopt.units import UnitCosts  # noqa: E402

DEVICES = 32


def load() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--microbatches", type=int, default=128, help="m (default 128); p = 32, cap 32")
    parser.add_argument("--radii", default="4,6,8,12", help="window radii to run, ticks (default 4,6,8,12)")
    parser.add_argument("--budget", type=float, default=42.0, help="seconds for each radius (default 42: about "
                        "what a 60 s search leaves the time-indexed search at 32 x 128)")
    args = parser.parse_args()
    try:
        radii_asked = {int(x) for x in args.radii.split(",")}
    except ValueError:
        parser.error(f"--radii: whole numbers of ticks, comma-separated, got {args.radii!r}")
    if min(radii_asked) < 1 or args.microbatches < 1 or not 0 < args.budget < float("inf"):
        parser.error("--radii and --microbatches must be at least 1 and --budget a finite number of seconds > 0")
    m = args.microbatches
    print(f"p = {DEVICES}, m = {m}, cap {DEVICES}, F = 1, B = 2, messages 1 slot; one worker, seed 0, "
          f"{args.budget:g} s per radius; load average at start {load()} on {os.cpu_count()} cores")
    spec = InstanceSpec(DEVICES, m, units=UnitCosts(1, 2, None, 1), memory_limit=DEVICES)
    setup = search_module._prepare(spec, parse_space("placement=linear,backward=full"), SolveOptions(600).start())
    start = search_module._time_indexed_start(setup)
    assert start is not None, "the time-indexed search does not apply to this instance"
    end = max(start.starts[op] + d for op, d in zip(start.graph.ops, start.graph.duration))
    print(f"start: {start.name}, {end} slots; the code's radius here: {start.radius}")
    radii = sorted(radii_asked | {start.radius})
    for radius in radii:
        began = time.monotonic()
        lines: list[str] = []
        options = SolveOptions(args.budget, workers=1, seed=0, progress=lines.append).start()
        result = shorten(start.graph, start.starts, radius, options, since=began)
        steps = [re.match(r"\[\s*([0-9.]+)s\] time-indexed step \d+: makespan (\d+)", line) for line in lines]
        reached = [f"{found.group(2)} at {float(found.group(1)):.1f} s" for found in steps if found]
        mark = " (default)" if radius == start.radius else ""
        best = "-" if result.time_to_best_s is None else f"{result.time_to_best_s:.1f} s"
        print(f"radius {radius:>2}{mark}: {result.end} slots after {result.steps} steps, the last improvement at {best}; "
              f"on the way: {', '.join(reached) or 'nothing'}", flush=True)
    print(f"load average at end {load()}")


if __name__ == "__main__":
    main()
