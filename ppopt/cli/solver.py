"""Solver commands: search, gap, frontier."""

from __future__ import annotations

import functools
import math
from collections.abc import Callable

import click

from ppopt.cli import main, startup_s
from ppopt.cli.options import (
    FLOAT,
    INT,
    check_plot,
    complete_file,
    complete_schedule_or_all,
    deadline_of,
    emit_json,
    format_option,
    job_options,
    json_option,
    output_not_named_as,
    parse_amount,
    quiet_option,
    refuse_all_with_others,
    refuse_other_modes_flags,
    refuse_unused_options,
    refuse_with_preset,
    say_whether_reproducible,
    schedule_options,
    system_options,
    unit_options,
    working,
    written_together,
)
from ppopt.host import LOCAL_CAP
from ppopt.solve.instance import InstanceSpec
from ppopt.solve.options import AUTO_CP_OPS, AUTO_LNS_OPS, CP_MAX_OPS, MAX_WORKERS, METHODS, SolveOptions


def solver_options(built: Callable[[dict], int] = lambda params: 1, held: int = 1, memory_limit: bool = True,
                   schedule_file: str | None = None, spaces: bool = True):
    """Flags every solver command shares; they reach the command as ``spec`` (an
    :class:`~ppopt.solve.instance.InstanceSpec`, memory limit included) and ``solve`` (started
    :class:`~ppopt.solve.options.SolveOptions`), besides ``options`` (the schedule options).

    ``built(params)``: how many schedules the command builds at the least, from its own parameters,
    and ``held``: how many it holds at once (a search counting as one), for the size checks of
    :func:`_check_size`. ``memory_limit`` False hides ``--memory-limit`` from the help (a command
    that sweeps limits itself, and refuses it). ``schedule_file``: the help of the command's
    ``--schedule-file FILE.csv`` (with ``--legacy-backward``), whose schedule reaches it as ``given``
    (None without one) and sets -p and -m, required otherwise; None: no such option. ``spaces``: the command takes a
    ``--space`` that the schedule options fill in (their help says so)."""
    return functools.partial(_with_solver_options, built=built, held=held, memory_limit=memory_limit,
                             schedule_file=schedule_file, spaces=spaces)


def _given_schedule(params: dict):
    """The schedule of ``--schedule-file`` (None without one), its sizes set as -p and -m."""
    from ppopt.cli.options import read_schedule_file
    from ppopt.errors import ConfigError

    file, legacy = params.pop("schedule_file"), params.pop("legacy_backward")
    if file is None:
        if legacy:
            raise ConfigError("only applies to --schedule-file (how the file spells its backward ops)", field="legacy_backward")
        for name, flag in (("devices", "'--devices' / '-p'"), ("microbatches", "'--microbatches' / '-m'")):
            if params[name] is None:
                raise click.UsageError(f"Missing option {flag} (or give --schedule-file FILE.csv)", click.get_current_context())
        return None
    if params.get("schedules"):
        raise click.UsageError("give --schedule or --schedule-file, not both", click.get_current_context())
    schedule = read_schedule_file(file, legacy, params["devices"], params["microbatches"], params["options"],
                                  deadline_of(params["time_limit"]))  # the budget's end covers waiting for standard input
    params["devices"], params["microbatches"] = schedule.devices, schedule.microbatches
    return schedule


