"""Measured-data commands: ``validate`` (predicted vs measured step times), ``calibrate`` (fit a
system's efficiencies and latencies to measured rows) and ``published`` (predicted vs published
throughput of large runs)."""

from __future__ import annotations

import dataclasses
import math
from typing import NoReturn

import click

from ppopt.accuracy import GROUP_KEYS
from ppopt.cli import flush_stdout, main
from ppopt.cli.options import (
    INT,
    ProgressBar,
    check_plot,
    complete_file,
    complete_model,
    complete_schedule,
    complete_system,
    emit_json,
    format_option,
    job_options,
    json_option,
    note_first,
    note_selective_saves_nothing,
    output_ending_in,
    parse_layer_split,
    quiet_option,
    refuse_idle_job_flags,
    refuse_unused_options,
    working,
)

DEFAULT_SYSTEM = "a100-vtrain-calibrated"
PUBLISHED_SYSTEMS = ("dgx-a100", DEFAULT_SYSTEM)
"""The systems ``ppopt published`` compares by default: the DGX A100 preset the runs used, and the fit."""


def _table(header: list[str], rows: list[list[str]], fmt: str) -> str:
    """A table of validate, published, calibrate and plan: CSV and markdown as every command writes
    them (:func:`ppopt.report.text.render_table`, which escapes a '|'); text without a header rule."""
    if fmt != "text":
        from ppopt.report.text import render_table

        return render_table(header, rows, fmt)
    widths = [max(len(str(x)) for x in column) for column in zip(header, *rows)]
    return "\n".join("  ".join(str(x).ljust(w) for x, w in zip(r, widths)).rstrip() for r in [header, *rows])


def _figure(value: float, fmt: str) -> str:
    """A measured or predicted figure: one decimal to read, :func:`ppopt.report.text.csv_number` in CSV."""
    from ppopt.report.text import csv_number

    return csv_number(value) if fmt == "csv" else f"{value:.1f}"


def _where(source: str, line: int, files: int) -> str:
    """``line`` alone for one input file, ``file:line`` for several."""
    return f"{source}:{line}" if files > 1 else str(line)


def _unmodelled_table(unmodelled, files: int, fmt: str = "text") -> str:
    """The rows outside the model, each with its reason (validate and calibrate)."""
    return _table(["line", "model", "job", "measured ms", "not modelled because"],
                  [[_where(u.source, u.line, files), u.label, u.job, f"{1e3 * u.measured_s:.1f}", u.reason] for u in unmodelled], fmt)


def _unmodelled_json(unmodelled) -> list[dict]:
    return [{"file": u.source, "line": u.line, "model": u.label, "job": u.job, "measured_s": u.measured_s, "reason": u.reason}
            for u in unmodelled]


def no_rows_reason(unmodelled, to: str) -> str:
    """Why no row can ``to`` (``"be predicted"``): the first row's reason, and how many more are
    outside the model (a report of no row would read as a result)."""
    first = unmodelled[0]
    more = len(unmodelled) - 1
    from ppopt.errors import counted

    return (f"no row can {to}: {first.source}, line {first.line}: {first.reason}"
            + (f" (and {counted(more, 'more row')} outside the model)" if more else ""))


def _refuse_no_rows(unmodelled, to: str) -> NoReturn:
    """No row inside the model: one line (:func:`no_rows_reason`)."""
    from ppopt.errors import ConfigError

    raise ConfigError(no_rows_reason(unmodelled, to))


def _summary_lines(accuracy, files: int = 1) -> list[str]:
    from ppopt.report.text import percent

    s = accuracy.summary()
    worst = accuracy.worst
    lines = [f"rows: {s['rows']} predicted, {s['unmodelled']} not modelled",
             f"MAPE {percent(s['mape'], 'text', decimals=2)}, median {percent(s['median'], 'text', decimals=2)}, "
             f"p95 {percent(s['p95'], 'text', decimals=2)}, "
             f"worst {percent(s['worst'], 'text', decimals=2)}" + (f" (line {_where(worst.source, worst.line, files)}: {worst.model} {worst.job})" if worst else "")]
    for model, rho in s["spearman"].items():
        lines.append(f"Spearman {model}: " + ("-" if rho is None or not math.isfinite(rho) else f"{rho:.3f}"))
    return lines


