"""Commands over handcrafted schedules: list, table, evaluate."""

from __future__ import annotations

import time
from collections.abc import Callable

import click

from ppopt.cli import main
from ppopt.cli.options import (
    FLOAT,
    ProgressBar,
    check_layers,
    check_plot,
    complete_file,
    complete_preset,
    deadline_of,
    emit_json,
    family_ops,
    format_option,
    job_options,
    json_option,
    note_selective_saves_nothing,
    output_not_named_as,
    quiet_option,
    refuse_with_preset,
    require_model_and_system,
    require_size,
    resolve_schedule,
    schedule_options,
    size_outputs_first,
    system_options,
    working,
    written_together,
)
from ppopt.generators import REGISTRY


@main.command("list")
@click.argument("what", metavar="[WHAT]", type=click.Choice(["schedules", "models", "systems", "model-fields", "system-fields"]),
                default="schedules")
@click.argument("names", metavar="[NAME|FILE]...", nargs=-1, shell_complete=complete_preset)
@json_option
@format_option
def list_command(what: str, names: tuple[str, ...], as_json: bool, fmt: str) -> None:
    """List the schedules (options, rules, where their closed forms hold, PyTorch export, summary);
    with WHAT = models or systems, the presets --model and --system take by name, or, given preset
    names or files, every field of each as read, side by side; with WHAT = model-fields or
    system-fields, what a model or system file may hold (type, unit, default, meaning)."""
    from ppopt.report.text import render_table

    if names and what not in ("models", "systems"):
        raise click.UsageError(f"`list {what}` takes no names (`list models NAME|FILE...` and `list systems NAME|FILE...` do)",
                               click.get_current_context())
    if what.endswith("-fields"):
        _list_fields(what, as_json, fmt)
        return
    if names:
        _list_configs(what, names, as_json, fmt)
        return
    if what != "schedules":
        _list_presets(what, as_json, fmt)
        return
    if as_json:
        emit_json([g.describe() for g in REGISTRY.values()])
        return

    rows = [
        (g.name, ", ".join(f"--{o}" for o in g.options) or "-", g.rules,
         _closed_forms_cell(g.closed_forms) if g.closed_forms else f"none ({g.no_closed_forms})", "yes" if g.torch else "no", g.summary)
        for g in REGISTRY.values()
    ]
    click.echo(render_table(("schedule", "options", "rules", "closed forms hold", "torch csv", "summary"), rows, fmt))


def _list_presets(what: str, as_json: bool, fmt: str) -> None:
    """Print the model or system presets (``models/``, ``configs/``) with the fields that tell them apart."""
    from ppopt.config import list_models, list_systems, load_model, load_system
    from ppopt.report.text import csv_number, render_table

    if what == "models":
        from ppopt.costs import model_param_count

        models = [load_model(name) for name in list_models()]
        dumped = [m.model_dump(mode="json") | {"parameters": model_param_count(m)} for m in models]  # derived, exact
        heads: tuple[str, ...] = ("heads", "KV heads") if fmt == "csv" else ("heads (KV)",)  # one number per CSV cell
        header: tuple[str, ...] = ("model", "parameters", "layers", "hidden", "FFN", *heads, "vocabulary", "sequence",
                                   "global batch")
        rows: list[tuple[str, ...]] = [
            (m.name, str(model_param_count(m)) if fmt == "csv" else _billions(model_param_count(m)), str(m.num_layers), str(m.hidden_size),
             str(m.ffn_hidden_size),
             *((str(m.num_attention_heads), str(m.num_kv_heads)) if fmt == "csv" else (f"{m.num_attention_heads} ({m.num_kv_heads})",)),
             str(m.vocab_size), str(m.seq_length), str(m.global_batch_size)) for m in models]
    else:
        systems = [load_system(name) for name in list_systems()]
        dumped = [s.model_dump(mode="json") for s in systems]
        header = ("system", "GPUs/node", "peak TFLOP/s", "memory GB", "intra-node GB/s", "inter-node GB/s", "inter-node per", "description")
        # four digits to read, never an exponent (10,000, not 1e+04); ten in CSV (as every CSV of ppopt: csv_number)
        short = csv_number if fmt == "csv" else (lambda x: f"{x:,.0f}" if x >= 1e4 else f"{x:,.4g}")
        whole = str if fmt == "csv" else (lambda n: f"{n:,}")
        rows = [(s.name, whole(s.devices_per_node), short(s.peak_flops / 1e12), short(s.memory_capacity_bytes / 1e9),
                 short(s.intra_node.bandwidth_bytes_per_s / 1e9),
                 short(s.inter_node.bandwidth_bytes_per_s / 1e9), s.inter_node_per,
                 s.description) for s in systems]
    if as_json:
        emit_json(dumped)
        return
    click.echo(render_table(header, rows, fmt))


