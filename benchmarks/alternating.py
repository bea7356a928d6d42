"""Shared by the benchmarks that time whole commands in two modes (a baseline and now),
alternating in one run so that both see the same load: the load average, and the loop that runs
and prints them."""

from __future__ import annotations

import argparse
import os
from collections.abc import Callable


def load() -> str:
    """The machine's load averages over 1, 5 and 15 minutes."""
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def run_alternating(description: str, commands: dict[str, list[str]], labels: dict[str, str], suffix: str,
                    timed: Callable[[str, list[str]], tuple[float, int]]) -> None:
    """Parse ``--repeat N`` (default 2), then for each command run ``timed(mode, command)`` for
    "baseline" and "now" in turn, N times, printing each run's wall seconds and bytes, between the
    load averages at the start and at the end. ``suffix`` follows the command as printed."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--repeat", type=int, default=2, help="runs of each mode per command, alternating (default 2)")
    args = parser.parse_args()
    print(f"load average at start: {load()} on {os.cpu_count()} cores")
    for name, command in commands.items():
        print(f"{name}: ppopt {' '.join(command)}{suffix}")
        for _ in range(args.repeat):
            for mode in ("baseline", "now"):
                seconds, size = timed(mode, command)
                print(f"  {labels[mode]}: {seconds:.1f} s end to end, {size / 1e6:.2f} MB", flush=True)
    print(f"load average at end: {load()}")
