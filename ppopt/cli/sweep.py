"""Sweep commands: ``sweep`` (rows of a spec's grid) and ``study`` (the paper's study and its report)."""

from __future__ import annotations

import functools
import math
import time

import click

from ppopt.cli import main
from ppopt.cli.options import FLOAT, INT, ProgressBar, check_output_dir, complete_dir, deadline_of, emit_json, json_option, quiet_option
from ppopt.errors import counted
from ppopt.host import LOCAL_CAP
from ppopt.solve.interrupt import sigterm_as_ctrl_c


def executor_options(command, report_kept: bool = False):
    """The options sweep and study share; ``report_kept``: study's --time-limit keeps the report's
    time (:data:`REPORT_S`, :data:`FIGURES_S`), which its help says."""
    kept = (f" It keeps {REPORT_S + FIGURES_S:g} s for report.md and its figures ({REPORT_S:g} s with --no-figures)."
            if report_kept else "")
    for option in reversed(
        [
            click.option("--output", "-o", default=None, callback=check_output_dir, shell_complete=complete_dir,
                         help="Output directory, created if missing (its parent must exist, but for the default's out/) [default: out/<spec stem>]."),
            click.option("--jobs", "-j", type=INT, default=1, show_default=True, help=f"Parallel jobs: local processes, or the CPUs of a local Ray (at most {LOCAL_CAP})."),
            click.option("--executor", type=click.Choice(["local", "ray"]), default="local", show_default=True, help="Where points run."),
            click.option("--address", default=None, help="Ray cluster address (--executor ray) [default: start a local Ray]."),
            click.option("--time-limit", type=FLOAT, default=None,
                         help="Seconds for the whole command; the points not computed by then are left for the next run, "
                              f"which resumes.{kept} [default: no limit]"),
            quiet_option,
        ]
    ):
        command = option(command)
    return command


REPORT_S = 1.0
"""Seconds ``study --time-limit`` keeps for writing report.md without figures (0.04 s for the paper's study)."""

FIGURES_S = 8.0
"""Seconds it keeps for the figures besides (5.5 s for the paper's study on this project's 2-core machine)."""


EXECUTOR_NOTE_S = 1.0
"""An executor's start this long or longer is named when the time limit leaves points missing."""


def _run(loaded, output, executor, jobs, address, quiet, deadline, time_limit, kinds=("evaluate", "gap"), also_files=(),
         also_dirs=()):
    """The sweep, and the --time-limit that would let its searches left out run (None if none was);
    ``also_files`` and ``also_dirs``: what is written after it (:func:`ppopt.sweep.run.run_sweep`)."""
    from ppopt.sweep import make_executor, run_sweep
    from ppopt.sweep.run import check_deadline_before_start

    if deadline is not None:
        check_deadline_before_start(loaded, kinds, deadline, executor, address)

    bar = None if quiet else ProgressBar(f"sweep {loaded.name}")
    try:
        with sigterm_as_ctrl_c():  # rows.csv is still written from the rows computed, as on Ctrl-C
            began = time.monotonic()
            with make_executor(executor, jobs, address, deadline) as pool:
                run_start = time.monotonic()
                started_s = run_start - began
                try:
                    result = run_sweep(loaded, output, pool, progress=bar, kinds=kinds, deadline=deadline,
                                       also_files=also_files, also_dirs=also_dirs)
                except KeyboardInterrupt:  # the rows are kept (rows.csv written): say so before "aborted"
                    start = "" if bar is not None else "\n"  # the bar's close ends its line; else the terminal's ^C
                    if bar is not None:
                        bar.close()
                        bar = None
                    click.echo(f"{start}interrupted: the rows computed are kept in {output}; rerun the same command to "
                               "compute the rest", err=True)
                    raise
        # the time spent before the run and kept after it (report, figures), plus what the run needs
        needed = None if not result.search_s else time_limit - (deadline - run_start) + result.search_s
        if needed is not None and needed <= time_limit:  # the longest could start: a rerun goes on ("under 1 s" read odd beside 1.5)
            needed = None
        if result.time_limit_reached and started_s >= EXECUTOR_NOTE_S:  # Ray's start cannot be cut short
            if bar is not None:
                bar.close()
                bar = None
            what = "Ray" if executor == "ray" else "the worker processes"
            click.echo(f"note: starting {what} took {started_s:.1f} s of the time limit", err=True)
        return result, needed
    finally:
        if bar is not None:
            bar.close()