def _billions(count: int) -> str:
    """A parameter count for a table: ``8.03 B`` (the exact count is in CSV and --json)."""
    return f"{count / 1e9:.3g} B"


def _list_fields(what: str, as_json: bool, fmt: str) -> None:
    """The reference of a model or system file (:mod:`ppopt.report.config_fields`)."""
    from ppopt.config import ModelConfig, SystemConfig
    from ppopt.report.config_fields import field_docs, field_reference_text
    from ppopt.report.text import render_table

    docs = field_docs(ModelConfig if what == "model-fields" else SystemConfig)
    if as_json:
        emit_json([doc.as_json() for doc in docs])
    elif fmt == "text":
        click.echo(field_reference_text(docs))
    else:
        click.echo(render_table(("field", "type", "unit", "default", "meaning"),
                                [(d.name, d.kind, d.unit, d.default, d.meaning) for d in docs], fmt))


def _list_configs(what: str, names: tuple[str, ...], as_json: bool, fmt: str) -> None:
    """Every field of the given presets or files as read, side by side; a value the file left out
    (the default) is marked."""
    from ppopt.config import ModelConfig, load_model, load_system
    from ppopt.costs import model_param_count
    from ppopt.report.config_fields import values_of
    from ppopt.report.text import render_table, with_context

    load = load_model if what == "models" else load_system
    configs = [load(name) for name in names]
    values = [values_of(config) for config in configs]
    # a model's parameter count, derived: to check a file against the size it is meant to have
    counts = [model_param_count(config) for config in configs if isinstance(config, ModelConfig)]
    if as_json:
        emit_json([{"given": name, **config.model_dump(mode="json"), **({"parameters": counts[k]} if counts else {}),
                    "defaults": [f for f, (_, given) in v.items() if not given]}
                   for k, (name, config, v) in enumerate(zip(names, configs, values))])
        return
    if fmt == "csv":  # a cell holds the value itself (no TOML quotes); the mark is a yes/no column per config
        import tomllib

        def bare(text: str) -> str:
            return tomllib.loads(f"v = {text}")["v"] if text.startswith('"') else text

        rows = [(field, *(bare(v[field][0]) for v in values), *("no" if v[field][1] else "yes" for v in values))
                for field in values[0]]
        if counts:
            rows.append(("parameters (derived)", *map(str, counts), *([""] * len(counts))))
        table = render_table(("field", *names, *(f"{name} default" for name in names)), rows, fmt)
        click.echo(table)
        return
    rows = [(field, *(text if given else f"{text} *" for text, given in (v[field] for v in values))) for field in values[0]]
    if counts:
        rows.append(("parameters (derived)", *map(_billions, counts)))
    table = render_table(("field", *names), rows, fmt)
    defaults = any(not given for v in values for _, given in v.values())
    note = f"* the default: the file leaves the field out (`ppopt list {what.removesuffix('s')}-fields`)"
    click.echo(with_context([], table, ["", note] if defaults else [], fmt))


def _closed_forms_cell(forms) -> str:
    """The range of a family's closed forms, and where ppopt's table differs from them."""
    return forms.holds if forms.table_exact else f"{forms.holds}; table {forms.table_differs}"


@main.command("table")
@schedule_options()
@click.option("--plot", callback=check_plot, shell_complete=complete_file, default=None, help="Also draw the table as a Gantt picture (.png or .svg; needs matplotlib).")
@json_option
@quiet_option
def table_command(name, schedule_file, legacy_backward, devices, microbatches, units, options, plot, as_json, quiet) -> None:
    """Print a schedule's unit-slot table: rows are devices, columns are slots."""
    from ppopt.report.evaluation import table_json
    from ppopt.report.text import grid, no_colour, table_summary
    from ppopt.table import build_table

    size_outputs_first(name, devices, microbatches, options, picture=bool(plot))
    with working(f"table {name or schedule_file}", quiet):  # formatting 2,000 x 2,400 took 15 s after the table was built
        schedule = resolve_schedule(name, schedule_file, legacy_backward, devices, microbatches, options)
        if plot:
            _check_picture(schedule)
        table = build_table(schedule, units)
        if as_json:
            emit_json(table_json(table))
        else:
            click.echo(grid(table, colour=not no_colour()))
            click.echo("\n" + table_summary(table))
        if plot:
            _plot_table(table, plot)
    if name is not None:
        _note_cautions([name], schedule.devices, schedule.microbatches)


