"""The time-indexed refutation (``ppopt.solve.timeindexed``) against the interval model's bound, at
p = 16, m = 64, a cap of 16, F = 1, B = 2 and one-slot messages (the first acceptance instance of
``solve_bench.py``), one CP-SAT worker. Run from the repository root:
``python benchmarks/refute_bench.py [--horizons 367,368,369,370] [--devices 32 --microbatches 128]``
(the cap is p).

For each horizon T it times one ``refute`` (building the model and solving it; the graph of heads
and tails is built once before, and timed apart) and prints whether a schedule of at most T slots
exists. The baseline, in the same run: the core-based CP-SAT solve of the same chain as an interval
model (``relaxation_bound`` with every device kept, as the search's reduced problems solve it), given
as many seconds as the first refutation took, and the bound it reaches. The load average is printed
at the start and the end: the machine may be shared.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from ppopt.ir import Kind  # noqa: E402
from ppopt.solve.options import SolveOptions  # noqa: E402
from ppopt.solve.relaxation import Chain, relaxation_bound  # noqa: E402
from ppopt.solve.timeindexed import chain_graph, refute  # noqa: E402

DEVICES, MICROBATCHES, COMM = 16, 64, 1


def load() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--horizons", default="367,368,369,370", help="horizons T to refute, slots (default 367,368,369,370)")
    parser.add_argument("--time-limit", type=float, default=300.0, help="seconds for each refutation (default 300)")
    parser.add_argument("--devices", type=int, default=DEVICES, help=f"p, and the cap (default {DEVICES})")
    parser.add_argument("--microbatches", type=int, default=MICROBATCHES, help=f"m (default {MICROBATCHES})")
    args = parser.parse_args()
    horizons = [int(x) for x in args.horizons.split(",")]
    devices, microbatches = args.devices, args.microbatches
    chain = Chain(devices, lambda s, k: 1 if k is Kind.F else 2, lambda s, a, b: COMM, [devices] * devices)
    print(f"p = {devices}, m = {microbatches}, cap {devices}, F = 1, B = 2, messages {COMM} slot; one worker; "
          f"load average at start {load()} on {os.cpu_count()} cores")
    began = time.perf_counter()
    graph = chain_graph(chain, microbatches)
    print(f"graph of {len(graph.ops):,} ops and {len(graph.lags):,} lags: {time.perf_counter() - began:.2f} s "
          f"(longest path {graph.shortest} slots)")
    first_s = None
    for horizon in horizons:
        began = time.perf_counter()
        result = refute(graph, horizon, SolveOptions(args.time_limit, workers=1).start())
        seconds = time.perf_counter() - began
        first_s = seconds if first_s is None else first_s
        answer = {"infeasible": f"none: the bound is {horizon + 1}", "feasible": "one found",
                  "unknown": "not proven within the time limit"}[result.status]
        print(f"  a schedule of at most {horizon} slots? {answer} ({graph.literals(horizon):,} Booleans, {seconds:.1f} s)",
              flush=True)
    assert first_s is not None
    began = time.perf_counter()
    bound = relaxation_bound(microbatches, devices, chain.duration, chain.delay, chain.caps,
                             SolveOptions(first_s, workers=1).start(), sets=[tuple(range(devices))])
    print(f"baseline, the interval model's core-based bound in {time.perf_counter() - began:.1f} s "
          f"(the first refutation's time): {bound} slots")
    print(f"load average at end {load()}")


if __name__ == "__main__":
    main()