@main.command("validate")
@click.argument("data", nargs=-1, required=True, type=click.Path())
@click.option("--system", default=DEFAULT_SYSTEM, show_default=True, shell_complete=complete_system, help="System preset name or .toml/.json file.")
@click.option("--plot", "plot_path", callback=check_plot, shell_complete=complete_file, default=None,
              help="Also write predicted vs measured (log-log, one colour per model, ±10 % band) to this image (.png or .svg).")
@click.option("--by", "by", multiple=True, type=click.Choice(list(GROUP_KEYS)),
              help="Also print the errors grouped by these job fields (repeat to group by several, e.g. --by model "
                   "--by tp): rows, mean signed error (the bias), MAPE and worst error per group; with --format csv, "
                   "the groups' table alone.")
@format_option
@json_option
@quiet_option
def validate_command(data, system, plot_path, by, fmt, as_json, quiet) -> None:
    """Predict every measured row of DATA (.csv, the format of data/measured; '-': standard input) and compare.

    Prints each row's job, measured and predicted step time and relative error, then the MAPE,
    median, 95th percentile and worst error and the Spearman rank correlation within each model.
    Each row is a GPT-style model trained by Megatron-DeepSpeed as in data/measured (GELU MLP of 4h,
    learned positions, tied embeddings, vocabulary 50,257, no flash attention, full recomputation,
    1F1B) unless its
    optional columns say otherwise: 'vocabulary size', 'ffn hidden size', 'kv heads', 'activation',
    'flash attention', 'dropout', 'tied embeddings', 'learned positions', 'recompute', 'schedule',
    'chunks', 'sequence parallel', 'distributed optimizer' (data/measured/README.md); other columns
    are ignored, with a note.
    """
    from ppopt.accuracy import group_errors, predict_rows, read_rows, summarize
    from ppopt.config import load_system
    from ppopt.io.measured import ASSUMED, unused_columns

    base = load_system(system)
    with working("validate", quiet):
        measured, unmodelled = read_rows(list(data), base)
        accuracy = summarize(predict_rows(measured), unmodelled)
    _note_unused_columns(data, unused_columns, ASSUMED)
    _note_labels(measured)
    if not accuracy.rows:  # a report of no prediction, "MAPE -", would read as a result
        _refuse_no_rows(accuracy.unmodelled, "be predicted")
    groups = group_errors(accuracy.rows, list(by)) if by else []
    _print_validation(accuracy, groups, data, by, fmt, as_json, base)
    if plot_path:  # after the results reached standard output (none when it cannot be written)
        from ppopt.report.accuracy_plot import plot_accuracy

        flush_stdout()
        plot_accuracy(accuracy, plot_path)
        click.echo(f"wrote {plot_path}", err=True)


