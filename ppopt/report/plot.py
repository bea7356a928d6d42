"""Schedule pictures: Gantt charts of timed schedules (PNG or SVG), with a memory panel.

``plot_schedule`` draws one row per device (device 0 on top), time on x, one box per op coloured by
kind, the microbatch number in the box (the font follows the box width; no text where it would not
fit), idle time blank. Boxes of a device's second and later chunks (interleaved, V and wave
placements) or of the "up" replica (Chimera) are drawn lighter and hatched. A simulated step can
also show its messages: one thin grey line per point-to-point transfer, from the sender's row at
the moment the message leaves to the receiver's row at its arrival (:func:`simulated_transfers`).

Below, the memory panel draws a step line per device: live activations over time (+1, or the
stage's ``activation_bytes``, from an F's start to the end of the op that frees it: B, or W when
backward is split, except what I frees, :func:`ppopt.table.activation_changes`), plus an optional constant per
device (``memory_base``, e.g. the persistent bytes of ``Simulation.persistent_bytes``, so the lines
are the device's whole memory). Devices keep one colour and one dash pattern each (no two devices
share both), earlier devices wider, so lines lying on top of each other still show. A memory limit
is a red dashed horizontal line. ``plot_compare`` stacks several schedules on one time axis, each
with its step time in its title and its own memory panel.

Times are any unit: table slots (``build_table``'s ``start`` and ``end``) or simulated seconds
(``Simulation.start_s`` / ``end_s``, drawn in ms when the step is shorter than a second).

matplotlib is an optional dependency (the ``plot`` extra: ``pip install 'matplotlib>=3.8'``), imported only when drawing.
The figures are built with matplotlib's object API (``matplotlib.figure.Figure``, Agg canvas), never
through ``pyplot``, so drawing changes no global backend or state. Files are written atomically.
"""

from __future__ import annotations

import io
import os
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple

from ppopt.errors import ScheduleError
from ppopt.io import atomic_write_bytes
from ppopt.ir import Kind, Op, Schedule

if TYPE_CHECKING:
    from ppopt.costs import StageCost

__all__ = [
    "KIND_COLORS", "MAX_PICTURE_OPS", "Panel", "Transfer", "check_picture_size", "compare_figure", "outputs_time_s", "picture_time_s", "default_title", "device_style", "live_curves", "plot_compare",
    "plot_schedule", "schedule_figure", "simulated_transfers",
]

SUFFIXES = {".png": "png", ".svg": "svg"}

# Okabe & Ito's colour-blind-safe palette.
KIND_COLORS = {Kind.F: "#0072B2", Kind.B: "#D55E00", Kind.I: "#E69F00", Kind.W: "#009E73"}
KIND_NAMES = {Kind.F: "F forward", Kind.B: "B backward", Kind.I: "I input grad", Kind.W: "W weight grad"}
_DARK_TEXT = {Kind.F: "white", Kind.B: "white", Kind.I: "black", Kind.W: "white"}
_LIGHTEN = 0.45
_MIN_FONT = 4.5
_MAX_FONT = 9.0
_ROW_INCHES = 0.42
_MEMORY_INCHES = 1.9
_COMPARE_MEMORY_INCHES = 1.2
# Device lines of the memory panel: 7 colours (Okabe & Ito, without yellow) by 4 dash patterns,
# coprime, so devices 0..27 all differ in (colour, dash).
_DEVICE_COLORS = ("#0072B2", "#D55E00", "#009E73", "#CC79A7", "#E69F00", "#56B4E9", "#000000")
_DEVICE_DASHES = ("-", "--", ":", "-.")
LIMIT_COLOR = "#C00000"
TRANSFER_COLOR = "0.35"

#: A point-to-point message: (source device, destination device, leaves, arrives), in the plot's time unit.
Transfer = tuple[int, int, float, float]


class Panel(NamedTuple):
    """One schedule of :func:`plot_compare`: its name, timing and what its memory panel needs."""

    name: str
    schedule: Schedule
    start: Mapping[Op, float]
    end: Mapping[Op, float]
    step: float | None = None
    """The step time shown in the title [default: the last op's end]."""
    stage_costs: Sequence[StageCost] | None = None
    """Each stage's costs, for the memory panel's activation sizes [default: 1 per stage]."""
    transfers: Sequence[Transfer] = ()


