"""How well the data pin ``partial_ring_efficiency``: the fitted value against fixed ones, in the same run.
Run from the repository root: ``python benchmarks/partial_ring.py [--factors 1,2,3,4,5,6,8]``.

A data-parallel ring whose group holds some but not all of a node's GPUs (t = 2 or 4 on 8-GPU
nodes) reaches ``SystemConfig.partial_ring_efficiency`` of its inter-node bandwidth, which
``ppopt calibrate`` fits when some row has such a ring (README, "How accurate is ppopt?"). This script
fixes it at 1/c for each c (the other seven parameters fitted as usual) and then fits it, and prints
for each:

- fit on the single-node rows and the 3.6B model (the only fitted rows with such rings are the 3.6B
  model's t = 2 and 4 rows): the fit's own closed-form MAPE, then the simulated MAPE and Spearman's
  rho on the 18.4B model, which that fit does not see;
- fit on the single-node rows: the simulated MAPE on the 41 multi-node rows and rho within each
  multi-node model. A single-node fit cannot see the efficiency, so there it stays at 1/c (and at
  the base system's 1 when fitted).

The baseline is c = 1 (such rings as fast as any other), in the same run. Accuracy figures, not
timings; the load is printed anyway.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import sys
from pathlib import Path

from ppopt.accuracy import predict_rows, summarize
from ppopt.calibrate import MODELS, FitModel, calibrate
from ppopt.config import SystemConfig, load_system
from ppopt.io.measured import Measured, read_measured

sys.path.insert(0, str(Path(__file__).resolve().parent))
from accuracy_extrapolation import MULTI, SINGLE, SMALL_MULTI, rho_text  # noqa: E402

FITTED = MODELS["host-overlap"]
FIXED = dataclasses.replace(FITTED, parameters=tuple(p for p in FITTED.parameters if p.name != "partial_ring_efficiency"))


def factors(text: str) -> list[float]:
    """``--factors``: comma-separated numbers, each at least 1."""
    try:
        values = [float(x) for x in text.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a list of numbers: {text!r}") from None
    if any(not v >= 1 for v in values):
        raise argparse.ArgumentTypeError(f"every factor must be at least 1: {text!r}")
    return values


def figures(rows: list[Measured], system: SystemConfig) -> tuple[float, str]:
    """Simulated MAPE (%) of ``rows`` on ``system`` and rho within each multi-node model."""
    accuracy = summarize(predict_rows([r.on(system) for r in rows]))
    return 100 * accuracy.mape, rho_text(accuracy)


def line(label: str, base: SystemConfig, model: FitModel, single: list[Measured], multi: list[Measured]) -> str:
    small = [r for r in multi if r.model_key.startswith(SMALL_MULTI)]
    large = [r for r in multi if not r.model_key.startswith(SMALL_MULTI)]
    fit = calibrate(single + small, base, model=model)
    large_mape, large_rho = figures(large, fit.system)
    multi_mape, multi_rho = figures(multi, calibrate(single, base, model=model).system)
    return (f"{label:>12} | {1 / fit.system.partial_ring_efficiency:>5.2f} {100 * fit.mape:>10.3f} % "
            f"{large_mape:>8.2f} % {large_rho:>11} | {multi_mape:>8.2f} %  {multi_rho}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--factors", type=factors, default=[1, 2, 3, 4, 5, 6, 8],
                        help="fixed values of c, comma-separated, each >= 1 (default 1,2,3,4,5,6,8)")
    args = parser.parse_args(argv)
    base = load_system("a100-vtrain")
    single, multi = read_measured(SINGLE, base)[0], read_measured(MULTI, base)[0]
    print(f"load average at start {os.getloadavg()[0]:.2f} (1 min) on {os.cpu_count()} cores; base system a100-vtrain")
    print(f"{'c = 1/eff.':>12} | {'fit on single + 3.6B: c, own MAPE':>33} {'18.4B':>9} {'rho':>11} | "
          f"{'fit on single: multi':>20}  rho")
    for c in args.factors:
        fixed = base.model_copy(update={"partial_ring_efficiency": 1 / c})
        print(line(f"fixed {c:g}", fixed, FIXED, single, multi), flush=True)
    print(line("fitted", base, FITTED, single, multi), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
