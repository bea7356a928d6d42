"""Time ppopt's schedule pictures end to end, with the op boxes drawn as two collections (now) and
as one matplotlib patch per op (the baseline, what ppopt did before), alternating, in the same run:

* ``ppopt compare --model llama3-8b --system dgx-a100 -p 4 -m 32 --plot FILE.png``: every
  applicable schedule (14) simulated and stacked, 6,432 ops;
* ``ppopt table -s 1f1b -p 16 -m 1024 --plot FILE.png``: one schedule of 32,768 ops, near
  :data:`ppopt.report.plot.MAX_PICTURE_OPS`.

Each run is a whole command in a fresh process, from parsing the flags (schedule generation,
validation, simulation or table, the figure, the PNG) to the file written. The baseline is the same
code with :func:`baseline_gantt` in place of ``ppopt.report.plot._draw_gantt``. Prints the load
average before and after, each run's wall time and the picture's size. Run from the repository
root: ``python benchmarks/plot_bench.py [--repeat N]``.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from alternating import run_alternating  # noqa: E402

COMMANDS = {
    "compare --plot, 14 schedules, 6,432 ops": ["compare", "--model", "llama3-8b", "--system", "dgx-a100", "-p", "4", "-m",
                                                "32", "-q"],
    "table --plot, 1f1b 16 x 1024, 32,768 ops": ["table", "-s", "1f1b", "-p", "16", "-m", "1024"],
}
RUN = ("import sys\n"
       "sys.path.insert(0, sys.argv[1])\n"
       "import ppopt.report.plot as plot\n"
       "if sys.argv[2] == 'baseline':\n"
       "    from plot_bench import baseline_gantt\n"
       "    plot._draw_gantt = baseline_gantt\n"
       "from ppopt.cli import main\n"
       "main(sys.argv[3:])\n")
LABELS = {"baseline": "baseline (a patch per op)", "now": "now (two collections)"}


def baseline_gantt(ax, schedule, start, end, factor) -> set:
    """The op boxes as ppopt drew them before: one Rectangle patch per op, added one at a time."""
    from matplotlib.patches import Rectangle

    from ppopt.report.plot import KIND_COLORS, _lighten, _secondary, _style_gantt

    drawn = set()
    height = 0.8
    for op, t0 in start.items():
        device = schedule.device_of(op)
        secondary = _secondary(schedule, op, device)
        base = KIND_COLORS[op.kind]
        ax.add_patch(Rectangle((t0 * factor, device - height / 2), (end[op] - t0) * factor, height,
                               facecolor=_lighten(base) if secondary else base, edgecolor=base if secondary else "white",
                               linewidth=0.6, hatch="///" if secondary else None))
        drawn.add((op.kind, secondary))
    _style_gantt(ax, schedule.devices, end, factor)
    return drawn


def timed(mode: str, command: list[str]) -> tuple[float, int]:
    """Wall seconds of one whole command in ``mode`` and the bytes of the picture it wrote."""
    here = str(Path(__file__).resolve().parent)
    with tempfile.TemporaryDirectory() as folder:
        picture = os.path.join(folder, "picture.png")
        began = time.monotonic()
        subprocess.run([sys.executable, "-c", RUN, here, mode, *command, "--plot", picture], stdout=subprocess.DEVNULL,
                       stderr=subprocess.PIPE, check=True)  # "wrote FILE" on stderr; a failure raises with it
        return time.monotonic() - began, os.path.getsize(picture)


def main() -> None:
    run_alternating(__doc__.splitlines()[0], COMMANDS, LABELS, " --plot FILE.png", timed)


if __name__ == "__main__":
    main()