def _print_validation(accuracy, groups, data, by, fmt, as_json, base) -> None:
    """validate's output: JSON, or the rows, the groups and the summary as text, markdown or CSV."""
    from ppopt.errors import counted
    from ppopt.report.evaluation import OVER_MEMORY, capacity_text, yes_no
    from ppopt.report.text import markdown_line, percent, percent_header

    capacity = base.memory_capacity_bytes  # the measured runs fitted: a peak above it is the model's error
    if as_json:
        emit_json({
            "summary": accuracy.summary(),
            "rows": [{"file": r.source, "line": r.line, "model": r.model, "job": r.job, "measured_s": r.measured_s,
                      "predicted_s": r.predicted_s, "error": r.error, "peak_memory_bytes": r.peak_memory_bytes,
                      "over_memory": not r.fits_memory, "pipeline_s": r.pipeline_s, "gradient_sync_s": r.gradient_sync_s,
                      "optimizer_s": r.optimizer_s}
                     for r in accuracy.rows],
            "memory_capacity_bytes": capacity,
            "unmodelled": _unmodelled_json(accuracy.unmodelled),
            **({"groups": [{"group": g.label, "rows": g.rows, "mean_error": g.mean_error, "mape": g.mape, "worst": g.worst}
                           for g in groups]} if by else {}),
        })
        return
    group_header = [" ".join(by), "rows", *(percent_header(h, fmt) for h in ("mean error", "MAPE", "worst"))]
    group_rows = [[g.label, str(g.rows), percent(g.mean_error, fmt, signed=True), percent(g.mape, fmt), percent(g.worst, fmt)]
                  for g in groups]
    header = ["line", "model", "job", "measured ms", "predicted ms", percent_header("error", fmt), "peak GB"]
    mark = "" if fmt == "csv" else f" {OVER_MEMORY}"  # CSV says it in a column of its own
    rows = [[_where(r.source, r.line, len(data)), r.model, r.job, _figure(1e3 * r.measured_s, fmt), _figure(1e3 * r.predicted_s, fmt),
             percent(r.error, fmt, signed=True), _figure(r.peak_memory_bytes / 1e9, fmt) + ("" if r.fits_memory else mark)]
            for r in accuracy.rows]
    if fmt == "csv":  # one table: the groups when asked for, else every row, those outside the model with the reason
        if groups:
            click.echo(_table(group_header, group_rows, fmt))
        else:
            rows = [[*row, yes_no(not r.fits_memory), ""] for row, r in zip(rows, accuracy.rows)] + [
                [_where(u.source, u.line, len(data)), u.label, u.job, _figure(1e3 * u.measured_s, fmt), "", "", "", "", u.reason]
                for u in accuracy.unmodelled]
            click.echo(_table([*header, "over memory", "not modelled because"], rows, fmt))
        left_out = "the rows and the summary" if groups else "the summary (MAPE, median, p95, worst, Spearman)"
        click.echo(f"note: --format csv prints one table, {'the groups' if groups else 'the rows'}; {left_out} "
                   f"{'are' if groups else 'is'} in the text, markdown and --json outputs", err=True)
        return
    click.echo(_table(header, rows, fmt))
    if overs := sum(not r.fits_memory for r in accuracy.rows):  # a footnote, escaped in markdown as with_context does
        footnote = (f"{OVER_MEMORY} {counted(overs, 'row')} predicted above {base.name}'s {capacity_text(capacity)} per GPU, "
                    "which the measured run fitted in: the memory model over-predicts it")
        click.echo("\n" + markdown_line(footnote) if fmt == "markdown" else footnote)
    if accuracy.unmodelled:
        click.echo("")
        click.echo(_unmodelled_table(accuracy.unmodelled, len(data), fmt))
    if groups:
        click.echo("")
        click.echo(_table(group_header, group_rows, fmt))
    click.echo("")
    click.echo("\n".join(_summary_lines(accuracy, len(data))))


