"""Time ``ppopt validate`` and ``ppopt calibrate`` over all shipped measured rows (issue 10: under
30 s for the 1,481 rows on 2 cores). Run from the repository root: ``python benchmarks/validate_measured.py``."""

from __future__ import annotations

import time
from pathlib import Path

from ppopt.accuracy import validate_file
from ppopt.calibrate import calibrate
from ppopt.config import load_system
from ppopt.io.measured import read_measured

DATA = Path(__file__).resolve().parent.parent / "data" / "measured"
FILES = [DATA / "vtrain-single-node.csv", DATA / "vtrain-multi-node-small.csv"]


def main() -> None:
    start = time.perf_counter()
    accuracy = validate_file(FILES, load_system("a100-vtrain-calibrated"))
    print(f"validate: {len(accuracy.rows)} rows in {time.perf_counter() - start:.2f} s (MAPE {100 * accuracy.mape:.2f} %)")
    base = load_system("a100-vtrain")
    rows = [row for path in FILES for row in read_measured(path, base)[0]]
    start = time.perf_counter()
    fitted = calibrate(rows, base)
    print(f"calibrate: {len(rows)} rows in {time.perf_counter() - start:.2f} s (closed-form MAPE {100 * fitted.mape:.2f} %)")


if __name__ == "__main__":
    main()
