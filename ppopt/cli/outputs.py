"""File commands: export (PyTorch CSV, Chrome trace, pictures) and import (PyTorch CSV)."""

from __future__ import annotations

import click

from ppopt.cli import main
from ppopt.cli.options import (
    OUTPUT_SUFFIXES,
    Phases,
    check_layers,
    check_output_or_stdout,
    complete_file,
    emit_json,
    job_options,
    json_option,
    note_runtime_problem,
    output_suffix,
    quiet_option,
    refuse_other_modes_flags,
    resolve_schedule,
    schedule_options,
    size_outputs_first,
    system_options,
    unit_cost_options,
    unit_options,
    working,
)

FORMATS = {"torch-csv": ".csv", "chrome-trace": ".json", "png": ".png", "svg": ".svg"}
"""Export formats and their usual suffix (used to infer --format from --output)."""


def _export_format(fmt: str | None, output: str) -> str:
    from ppopt.errors import ConfigError

    suffix, compressed = output_suffix(output)  # a gzip-compressed trace: `-o trace.json.gz`
    if fmt is None and output == "-":
        return "torch-csv"
    if fmt is None:
        fmt = next((name for name, usual in FORMATS.items() if usual == suffix), None)
        if fmt is None:
            raise ConfigError(
                f"cannot tell the format from {output!r}: give --format ({', '.join(FORMATS)}) "
                "or an output ending in .csv, .json, .json.gz, .png or .svg"
            )
    if output == "-" and fmt in ("png", "svg"):
        raise ConfigError(f"--format {fmt} needs a file: --output - (stdout) is for torch-csv and chrome-trace")
    if compressed and fmt != "chrome-trace":
        raise ConfigError(f"--output {output!r} ends in .gz, but only a chrome-trace is written gzip-compressed "
                          f"(--format {fmt} writes a {FORMATS[fmt]} file)")
    if fmt in ("png", "svg") and suffix != FORMATS[fmt]:
        raise ConfigError(f"--format {fmt} writes a {FORMATS[fmt]} file, but --output is {output!r}")
    if fmt not in ("png", "svg") and suffix in (FORMATS["png"], FORMATS["svg"]):
        raise ConfigError(f"--format {fmt} writes text ({FORMATS[fmt]}), but --output {output!r} names a picture")
    if suffix in OUTPUT_SUFFIXES and suffix != FORMATS[fmt]:  # `--format chrome-trace -o t.csv`: as search refuses it
        raise ConfigError(f"--format {fmt} writes a {FORMATS[fmt]} file, but --output {output!r} looks like "
                          f"{OUTPUT_SUFFIXES[suffix]} file's name")
    return fmt


@main.command("export")
@schedule_options(name=True, unit_costs=False)
@unit_options()
@system_options()
@job_options()
@click.option("--format", "fmt", type=click.Choice(list(FORMATS)), default=None,
              help="torch-csv (PyTorch schedule CSV), chrome-trace (Perfetto JSON), png or svg (Gantt picture) "
                   "[default: from the --output suffix; torch-csv for '-'].")
