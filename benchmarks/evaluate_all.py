"""Whole commands: ``ppopt evaluate -s all`` beside the same schedules evaluated one command each.

Timed: each command as a separate process, from its start to its exit (reading the options,
generating, validating, building the table, printing), unit mode, ``-q``; its peak resident memory
comes from the operating system (``os.wait4``). Baseline, in the same run: ``ppopt evaluate -s NAME``
for every family, one process each; their times summed and their peaks' largest. Evaluating all
schedules in one process does the same work, so it should take about the sum and peak about the
largest single one: more means one schedule's memory outlives its evaluation (before e2bcc47,
each schedule's flat form, kept with it by ``ppopt.validation.validated``, referred back to it, and
the cycle kept it alive until a full garbage collection). Every process pays Python's and ppopt's
start-up, timed alone as ``ppopt --version``: the raw wall times (start-up included, end to end)
are printed, and beside them the times with it subtracted (once from the single command's, once per
command from the baseline's), which compare the work alone. The load average is printed at the
start and at the end, since the machine may be shared.

Run from the repository root: ``python benchmarks/evaluate_all.py [-p P] [-m M]`` (default 64 x 2,048).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time

from ppopt.generators import names


def run(args: list[str]) -> tuple[float, float]:
    """Wall seconds and peak resident memory (GB) of ``ppopt ARGS`` in its own process."""
    began = time.perf_counter()
    process = subprocess.Popen([sys.executable, "-m", "ppopt", *args], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    _, status, usage = os.wait4(process.pid, 0)
    seconds = time.perf_counter() - began
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(f"ppopt {' '.join(args)} failed: {process.stderr.read().decode().strip() if process.stderr else ''}")
    return seconds, usage.ru_maxrss / 1e6  # ru_maxrss is in kilobytes on Linux


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-p", type=int, default=64)
    parser.add_argument("-m", type=int, default=2048)
    shape = parser.parse_args()
    size = ["-p", str(shape.p), "-m", str(shape.m), "-q"]
    print(f"load average at start: {' '.join(f'{x:.2f}' for x in os.getloadavg())} on {os.cpu_count()} cores")
    print(f"p = {shape.p}, m = {shape.m}, unit mode")
    start_up = min(run(["--version"])[0] for _ in range(3))
    print(f"start-up (ppopt --version, best of 3): {start_up:.2f} s, subtracted below")
    singles = []
    for name in names():
        try:
            seconds, peak = run(["evaluate", "-s", name, *size])
            singles.append((name, seconds, peak))
        except SystemExit as refused:  # a family that does not apply at this shape
            print(f"  {name}: not applicable ({str(refused)[:80]})")
    print(f"  {'schedule':<18}{'end to end':>12}{'start-up off':>14}{'peak':>9}")
    for name, seconds, peak in singles:
        print(f"  {name:<18}{seconds:10.2f} s{seconds - start_up:12.2f} s{peak:7.2f} GB")
    raw = sum(s for _, s, _ in singles)
    total, largest = raw - start_up * len(singles), max(g for _, _, g in singles)
    print(f"baseline, one command per schedule: {raw:.2f} s end to end, {total:.2f} s with start-up off, "
          f"largest peak {largest:.2f} GB")
    whole, peak = run(["evaluate", "-s", "all", *size])
    seconds = whole - start_up
    print(f"evaluate -s all, one command:       {whole:.2f} s end to end, {seconds:.2f} s with start-up off, peak {peak:.2f} GB "
          f"({seconds / total:.2f}x the time with start-up off, {peak / largest:.2f}x the peak)")
    print(f"load average at the end: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")


if __name__ == "__main__":
    main()
