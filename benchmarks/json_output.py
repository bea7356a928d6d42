"""Time ``ppopt table --json`` end to end at 2 million ops (1F1B, p = 1, m = 1,000,000), as printed
now (compact above :data:`ppopt.cli.options.PRETTY_JSON_BYTES`) against the baseline, the same
command printing indented JSON (what it did before; forced here with ``PRETTY_JSON_BYTES`` raised),
in the same run. Each is a whole command in a fresh process, from parsing the flags (schedule
generation, validation, table) to the last byte written to a file; the load average is printed
first. Run from the repository root: ``python benchmarks/json_output.py``.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time

COMMAND = ["table", "-s", "1f1b", "-p", "1", "-m", "1000000", "--json"]
RUN = ("import sys, ppopt.cli.options as options\n"
       "if sys.argv[1] == 'indented': options.PRETTY_JSON_BYTES = float('inf')\n"
       "from ppopt.cli import main\n"
       "main(sys.argv[2:])\n")


def timed(mode: str) -> tuple[float, int]:
    """Wall seconds of one whole command in ``mode`` and the bytes it printed."""
    with tempfile.TemporaryFile() as out:
        began = time.monotonic()
        subprocess.run([sys.executable, "-c", RUN, mode, *COMMAND], stdout=out, check=True)
        seconds = time.monotonic() - began
        return seconds, out.tell()


def main() -> None:
    print(f"load average at start: {' '.join(f'{x:.2f}' for x in os.getloadavg())} on {os.cpu_count()} cores")
    for mode in ("indented", "compact"):
        seconds, size = timed(mode)
        label = "baseline, indented JSON" if mode == "indented" else "now, compact above 1 MB"
        print(f"{label}: {seconds:.1f} s end to end, {size / 1e6:.0f} MB printed")
    print(f"load average at end: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")


if __name__ == "__main__":
    main()
