"""Solver commands: search, gap, frontier."""

from __future__ import annotations

import click

from ppopt.cli import main
from ppopt.cli.options import emit_json, format_option, json_option, parse_amount, schedule_options, system_options, unit_options


def solver_options(command):
    """Flags every solver command shares."""
    for option in reversed(
        [
            click.option("--memory-limit", default=None, help="Per device: live activations (unit mode) or bytes, e.g. 60GiB."),
            click.option("--time-limit", type=float, default=60.0, show_default=True, help="Seconds per solve."),
            click.option("--workers", type=int, default=1, show_default=True, help="CP-SAT workers (1 is reproducible)."),
            click.option("--seed", type=int, default=0, show_default=True, help="CP-SAT random seed."),
            click.option("--quiet", "-q", is_flag=True, help="No progress on stderr."),
        ]
    ):
        command = option(command)
    return system_options()(unit_options()(schedule_options(name=False, table_backward=False)(command)))


def _factory(devices, microbatches, unit, forward, backward, weight, comm, model, system, global_batch, limit):
    from ppopt.solve.instance import instance_factory

    return instance_factory(
        devices, microbatches, unit=unit, forward=forward, backward=backward, weight=weight, comm=comm,
        model=model, system=system, global_batch=global_batch, memory_limit=limit,
    )


def _progress(quiet: bool):
    return None if quiet else (lambda line: click.echo(line, err=True))


@main.command("search")
@solver_options
@click.option("--space", "space_spec", default="placement=linear", show_default=True, help="Search space, e.g. placement=linear,backward=split or fixed:1f1b (see README).")
@click.option("--grid/--no-grid", default=True, show_default=True, help="Print the schedule found as a grid.")
@click.option("--minimize-memory", is_flag=True, help="Then minimise the worst device's peak memory at that step time (second solve).")
@click.option("--csv", "csv_path", default=None, help="Write the schedule found as a PyTorch schedule CSV.")
@click.option("--plot", default=None, help="Draw the schedule found, simulated, to .png/.svg.")
@click.option("--trace", default=None, help="Write the schedule found, simulated, as a Chrome/Perfetto trace (.json).")
@json_option
def search_command(devices, microbatches, options, unit, forward, backward, weight, comm, model, system, global_batch,
                   memory_limit, time_limit, workers, seed, quiet, space_spec, grid, minimize_memory, csv_path, plot, trace, as_json):
    """Search a space for the shortest step under a memory limit; print the schedule, bound and gap."""
    from ppopt.report.solve import search_json, search_text
    from ppopt.solve.search import search
    from ppopt.solve.space import parse_space

    limit = parse_amount(memory_limit, unit)
    space = parse_space(space_spec, **options)
    factory = _factory(devices, microbatches, unit, forward, backward, weight, comm, model, system, global_batch, limit)
    result = search(factory, space, devices, microbatches, time_limit, workers, seed, _progress(quiet), minimize_memory=minimize_memory)
    if as_json:
        emit_json(search_json(result))
    else:
        click.echo(search_text(result, grid, colour=True))
    if result.schedule is not None and (csv_path or plot or trace):
        _write_outputs(result, factory, csv_path, plot, trace)


def _write_outputs(result, factory, csv_path, plot, trace) -> None:
    """The schedule found as CSV (ordered by simulated start), picture and trace."""
    schedule, simulation = result.schedule, result.simulation
    instance = factory(schedule.stages, schedule.stage_weights)
    costs = instance.costs
    unit = result.time_unit
    if csv_path:
        from ppopt.io.torch_csv import write_torch_csv

        write_torch_csv(schedule, csv_path, simulation.start_s)
        click.echo(f"wrote {csv_path}", err=True)
    if plot:
        from ppopt.report.plot import plot_schedule, simulated_transfers

        in_bytes = instance.memory_unit == "bytes"  # then the limit counts persistent memory too
        plot_schedule(schedule, simulation.start_s, simulation.end_s, plot,
                      title=f"search p={schedule.devices}, m={schedule.microbatches}: step {result.step_time:.4g} {unit} ({result.status})",
                      time_unit=unit, activation_size=lambda stage: costs.stages[stage].activation_bytes,
                      memory_unit=instance.memory_unit, memory_base=simulation.persistent_bytes if in_bytes else None,
                      memory_limit=instance.memory_limit, transfers=simulated_transfers(simulation))
        click.echo(f"wrote {plot}", err=True)
    if trace:
        from ppopt.io import write_json
        from ppopt.report.trace import chrome_trace

        write_json(chrome_trace(schedule, simulation, costs, time_unit=unit), trace)
        click.echo(f"wrote {trace}", err=True)


@main.command("gap")
@solver_options
@click.option("--schedule", "-s", "schedules", multiple=True, help="Only these schedules (repeatable) [default: all applicable].")
@json_option
@format_option
def gap_command(devices, microbatches, options, unit, forward, backward, weight, comm, model, system, global_batch,
                memory_limit, time_limit, workers, seed, quiet, schedules, as_json, fmt):
    """Optimality gap of every handcrafted schedule against its family's relaxed space."""
    from ppopt.generators import get
    from ppopt.report.solve import gap_json, gap_text
    from ppopt.solve.gap import gap_report

    for name in schedules:
        get(name)
    limit = parse_amount(memory_limit, unit)
    factory = _factory(devices, microbatches, unit, forward, backward, weight, comm, model, system, global_batch, limit)
    report = gap_report(factory, devices, microbatches, options, schedules or None, time_limit, workers, seed, _progress(quiet))
    for name, reason in report.skipped.items():
        click.echo(f"skipped {name}: {reason}", err=True)
    if as_json:
        emit_json(gap_json(report))
    else:
        click.echo(gap_text(report, devices, microbatches, fmt))


@main.command("frontier")
@solver_options
@click.option("--space", "space_spec", default="placement=linear", show_default=True, help="Search space (see `ppopt search`).")
@click.option("--limits", default=None, help="Comma-separated memory limits [default: from the minimum to the largest handcrafted peak].")
@json_option
@format_option
def frontier_command(devices, microbatches, options, unit, forward, backward, weight, comm, model, system, global_batch,
                     memory_limit, time_limit, workers, seed, quiet, space_spec, limits, as_json, fmt):
    """Step time vs memory limit (the Pareto frontier), with the handcrafted schedules on it."""
    from ppopt.errors import ConfigError
    from ppopt.report.solve import frontier_json, frontier_text
    from ppopt.solve.gap import frontier
    from ppopt.solve.space import parse_space

    if memory_limit is not None:
        raise ConfigError("frontier sweeps memory limits itself: use --limits, not --memory-limit")
    values = [parse_amount(x.strip(), unit, "--limits") for x in limits.split(",")] if limits else None
    space = parse_space(space_spec, **options)
    _factory(devices, microbatches, unit, forward, backward, weight, comm, model, system, global_batch, None)  # fail early

    def with_limit(limit):
        return _factory(devices, microbatches, unit, forward, backward, weight, comm, model, system, global_batch, limit)

    result = frontier(with_limit, space, devices, microbatches, values, time_limit, workers, seed, _progress(quiet))
    if as_json:
        emit_json(frontier_json(result))
    else:
        click.echo(frontier_text(result, fmt))