def require_matplotlib() -> None:
    """Raise a one-line :class:`ScheduleError` (field ``plot``) when matplotlib is not installed."""
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        raise ScheduleError("needs matplotlib: pip install 'matplotlib>=3.8' (ppopt's plot extra)", field="plot") from None


def new_figure():
    """A function making Figures with their own Agg canvas; a one-line error without matplotlib."""
    require_matplotlib()
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    def figure(**options) -> Figure:
        fig = Figure(**options)
        FigureCanvasAgg(fig)  # an Agg canvas of its own: no pyplot, no global backend
        return fig

    return figure


def picture_format(path: str | os.PathLike) -> str:
    """The matplotlib format of a picture path (its .png or .svg suffix); ScheduleError otherwise."""
    suffix = Path(path).suffix.lower()
    if suffix not in SUFFIXES:
        if not suffix:
            raise ScheduleError(f"cannot draw to {path}: the name needs a picture suffix, .png or .svg")
        raise ScheduleError(f"cannot draw to {path}: '{suffix}' is not a picture format (use .png or .svg)")
    return SUFFIXES[suffix]


def _lighten(color: str, amount: float = _LIGHTEN) -> tuple[float, float, float]:
    from matplotlib.colors import to_rgb

    r, g, b = to_rgb(color)
    return (r + (1 - r) * amount, g + (1 - g) * amount, b + (1 - b) * amount)


def _secondary(schedule: Schedule, op: Op, device: int) -> bool:
    """True for an op of a device's second or later chunk, or of a non-first replica."""
    holders = schedule.placement[op.stage]
    if len(holders) > 1:
        return (schedule.replica_of[op.microbatch] if schedule.replica_of else 0) > 0
    return schedule.stages_on(device).index(op.stage) > 0


def _time_axis(length: float, time_unit: str) -> tuple[float, str]:
    """Factor to multiply times by for the axis, and the axis label."""
    if time_unit == "s" and 0 < length < 1:
        return 1e3, "time (ms)"
    return 1.0, f"time ({time_unit})"


def live_curves(
    schedule: Schedule,
    start: Mapping[Op, float],
    end: Mapping[Op, float],
    stage_costs: Sequence[StageCost] | None = None,
) -> list[tuple[list[float], list[float]]]:
    """Per device, ``(times, levels)`` of live activations: the level after each change, from 0
    (:func:`ppopt.table.activation_changes`, with each stage's sizes from ``stage_costs``
    [default: 1 per stage, freed whole])."""
    from ppopt.table import activation_changes

    if stage_costs is None:
        changes = activation_changes(schedule, start, end)
    else:
        changes = activation_changes(schedule, start, end, lambda s: stage_costs[s].activation_bytes,
                                     lambda s: stage_costs[s].input_grad_release_bytes)
    length = max(end.values(), default=0.0)
    curves = []
    for device_changes in changes:
        times, levels, live = [0.0], [0.0], 0.0
        for t, _, change in device_changes:
            live += change
            if t == times[-1]:
                levels[-1] = live
            else:
                times.append(t)
                levels.append(live)
        if times[-1] < length:
            times.append(length)
            levels.append(levels[-1])
        curves.append((times, levels))
    return curves