@main.command("calibrate")
@click.argument("data", nargs=-1, required=True, type=click.Path())
@click.option("--system", default="a100-vtrain", show_default=True, shell_complete=complete_system, help="Base system preset or file.")
@click.option("--output", "-o", required=True, shell_complete=complete_file, callback=output_ending_in(".toml", "the calibrated system is TOML"), help="Calibrated system .toml to write.")
@click.option("--name", default=None, help="Name of the calibrated system [default: the output file's stem].")
@quiet_option
@json_option
def calibrate_command(data, system, output, name, quiet, as_json) -> None:
    """Fit the base system's efficiencies and latencies to the measured rows of DATA ('-': standard input).

    At most eight system parameters (ppopt.calibrate.PARAMETERS), no per-row or per-model ones;
    minimises the MAPE; deterministic. Writes a system file that --system accepts, and prints the
    fitted values (those at a bound of their range marked), the fit's error and the base system's on
    the same rows. Rows are modelled as in `ppopt validate` (see its help); rows run with a schedule
    other than 1F1B are listed as not fitted (the fit times 1F1B in closed form).
    """
    from pathlib import Path

    from ppopt.accuracy import predict_rows, read_rows, summarize
    from ppopt.calibrate import calibrate, fittable, system_toml
    from ppopt.config import load_system, name_problem
    from ppopt.errors import ConfigError
    from ppopt.io import atomic_write_text, file_labels
    from ppopt.io.measured import ASSUMED, unused_columns
    from ppopt.report.text import percent

    # The name is written into the file (and its header comment): refused before the fit, as a file's would be.
    if name is not None and (problem := name_problem(name)) is not None:
        raise ConfigError(problem, field="name")
    if name is None and (problem := name_problem(Path(output).stem)) is not None:
        raise ConfigError(f"its stem, the system's name by default, {problem}; give --name", field="output")
    base = load_system(system)
    rows, outside = read_rows(list(data), base)  # sizes checked before the fit
    rows, other_schedules = fittable(rows)
    _note_unused_columns(data, unused_columns, ASSUMED)
    _note_labels(rows)
    if not rows:  # rows of other schedules first: that calibrate fits 1F1B alone is the reason a user can act on
        _refuse_no_rows([*other_schedules, *outside], "be calibrated on")
    unmodelled = [*outside, *other_schedules]
    bar = None if quiet else ProgressBar(f"calibrate: {len(rows)} rows, fits")
    try:
        fitted = calibrate(rows, base, progress=bar)
    finally:
        if bar is not None:
            bar.close()
    calibrated = fitted.system.model_copy(update={"name": name or Path(output).stem,
                                                  "description": f"{base.name} calibrated on {len(rows)} measured rows"})
    fitted = dataclasses.replace(fitted, system=calibrated)
    with working("calibrate: the fit and the base system on the rows", quiet):
        on_fit = summarize(predict_rows([r.on(calibrated) for r in rows]), unmodelled)
        on_base = summarize(predict_rows([r.on(base) for r in rows]), unmodelled)
    if len(rows) <= (free := len(fitted.values) - len(fitted.kept)):  # as many parameters as rows: the fit matches them whatever the model
        click.echo(f"note: {len(rows)} row(s) for {free} fitted parameters: the fit is underdetermined, "
                   "and its error on these rows says nothing of other jobs", err=True)
    if on_fit.mape >= on_base.mape:
        click.echo(f"note: the calibrated system ({percent(on_fit.mape, 'text', decimals=2)}) predicts these rows no better than "
                   f"its base {base.name} ({percent(on_base.mape, 'text', decimals=2)}); keep the base, or calibrate on more rows",
                   err=True)
    at_bounds = _at_bounds(fitted)
    if on_fit.mape > POOR_FIT_MAPE:
        free = len(fitted.values) - len(fitted.kept)
        names = f" ({', '.join(at_bounds)})" if at_bounds else ""
        click.echo(f"note: the fit is off its own rows by {percent(on_fit.mape, 'text', decimals=2)} on average, with "
                   f"{len(at_bounds)} of its {free} fitted parameters at a bound of their range{names}: are the times "
                   "milliseconds per training step, and the layouts those the runs used?", err=True)
    if as_json:
        emit_json({"values": fitted.values, "fit_mape": on_fit.mape, "base_system": base.name, "base_mape": on_base.mape,
                   "at_bounds": at_bounds, "not_fitted": list(fitted.kept), "output": output, "summary": on_fit.summary(),
                   "unmodelled": _unmodelled_json(unmodelled)})
    else:
        _print_calibration(fitted, at_bounds, unmodelled, on_fit, on_base, base, len(data))
    flush_stdout()  # the results reached standard output: only then the file (none when it cannot be written)
    atomic_write_text(output, system_toml(fitted, base, file_labels(data), on_fit.mape))
    click.echo(f"wrote {output}", err=True)  # on stderr, as every command says it


