"""Time to export a large simulated schedule as a PyTorch CSV, beside a baseline in the same run.

Schedule: 1F1B on 64 ranks, 10,000 microbatches (1.28M ops; ``--full``: also 76,500 microbatches,
9.79M ops, just under ``ppopt.ir.MAX_OPS``), unit costs with one-slot messages. Timed for each:

* by op (baseline): ``format_torch_csv(schedule, simulation.start_s)``, the path ``export`` took
  before: a dictionary of start times keyed by op, then one lookup per op;
* per device: ``format_torch_csv(schedule, simulation.device_starts())``, the path ``export`` and
  ``search --csv`` take now: each device's start times sliced from the simulation's list;
* end to end: ``ppopt export -s 1f1b -p 64 -m M --unit --comm 1 --format torch-csv -o FILE -q`` in
  a subprocess, from the command line to the file written: argument checks, generation,
  validation, simulation, the CSV and its atomic write, interpreter start-up included.

The two in-process figures share one simulation, built untimed. ``start_s`` is a cached property,
so the baseline builds its dictionary as ``start_s`` does, each repeat (it is part of that path).
Each figure is the best of a few runs, with µs per op; both give the same text (checked). The load
average is printed at the start and the end, since the machine may be shared.

Run: ``PYTHONPATH=. python benchmarks/export_csv.py [--full]``.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from functools import partial
from pathlib import Path

from simulate_ops import best_of

from ppopt.generators import generate
from ppopt.io.torch_csv import format_torch_csv
from ppopt.simulate import simulate
from ppopt.solve.instance import unit_instance
from ppopt.units import UnitCosts

RANKS = 64
MICROBATCHES = (10_000, 76_500)
REPEATS = 3
PATIENCE_S = 20.0


def _simulated(microbatches: int):
    schedule = generate("1f1b", RANKS, microbatches)
    instance = unit_instance(RANKS, microbatches, schedule.stages, UnitCosts(comm=1))
    return schedule, lambda: simulate(schedule, instance.costs, instance.system)


def csv_by_op(schedule, simulation) -> str:
    """The baseline: start times keyed by op, built as ``Simulation.start_s`` builds them."""
    ops, _, start, _ = simulation.op_times()
    return format_torch_csv(schedule, dict(zip(ops, start)))


def csv_per_device(schedule, simulation) -> str:
    return format_torch_csv(schedule, simulation.device_starts())


def end_to_end(microbatches: int, target: Path) -> float:
    command = [sys.executable, "-m", "ppopt", "export", "-s", "1f1b", "-p", str(RANKS), "-m", str(microbatches),
               "--unit", "--comm", "1", "--format", "torch-csv", "-o", str(target), "-q"]
    began = time.perf_counter()
    subprocess.run(command, check=True, stdout=subprocess.DEVNULL)
    return time.perf_counter() - began


def measure(microbatches: int) -> None:
    ops = RANKS * 2 * microbatches
    schedule, simulated = _simulated(microbatches)
    simulation = simulated()
    print(f"\n1F1B, {RANKS} ranks x {microbatches:,} microbatches ({ops / 1e6:.2f}M ops), one-slot messages")
    assert format_torch_csv(schedule, simulation.device_starts()) == format_torch_csv(schedule, simulation.start_s)
    cases = [
        ("by op (baseline: start_s dictionary)", partial(csv_by_op, schedule, simulation)),
        ("per device (device_starts)", partial(csv_per_device, schedule, simulation)),
    ]
    for label, run in cases:
        seconds = best_of(run, REPEATS, PATIENCE_S)
        print(f"  {label:<40} {seconds:7.2f} s  {seconds / ops * 1e6:5.2f} us/op")
    del schedule, simulated, simulation, cases  # the command below needs the memory
    with tempfile.TemporaryDirectory() as folder:
        whole = min(end_to_end(microbatches, Path(folder) / "x.csv") for _ in range(1 if microbatches > 20_000 else 2))
    print(f"  {'end to end (ppopt export; no baseline)':<40} {whole:7.2f} s  {whole / ops * 1e6:5.2f} us/op")


def main() -> None:
    print(f"load average at start: {os.getloadavg()[0]:.2f} ({os.cpu_count()} cores)")
    for m in MICROBATCHES if "--full" in sys.argv else MICROBATCHES[:1]:
        measure(m)
    print(f"\nload average at end: {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