def _draw_gantt(ax, schedule: Schedule, start: Mapping[Op, float], end: Mapping[Op, float], factor: float) -> set:
    """The op boxes on ``ax``, as two collections (plain, and hatched for the secondary ops: a
    collection has one hatch); returns the (kind, secondary) pairs drawn, for the legend.

    One collection instead of a patch per op: matplotlib updates the data limits of every patch
    added and draws each as its own path, which made ``compare --plot`` of 14 schedules at
    p = 4, m = 32 take 18 s (``benchmarks/plot_bench.py``)."""
    from matplotlib.collections import PatchCollection
    from matplotlib.patches import Rectangle

    drawn = set()
    height = 0.8
    boxes: dict[bool, list] = {False: [], True: []}
    for op, t0 in start.items():
        device = schedule.device_of(op)
        width = (end[op] - t0) * factor
        secondary = _secondary(schedule, op, device)
        base = KIND_COLORS[op.kind]
        face = _lighten(base) if secondary else base
        boxes[secondary].append(Rectangle((t0 * factor, device - height / 2), width, height, facecolor=face,
                                          edgecolor=base if secondary else "white", linewidth=0.6))
        drawn.add((op.kind, secondary))
    for secondary, rectangles in boxes.items():
        if rectangles:
            ax.add_collection(PatchCollection(rectangles, match_original=True, hatch="///" if secondary else None,
                                              gid="boxes"), autolim=False)
    _style_gantt(ax, schedule.devices, end, factor)
    return drawn


def _style_gantt(ax, devices: int, end: Mapping[Op, float], factor: float) -> None:
    """The Gantt chart's axes: a row per device (device 0 on top), time from 0 to the last end."""
    ax.set_ylim(devices - 0.5, -0.5)  # device 0 on top
    ax.set_yticks(range(devices))
    ax.set_yticklabels([f"device {d}" for d in range(devices)])
    length = max(end.values(), default=1.0) * factor
    ax.set_xlim(0, length if length > 0 else 1)
    ax.tick_params(axis="y", length=0)
    for spine in ("top", "right", "left"):
        ax.spines[spine].set_visible(False)
    ax.grid(axis="x", color="0.88", linewidth=0.6)
    ax.set_axisbelow(True)


def _label_boxes(fig, ax, schedule: Schedule, start: Mapping[Op, float], end: Mapping[Op, float], factor: float) -> None:
    """Microbatch numbers in the boxes, the font sized to the box (call after ``fig.draw_without_rendering()``
    has settled the layout, so the axes' size in points is final)."""
    box = ax.get_window_extent()
    x0, x1 = ax.get_xlim()
    points_per_unit = box.width * 72.0 / fig.dpi / (x1 - x0)
    row_points = box.height * 72.0 / fig.dpi / max(schedule.devices, 1)
    for op, t0 in start.items():
        text = str(op.microbatch)
        width_points = (end[op] - t0) * factor * points_per_unit
        size = min(_MAX_FONT, row_points * 0.55, 0.85 * width_points / (0.62 * len(text) + 0.3))
        if size < _MIN_FONT:
            continue
        secondary = _secondary(schedule, op, schedule.device_of(op))
        ax.text(
            (t0 + (end[op] - t0) / 2) * factor, schedule.device_of(op), text,
            ha="center", va="center", fontsize=size,
            color="black" if secondary else _DARK_TEXT[op.kind],
            fontweight="bold" if secondary else "normal",
        )


def _legend_handles(drawn: set, secondary_label: str, messages: bool = False):
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch

    handles: list[Any] = []
    for kind in (Kind.F, Kind.B, Kind.I, Kind.W):
        if any(k is kind for k, _ in drawn):
            handles.append(Patch(facecolor=KIND_COLORS[kind], edgecolor="white", label=KIND_NAMES[kind]))
    if any(secondary for _, secondary in drawn):
        handles.append(Patch(facecolor=_lighten("#777777"), edgecolor="#777777", hatch="///", label=secondary_label))
    if messages:
        handles.append(Line2D([], [], color=TRANSFER_COLOR, linewidth=0.7, label="message (send → arrival)"))
    return handles


def _save(fig, path: str | os.PathLike, fmt: str) -> Path:
    return atomic_write_bytes(path, figure_bytes(fig, fmt, dpi=150 if fmt == "png" else None))


def figure_bytes(fig, fmt: str, dpi: float | None = None) -> bytes:
    """``fig`` as the bytes of a ``fmt`` file (png, svg), the same on every run: no creation date and
    a fixed salt for the element ids in SVG (matplotlib's are random otherwise), a fixed software
    tag in PNG. ValueError for a format matplotlib cannot write."""
    import matplotlib

    buffer = io.BytesIO()
    metadata = {"svg": {"Date": None}, "png": {"Software": "ppopt"}}.get(fmt.lower())  # other formats: matplotlib's own
    with matplotlib.rc_context({"svg.hashsalt": "ppopt"}):
        fig.savefig(buffer, format=fmt, dpi=dpi, metadata=metadata)
    return buffer.getvalue()


