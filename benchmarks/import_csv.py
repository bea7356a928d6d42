"""Time to import a large PyTorch schedule CSV, beside two baselines measured in the same run.

Files: 1F1B on 64 ranks, written by ppopt (``ppopt.io.torch_csv.write_torch_csv``), with 20,000 and
100,000 actions per rank (10,000 and 50,000 microbatches: 1.28M and 6.4M ops). Timed for each:

* floor: read the file (``ppopt.io.read_text_bounded``) and split it into lines and cells with
  ``str.split``: the least any reader of the text pays, building no op;
* generator: ``ppopt.generators.generate`` builds the same schedule in memory and
  ``ppopt.validation.validated`` checks it: the cost of the same ops without a file;
* read: ``ppopt.io.torch_csv.read_torch_csv`` (parse, build the ops, validate), what
  ``ppopt evaluate --schedule-file`` pays before its layers;
* import: read, then the unit-slot table, its metrics and the text grid, most of what
  ``ppopt import`` computes before printing (its notes on the runtime and the table's summary line
  are left out, as are Python's start-up and the printing).

Writing the files is not timed, and every read after the first finds them in the page cache.

Each figure is the best of a few runs (one for the largest file once a run passed the patience),
with µs per op. The load average is printed at the start and the end, since the machine may be
shared.

Run: ``PYTHONPATH=. python benchmarks/import_csv.py [--quick]`` (``--quick``: the 20,000-action file only).
"""

from __future__ import annotations

import os
import sys
import tempfile
from functools import partial
from pathlib import Path

from simulate_ops import best_of

from ppopt.generators import generate
from ppopt.io import read_text_bounded
from ppopt.io.torch_csv import MAX_BYTES, read_torch_csv, write_torch_csv
from ppopt.report.text import grid
from ppopt.table import build_table, table_metrics
from ppopt.validation import validated

RANKS = 64
MICROBATCHES = (10_000, 50_000)  # 20,000 and 100,000 actions per rank
REPEATS = 3
PATIENCE_S = 8.0


def floor(path: Path) -> None:
    text = read_text_bounded(path, MAX_BYTES, "utf-8-sig", "the file")
    [line.split(",") for line in text.split("\n")]


def generator(microbatches: int) -> None:
    validated(generate("1f1b", RANKS, microbatches))


def import_command(path: Path) -> None:
    table = build_table(read_torch_csv(path))
    table_metrics(table)
    grid(table, colour=True)


def main() -> None:
    sizes = MICROBATCHES[:1] if "--quick" in sys.argv else MICROBATCHES
    print(f"load average at start: {os.getloadavg()[0]:.2f} ({os.cpu_count()} cores)")
    with tempfile.TemporaryDirectory() as folder:
        for m in sizes:
            path = Path(folder) / f"1f1b-{RANKS}x{2 * m}.csv"
            write_torch_csv(generate("1f1b", RANKS, m), path)
            ops = RANKS * 2 * m
            print(f"\n1F1B, {RANKS} ranks x {2 * m:,} actions ({ops / 1e6:.2f}M ops, {path.stat().st_size / 1e6:.0f} MB)")
            cases = [
                ("floor (read + str.split)", partial(floor, path)),
                ("generator (generate + validate)", partial(generator, m)),
                ("read_torch_csv (parse + validate)", partial(read_torch_csv, path)),
                ("import (read + table + metrics + grid)", partial(import_command, path)),
            ]
            for label, run in cases:
                seconds = best_of(run, REPEATS, PATIENCE_S)
                print(f"  {label:<40} {seconds:7.2f} s  {seconds / ops * 1e6:5.2f} us/op")
    print(f"\nload average at end: {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