def _print_calibration(fitted, at_bounds, unmodelled, on_fit, on_base, base, files: int) -> None:
    """calibrate's text: the fitted values, the rows not fitted, and the fit's and the base's errors."""
    from ppopt.calibrate import not_fitted_reason
    from ppopt.report.text import percent

    descriptions = {p.name: p for p in fitted.parameters}
    click.echo(_table(["parameter", "value", "bound", "meaning"],
                      [[k, f"{v:.4g}", f"not fitted: {not_fitted_reason(k)}" if k in fitted.kept else at_bounds.get(k, ""),
                        descriptions[k].description] for k, v in fitted.values.items()],
                      "text"))
    if unmodelled:
        click.echo("")
        click.echo(_unmodelled_table(unmodelled, files))
    click.echo("")
    click.echo("fit on the calibration rows (simulated):")
    click.echo("\n".join(_summary_lines(on_fit, files)))
    click.echo(f"base system {base.name} on the same rows: MAPE {percent(on_base.mape, 'text', decimals=2)}")


def _note_labels(rows) -> None:
    """A note on stderr for a row whose 'Parameters (billion)' label is far from its dimensions'
    count (:func:`ppopt.io.measured.label_problem`; ``published`` says the same of its runs): the
    first few by line, then how many more (:func:`ppopt.cli.options.note_first`)."""
    from ppopt.io.measured import label_problem

    note_first([f"{row.source}, line {row.line}: {problem}" for row in rows if (problem := label_problem(row)) is not None],
               "more row", "with such a label")


def _note_unused_columns(files, unused_columns, assumed: str) -> None:
    """A note on stderr for each file with columns the command does not read (``unused_columns``
    finds them; ``assumed`` says what the rows are taken to be instead)."""
    for path in files:
        if unused := unused_columns(path):
            click.echo(f"note: {path}: {'column' if len(unused) == 1 else 'columns'} {', '.join(repr(c) for c in unused)} "
                       f"{'is' if len(unused) == 1 else 'are'} not read: {assumed}", err=True)


POOR_FIT_MAPE = 0.5
"""A fit whose MAPE on its own rows is above this gets a note: the calibrations of data/measured
reach about 8 %; rows in microseconds instead of milliseconds gave 97.9 % with 7 of 8 parameters at a
bound, written without a word."""


def _at_bounds(fitted) -> dict[str, str]:
    """The fitted parameters that sit at a bound of their range (within 0.1 %), ``low`` or ``high``:
    the data may have pushed them further, so the bound, an assumption, shapes the fit (for a parameter
    chosen from a few values, the saturation exponent, it is its smallest or largest choice)."""
    at = {}
    for parameter in fitted.parameters:
        value = fitted.values.get(parameter.name)
        if value is None or parameter.name in fitted.kept:  # not fitted: the base value, wherever it lies
            continue
        for side, bound in (("low", parameter.low), ("high", parameter.high)):
            if abs(value - bound) <= 1e-3 * abs(bound):
                at[parameter.name] = f"at {side} {bound:.4g}"
    return at


@main.command("job")
@click.option("--model", required=True, shell_complete=complete_model, help="Model preset name (`ppopt list models`) or a .toml/.json file.")
@click.option("--system", required=True, shell_complete=complete_system, help="System preset name (`ppopt list systems`) or a .toml/.json file.")
@click.option("--global-batch", type=INT, default=None, help="Sequences per step [default: the model's global_batch_size].")
@click.option("--pp", "-p", "--devices", "pp", type=INT, default=1, show_default=True, help="Pipeline devices (ranks) p; a schedule with v chunks has v·p stages.")
@job_options(microbatches_given=False)
@click.option("--overlap-grad-sync", is_flag=True, help="Bucket the gradient all-reduce and overlap it with the last backward.")
@click.option("--schedule", "-s", "schedule", default="1f1b", show_default=True, shell_complete=complete_schedule,
              help="Pipeline schedule family (see `ppopt list`).")
@click.option("--chunks", "-v", "chunks", type=INT, default=None, help="Chunks (stages) per device for interleaved-1f1b and looped-bfs [default: 2].")
@click.option("--waves", type=INT, default=None, help="Hanayo's waves (2W stages per device) [default: 1].")
@click.option("--split", default=None, help="chimera-asym's layer split A:B between the halves of the stages [default: 1:2].")
@click.option("--layers-per-stage", "layers_per_stage", default=None,
              help="Layers of each stage: counts such as 7,8,8,7 or 3,2*14,1 (n*k: k stages of n; as ppopt plan prints them), even (equal counts, the "
                   "remainder on the first stages) or balanced (counts minimising the slowest stage, as ppopt plan "
                   "balances) [default: even, but chimera-asym's --split; any of these replaces it].")