@click.option("--output", "-o", required=True, shell_complete=complete_file, callback=check_output_or_stdout, help="File to write (atomically); '-' writes torch-csv or chrome-trace to stdout.")
@quiet_option
def export_command(name, schedule_file, legacy_backward, devices, microbatches, options, unit, units, model, system,
                   global_batch, parallel, fmt, output, quiet) -> None:
    """Write a schedule, simulated, as a PyTorch schedule CSV, a Chrome trace or a Gantt picture.

    The step is simulated in unit mode (slots) unless --model and --system are given (with the job
    fields, as in evaluate; the simulated job is named on stderr). The CSV lists
    each rank's actions ordered by simulated start time; the trace and the picture show the
    simulated timeline with its communication and live activations.
    """
    from ppopt.io.torch_csv import format_torch_csv, refuse_replicas
    from ppopt.simulate import simulate
    from ppopt.solve.instance import InstanceSpec

    fmt = _export_format(fmt, output)
    unit = unit or (model is None and system is None)
    refuse_other_modes_flags(unit, {"model": model, "system": system, "global_batch": global_batch})
    phases = Phases("export", quiet)
    if name is not None and devices and not unit:  # more stages than layers: named before the schedule is built
        from ppopt.config import load_model

        check_layers(name, devices, options, load_model(model).num_layers)
    size_outputs_first(name, devices, microbatches, options, picture=fmt in ("png", "svg"), trace=fmt == "chrome-trace")
    with working("export", quiet):  # phases of 10 s and more at millions of ops: a line every 5 s between them
        # a PyTorch CSV of a schedule its runtime cannot run is refused with the reason: no note before
        schedule = resolve_schedule(name, schedule_file, legacy_backward, devices, microbatches, options, note=fmt != "torch-csv")
        phases.done("schedule built")
        if fmt in ("png", "svg"):  # before simulating what could never be drawn
            from ppopt.report.plot import check_picture_size

            check_picture_size(schedule.op_count)
        elif fmt == "chrome-trace":
            from ppopt.report.trace import check_trace_size

            check_trace_size(schedule.op_count)
        devices, microbatches = schedule.devices, schedule.microbatches
        spec = InstanceSpec(devices, microbatches, units=units if unit else None, model=model, system=system,
                            global_batch=global_batch, parallel=parallel)
        if fmt == "torch-csv":
            refuse_replicas(schedule)  # before simulating
        instance = spec.instance(schedule.stages, schedule.stage_weights, schedule.placement)
        simulation = simulate(schedule, instance.costs, instance.system)
        phases.done("simulated")
        if not unit:
            click.echo(parallel.summary(spec.model, spec.system, microbatches, global_batch), err=True)
        unit_name = "slots" if unit else "s"

        if fmt == "torch-csv":
            _emit_text(output, format_torch_csv(schedule, simulation.device_starts()))
        elif fmt == "chrome-trace":
            from ppopt.io import json_bytes, write_json
            from ppopt.report.trace import chrome_trace

            trace = chrome_trace(schedule, simulation, instance.costs, time_unit=unit_name)
            phases.done("trace built")
            if output == "-":
                click.echo(json_bytes(trace))
            else:
                write_json(trace, output)
        else:
            from ppopt.report.plot import default_title, plot_schedule, simulated_transfers

            costs = instance.costs
            step = f"{simulation.step_time_s:.4g} {'slots' if unit else 's'}"
            plot_schedule(
                schedule, simulation.start_s, simulation.end_s, output,
                title=f"{default_title(schedule)}, simulated step {step}",
                time_unit=unit_name,
                stage_costs=costs.stages,
                memory_unit="activations" if unit else "bytes",
                transfers=simulated_transfers(simulation),
            )
    if output != "-":
        click.echo(f"wrote {output} ({fmt}: {schedule.name}, p={devices}, m={microbatches})", err=True)


def _emit_text(output: str, text: str) -> None:
    from ppopt.io import atomic_write_text

    if output == "-":
        click.echo(text, nl=False)
    else:
        atomic_write_text(output, text)


BACKWARD_SHOWN = {"full": "full (B)", "split": "split (I, W)", "mixed": "mixed (B, and I, W)"}


@main.command("import")
@click.argument("file", shell_complete=complete_file)
@click.option("--legacy-backward", is_flag=True,
              help="Old PyTorch spelling (torch <= 2.5): BW is a full backward, B the input backward (when W is used).")
@unit_cost_options()
@json_option
@quiet_option
def import_command(file: str, legacy_backward: bool, units, as_json: bool, quiet: bool) -> None:
    """Read a PyTorch schedule CSV (FILE; '-': standard input), validate it, and print its unit-slot
    table and metrics."""
    from ppopt.io.torch_csv import read_torch_csv_file
    from ppopt.report.evaluation import orders_json
    from ppopt.report.text import grid, no_colour, table_summary
    from ppopt.table import build_table, table_metrics

    phases = Phases(f"import {file}", quiet)
    with working(f"import {file}", quiet):  # reading a 9.6-million-op CSV: 20 s before its first phase line
        schedule = read_torch_csv_file(file, legacy_backward=legacy_backward)
        note_runtime_problem(schedule, file)
        phases.done("read and validated")
        table = build_table(schedule, units)
        metrics = table_metrics(table)
        phases.done("table built")
        backward = table.flat.backward
        if as_json:
            emit_json({
                "schedule": schedule.name,
                "file": file,
                "devices": schedule.devices,
                "stages": schedule.stages,
                "microbatches": schedule.microbatches,
                "split_backward": table.flat.split,
                "backward": backward,
                **orders_json(schedule),
                "table": {"length": metrics.length, "bubble_ratio": metrics.bubble_ratio,
                          "peak_activations": list(metrics.peak_activations)},
            })
            return
        from ppopt.errors import counted

        click.echo(
            f"{schedule.name}: {counted(schedule.devices, 'device')}, {counted(schedule.stages, 'stage')}, "
            f"{counted(schedule.microbatches, 'microbatch')}, {BACKWARD_SHOWN[backward]} backward\n"
        )
        click.echo(grid(table, colour=not no_colour()))
        click.echo("\n" + table_summary(table))