def _figure_width(length_ops: int) -> float:
    return min(22.0, max(8.0, 0.16 * length_ops + 4.0))


def _secondary_label(schedules: Sequence[Schedule]) -> str:
    replicated = any(s.replicas > 1 for s in schedules)
    chunked = any(s.replicas == 1 and s.stages > s.devices for s in schedules)
    what = " / ".join(x for x, on in (("chunk ≥ 1", chunked), ("up direction", replicated)) if on) or "chunk ≥ 1"
    return f"{what} (lighter, hatched)"


def default_title(schedule: Schedule) -> str:
    """A picture's title: the family, p, m and the options that built it."""
    options = ", ".join(f"{k}={v}" for k, v in schedule.options.items() if v is not None)
    return f"{schedule.name}: p={schedule.devices}, m={schedule.microbatches}" + (f" ({options})" if options else "")


def simulated_transfers(simulation) -> list[Transfer]:
    """The messages between devices of a :class:`~ppopt.simulate.Simulation` (its "transfer"
    events; two stages on one device exchange no message), in its time unit."""
    return [(e.where[0], e.where[1], e.start_s, e.end_s) for e in simulation.events("transfer") if e.where[0] != e.where[1]]


def device_style(device: int, devices: int) -> dict[str, Any]:
    """Colour, dash pattern, width and stacking of a device's line in the memory panel: earlier
    devices wider and below, so a line lying on another one still shows as a rim."""
    return {
        "color": _DEVICE_COLORS[device % len(_DEVICE_COLORS)],
        "linestyle": _DEVICE_DASHES[device % len(_DEVICE_DASHES)],
        "linewidth": 1.2 + 1.6 * (devices - 1 - device) / max(devices - 1, 1),
        "zorder": 2 + device,
    }


def _draw_transfers(ax, transfers: Iterable[Transfer], factor: float) -> None:
    """One thin line per message, from the sender's box edge facing the receiver to the receiver's."""
    from matplotlib.collections import LineCollection

    edge = 0.4
    segments = []
    for source, destination, leaves, arrives in transfers:
        down = 1 if destination > source else -1  # device 0 is the top row
        segments.append([(leaves * factor, source + down * edge), (arrives * factor, destination - down * edge)])
    if segments:
        ax.add_collection(LineCollection(segments, colors=TRANSFER_COLOR, linewidths=0.7, alpha=0.8, zorder=3,
                                         gid="transfers", label="message"))


