"""How the calibrated cost model extrapolates: held-out proxies computed from the shipped measured rows.
Run from the repository root: ``python benchmarks/accuracy_extrapolation.py``.

Each proxy calibrates on some rows of ``data/measured`` and validates (pipeline simulated, as
``ppopt validate`` does) on others:

1. single-node -> multi-node (the setting of a user who calibrates on one node and plans a cluster);
2. single-node hidden 1024 -> single-node hidden 2048 (extrapolation in model size);
3. single-node + 3.6B -> 18.4B (extrapolation in model size and GPUs);
4. all -> all (the shipped preset's fit).

Every proxy prints the MAPE and, where the validated rows hold a multi-node model, Spearman's rho
within it, for each fit model of :data:`ppopt.calibrate.MODELS`: the named baseline ``saturating``
(the model before the host-launch time: GEMM curve exponent n in {1, 1.5, 2}, no host time) beside
the default ``host-overlap``, in the same run. Accuracy figures, not timings; the load is printed
anyway, with the seconds each fit model took.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

from ppopt.accuracy import Accuracy, predict_rows, summarize
from ppopt.calibrate import MODELS, calibrate
from ppopt.config import load_system
from ppopt.io.measured import Measured, read_measured

DATA = Path(__file__).resolve().parent.parent / "data" / "measured"
SINGLE, MULTI = DATA / "vtrain-single-node.csv", DATA / "vtrain-multi-node-small.csv"
SMALL_MULTI = "h3072"  # model key prefix of the 3.6B model (the 18.4B one is h6144)


def proxies(single: list[Measured], multi: list[Measured]) -> list[tuple[str, list[Measured], list[Measured]]]:
    """(label, calibration rows, validation rows) of the four proxies (module doc)."""
    def hidden(rows: list[Measured], size: int) -> list[Measured]:
        return [r for r in rows if r.job.model.hidden_size == size]

    small = [r for r in multi if r.model_key.startswith(SMALL_MULTI)]
    large = [r for r in multi if not r.model_key.startswith(SMALL_MULTI)]
    return [
        ("(1) single -> multi", single, multi),
        ("(2) single h1024 -> single h2048", hidden(single, 1024), hidden(single, 2048)),
        ("(3) single + 3.6B -> 18.4B", single + small, large),
        ("(4) all -> all", single + multi, single + multi),
    ]


def rho_text(accuracy: Accuracy) -> str:
    """Spearman's rho within each multi-node model of ``accuracy`` ("3.6B 0.964, 18.4B 0.721"), or ""."""
    return ", ".join(f"{'3.6B' if key.startswith(SMALL_MULTI) else '18.4B'} {value:.3f}"
                     for key, value in accuracy.spearman.items() if value is not None and key.endswith("s2048"))


def figures(fit: list[Measured], check: list[Measured], model: str) -> str:
    """Calibrate ``model`` on ``fit``, validate on ``check``: the MAPE and the multi-node Spearman."""
    base = load_system("a100-vtrain")
    system = calibrate(fit, base, model=model).system
    accuracy = summarize(predict_rows([r.on(system) for r in check]))
    rho = rho_text(accuracy)
    return f"MAPE {100 * accuracy.mape:6.2f} %" + (f", Spearman {rho}" if rho else "")


def main() -> None:
    print(f"load average at start: {' '.join(f'{x:.2f}' for x in os.getloadavg())} on {os.cpu_count()} cores")
    base = load_system("a100-vtrain")
    single, multi = read_measured(SINGLE, base)[0], read_measured(MULTI, base)[0]
    for label, fit, check in proxies(single, multi):
        print(f"{label} (calibrate on {len(fit)} rows, validate on {len(check)})")
        for model in MODELS:
            start = time.perf_counter()
            text = figures(fit, check, model)
            print(f"  {model:<13} {text}  [{time.perf_counter() - start:.1f} s]")


if __name__ == "__main__":
    main()