def _note_cautions(names, devices: int, microbatches: int) -> None:
    """A note on stderr for each family named whose construction is poor at p, m though defined
    (:attr:`ppopt.generators.Family.caution`: Hanayo when p does not divide m)."""
    from ppopt.generators import REGISTRY

    for name in names:
        family = REGISTRY.get(name)
        if family is not None and family.caution is not None and (caution := family.caution(devices, microbatches)):
            click.echo(f"note: {caution}", err=True)


def _check_picture(schedule) -> None:
    """Refuse a picture too large to draw before the work that would make it."""
    from ppopt.report.plot import check_picture_size

    check_picture_size(schedule.op_count)


PICTURE_PRECHECK = 10
"""``compare --plot`` refuses before evaluating when every family together makes this many times the
drawable ops: the schedules that apply could not be drawn whichever they are (sizing what applies
means evaluating, seconds at such sizes). Below it, the exact count is checked after evaluating."""


def _plot_table(table, path) -> None:
    from ppopt.report.plot import default_title, plot_schedule

    plot_schedule(table.schedule, table.start, {op: table.end(op) for op in table.start}, path,
                  title=f"{default_title(table.schedule)}, unit-slot table")
    click.echo(f"wrote {path}", err=True)


def _plot_simulation(schedule, simulation, costs, path) -> None:
    from ppopt.report.plot import default_title, plot_schedule, simulated_transfers

    plot_schedule(schedule, simulation.start_s, simulation.end_s, path,
                  title=f"{default_title(schedule)}, simulated step {simulation.step_time_s:.4g} s", time_unit="s",
                  stage_costs=costs.stages, memory_unit="bytes",
                  transfers=simulated_transfers(simulation))


def _write_trace(schedule, simulation, costs, path) -> None:
    from ppopt.io import write_json
    from ppopt.report.trace import chrome_trace

    write_json(chrome_trace(schedule, simulation, costs), path)


def _presets(model, system, required: bool = False):
    """Load --model and --system (both or neither)."""
    from ppopt.config import load_model, load_system

    require_model_and_system(model, system, required)
    if model is None:
        return None, None
    return load_model(model), load_system(system)


def _evaluate_all_with_progress(command, devices, microbatches, units, model, system, global_batch, parallel, options,
                                quiet=False, deadline=None, timelines=False):
    """:func:`ppopt.evaluate.evaluate_all` (with ``deadline``, from ``--time-limit``), with a progress
    bar on stderr once it has run :data:`~ppopt.solve.options.PROGRESS_AFTER_S` (51 s for every
    schedule at 524,288 ops on 2 cores), unless ``quiet``."""
    from ppopt.evaluate import evaluate_all
    from ppopt.solve import options as solve_options

    bar = None if quiet else ProgressBar(f"{command}: schedules", after_s=solve_options.PROGRESS_AFTER_S)
    try:
        return evaluate_all(devices, microbatches, units, model, system, global_batch, parallel, progress=bar, deadline=deadline,
                            timelines=timelines, **options)
    finally:
        if bar is not None:
            bar.close()


def time_limit_option(what: str) -> Callable:
    """``--time-limit SECONDS`` of evaluate and compare: the whole command's budget (default none)."""
    return click.option("--time-limit", type=FLOAT, default=None,
                        help=f"Seconds for the whole command: {what} whose estimated time no longer fits are skipped, with "
                             "that reason [default: no limit].")


def _check_one_in_time(name: str, ops: int, deadline: float | None, plot: bool, trace: bool) -> None:
    """ConfigError when evaluating one schedule of ``ops`` ops (and drawing or tracing it) is
    estimated not to fit before ``deadline``."""
    from ppopt.errors import ConfigError
    from ppopt.evaluate import evaluation_seconds
    from ppopt.ir import MAX_OPS
    from ppopt.report.plot import outputs_time_s

    if ops > MAX_OPS:  # refused by its size once it is built or sized, a message that names the limit
        return
    needed = evaluation_seconds(ops) + outputs_time_s(ops, plot, trace)
    if deadline is not None and time.monotonic() + needed > deadline:
        from ppopt.report.text import span, time_left

        raise ConfigError(f"too short for {name}: about {span(needed)} to evaluate{' and write' if plot or trace else ''} "
                          f"its {ops:,} ops, {time_left(deadline - time.monotonic())}", field="time_limit")


