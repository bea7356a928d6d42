"""``ppopt plan --plot``: predicted step time against per-GPU peak memory of every evaluated job.

One panel per plan (one per model with ``--candidates``). Every evaluated job is a grey dot; the
Pareto front (no other job is both faster and lighter) is drawn as a blue step line with its jobs
marked; the best job is labelled; the memory limit is a red dashed vertical line. Conventions of
:mod:`ppopt.report.plot`: matplotlib's object API (no pyplot), Okabe & Ito colours, atomic writes,
PNG or SVG by suffix.
"""

from __future__ import annotations

import os
from collections.abc import Sequence

from ppopt.report.plot import LIMIT_COLOR, _save, new_figure, picture_format

__all__ = ["pareto_front", "plot_plan"]

FRONT_COLOR = "#0072B2"


def pareto_front(points: Sequence[tuple[float, float]]) -> list[int]:
    """Indices of the (memory, step) points no other point dominates (both no larger, one smaller),
    by increasing memory."""
    order = sorted(range(len(points)), key=lambda k: (points[k][0], points[k][1]))
    front, best = [], float("inf")
    for k in order:
        if points[k][1] < best:
            front.append(k)
            best = points[k][1]
    return front


def plot_plan(plans: Sequence, path: str | os.PathLike) -> None:
    """Draw ``plans`` (:class:`ppopt.plan.Plan`) to ``path`` (see module doc)."""
    fmt = picture_format(path)
    figure = new_figure()
    fig = figure(figsize=(7.0, 4.2 * len(plans)), layout="constrained")
    axes = fig.subplots(len(plans), 1, squeeze=False)[:, 0]
    for ax, plan in zip(axes, plans):
        points = [(r.memory.peak_bytes / 1e9, r.step_time_s) for r in plan.rows]
        ax.scatter([x for x, _ in points], [y for _, y in points], s=10, color="0.6", label=f"evaluated jobs ({len(points)})")
        front = pareto_front(points)
        fx, fy = [points[k][0] for k in front], [points[k][1] for k in front]
        ax.step(fx, fy, where="post", color=FRONT_COLOR, linewidth=1.2)
        ax.scatter(fx, fy, s=22, color=FRONT_COLOR, label=f"Pareto front ({len(front)})", zorder=3)
        if plan.rows:
            best = plan.rows[0]
            ax.annotate(f"{best.job.describe()} {best.job.recompute} {best.job.schedule}",
                        (best.memory.peak_bytes / 1e9, best.step_time_s), textcoords="offset points", xytext=(-6, -12), ha="right", fontsize=8)
        limit = plan.request.limit / 1e9
        ax.axvline(limit, color=LIMIT_COLOR, linestyle="--", linewidth=1.0, label=f"memory limit {limit:.1f} GB")
        ax.set_xlabel("per-GPU peak memory (GB)")
        ax.set_ylabel("predicted step time (s)")
        ax.set_title(f"{plan.request.model.name} on {plan.request.gpus:,} x {plan.request.system.name}: "
                     f"{len(plan.rows)} jobs evaluated, {plan.over_limit} over the limit", fontsize=10)
        ax.grid(True, linewidth=0.3)
        ax.legend(fontsize=8, loc="upper left")
    _save(fig, path, fmt)