def schedule_figure(
    schedule: Schedule,
    start: Mapping[Op, float],
    end: Mapping[Op, float],
    title: str | None = None,
    memory: bool = True,
    time_unit: str = "slots",
    stage_costs: Sequence[StageCost] | None = None,
    memory_unit: str = "activations",
    *,
    memory_base: Sequence[float] | None = None,
    memory_limit: float | None = None,
    transfers: Sequence[Transfer] = (),
):
    """A schedule timed by ``start``/``end`` as a Gantt chart over a memory panel (the Figure
    :func:`plot_schedule` saves); axes: the Gantt chart, then the memory panel.

    Args:
        schedule: the schedule (placement and chunks).
        start, end: every op's start and end time (table slots or simulated seconds).
        title: figure title [default: name, p, m and options].
        memory: add the memory panel below the chart.
        time_unit: label of the time axis (``"slots"`` or ``"s"``; seconds shorter than a whole
            second are drawn in ms).
        stage_costs: each stage's costs (``costs.stages``), whose activation sizes the memory
            panel counts, freed as the simulator frees them [default: 1 per stage].
        memory_unit: what the activation sizes count: ``"activations"`` or ``"bytes"`` (then
            shown in KiB, MiB, GiB or TiB as the peak suggests).
        memory_base: a constant per device added to its live activations (e.g.
            ``Simulation.persistent_bytes``): the panel then shows the device's whole memory.
        memory_limit: a per-device limit in the same unit, drawn as a horizontal line.
        transfers: messages to draw (:func:`simulated_transfers`), in the time unit of ``start``.
    """
    _memory_scale(0.0, memory_unit)  # checks the unit
    Figure = new_figure()
    factor, xlabel = _time_axis(max(end.values(), default=0.0), time_unit)
    p = schedule.devices
    gantt_height = max(1.6, _ROW_INCHES * p + 0.6)
    heights = [gantt_height] + ([_MEMORY_INCHES] if memory else [])
    width = _figure_width(max((len(order) for order in schedule.orders), default=1))
    fig = Figure(figsize=(width, sum(heights) + 0.9), layout="constrained")
    axes = fig.subplots(len(heights), 1, sharex=True, squeeze=False, gridspec_kw={"height_ratios": heights})[:, 0]
    gantt = axes[0]
    drawn = _draw_gantt(gantt, schedule, start, end, factor)
    _draw_transfers(gantt, transfers, factor)
    gantt.set_title(title if title is not None else default_title(schedule), loc="left", fontsize=11)
    gantt.legend(handles=_legend_handles(drawn, _secondary_label([schedule]), bool(transfers)), loc="upper left",
                 bbox_to_anchor=(1.0, 1.0), frameon=False, fontsize=8, handlelength=1.6)
    if memory:
        _draw_memory(axes[1], schedule, start, end, factor, stage_costs, memory_unit, memory_base, memory_limit)
    axes[-1].set_xlabel(xlabel)
    if not memory:
        gantt.tick_params(axis="x", labelbottom=True)
    fig.draw_without_rendering()  # settle the layout (axes sizes) before sizing the labels
    fig.set_layout_engine("none")  # and keep it: the labels fit inside their boxes
    _label_boxes(fig, gantt, schedule, start, end, factor)
    return fig


MAX_PICTURE_OPS = 40_000
"""The most ops a schedule picture draws: well before this many the boxes are too small to read.
With the boxes drawn as collections, 1F1B at 16 x 1,024 (32,768 ops) took 6 s as a whole ``table
--plot`` command to PNG on this project's 2-core machine (34 to 40 s with a patch per op before);
ZB-V at 16 x 256 (24,576 ops, half of them hatched) 8.2 s and 5.3 MB to SVG. ``benchmarks/plot_bench.py``
times the PNG beside the patch-per-op baseline."""


PICTURE_FIXED_S = 2.0
"""Wall time of any picture before its ops, generously: importing matplotlib, laying out and saving
the figure (1F1B at 16 x 16, 512 ops: 1.8 s as a whole command on this project's 2-core machine)."""
PICTURE_S_PER_OP = 0.4e-3
"""Wall time per op of a schedule picture, generously (whole ``table --plot`` commands, 1F1B at
16 x 128, 4,096 ops: 2.0 s; at 16 x 512: 3.2 s; at 16 x 1,024: 6 s; ZB-V at 16 x 256 to SVG: 8.2 s,
against 11.8 s estimated)."""


COMPARE_PANEL_S = 0.6
"""Wall time of each further schedule a :func:`plot_compare` picture stacks (its Gantt and memory
axes, laid out, labelled and drawn), generously: ``compare --plot`` of 14 schedules at p = 4, m = 8
(llama3-8b on dgx-a100, 920 ops) took 8.8 s as a whole command against 0.6 s without the picture,
about 0.48 s per schedule after the first."""


def picture_time_s(ops: int, schedules: int = 1) -> float:
    """Seconds a picture of ``ops`` ops over ``schedules`` stacked schedules may take to draw and
    write: what a command with a time limit keeps for it after its search or its evaluations."""
    return PICTURE_FIXED_S + COMPARE_PANEL_S * max(0, schedules - 1) + PICTURE_S_PER_OP * ops


def outputs_time_s(ops: int, picture: bool, trace: bool) -> float:
    """Seconds to keep for a picture (:func:`picture_time_s`) and a trace
    (:func:`ppopt.report.trace.trace_time_s`) of one schedule of ``ops`` ops, those asked for."""
    from ppopt.report.trace import trace_time_s

    return (picture_time_s(ops) if picture else 0.0) + (trace_time_s(ops) if trace else 0.0)