@main.command("evaluate")
@schedule_options(all_schedules=True)
@system_options()
@job_options()
@click.option("--plot", callback=check_plot, shell_complete=complete_file, default=None, help="Draw the simulated timeline (or, without --model/--system, the table) to .png/.svg (not with --costs).")
@click.option("--trace", shell_complete=complete_file, callback=output_not_named_as(".json", "a Chrome trace (JSON)", compressed=True), default=None, help="Write the simulated step as a Chrome/Perfetto trace (.json, or .json.gz compressed; needs --model/--system).")
@click.option("--costs", default=None, shell_complete=complete_file, help="Simulate with a measured cost preset from `ppopt profile` instead of --model/--system.")
@time_limit_option("one schedule that cannot fit is refused; with --schedule all, the schedules")
@json_option
@format_option
@quiet_option
def evaluate_command(name, schedule_file, legacy_backward, devices, microbatches, units, options, model, system,
                     global_batch, parallel, plot, trace, costs, time_limit, as_json, fmt, quiet) -> None:
    """Formula vs table (and, with --model and --system, simulated) metrics for one schedule or 'all'.

    Lengths are in unit slots for every schedule: a slot is one forward of a 1/p model share, B = I + W
    lasts --backward slots, chunk ops scale by p/S (so 1f1b at p = m = 8 is 45 slots)."""
    from ppopt.errors import ConfigError
    from ppopt.evaluate import schedule_costs
    from ppopt.report.evaluation import evaluation_json, evaluation_text, skipped_json

    deadline = deadline_of(time_limit)  # checked first, though a cost preset's one simulation does not need it
    if costs is not None:
        from ppopt.cli.run import evaluate_with_preset

        conflict = _with_costs(model, system, ("--plot", plot), ("--trace", trace))
        if conflict or name == "all":
            raise ConfigError(conflict or "takes one schedule, not -s all", field="costs")
        refuse_with_preset(parallel, global_batch, options.get("split"))
        evaluate_with_preset(resolve_schedule(name, schedule_file, legacy_backward, devices, microbatches, options, deadline=deadline),
                             costs, as_json, fmt, with_formula=name is not None)
        return

    model_config, system_config = _presets(model, system)
    if trace and model_config is None:
        raise ConfigError("--trace needs --model and --system (for a unit-slot trace use `ppopt export --format chrome-trace`)")
    if name == "all":
        from ppopt.cli.options import check_inputs

        check_inputs(name, schedule_file, legacy_backward)
        if plot:
            raise ConfigError("--plot draws one schedule: give --schedule NAME (or use `ppopt compare --plot`)")
        if trace:
            raise ConfigError("--trace writes one schedule's step: give --schedule NAME")
        require_size(devices, microbatches)
        results, skipped = _evaluate_all_with_progress("evaluate", devices, microbatches, units, model_config, system_config,
                                                       global_batch, parallel, options, quiet, deadline)
        for skipped_name, reason in skipped.items():
            click.echo(f"skipped {skipped_name}: {reason}", err=True)
    else:
        if name is not None and model_config is not None and devices is not None:
            check_layers(name, devices, options, model_config.num_layers)
        if name is not None and model_config is not None and microbatches:  # a schedule file's count is checked once read
            parallel.check_batch(model_config, microbatches, global_batch)
        size_outputs_first(name, devices, microbatches, options, picture=bool(plot), trace=bool(trace))
        if name is not None and devices and microbatches:  # known before it is built
            _check_one_in_time(name, family_ops(devices, microbatches, options, [name]), deadline, bool(plot), bool(trace))
        with working(f"evaluate {name or schedule_file}", quiet):  # one clock from reading to the result
            schedule = resolve_schedule(name, schedule_file, legacy_backward, devices, microbatches, options, deadline=deadline)
            if name is None:  # read from a file: sized once read
                _check_one_in_time(schedule.name, schedule.op_count, deadline, bool(plot), bool(trace))
            if plot:
                _check_picture(schedule)
            if trace:
                from ppopt.report.trace import check_trace_size

                check_trace_size(schedule.op_count)
            result = _evaluate_one(schedule, schedule_file, units, model_config, system_config, global_batch, parallel,
                                   name is not None, options)
        results, skipped = [result], {}
    note_selective_saves_nothing(model_config, parallel.recompute)  # once the job is known to be valid
    if results:
        _note_cautions([r.schedule for r in results] if name == "all" else [name] if name else [], results[0].devices,
                       results[0].microbatches)
    if name != "all" and model_config is not None:
        _note_uneven_layers(schedule, model_config)
    elif model_config is not None:
        _note_uneven_for_every_schedule(results[0].devices, model_config)
    if as_json:
        payload = [evaluation_json(r, units) for r in results]
        if model_config is not None:
            _add_simulated_job(payload, parallel.summary_json(model_config, system_config, results[0].microbatches, global_batch))
        emit_json(payload + skipped_json(skipped) if name == "all" else payload[0])
    else:
        context = None if model_config is None else parallel.summary(model_config, system_config, results[0].microbatches, global_batch)
        click.echo(evaluation_text(results, units, fmt, context))
    if name != "all" and (plot or trace):
        simulation = results[0].simulation
        if simulation is not None:
            stage_table = schedule_costs(schedule, model_config, system_config, global_batch, parallel)
            with written_together(plot, trace):
                if plot:
                    _plot_simulation(schedule, simulation, stage_table, plot)
                if trace:
                    _write_trace(schedule, simulation, stage_table, trace)
        elif plot:
            from ppopt.table import build_table

            _plot_table(build_table(schedule, units), plot)


