"""Time ``ppopt plan`` for Llama 3 70B on 64 H100s (target: under 120 s on 2 cores with the
default search time). Run from the repository root: ``python benchmarks/plan_bench.py``.

Prints the wall time of the whole command in three settings, measured in the same run: the
enumeration alone (``--search 0``, the baseline), the default command (enumeration, then a CP-SAT
search of the best 3 jobs within the default ``--time-limit`` of 60 s for the whole command), and the
default command with ``--layers-per-stage balanced``; every schedule family but chimera-asym is
enumerated (the default). Then the wall time of GPT-3 175B on 1,024 H100s (7,710 jobs) with
``--search 1`` beside the ``--time-limit`` it must honour (the whole command within about 5 % of it):
with 5 s the budget ends before any job is evaluated (exit status 1, its error line printed), with
20 s during the simulations. The load average is printed with them: the machine may be shared.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BASE = ["plan", "--model", "llama3-70b", "--gpus", "64", "--system", "dgx-h100", "-q"]
RUNS = [
    ("enumeration only (--search 0), baseline", ["--search", "0"]),
    ("default (search the best 3, --time-limit 60)", []),
    ("default with --layers-per-stage balanced", ["--layers-per-stage", "balanced"]),
]

BUDGET = ["plan", "--model", "gpt3-175b", "--gpus", "1024", "--system", "dgx-h100", "-q", "--search", "1"]
LIMITS = [5.0, 20.0]


def _budget_runs(env: dict[str, str]) -> None:
    for limit in LIMITS:
        start = time.perf_counter()
        done = subprocess.run([sys.executable, "-m", "ppopt", *BUDGET, "--time-limit", f"{limit:g}"], cwd=ROOT, env=env,
                              capture_output=True, text=True)
        wall = time.perf_counter() - start
        # the budget's own refusals: out of time ("no job evaluated") or foreseen to be ("no job would be evaluated")
        if done.returncode and not any(reason in done.stderr for reason in ("no job evaluated", "no job would be evaluated")):
            raise SystemExit(f"gpt3-175b --time-limit {limit:g}: failed: {done.stderr.strip()}")
        outcome = done.stderr.strip() if done.returncode else next(line for line in done.stdout.splitlines() if " jobs: " in line)
        print(f"gpt3-175b on 1024 GPUs, --time-limit {limit:g}: {wall:.2f} s ({100 * (wall / limit - 1):+.1f} %, "
              f"load {os.getloadavg()[0]:.2f}); {outcome}")


def main() -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    print(f"cpus {os.cpu_count()}, load average before {os.getloadavg()[0]:.2f}")
    for label, extra in RUNS:
        start = time.perf_counter()
        done = subprocess.run([sys.executable, "-m", "ppopt", *BASE, *extra], cwd=ROOT, env=env, capture_output=True, text=True)
        wall = time.perf_counter() - start
        if done.returncode:
            raise SystemExit(f"{label}: failed: {done.stderr.strip()}")
        first = next(line for line in done.stdout.splitlines() if line.startswith("1 "))
        print(f"{label}: {wall:.1f} s (load {os.getloadavg()[0]:.2f}); #1: {' '.join(first.split()[1:9])}")
    _budget_runs(env)


if __name__ == "__main__":
    main()