def _with_solver_options(command, built: Callable[[dict], int], held: int, memory_limit: bool, schedule_file: str | None,
                         spaces: bool):
    @functools.wraps(command)
    def wrapper(**params):
        if schedule_file is not None:
            params["given"] = _given_schedule(params)
        spec, solve = _requests(params)
        _check_size(spec, params, solve.time_limit_s, built(params), held)
        result = command(spec=spec, solve=solve, **params)
        say_whether_reproducible(solve)
        return result

    for option in reversed(
        [
            click.option("--memory-limit", default=None, hidden=not memory_limit,
                         help="Per device: live activations of a 1/p model share (unit mode; fractions count chunk "
                              "activations, which are p/S each) or, with a model, bytes of its whole memory (weights, "
                              "gradients, optimizer state and activations), e.g. 60GiB [default: no limit]."),
            click.option("--time-limit", type=FLOAT, default=60.0, show_default=True,
                         help="Seconds for the whole command: model building, hints, every solve and the report."),
            click.option("--workers", type=INT, default=1, show_default=True, help=f"CP-SAT workers: at most {LOCAL_CAP}, and never more than {MAX_WORKERS}. 1 is reproducible unless the "
                                                                               "time limit cuts a solve: see --deterministic-time."),
            click.option("--seed", type=INT, default=0, show_default=True, help="CP-SAT random seed (and the neighbourhoods of lns)."),
            click.option("--deterministic-time", type=FLOAT, default=None,
                         help="A budget of CP-SAT deterministic time (its machine-independent count of work; one "
                              "unit took 1.7 to 2.2 s of wall time on a 2-core machine) for the whole command, shared out like the time limit. With one "
                              "worker, a run that the time limit does not cut is reproducible (a note says which)."),
            click.option("--method", type=click.Choice(METHODS), default="auto", show_default=True,
                         help=f"cp: one CP-SAT solve (at most {CP_MAX_OPS} ops); lns: large-neighbourhood search from the "
                              f"best hint (one device per stage). auto: cp up to {AUTO_CP_OPS} ops; cp, then lns, up to "
                              f"{AUTO_LNS_OPS}; above, lns (on the linear placement with a full backward up to {CP_MAX_OPS} "
                              "ops, cp for the rest if lns found nothing in a third of the time)."),
            quiet_option,
            click.option("--costs", default=None, shell_complete=complete_file,
                         help="A measured cost preset (`ppopt profile`): unit mode with its stage-averaged F, I, W and message time "
                              "(a full backward takes I + W there, not the measured B)."),
        ]
    ):
        wrapper = option(wrapper)
    if schedule_file is not None:
        wrapper = click.option("--legacy-backward", is_flag=True,
                               help="--schedule-file uses the old spelling: BW full backward, B input backward.")(wrapper)
        wrapper = click.option("--schedule-file", default=None, shell_complete=complete_file,
                               help=f"A PyTorch schedule CSV of your own ('-': standard input): {schedule_file}")(wrapper)
    return system_options()(job_options()(unit_options()(
        schedule_options(name=False, unit_costs=False, sizes_required=schedule_file is None, spaces=spaces)(wrapper))))


def _gap_builds(params: dict) -> int:
    """`gap` simulates every schedule it reports (a schedule file's alone), one at a time, then searches."""
    from ppopt.generators import names

    return (1 if params.get("given") is not None else len(params["schedules"] or names())) + 1