def check_picture_size(ops: int, what: str = "") -> None:
    """ScheduleError for a picture of more than :data:`MAX_PICTURE_OPS` ops, before any drawing (its
    boxes would be too small to read, and its time and memory grow with the ops); commands check the size they will draw before the work that makes it.
    ``what`` qualifies the count in the message (``up to``, for an upper bound)."""
    if ops > MAX_PICTURE_OPS:
        raise ScheduleError(f"a picture of {what + ' ' if what else ''}{ops:,} ops would have boxes too small to "
                            f"read; it draws at most {MAX_PICTURE_OPS:,}: export torch-csv or chrome-trace instead, "
                            "or fewer microbatches")


def plot_schedule(schedule: Schedule, start: Mapping[Op, float], end: Mapping[Op, float], path: str | os.PathLike,
                  **options: Any) -> Path:
    """Draw :func:`schedule_figure` (``options`` are its keyword arguments) and write it to ``path``,
    a ``.png`` or ``.svg`` (anything else is a :class:`ScheduleError`; so is a schedule over
    :func:`check_picture_size`). Returns the path written."""
    check_picture_size(len(start))
    fmt = picture_format(path)
    return _save(schedule_figure(schedule, start, end, **options), path, fmt)


def _memory_peak(schedule: Schedule, start, end, stage_costs: Sequence[StageCost] | None) -> float:
    return max((max(levels) for _, levels in live_curves(schedule, start, end, stage_costs)), default=0.0)


def _draw_memory(ax, schedule: Schedule, start, end, factor: float, stage_costs: Sequence[StageCost] | None, unit: str,
                 base: Sequence[float] | None = None, limit: float | None = None, top: float | None = None,
                 legend: bool = True) -> None:
    """The memory panel: a step line per device (see the module docstring), and the limit; ``top``
    sets the scale (panels that are compared share it) [default: this panel's peak]."""
    curves = live_curves(schedule, start, end, stage_costs)
    offsets = list(base) if base is not None else [0.0] * schedule.devices
    peak = top if top is not None else max([max(levels) + b for (_, levels), b in zip(curves, offsets)] + [limit or 0.0])
    divisor, label = _memory_scale(peak, unit, whole=base is not None)
    if unit == "activations":  # say what one activation is: the table's stage chunk, or a 1/p model share
        chunks = stage_costs is None and schedule.stages != schedule.devices
        label += f" (stage chunks, 1/{schedule.stages} of the model)" if chunks else " (1/p model shares)"
    p = schedule.devices
    for device, ((times, levels), b) in enumerate(zip(curves, offsets)):
        ax.step([t * factor for t in times], [(v + b) / divisor for v in levels], where="post",
                label=f"device {device}", **device_style(device, p))
    if limit is not None:
        ax.axhline(limit / divisor, color=LIMIT_COLOR, linestyle=(0, (4, 2)), linewidth=1.2, zorder=2 + p, gid="memory limit",
                   label="memory limit")
    ax.set_ylabel(label, fontsize=9)
    ax.set_ylim(bottom=0, top=(peak / divisor) * 1.08 or 1.0)
    ax.grid(color="0.9", linewidth=0.6)
    for spine in ("top", "right"):
        ax.spines[spine].set_visible(False)
    if legend and p <= 16:
        ax.legend(loc="upper left", bbox_to_anchor=(1.0, 1.0), fontsize=8, frameon=False, ncol=1 if p <= 8 else 2,
                  handlelength=2.8)


def _memory_scale(peak: float, unit: str, whole: bool = False) -> tuple[float, str]:
    """The memory panel's divisor and y label: activations as counted, bytes in a binary unit;
    ``whole`` when the lines include persistent memory."""
    what = "memory" if whole else "live activations"
    if unit == "activations":
        return 1.0, what
    if unit != "bytes":
        raise ValueError(f"memory_unit must be 'activations' or 'bytes', got {unit!r}")
    for name, divisor in (("TiB", 2.0**40), ("GiB", 2.0**30), ("MiB", 2.0**20), ("KiB", 2.0**10)):
        if peak >= divisor:
            return divisor, f"{what} ({name})"
    return 1.0, f"{what} (bytes)"


