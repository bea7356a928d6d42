"""The study report's figures: step time and idle ratio vs m per system, peak memory per schedule.

:func:`study_figures` builds matplotlib Figures (object API, an Agg canvas each, no pyplot; see
:func:`ppopt.report.plot.new_figure`) from a :class:`ppopt.sweep.study.StudyData`, and
:func:`write_figures` saves them as PNG files. Only panels with data are drawn: a system or a
device count without rows gets no panel, and a grid has no empty cell. Paper schedules are drawn
solid, ppopt's additions dashed; each schedule keeps its colour in every figure.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from ppopt.errors import PpoptError
from ppopt.io import atomic_write_bytes
from ppopt.sweep.study import LEVELS, StudyData, grid_level, is_paper

__all__ = ["DPI", "GiB", "available", "study_figures", "write_figures"]

GiB = 2**30
#: Resolution of the saved PNGs, dots per inch.
DPI = 110
# Okabe & Ito's colour-blind-safe palette, then greys.
_PALETTE = ["#0072B2", "#D55E00", "#009E73", "#CC79A7", "#E69F00", "#56B4E9", "#000000", "#999999", "#F0E442"]
_MARKERS = ["o", "s", "^", "D", "v", "P", "X", "*", "h"]


def available() -> Callable[..., Any] | None:
    """The Figure factory of :mod:`ppopt.report.plot`, or None without matplotlib."""
    from ppopt.errors import ScheduleError
    from ppopt.report.plot import new_figure

    try:
        return new_figure()
    except ScheduleError:
        return None


def _style(data: StudyData) -> dict[str, dict]:
    """Per schedule: a colour, solid (paper) or dashed (ppopt's additions), and a marker of its own,
    earlier schedules larger, so equal values (GPipe and 1F1B often) still show both."""
    return {
        s: {"color": _PALETTE[i % len(_PALETTE)], "linestyle": "-" if is_paper(s) else "--",
            "marker": _MARKERS[i % len(_MARKERS)], "markersize": max(3.0, 8.0 * 0.85**i),
            "linewidth": max(1.0, 3.0 * 0.85**i), "zorder": 2 + i}
        for i, s in enumerate(data.schedules)
    }


def grid_layout(systems: Sequence[str]) -> tuple[int, int, dict[str, tuple[int, int]]]:
    """Rows, columns and the cell of each system: compute level by network level when the systems
    fill that grid, else a near-square grid in the given order (so no cell is left empty but the
    last row's tail)."""
    levels = [grid_level(s) for s in systems]
    if all(x is not None for x in levels):
        known = [x for x in levels if x is not None]
        computes = [lvl for lvl in LEVELS if any(x[0] == lvl for x in known)]
        networks = [lvl for lvl in LEVELS if any(x[1] == lvl for x in known)]
        if len(computes) * len(networks) == len(systems):
            return len(computes), len(networks), {s: (computes.index(x[0]), networks.index(x[1])) for s, x in zip(systems, known)}
    cols = math.ceil(math.sqrt(len(systems)))
    rows = math.ceil(len(systems) / cols)
    return rows, cols, {s: divmod(i, cols) for i, s in enumerate(systems)}


def _m_axis(ax, microbatches: Sequence[int]) -> None:
    """A log2 axis of microbatch counts with a tick at each swept m and no minor ticks."""
    from matplotlib.ticker import NullLocator

    ax.set_xscale("log", base=2)
    ax.set_xticks(list(microbatches), [str(m) for m in microbatches])
    ax.xaxis.set_minor_locator(NullLocator())


def _legend(fig, axes: Sequence) -> None:
    """One legend for the figure: the panel with the most schedules has every label."""
    handles, labels = max((ax.get_legend_handles_labels() for ax in axes), key=lambda hl: len(hl[1]))
    columns = max(1, min(len(labels), int(fig.get_figwidth() / 1.35)))  # about 1.35 inches per entry
    fig.legend(handles, labels, loc="outside lower center", ncols=columns, fontsize=8)


def _per_system_figure(figure, data: StudyData, devices: int, column: str, label: str):
    """``column`` vs m, one panel per system that has rows at S = ``devices``."""
    systems = [sy for sy in data.systems if any(data.present(sy, devices, m) for m in data.microbatches)]
    rows, cols, where = grid_layout(systems)
    fig = figure(figsize=(3.6 * cols, 2.9 * rows + 0.6), layout="constrained")
    grid = fig.add_gridspec(rows, cols)
    style = _style(data)
    axes: list[Any] = []
    for system, (r, c) in where.items():
        ax = fig.add_subplot(grid[r, c], sharex=axes[0] if axes else None)
        axes.append(ax)
        for schedule in data.schedules:
            xs = [m for m in data.microbatches if (system, devices, m, schedule) in data.rows]
            if xs:
                ax.plot(xs, [data.value(system, devices, m, schedule, column) for m in xs], label=schedule, **style[schedule])
        _m_axis(ax, data.microbatches)
        ax.set_title(system + (" (compute-network)" if (r, c) == (0, 0) and grid_level(system) else ""), fontsize=9)
        ax.tick_params(labelsize=7)
        if c == 0:
            ax.set_ylabel(label, fontsize=8)
        if r == rows - 1 or (r + 1, c) not in where.values():
            ax.set_xlabel("microbatches m", fontsize=8)
    _legend(fig, axes)
    fig.suptitle(f"{label} vs m, S = {devices} stages, model {data.model}", fontsize=10)
    return fig


def _panel_row(figure, count: int, width: float) -> tuple[Any, list[Any]]:
    """A figure of ``count`` panels side by side, ``width`` inches each."""
    fig = figure(figsize=(width * count, 3.9), layout="constrained")
    return fig, [fig.add_subplot(1, count, k + 1) for k in range(count)]


def _label(ax, title: str, xlabel: str, ylabel: str) -> None:
    """One panel's title and axis labels in the study figures' font sizes."""
    ax.set_title(title, fontsize=9)
    ax.set_xlabel(xlabel, fontsize=8)
    ax.set_ylabel(ylabel, fontsize=8)
    ax.tick_params(labelsize=7)


def _memory_figure(figure, data: StudyData):
    """Worst-device peak memory vs m on the baseline system, one panel per S with rows."""
    system = data.baseline
    style = _style(data)
    devices = [p for p in data.devices if any(data.present(system, p, m) for m in data.microbatches)]
    fig, axes = _panel_row(figure, len(devices), 5.0)
    for ax, p in zip(axes, devices):
        for schedule in data.schedules:
            xs = [m for m in data.microbatches if (system, p, m, schedule) in data.rows]
            if xs:
                ax.plot(xs, [data.value(system, p, m, schedule, "sim_peak_memory_bytes_max") / GiB for m in xs], label=schedule, **style[schedule])
        _m_axis(ax, data.microbatches)
        _label(ax, f"S = {p}", "microbatches m", "peak memory, worst device (GiB)")
    _legend(fig, axes)
    fig.suptitle(f"Peak memory per device (worst device), {system}", fontsize=10)
    return fig


def _per_device_figure(figure, data: StudyData):
    """Peak memory of every device at the smallest m on the baseline system, bars per schedule."""
    system, m = data.baseline, data.microbatches[0]
    style = _style(data)
    devices = [p for p in data.devices if data.present(system, p, m)]
    fig, axes = _panel_row(figure, len(devices), 5.5)
    for ax, p in zip(axes, devices):
        present = data.present(system, p, m)
        width = 0.8 / len(present)
        for j, schedule in enumerate(present):
            values = [v / GiB for v in data.rows[(system, p, m, schedule)]["sim_peak_memory_bytes"]]
            ax.bar([d + (j - (len(present) - 1) / 2) * width for d in range(len(values))], values, width, label=schedule, color=style[schedule]["color"])
        ax.set_xticks(range(p))
        _label(ax, f"S = {p}, m = {m}", "device", "peak memory (GiB)")
    _legend(fig, axes)
    fig.suptitle(f"Peak memory on every device, {system}", fontsize=10)
    return fig


def study_figures(data: StudyData, figure: Callable[..., Any]) -> list[tuple[str, str, Any]]:
    """``(file name, caption, Figure)`` of every figure the rows allow; ``figure`` makes a Figure
    (:func:`available`)."""
    made = []
    for column, label, stem in (("sim_step_time_s", "step time (s)", "step_time"), ("sim_idle_ratio", "idle ratio", "idle_ratio")):
        for p in data.devices:
            if any(key[1] == p for key in data.rows):
                made.append((f"{stem}_S{p}.png", f"{label.split(' (')[0]}, S = {p}", _per_system_figure(figure, data, p, column, label)))
    if any(key[0] == data.baseline for key in data.rows):
        made.append(("peak_memory.png", "peak memory", _memory_figure(figure, data)))
    if any(key[0] == data.baseline and key[2] == data.microbatches[0] for key in data.rows):
        made.append(("peak_memory_per_device.png", "peak memory per device", _per_device_figure(figure, data)))
    return made


def write_figures(data: StudyData, directory: Path, dpi: int | None = None) -> list[tuple[str, str]] | None:
    """Draw and save the figures into ``directory`` at ``dpi`` [default: :data:`DPI`]; ``None``
    without matplotlib. Returns (caption, path relative to the report) per figure."""
    figure = available()
    if figure is None:
        return None
    from ppopt.report.plot import figure_bytes

    written = []
    for name, caption, fig in study_figures(data, figure):
        try:
            directory.mkdir(parents=True, exist_ok=True)
        except OSError as error:  # a file of that name (checked before the sweep, but it may appear since)
            raise PpoptError(f"cannot write into {directory}: {error.strerror or error}", field="output") from None
        atomic_write_bytes(directory / name, figure_bytes(fig, "png", dpi=dpi or DPI))
        written.append((caption, f"{directory.name}/{name}"))
    return written