@json_option
@quiet_option
def job_command(model, system, global_batch, pp, parallel, overlap_grad_sync, schedule, chunks, waves, split,
                layers_per_stage, as_json, quiet) -> None:
    """Predict one training step of a 3D-parallel job (t·p·d GPUs): pipeline, gradient
    all-reduce, optimizer step and per-GPU peak memory."""
    from ppopt.config import load_model, load_system
    from ppopt.costs import check_global_batch
    from ppopt.errors import ConfigError
    from ppopt.job import Job, evaluate_job
    from ppopt.placement import split_note
    from ppopt.plan import throughput
    from ppopt.report.evaluation import capacity_json
    from ppopt.report.text import LARGEST_FIXED, fixed, tokens_per_s

    check_global_batch(global_batch)
    refuse_idle_job_flags(dp=parallel.dp, overlap_gradient_sync=overlap_grad_sync)  # t and the others: checked with --tp
    given = {"chunks": chunks, "waves": waves, "split": split}
    refuse_unused_options(schedule, given)
    layers = None
    if layers_per_stage is not None:
        if split is not None:  # the split only sets the default layer counts
            raise ConfigError("sets the layers per stage, which --layers-per-stage gives here: give one of the two",
                              field="split")
        if isinstance(split_counts := parse_layer_split(layers_per_stage), tuple):
            layers = split_counts
    job = Job(load_model(model), load_system(system), tp=parallel.tp, pp=pp, dp=parallel.dp, micro_batch=parallel.micro_batch,
              global_batch=global_batch, recompute=parallel.recompute, sequence_parallel=parallel.sequence_parallel,
              distributed_optimizer=parallel.distributed_optimizer, overlap_gradient_sync=overlap_grad_sync, schedule=schedule,
              layers=layers, **{name: value for name, value in given.items() if value is not None})
    if layers_per_stage in ("even", "balanced"):  # even as the help says, not a schedule's own split (chimera-asym's)
        import dataclasses

        from ppopt.costs import partition_layers
        from ppopt.plan import balanced_layers

        counts = balanced_layers(job) if layers_per_stage == "balanced" else tuple(partition_layers(job.model.num_layers, job.stages))
        job = dataclasses.replace(job, layers=counts)
    with working(f"job {job.describe()}", quiet):
        result = evaluate_job(job)
    note_selective_saves_nothing(job.model, job.recompute)
    if job.tp > job.system.devices_per_node:  # modelled, but no layout plan would choose: said, as plan never offers it
        click.echo(f"note: tensor parallelism {job.tp} spans {job.tp // job.system.devices_per_node} nodes of "
                   f"{job.system.devices_per_node} GPUs, so every block's all-reduces cross the network "
                   "(`ppopt plan` keeps t within a node)", err=True)
    tokens, mfu = throughput(job, result.step_time_s)
    figures = {
        "model": job.model.name, "system": job.system.name, **job.layout_json(), "global_batch": job.batch, "gpus": job.gpus,
        "step_time_s": result.step_time_s, "pipeline_s": result.pipeline_s, "gradient_sync_s": result.gradient_sync_s,
        "optimizer_s": result.optimizer_s, "tokens_per_s": tokens, "mfu": mfu, "peak_memory_bytes": result.peak_memory_bytes,
        "fits_memory": result.fits_memory, "overlap_gradient_sync": job.overlap_gradient_sync,
        # over_memory and the rest as evaluate and search give them
        **capacity_json(result.simulation.peak_memory_bytes, job.system.memory_capacity_bytes),
    }
    if as_json:
        emit_json(figures)
        return
    click.echo(f"{job.model.name} on {job.gpus:,} x {job.system.name}: {job.describe()} ({job.schedule_label}, recompute {job.recompute}"
               f"{', sequence parallel' if job.sequence_parallel else ''}"
               f"{', distributed optimizer' if job.distributed_optimizer else ''}"
               f"{', gradient sync overlapped' if job.overlap_gradient_sync else ''}"
               f"{'' if len(set(job.stage_layers)) == 1 else ', layers per stage ' + ','.join(map(str, job.stage_layers))})")
    if job.layers is None and "split" in job.schedule_options and \
            (uneven := split_note(job.stage_layers, job.schedule_options["split"])) is not None:
        click.echo(f"note: {uneven}", err=True)
    hidden = " (the part the last backward does not hide)" if job.overlap_gradient_sync else ""
    # ms, unless the step is under a millisecond (a toy model read 0.0 ms) or hours long (12 digits of ms);
    # a part that would read 0.0 in the step's unit takes a finer one (a 27 ms optimizer step of a 9-hour step)
    units = [(1.0, "s"), (1e3, "ms"), (1e6, "us")]
    first = 2 if result.step_time_s < 1e-3 else 0 if result.step_time_s >= 1e4 else 1
    for label, seconds, note in (("step       ", result.step_time_s, ""), ("  pipeline ", result.pipeline_s, ""),
                                 ("  grad sync", result.gradient_sync_s, hidden), ("  optimizer", result.optimizer_s, "")):
        chosen = first
        while chosen < len(units) - 1 and 0 < units[chosen][0] * seconds < 0.1:
            chosen += 1
        scale, unit = units[chosen]
        amount = f"{seconds:>10,.1f}" if unit == "s" and seconds < LARGEST_FIXED else fixed(scale * seconds, 1, 10)
        click.echo(f"{label} {amount} {unit}{note}")
    click.echo(f"throughput  {tokens_per_s(tokens)} tokens/s, MFU {fixed(100 * mfu, 1)} %")
    fits = "fits" if figures["fits_memory"] else "does NOT fit"
    capacity = job.system.memory_capacity_bytes / 1e9
    shown = fixed(capacity, 0) if capacity == round(capacity) else f"{capacity:.4g}"  # 80 GB, 16.55 GB, 0.5 GB
    peak, decimals = result.peak_memory_bytes / 1e9, 1
    while decimals < 4 and round(peak, decimals) == round(capacity, decimals):  # 80.02 GB read "80.0 GB (does NOT fit in 80 GB)"
        decimals += 1
    click.echo(f"peak memory {fixed(peak, decimals, 10)} GB per GPU ({fits} in {shown} GB)")


