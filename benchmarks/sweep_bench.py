"""Wall time of the full study sweep (``configs/studies/paper.toml``), simulation layers only.

Every evaluation point of the paper's grid (formula, table and simulation layers; no solver points)
is computed from scratch into a temporary directory, once in-process (``--jobs 1``) and once with a
pool of two processes (``--jobs 2``, process start-up included). The first ``--jobs`` value is the
baseline the others are compared with. Timed: the sweep from its first point to its last row
written; not timed: reading the spec (once per run, before the clock starts) and Python's start-up.
Prints the number of points, the wall time, points per second and the speed-up, checks that every
run wrote the same rows.csv, and prints the load average at the start and at the end.

Run: ``python benchmarks/sweep_bench.py [--jobs 1 2 4] [--spec paper|quick|PATH]``.
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from pathlib import Path

from ppopt.sweep import LocalExecutor, load_spec, resolve_spec, run_sweep


def measure(spec: str, jobs: int, directory: Path) -> tuple[int, float, str]:
    loaded = load_spec(resolve_spec(spec))
    began = time.perf_counter()
    with LocalExecutor(jobs) as pool:
        result = run_sweep(loaded, directory, pool, kinds=("evaluate",))
    wall = time.perf_counter() - began
    assert result.missing == 0 and result.computed + result.skipped == result.points
    return result.points, wall, (directory / "rows.csv").read_text()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--spec", default="paper")
    args = parser.parse_args()
    load = " ".join(f"{x:.2f}" for x in os.getloadavg())
    print(f"study sweep {args.spec}, simulation layers only, {os.cpu_count()} CPUs, load average at start {load}")
    walls, csvs = {}, {}
    with tempfile.TemporaryDirectory() as tmp:
        for jobs in args.jobs:
            points, wall, text = measure(args.spec, jobs, Path(tmp) / f"jobs{jobs}")
            walls[jobs], csvs[jobs] = wall, text
            print(f"jobs {jobs}: {points} points in {wall:7.2f} s = {points / wall:6.1f} points/s")
    first = args.jobs[0]
    for jobs in args.jobs[1:]:
        same = "identical rows" if csvs[jobs] == csvs[first] else "ROWS DIFFER"
        print(f"speed-up jobs {jobs} vs the baseline jobs {first}: {walls[first] / walls[jobs]:.2f}x ({same})")
    print(f"load average at the end {' '.join(f'{x:.2f}' for x in os.getloadavg())}")


if __name__ == "__main__":
    main()
