"""Time ppopt's two largest JSON outputs end to end, with orjson (now) and with the standard
library's encoder (the baseline, what ppopt used before), alternating, in the same run:

* ``ppopt table -s 1f1b -p 1 -m 1000000 --json`` (2 million ops, printed compact to a file);
* ``ppopt export -s 1f1b -p 60 -m 4096 --unit --format chrome-trace`` (491,520 ops, just under
  :data:`ppopt.report.trace.MAX_TRACE_OPS`), the trace's events built with the garbage collector
  paused now and running in the baseline, as before.

Each run is a whole command in a fresh process, from parsing the flags (schedule generation,
validation, table or simulation, JSON encoding) to the last byte written. The baseline is the same
code with :func:`ppopt.io.stdlib_json_bytes` in place of :func:`ppopt.io.json_bytes`. Prints the
load average before and after, each run's wall time and the bytes written. Run from the repository
root: ``python benchmarks/json_output.py [--repeat N]``.
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from alternating import run_alternating  # noqa: E402

COMMANDS = {
    "table --json, 2 million ops": ["table", "-s", "1f1b", "-p", "1", "-m", "1000000", "--json"],
    "chrome trace, 491,520 ops": ["export", "-s", "1f1b", "-p", "60", "-m", "4096", "--unit", "--format",
                                  "chrome-trace", "-q", "-o", "-"],
}
RUN = ("import contextlib, sys, ppopt.io, ppopt.report.trace\n"
       "if sys.argv[1] == 'baseline':\n"
       "    ppopt.io.json_bytes = ppopt.io.stdlib_json_bytes\n"
       "    ppopt.report.trace.paused_gc = contextlib.nullcontext\n"
       "from ppopt.cli import main\n"
       "main(sys.argv[2:])\n")
LABELS = {"baseline": "baseline (standard library)", "now": "now (orjson)"}


def timed(mode: str, command: list[str]) -> tuple[float, int]:
    """Wall seconds of one whole command in ``mode`` and the bytes it printed."""
    with tempfile.TemporaryFile() as out:
        began = time.monotonic()
        subprocess.run([sys.executable, "-c", RUN, mode, *command], stdout=out, check=True)
        seconds = time.monotonic() - began
        return seconds, out.tell()


def main() -> None:
    run_alternating(__doc__.splitlines()[0], COMMANDS, LABELS, "", timed)


if __name__ == "__main__":
    main()