def _note_uneven_layers(schedule, model) -> None:
    """A note on stderr when the model's layers do not split evenly over the schedule's stages (the
    first stages take the remainder, :func:`ppopt.costs.partition_layers`): the simulation times
    that split, which no other output shows."""
    from ppopt.costs import partition_layers
    from ppopt.placement import split_note

    layers = partition_layers(model.num_layers, schedule.stages, schedule.stage_weights)
    if len(set(layers)) > 1 and schedule.stage_weights is None:
        click.echo(f"note: {model.num_layers} layers over {schedule.stages} stages: {','.join(map(str, layers))} per stage "
                   "(the first stages take the remainder)", err=True)
    if "split" in schedule.options and (note := split_note(layers, schedule.options["split"])) is not None:
        click.echo(f"note: {note}", err=True)


def _note_uneven_for_every_schedule(devices: int, model) -> None:
    """`-s all` and compare: every family has a multiple of p stages, so when p does not divide the
    model's layers no schedule's split is even; a note says so once."""
    if model.num_layers % devices:
        click.echo(f"note: {model.num_layers} layers do not divide over p = {devices}: every schedule's stages split "
                   "unevenly (the first stages take the remainder)", err=True)


def _evaluate_one(schedule, schedule_file, units, model, system, global_batch, parallel, with_formula: bool, options):
    """:func:`ppopt.evaluate.evaluate_schedule`; a batch that does not split into the microbatches of
    a schedule file is that file's doing, not --microbatches': the error says so."""
    from ppopt.errors import ConfigError
    from ppopt.evaluate import evaluate_schedule

    try:
        return evaluate_schedule(schedule, units, model, system, global_batch, with_formula=with_formula, parallel=parallel,
                                 **options)
    except ConfigError as error:
        if schedule_file is None or error.field != "microbatches":
            raise
        what = error.reason.rsplit(" (give", 1)[0]  # the library's hint offers other microbatches too
        raise ConfigError(f"{what}, and {schedule_file} sets the microbatches: give another global batch",
                          field="global_batch") from None


def _add_simulated_job(rows: list[dict], job: dict) -> None:
    """Each simulated row's ``simulation`` names the job it ran (the text reports' ``simulated:`` line)."""
    for row in rows:
        if row.get("simulation") is not None:
            row["simulation"]["job"] = job


