"""Time the work of ``ppopt validate`` and ``ppopt calibrate`` over all shipped measured rows, in this
process (target: under 30 s for the 1,481 rows on 2 cores). Run from the repository root:
``python benchmarks/validate_measured.py``.

Baseline, measured in the same run: reading and checking the two CSV files alone (``read_measured``),
the floor under any prediction. Timed for ``validate`` (``ppopt.accuracy.validate_file``): reading,
building every job, simulating its pipeline and scoring, best of 3 runs; for ``calibrate``: the fit
alone (rows already read), one run. Not timed: Python's start-up, the imports and printing the
report. The load average is printed at the start and at the end.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from pathlib import Path

from ppopt.accuracy import validate_file
from ppopt.calibrate import calibrate
from ppopt.config import load_system
from ppopt.io.measured import read_measured

DATA = Path(__file__).resolve().parent.parent / "data" / "measured"
FILES = [DATA / "vtrain-single-node.csv", DATA / "vtrain-multi-node-small.csv"]
REPEATS = 3


def best_of(run: Callable[[], object]) -> float:
    """Seconds of the fastest of :data:`REPEATS` runs."""
    times = []
    for _ in range(REPEATS):
        start = time.perf_counter()
        run()
        times.append(time.perf_counter() - start)
    return min(times)


def main() -> None:
    print(f"load average at start: {' '.join(f'{x:.2f}' for x in os.getloadavg())} on {os.cpu_count()} cores")
    calibrated, base = load_system("a100-vtrain-calibrated"), load_system("a100-vtrain")
    rows = [row for path in FILES for row in read_measured(path, base)[0]]
    read_s = best_of(lambda: [read_measured(path, base) for path in FILES])
    print(f"baseline, reading the files: {len(rows)} rows in {read_s:.3f} s")
    validate_s = best_of(lambda: validate_file(FILES, calibrated))
    print(f"validate: {len(rows)} rows in {validate_s:.2f} s ({validate_s / read_s:.0f}x reading them)")
    start = time.perf_counter()
    fitted = calibrate(rows, base)
    fit_s = time.perf_counter() - start
    print(f"calibrate: {len(rows)} rows in {fit_s:.2f} s, one run (closed-form MAPE {100 * fitted.mape:.2f} %; "
          f"{fit_s / validate_s:.1f}x one validate pass)")
    print(f"load average at the end: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")


if __name__ == "__main__":
    main()