def _prediction_json(prediction) -> dict | None:
    """One run's prediction on one system, for ``ppopt published --json`` (None: nothing fits)."""
    result = prediction.result
    if result is None:
        return None
    return {"predicted_s": result.step_time_s, "error": prediction.error, "micro_batch": result.job.micro_batch}


@main.command("published")
@click.argument("data", type=click.Path())
@click.option("--system", "systems", multiple=True, shell_complete=complete_system,
              help=f"System preset name or file (repeatable) [default: {' and '.join(PUBLISHED_SYSTEMS)}].")
@format_option
@json_option
@quiet_option
def published_command(data, systems, fmt, as_json, quiet) -> None:
    """Predict published runs (DATA: .csv, the format of data/published; '-': standard input) and compare their step times.

    Each run is predicted with the fastest micro batch size of 1, 2, 4 and 8 that fits in the
    system's memory (the table does not give it), 1F1B and full recomputation; then the MAPE and
    worst error per system. See data/published/README.md."""
    from ppopt.config import load_system
    from ppopt.errors import ConfigError, counted
    from ppopt.io.measured import label_far
    from ppopt.io.published import ASSUMED, read_published, unused_columns
    from ppopt.ir import check_total_size
    from ppopt.published import MICRO_BATCHES, error_summary, predictions, simulated_ops
    from ppopt.report.text import csv_number, percent

    chosen = [load_system(name) for name in systems or PUBLISHED_SYSTEMS]
    names = [system.name for system in chosen]
    if twice := sorted({name for name in names if names.count(name) > 1}):  # the table and JSON are keyed by name
        raise ConfigError(f"two systems are named {twice[0]!r}: give each file its own `name` to compare them", field="systems")
    runs = read_published(data)
    _note_unused_columns([data], unused_columns, ASSUMED)
    check_total_size(simulated_ops(runs) * len(chosen), f"{counted(len(runs), 'run')} on {counted(len(chosen), 'system')}")
    try:
        with working("published", quiet):
            predicted = {system.name: predictions(runs, system) for system in chosen}
    except ConfigError as error:
        raise ConfigError(f"{data}: {error}") from error
    if all(p.result is None for found in predicted.values() for p in found):  # "MAPE -" would read as a result
        raise ConfigError(f"{data}: no run fits in the memory of {' or '.join(system.name for system in chosen)} at a micro batch "
                          f"of {', '.join(map(str, MICRO_BATCHES))} (line {runs[0].line}: {runs[0].parameters_billion:g}B "
                          f"on {runs[0].gpus} GPUs, t = {runs[0].tp}, p = {runs[0].pp})")
    for run in runs:
        dimensions = run.dimensions_parameters_billion
        if label_far(run.parameters_billion, dimensions):
            click.echo(f"note: {data}: line {run.line}: 'parameters (billion)' says {run.parameters_billion:g}, but the "
                       f"layers and hidden size give {dimensions:.3g} billion (Narayanan et al. 2021, §5.1); the "
                       "prediction follows the dimensions, the label is only printed", err=True)
    summary = {name: error_summary(found) for name, found in predicted.items()}
    if as_json:
        emit_json({
            "runs": [{"line": run.line, "parameters_billion": run.parameters_billion, "gpus": run.gpus, "tp": run.tp,
                      "pp": run.pp, "dp": run.dp, "published_s": run.step_time_s,
                      "predictions": {name: _prediction_json(found[k]) for name, found in predicted.items()}}
                     for k, run in enumerate(runs)],
            "summary": summary,
        })
        return

    def cell(prediction) -> str:
        if prediction.result is None:
            return "does not fit"
        return (f"{prediction.result.step_time_s:.1f} s ({percent(prediction.error, 'text', signed=True)}, "
                f"b = {prediction.result.job.micro_batch})")

    if fmt == "csv":  # one value per cell, numbers bare: the unit in the header
        def cells(prediction) -> list[str]:
            result = prediction.result
            if result is None:
                return ["", "", ""]
            return [csv_number(result.step_time_s), percent(prediction.error, fmt), str(result.job.micro_batch)]

        header = ["parameters (billion)", "GPUs", "t", "p", "d", "published step s",
                  *(f"{name} {what}" for name in predicted for what in ("step s", "error %", "micro batch"))]
        rows = [[f"{run.parameters_billion:g}", str(run.gpus), str(run.tp), str(run.pp), str(run.dp), csv_number(run.step_time_s),
                 *(c for found in predicted.values() for c in cells(found[k]))] for k, run in enumerate(runs)]
        click.echo(_table(header, rows, fmt))
        click.echo("note: --format csv prints one table, the runs; each system's figures are in the text, markdown and "
                   "--json outputs", err=True)
        return
    header = ["model", "GPUs (t × p × d)", "published step", *predicted]
    rows = [[f"{run.parameters_billion:g}B", f"{run.gpus:,} ({run.tp} × {run.pp} × {run.dp})", f"{run.step_time_s:.1f} s",
             *(cell(found[k]) for found in predicted.values())] for k, run in enumerate(runs)]
    click.echo(_table(header, rows, fmt))
    click.echo("")  # CSV returned above: text and markdown end with each system's figures
    for name, figures in summary.items():
        fitting = figures["runs"]
        over = "" if fitting == len(runs) else f" (over the {fitting} of {len(runs)} runs that fit in its memory)"
        click.echo(f"{name}: MAPE {percent(figures['mape'], 'text', decimals=2)}, worst {percent(figures['worst'], 'text', decimals=2)}{over}")