@main.command("compare")
@schedule_options(name=False)
@system_options()
@job_options()
@click.option("--plot", callback=check_plot, shell_complete=complete_file, default=None, help="Draw every schedule's simulated timeline, stacked, to .png/.svg (with --model/--system, not --costs).")
@click.option("--costs", default=None, shell_complete=complete_file, help="Rank by simulation with a measured cost preset from `ppopt profile` instead of --model/--system.")
@time_limit_option("the schedules")
@json_option
@format_option
@quiet_option
def compare_command(devices, microbatches, units, options, model, system, global_batch, parallel, plot, costs, time_limit, as_json,
                    fmt, quiet) -> None:
    """Rank all applicable schedules in the formula, table and simulation layers; mark rank changes.

    Needs --model and --system, or --costs FILE (the simulation layer only, with measured durations);
    without durations, `ppopt evaluate -s all` gives the formula and table layers."""
    from ppopt.evaluate import rank_layers
    from ppopt.generators import generate

    # checked first, though a cost preset's simulations do not need it; a stacked picture keeps its time
    deadline = deadline_of(time_limit, _stacked_picture_s(devices, microbatches, options) if plot else 0.0, "the picture (--plot)",
                           "the schedules")
    from ppopt.report.evaluation import compare_json, compare_text, skipped_json

    if costs is not None:
        from ppopt.cli.run import compare_with_preset
        from ppopt.errors import ConfigError

        conflict = _with_costs(model, system, ("--plot", plot))
        if conflict:
            raise ConfigError(conflict, field="costs")
        refuse_with_preset(parallel, global_batch, options.get("split"))
        compare_with_preset(devices, microbatches, options, costs, as_json, fmt)
        return
    model_config, system_config = _presets(model, system, required=True)
    if plot:  # every applicable schedule is drawn: far over the limit even if most did not apply, refused now
        from ppopt.report.plot import MAX_PICTURE_OPS, check_picture_size

        require_size(devices, microbatches)
        every = family_ops(devices, microbatches, options, list(REGISTRY))
        if every > PICTURE_PRECHECK * MAX_PICTURE_OPS:
            check_picture_size(every, "up to")
    results, skipped = _evaluate_all_with_progress("compare", devices, microbatches, units, model_config, system_config,
                                                   global_batch, parallel, options, quiet, deadline, timelines=bool(plot))
    if plot:  # exactly what will be drawn, before the report
        check_picture_size(family_ops(devices, microbatches, options, [r.schedule for r in results]))
    for schedule, reason in skipped.items():
        click.echo(f"skipped {schedule}: {reason}", err=True)
    note_selective_saves_nothing(model_config, parallel.recompute)  # once the job is known to be valid
    _note_uneven_for_every_schedule(devices, model_config)
    _note_cautions([r.schedule for r in results], devices, microbatches)
    ranking = rank_layers(results)
    if as_json:
        payload = compare_json(results, ranking, units)
        _add_simulated_job(payload, parallel.summary_json(model_config, system_config, microbatches, global_batch))
        emit_json(payload + skipped_json(skipped))
    else:
        click.echo(compare_text(results, ranking, units, parallel.summary(model_config, system_config, microbatches, global_batch), fmt))
    if plot:
        from ppopt.evaluate import schedule_costs
        from ppopt.report.plot import Panel, plot_compare, simulated_transfers

        panels = []
        simulated = sorted(((r, r.simulation) for r in results if r.simulation is not None), key=lambda x: x[1].step_time_s)
        for r, simulation in simulated:
            timed = generate(r.schedule, devices, microbatches, **r.options)  # the options it was evaluated with
            stage_costs = schedule_costs(timed, model_config, system_config, global_batch, parallel).stages
            panels.append(Panel(r.label, timed, simulation.start_s, simulation.end_s, simulation.step_time_s,
                                stage_costs, simulated_transfers(simulation)))
        plot_compare(panels, plot, title=f"p = {devices}, m = {microbatches}, {model_config.name} on {system_config.name}",
                     time_unit="s", memory_unit="bytes")
        click.echo(f"wrote {plot}", err=True)


def _stacked_picture_s(devices, microbatches, options) -> float:
    """What ``compare --plot`` keeps for its picture: every family stacked, at most the ops a picture
    draws (0 when -p or -m is missing, which is refused later)."""
    from ppopt.report.plot import MAX_PICTURE_OPS, picture_time_s

    if not devices or not microbatches:
        return 0.0
    return picture_time_s(min(family_ops(devices, microbatches, options, list(REGISTRY)), MAX_PICTURE_OPS), len(REGISTRY))


def _with_costs(model, system, *flags: tuple[str, object]) -> str | None:
    """Why --costs cannot go with the other options given (None: it can): it replaces --model and
    --system, and the named ``flags`` (name, value) do not apply with it."""
    if model or system:
        return "replaces --model/--system: give one or the other"
    given = [name for name, value in flags if value]
    return f"does not take {' or '.join(given)}" if given else None