def _planned_size(spec: InstanceSpec, params: dict) -> tuple[int, int, str | None]:
    """Stages per device and op kinds of the largest schedule a command builds, and the space key
    that sets them (``chunks=V``, ``waves=W``), if any. Commands with a ``--space`` (search,
    frontier) count its stages (:func:`ppopt.solve.space.largest_stage_count`; the flags fill in
    what it leaves out); ``gap`` counts p x chunks or 2 x waves per device from the flags, each
    stage with a forward and a backward of each microbatch."""
    options = params["options"]
    if params.get("given") is not None:  # a schedule file: its own stages and backward
        given = params["given"]
        return -(-given.stages // given.devices), 3 if given.split_backward else 2, None
    if "space" in params:
        from ppopt.solve.space import largest_stage_count, parse_space, size_key

        space = parse_space(params["space"], **options)
        return largest_stage_count(space, spec.devices) // spec.devices, 3 if space.split_backward else 2, size_key(space)
    return max(1, options.get("chunks") or 1, 2 * (options.get("waves") or 0)), 2, None


def _check_size(spec: InstanceSpec, params: dict, time_limit_s: float, schedules: int = 1, held: int = 1) -> None:
    """Refuse, before any model or placement is built, a request whose every schedule is over
    :data:`ppopt.ir.MAX_OPS` (:func:`_planned_size`), over what the command's memory plan
    allows (:func:`ppopt.solve.search.max_search_ops`) or this machine's available memory
    (:func:`ppopt.host.require_memory`), or too large to finish within the time limit
    (:func:`ppopt.solve.search.minimum_time_s` for each of the ``schedules`` the command builds at
    the least; ``held`` of them at once count in the memory plan). A size set by a space key is
    named, with the field ``space``."""
    from ppopt.errors import ConfigError, ScheduleError
    from ppopt.host import require_memory
    from ppopt.ir import check_size
    from ppopt.solve.search import SCHEDULE_BYTES_PER_OP, SEARCH_BYTES_PER_OP, max_search_ops, minimum_time_s

    per_device, kinds, key = _planned_size(spec, params)
    ops = spec.devices * per_device * spec.microbatches * kinds
    what = (f"{spec.devices} devices{f' x {per_device} stages each' if per_device > 1 else ''}{f' ({key})' if key else ''}, "
            f"{spec.microbatches} microbatches")
    field = "schedule_file" if params.get("given") is not None else "space" if key else \
        "devices" if spec.devices * per_device > spec.microbatches else "microbatches"  # the larger factor, unless a file set both
    try:
        check_size(ops, what)
    except ScheduleError as error:
        raise ScheduleError(error.reason, field=field) from None
    if ops > max_search_ops(held):
        raise ConfigError(f"search too large: {what} make {ops:,} ops (stages x microbatches x kinds); this command holds "
                          f"about {SEARCH_BYTES_PER_OP + (held - 1) * SCHEDULE_BYTES_PER_OP:,} bytes per op and takes "
                          f"at most {max_search_ops(held):,} ops", field=field)
    require_memory(ops * (SEARCH_BYTES_PER_OP + (held - 1) * SCHEDULE_BYTES_PER_OP), f"a search of {what} ({ops:,} ops)", field)
    if spec.memory_limit is not None:  # the first handcrafted hint may not fit: one more until one does
        schedules += 1
    started = startup_s()  # the budget counts from the imports (0 when not run from the command line)
    least = started + schedules * minimum_time_s(ops)
    if time_limit_s < least:
        what_work = "one schedule" if schedules == 1 else f"the {schedules} schedules this command builds"
        start_up = f", the command's start-up ({started:.2g} s) included" if started else ""
        raise ConfigError(f"{time_limit_s:g} s is too short for {what} ({ops:,} ops): building, simulating and printing "
                          f"{what_work} at that size takes up to {_rounded_up(least)} s{start_up}; give at least that",
                          field="time_limit_s")


def _check_outputs_in_time(solve, ops: int, outputs_s: float, flags: str) -> None:
    """Refuse a time limit that a search and its picture or trace (``outputs_s``) cannot both fit in
    (a trace of 499,200 ops, about 25 s, was written after a 14 s limit had passed)."""
    from ppopt.errors import ConfigError
    from ppopt.solve.search import minimum_time_s

    if solve.time_limit_s is not None and solve.remaining_s() < outputs_s + minimum_time_s(ops):
        raise ConfigError(f"{solve.time_limit_s:g} s cannot cover a search of {ops:,} ops and writing {flags} (about "
                          f"{_rounded_up(outputs_s)} s for {'them' if ' and ' in flags else 'it'}): give more, or leave {flags} out",
                          field="time_limit_s")


def _rounded_up(seconds: float) -> str:
    """``seconds`` shown so that the figure is never below it: whole seconds from 10 s, else two
    significant digits rounded up (0.000834 -> 0.00084)."""
    if seconds >= 10:
        return str(math.ceil(seconds))
    from decimal import ROUND_CEILING, Decimal

    exact = Decimal(repr(seconds))
    return f"{exact.quantize(Decimal(1).scaleb(exact.adjusted() - 1), rounding=ROUND_CEILING).normalize():f}"


def _requests(params: dict) -> tuple[InstanceSpec, SolveOptions]:
    """Take the shared solver flags out of ``params``: the instance spec and the started solve options.

    Runs first thing in a command, so the time budget starts with the command.
    """
    quiet = params.pop("quiet")
    workers = params.pop("workers")
    if isinstance(workers, int) and 1 <= workers <= MAX_WORKERS:  # SolveOptions refuses the rest
        from ppopt.host import check_local_parallelism

        check_local_parallelism(workers, "workers")  # 64 threads on 2 CPUs overran a 5 s limit by 30 %
    solve = SolveOptions(params.pop("time_limit"), workers, params.pop("seed"),
                         None if quiet else (lambda line: click.echo(line, err=True)),
                         deterministic_time=params.pop("deterministic_time"), method=params.pop("method")).start(startup_s())
    unit, units = params.pop("unit"), params.pop("units")
    if not unit and params.get("model") is None and params.get("costs") is None:  # no mode given: a usage error
        raise click.UsageError("give --unit, --costs FILE, or --model and --system", click.get_current_context())
    refuse_other_modes_flags(unit, params)  # before --memory-limit is read in either unit
    costs = params.pop("costs")
    if costs is not None:
        from ppopt.cli.run import preset_units

        refuse_with_preset(params.get("parallel"), params.get("global_batch"))
        unit, units = True, preset_units(costs, params)
    spec = InstanceSpec(
        params.pop("devices"), params.pop("microbatches"), units=units if unit else None,
        model=params.pop("model"), system=params.pop("system"), global_batch=params.pop("global_batch"),
        memory_limit=parse_amount(params.pop("memory_limit"), unit), parallel=params.pop("parallel"),
    )
    return spec, solve


def _refuse_replicas_for_torch(space, csv_path, run_it) -> None:
    """PyTorch's schedule CSV and runtime hold one rank per stage: a space whose schedules place a
    stage on two ranks (Chimera's weight replicas) is refused with --csv or --run before searching."""
    from ppopt.errors import ConfigError
    from ppopt.generators import REGISTRY

    replicated = space.placement == "bidirectional" if space.fixed is None else not REGISTRY[space.fixed].torch
    if replicated and (csv_path or run_it):
        raise ConfigError(f"space {space.describe()} places each stage on two ranks, and PyTorch's schedule CSV and "
                          "runtime hold one rank per stage", field="csv_path" if csv_path else "run_it")


@main.command("search")
@solver_options(schedule_file="searched with it as a hint, in the relaxed space it belongs to unless --space names another "
                              "free one; the best found is never slower than it when it fits the memory limit.")
@click.option("--space", default="placement=linear", show_default=True,
              help="Search space, e.g. placement=linear,backward=split or fixed:1f1b (see README); with --schedule-file, "
                   "the file's own space unless given.")
@click.option("--grid/--no-grid", default=True, show_default=True, help="Print the schedule found as a grid (text output; --json always holds its orders and timeline).")
@click.option("--minimize-memory", is_flag=True, help="Then minimise the worst device's peak memory at that step time (second solve).")
@click.option("--csv", "--torch-csv", "csv_path", shell_complete=complete_file, callback=output_not_named_as(".csv", "PyTorch's schedule CSV"), default=None,
              help="Write the schedule found as a PyTorch schedule CSV (--torch-csv, as in `plan`, is the same flag).")
@click.option("--plot", callback=check_plot, shell_complete=complete_file, default=None, help="Draw the schedule found, simulated, to .png/.svg.")
@click.option("--trace", shell_complete=complete_file, callback=output_not_named_as(".json", "a Chrome trace (JSON)", compressed=True), default=None, help="Write the schedule found, simulated, as a Chrome/Perfetto trace (.json, or .json.gz compressed).")
@click.option("--run", "run_it", is_flag=True, help="Then run the schedule found in PyTorch's runtime on local ranks (see `ppopt run`; needs torch). The run comes after --time-limit's budget, bounded by `ppopt run`'s default --timeout.")
@json_option
def search_command(spec, solve, options, space, grid, minimize_memory, csv_path, plot, trace, run_it, given, as_json):
    """Search a space for the shortest step under a memory limit; print the schedule, bound and gap.

    With --schedule-file, a schedule of your own is the first hint, so the schedule found (--csv,
    --trace, --plot) is never slower than it when it fits the memory limit.

    Durations: --unit (unit slots), --costs FILE (measured) or --model with --system; one of the three."""
    from ppopt.errors import ConfigError
    from ppopt.report.solve import search_json, search_text
    from ppopt.report.text import no_colour
    from ppopt.solve.search import search

    if run_it and as_json:
        raise ConfigError("prints the run's table; give --run without --json (or use --csv and `ppopt run FILE --json`)", field="run_it")
    searched = _searched_space(spec, space, options, given)
    _refuse_replicas_for_torch(searched, csv_path, run_it)
    if run_it:  # before the search and its outputs, not after them
        from ppopt.cli.run import check_run_before_search
        from ppopt.solve.space import stage_count

        check_run_before_search(spec.devices, spec.microbatches, stage_count(searched, spec.devices))
    if plot or trace:  # the picture's and the trace's size is known before the search that makes them
        from ppopt.report.plot import check_picture_size, outputs_time_s
        from ppopt.report.trace import check_trace_size
        from ppopt.solve.search import space_ops

        ops = space_ops(spec, searched)
        if plot:
            check_picture_size(ops)
        if trace:
            check_trace_size(ops)
        # the time limit covers the whole command: the search leaves the outputs their time
        outputs_s = outputs_time_s(ops, bool(plot), bool(trace))
        _check_outputs_in_time(solve, ops, outputs_s, " and ".join(n for n, given in (("--plot", plot), ("--trace", trace)) if given))
        solve = solve.reserve(outputs_s)
    result = search(spec, searched, solve, minimize_memory=minimize_memory, hints=() if given is None else (given,))
    capacity = None if spec.unit_mode else spec.system.memory_capacity_bytes
    if as_json:
        emit_json(search_json(result, capacity) | _request_json(spec))
    else:
        click.echo(search_text(result, grid, colour=not no_colour(), context=_simulated(spec), capacity_bytes=capacity,
                               limit_bytes=spec.memory_limit))
    if result.schedule is not None and (csv_path or plot or trace):
        with working("search: writing the outputs", quiet=solve.progress is None):  # a trace of 500,000 ops: 12 to 15 s
            _write_outputs(result, spec, csv_path, plot, trace)
    if run_it and result.schedule is not None:
        from ppopt.cli.run import run_found

        run_found(result.schedule, result.simulation.start_s)


def _file_space(spec, given):
    """The relaxed space a --schedule-file's schedule is a point of (``space_of``), refused naming the
    file when there is none, when it has more stages than the model has layers, or when the system
    shortens its overlapped pairs (the solver's bounds would not hold for it)."""
    from ppopt.errors import ConfigError, ScheduleError
    from ppopt.solve.search import OVERLAP_REFUSED, overlap_outside_model
    from ppopt.solve.space import space_of

    try:
        own = space_of(given)
    except ScheduleError as error:
        raise ConfigError(error.reason, field="schedule_file") from None
    _check_space_layers(spec, own, field="schedule_file")  # before its instance is built
    instance = spec.instance(given.stages, given.stage_weights, given.placement)
    if overlap_outside_model(given, instance):
        raise ConfigError(f"{given.name} " + OVERLAP_REFUSED.format(share=instance.system.overlap_f_b_share), field="schedule_file")
    return own


def _searched_space(spec, space: str, options: dict, given):
    """The space a search command searches, checked against the model's layers: a file's own
    (:func:`_file_space`) unless --space was given on the command line, then that one, of which the
    file must be a point as it is: a fixed or family space, another stage map, or a full-backward
    space for a file with I and W (it would be merged into another schedule) is refused naming the
    file's own space."""
    from ppopt.errors import ConfigError
    from ppopt.solve.space import parse_space, placement_of, stage_count

    own = None if given is None else _file_space(spec, given)
    if own is not None and click.get_current_context().get_parameter_source("space") != click.core.ParameterSource.COMMANDLINE:
        return own
    searched = parse_space(space, **options)
    if own is not None:
        placement = None if searched.fixed or searched.placement == "family" else placement_of(searched, given.devices)
        why = ("a fixed space takes no hint" if searched.fixed else "a family space searches several placements" if
               searched.placement == "family" else "its stages or their devices differ" if
               stage_count(searched, given.devices) != given.stages or placement not in (None, given.placement) else
               "a full backward would merge its I and W into another schedule"
               if given.split_backward and not searched.split_backward else None)
        if why:
            raise ConfigError(f"{given.name} is not searched in {searched.describe()}: {why}; its own space is "
                              f"{own.describe()} (leave --space out)", field="space")
    _check_space_layers(spec, searched)
    return searched


def _check_space_layers(spec, space, field: str = "space") -> None:
    """A modelled space with more stages than the model has layers, named before the search (the
    instance's own error named no flag), with ``field`` (the flag that set the space)."""
    from ppopt.errors import ConfigError
    from ppopt.generators import too_many_stages
    from ppopt.solve.space import stage_count

    if spec.unit_mode:
        return
    layers = spec.model.num_layers
    if space.fixed is not None:
        if (reason := too_many_stages(space.fixed, spec.devices, space.fixed_options, layers)) is not None:
            raise ConfigError(reason, field=field)
        return
    if space.placement == "family":  # it skips its members with too many stages; the linear one has the fewest, p
        if spec.devices > layers:
            raise ConfigError(f"every placement of {space.describe()} has at least {spec.devices} stages on {spec.devices} "
                              f"devices, more than the model's {layers} layers", field=field)
        return
    stages = stage_count(space, spec.devices)
    if stages > layers:
        raise ConfigError(f"{stages} stages ({space.describe()} on {spec.devices} devices) exceed the model's {layers} "
                          "layers", field=field)


def _simulated(spec) -> str | None:
    """The modelled job a text report is about, in one line under its header (None in unit mode)."""
    from ppopt.job import summary_line

    job = _simulated_json(spec)
    return None if job is None else summary_line(job)


def _request_json(spec) -> dict:
    """What a solver command's ``--json`` says of its request: the devices and microbatches (the
    names ``evaluate`` uses) and the modelled job."""
    return {"devices": spec.devices, "microbatches": spec.microbatches, "job": _simulated_json(spec)}


def _simulated_json(spec) -> dict | None:
    """The modelled job of a solver command for ``--json`` (None in unit mode)."""
    if spec.unit_mode:
        return None
    from ppopt.job import Parallelism

    return (spec.parallel or Parallelism()).summary_json(spec.model, spec.system, spec.microbatches, spec.global_batch)


def _write_outputs(result, spec, csv_path, plot, trace) -> None:
    """The schedule found as CSV (ordered by simulated start), picture and trace."""
    with written_together(csv_path, plot, trace):  # a full disk at the trace leaves the CSV as it was
        _write_each_output(result, spec, csv_path, plot, trace)


def _write_each_output(result, spec, csv_path, plot, trace) -> None:
    schedule, simulation = result.schedule, result.simulation
    instance = spec.instance(schedule.stages, schedule.stage_weights, schedule.placement)
    costs = instance.costs
    unit = result.time_unit
    if csv_path:
        from ppopt.io.torch_csv import write_torch_csv

        write_torch_csv(schedule, csv_path, simulation.device_starts())
    if plot:
        from ppopt.report.plot import plot_schedule, simulated_transfers

        in_bytes = instance.memory_unit == "bytes"  # then the limit counts persistent memory too
        plot_schedule(schedule, simulation.start_s, simulation.end_s, plot,
                      title=f"search p={schedule.devices}, m={schedule.microbatches}: step {result.step_time:.4g} {unit} ({result.status})",
                      time_unit=unit, stage_costs=costs.stages,
                      memory_unit=instance.memory_unit, memory_base=simulation.persistent_bytes if in_bytes else None,
                      memory_limit=instance.memory_limit, transfers=simulated_transfers(simulation))
    if trace:
        from ppopt.io import write_json
        from ppopt.report.trace import chrome_trace

        write_json(chrome_trace(schedule, simulation, costs, time_unit=unit), trace)


@main.command("gap")
@solver_options(built=_gap_builds, held=2, spaces=False,
                schedule_file="its gap against the relaxed space it belongs to, instead of the handcrafted schedules'.")  # holds a search and the schedule it simulates
@click.option("--schedule", "-s", "schedules", multiple=True, shell_complete=complete_schedule_or_all,
              help="Only these schedules (repeatable), or 'all' [default: all applicable].")
@json_option
@format_option
def gap_command(spec, solve, options, schedules, given, as_json, fmt):
    """Optimality gap of every handcrafted schedule against its family's relaxed space, or of your
    own schedule (--schedule-file) against the space of its placement and backward.

    Durations: --unit (unit slots), --costs FILE (measured) or --model with --system; one of the three."""
    from ppopt.errors import ConfigError
    from ppopt.report.solve import gap_json, gap_text
    from ppopt.solve.gap import gap_report

    refuse_all_with_others(schedules)
    if schedules == ("all",):  # as evaluate and plan take it: every family, the default
        schedules = ()
    if schedules:  # each name known, and every option taken by one of them
        refuse_unused_options(schedules, options)
    if given is not None:  # a file no space holds, too deep for the model or overlapped, named as the file
        _file_space(spec, given)
    report = gap_report(spec, options, schedules or None, solve, given)
    if (infeasible := report.infeasible_for_all()) is not None:
        raise infeasible
    if not report.rows:  # every schedule skipped: an empty table would read as a result
        from ppopt.evaluate import skipped_reasons

        raise ConfigError(f"no schedule to report at p = {spec.devices}, m = {spec.microbatches} "
                          f"({skipped_reasons(report.skipped)})")
    for name, reason in report.skipped.items():
        click.echo(f"skipped {name}: {reason}", err=True)
    if as_json:
        emit_json(gap_json(report) | _request_json(spec))
    else:
        click.echo(gap_text(report, spec.devices, spec.microbatches, fmt, _simulated(spec)))


@main.command("frontier")
@solver_options(built=lambda params: 2, held=2, memory_limit=False,  # keeps the search without a limit, then one per limit
                schedule_file="placed on the frontier of the relaxed space it belongs to (unless --space names another "
                              "free one), with the handcrafted schedules, and a hint of every search.")
@click.option("--space", default="placement=linear", show_default=True,
              help="Search space (see `ppopt search`); with --schedule-file, the file's own space unless given.")
@click.option("--limits", default=None, help="Comma-separated memory limits per device: live activations in unit mode, bytes of the whole "
                   "memory such as 60GiB with a model; at most 1,000 [default: from the minimum to the largest "
                   "peak of the handcrafted schedules and the unlimited search's].")
@json_option
@format_option
def frontier_command(spec, solve, options, space, limits, given, as_json, fmt):
    """Step time vs memory limit (the Pareto frontier), with the handcrafted schedules (and your own,
    --schedule-file) on it.

    Durations: --unit (unit slots), --costs FILE (measured) or --model with --system; one of the three."""
    from ppopt.errors import ConfigError
    from ppopt.report.solve import frontier_json, frontier_text
    from ppopt.solve.gap import frontier

    if spec.memory_limit is not None:
        raise ConfigError("frontier sweeps memory limits itself: use --limits, not --memory-limit", field="memory_limit")
    if limits is not None and not limits.strip():
        raise ConfigError("must list at least one memory limit (leave it out for the default range)", field="limits")
    values = [parse_amount(x.strip(), spec.unit_mode, "--limits") for x in limits.split(",")] if limits else None
    searched = _searched_space(spec, space, options, given)
    result = frontier(spec, searched, values, solve, given)
    if as_json:
        emit_json(frontier_json(result) | _request_json(spec))
    else:
        click.echo(frontier_text(result, spec.devices, spec.microbatches, fmt, _simulated(spec)))
