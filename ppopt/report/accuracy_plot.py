"""Predicted vs measured step times (``ppopt validate --plot``): log-log, one colour per model,
the diagonal and a ±10 % band. matplotlib is optional and imported only here, with the object API
(Figure + Agg canvas) like :mod:`ppopt.report.plot`."""

from __future__ import annotations

import os

from ppopt.accuracy import Accuracy
from ppopt.errors import ConfigError
from ppopt.io import atomic_write_bytes
from ppopt.report.plot import figure_bytes, new_figure


def plot_accuracy(accuracy: Accuracy, path: str | os.PathLike[str]) -> None:
    """Write the figure to ``path`` atomically (format from its suffix: .png, .svg, .pdf)."""
    figure = new_figure()(figsize=(6.0, 5.5))
    axes = figure.add_subplot()
    models: dict[str, list] = {}
    for r in accuracy.rows:
        models.setdefault(r.model, []).append(r)
    values = [t for r in accuracy.rows for t in (r.measured_s, r.predicted_s)] or [1.0]
    low, high = min(values) / 1.3, max(values) * 1.3
    axes.plot([low, high], [low, high], color="black", linewidth=0.8, label="predicted = measured")
    axes.fill_between([low, high], [0.9 * low, 0.9 * high], [1.1 * low, 1.1 * high], color="grey", alpha=0.25, label="±10 %")
    for model, rows in sorted(models.items()):
        axes.scatter([r.measured_s for r in rows], [r.predicted_s for r in rows], s=8, label=model)
    axes.set_xscale("log")
    axes.set_yscale("log")
    axes.set_xlim(low, high)
    axes.set_ylim(low, high)
    axes.set_xlabel("measured step time (s)")
    axes.set_ylabel("predicted step time (s)")
    axes.set_title(f"ppopt vs measured: MAPE {100 * accuracy.mape:.1f} % over {len(accuracy.rows)} rows")
    axes.legend(fontsize=6, loc="upper left")
    figure.tight_layout()
    suffix = os.path.splitext(os.fspath(path))[1].lstrip(".").lower() or "png"
    try:
        data = figure_bytes(figure, suffix, dpi=120)
    except ValueError as error:
        raise ConfigError(f"{os.fspath(path)}: cannot write the plot ({error})") from error
    atomic_write_bytes(path, data)