def summary_text(result, needed_s: float | None = None) -> str:
    """The run in one line (counts add up to the points), then where the rows are; with
    ``needed_s``, the time limit below which a rerun cannot start the longest point left out (a
    necessary figure, not a sufficient one: every point checks its own estimate against what is
    left when it is due, after the points before it)."""
    s = result.summary()
    if s["points"] and s["skipped"] == s["points"]:
        head = (f"{counted(s['points'], 'point')}, none applicable: all {s['skipped']} skipped (the generator, the job model or the solver refused them; "
                f"reasons in rows.csv)")
    else:
        head = (f"{counted(s['points'], 'point')}: {s['computed']} computed, {s['reused']} already in rows.jsonl, "
                f"{s['skipped']} skipped (not applicable), {s['missing']} missing")
    lines = s["unreadable_lines"]
    if lines:
        shown = ", ".join(map(str, lines[:5])) + (f" and {len(lines) - 5} more" if len(lines) > 5 else "")
        head += (f"; {len(lines)} unreadable line(s) of rows.jsonl ignored (line {shown}), the points of this spec "
                 "among them run again")
    if s["other_rows"]:
        head += (f"; rows.jsonl also holds {counted(s['other_rows'], 'row')} of points outside this spec (an earlier spec's: "
                 "kept, not in rows.csv)")
    text = f"{head}; {s['wall_time_s']:.1f} s\nrows: {result.output / 'rows.csv'}"
    if result.deferred:
        text += (f"\n{counted(len(result.deferred), 'point')} left missing, as this machine lacks the memory for them now "
                 f"({result.deferred[0]}); a rerun with more memory free computes them")
    if s["solver_cut_rows"]:
        from ppopt.sweep.run import REPEAT_CUT

        text += (f"\n{counted(s['solver_cut_rows'], 'solver row')} cut by the wall clock (column solver_cut): a rerun may give "
                 f"other figures there. {REPEAT_CUT}")
    if result.time_limit_reached:
        text += f"\ntime limit reached: rerun the same command to compute the {result.missing} missing"
        if needed_s:
            text += (f"; a --time-limit under {math.ceil(needed_s)} s cannot start the longest of them (a search starts "
                     "only while the spec's time_limit_s, with a margin, is left, an evaluation while its estimated time is; "
                     "the more there are, the more they need)")
    return text


@main.command("sweep")
@click.argument("spec", type=click.Path())
@executor_options
@json_option
def sweep_command(spec, output, jobs, executor, address, time_limit, quiet, as_json) -> None:
    """Evaluate every point of a sweep SPEC (.toml, or a spec of configs/studies by name, such as
    quick) into rows.jsonl and rows.csv; reruns resume.

    A spec lists schedules, devices, microbatches, models, systems and options, and optionally a
    [solver] table for optimality gaps; see configs/studies/paper.toml and the README.
    """
    from ppopt.sweep import load_spec, resolve_spec

    deadline = deadline_of(time_limit)
    result, needed = _run(load_spec(resolve_spec(spec)), output, executor, jobs, address, quiet, deadline,  # as study --spec finds it
                          time_limit)
    if as_json:
        emit_json(result.summary())
    else:
        click.echo(summary_text(result, needed))


@main.command("study")
@functools.partial(executor_options, report_kept=True)
@click.option("--quick", is_flag=True, help="The reduced grid (configs/studies/quick.toml) instead of paper.toml.")
@click.option("--spec", "spec_path", type=click.Path(), default=None, help="Another study spec [default: paper.toml].")
@click.option("--no-solver", is_flag=True, help="Skip the solver points (simulation layers only).")
@click.option("--no-figures", is_flag=True, help="Write the report without figures.")
@json_option
def study_command(output, jobs, executor, address, time_limit, quiet, quick, spec_path, no_solver, no_figures, as_json) -> None:
    """Run the paper's study (Barley et al., ISPDC 2026, plus ppopt's schedules and solver gaps)
    and write report.md with figures, rankings, gaps and the paper's claims checked on the data."""
    from ppopt.report.study import write_report
    from ppopt.sweep import load_spec, resolve_spec

    if quick and spec_path is not None:
        raise click.UsageError("give --quick or --spec, not both", click.get_current_context())
    reserve = REPORT_S if no_figures else REPORT_S + FIGURES_S
    deadline = deadline_of(time_limit, reserve, "report.md" if no_figures else "report.md and its figures (--no-figures keeps 1 s)")
    loaded = load_spec(resolve_spec(("quick" if quick else "paper") if spec_path is None else spec_path))
    kinds = ("evaluate",) if no_solver else ("evaluate", "gap")
    result, needed = _run(loaded, output, executor, jobs, address, quiet, deadline, time_limit, kinds,
                          also_files=("report.md", "claims.json"), also_dirs=() if no_figures else ("figures",))
    note = "" if not result.missing else f"*Incomplete: {result.missing} of {result.points} points are missing.*"
    report = write_report(loaded, result.rows, result.output, figures=not no_figures, note=note)
    if as_json:
        emit_json({**result.summary(), "report": str(report)})
    else:
        click.echo(summary_text(result, needed) + f"\nreport: {report}")