def compare_figure(
    items: Sequence[Panel | tuple],
    title: str | None = None,
    time_unit: str = "slots",
    memory: bool = True,
    memory_unit: str = "activations",
):
    """The Figure :func:`plot_compare` saves; axes: per schedule its Gantt chart, then (with
    ``memory``) its memory panel."""
    from matplotlib.lines import Line2D

    panels = [Panel(*item) for item in items]
    if not panels:
        raise ScheduleError("nothing to compare: give at least one schedule")
    _memory_scale(0.0, memory_unit)  # checks the unit
    Figure = new_figure()
    longest = max(max(panel.end.values(), default=0.0) for panel in panels)
    factor, xlabel = _time_axis(longest, time_unit)
    heights: list[float] = []
    for panel in panels:
        heights += [max(1.2, _ROW_INCHES * panel.schedule.devices + 0.5)] + ([_COMPARE_MEMORY_INCHES] if memory else [])
    width = _figure_width(max(len(order) for panel in panels for order in panel.schedule.orders))
    fig = Figure(figsize=(width, sum(heights) + 0.5 * len(panels) + 0.8), layout="constrained")
    axes = fig.subplots(len(heights), 1, sharex=True, squeeze=False, gridspec_kw={"height_ratios": heights})[:, 0]
    per = 2 if memory else 1
    # one memory scale for every panel, so heights compare across schedules
    top = max(_memory_peak(panel.schedule, panel.start, panel.end, panel.stage_costs) for panel in panels) if memory else None
    drawn: set = set()
    for k, panel in enumerate(panels):
        ax = axes[per * k]
        drawn |= _draw_gantt(ax, panel.schedule, panel.start, panel.end, factor)
        _draw_transfers(ax, panel.transfers, factor)
        step = panel.step if panel.step is not None else max(panel.end.values(), default=0.0)
        ax.set_title(f"{panel.name}: step {step:.4g} {time_unit}", loc="left", fontsize=10)
        if memory:
            _draw_memory(axes[per * k + 1], panel.schedule, panel.start, panel.end, factor, panel.stage_costs, memory_unit,
                         top=top, legend=False)
    for ax in axes:
        ax.set_xlim(0, longest * factor if longest > 0 else 1)
    axes[-1].set_xlabel(xlabel)
    handles = _legend_handles(drawn, _secondary_label([panel.schedule for panel in panels]), any(p.transfers for p in panels))
    if memory:  # one legend for the memory panels' device lines too
        widest = max(panels, key=lambda panel: panel.schedule.devices).schedule.devices
        handles += [Line2D([], [], label=f"device {d}", **device_style(d, widest)) for d in range(min(widest, 16))]
    fig.legend(handles=handles, loc="outside right upper", frameon=False, fontsize=8, handlelength=2.8)
    if title:
        fig.suptitle(title, x=0.01, ha="left", fontsize=11)
    fig.draw_without_rendering()  # settle the layout (axes sizes) before sizing the labels
    fig.set_layout_engine("none")  # and keep it: the labels fit inside their boxes
    for k, panel in enumerate(panels):
        _label_boxes(fig, axes[per * k], panel.schedule, panel.start, panel.end, factor)
    return fig


def plot_compare(
    items: Sequence[Panel | tuple],
    path: str | os.PathLike,
    title: str | None = None,
    time_unit: str = "slots",
    memory: bool = True,
    memory_unit: str = "activations",
) -> Path:
    """Several timed schedules (:class:`Panel`, or tuples of its fields) stacked on a shared time
    axis, each with its step time in its title and, with ``memory``, its memory panel; together at
    most :data:`MAX_PICTURE_OPS` ops (:func:`check_picture_size`)."""
    check_picture_size(sum(len(Panel(*item).start) for item in items))
    fmt = picture_format(path)
    return _save(compare_figure(items, title, time_unit, memory, memory_unit), path, fmt)
