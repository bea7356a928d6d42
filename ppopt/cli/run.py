"""Commands that execute schedules in PyTorch's runtime on this machine: run, profile."""

from __future__ import annotations

import dataclasses
import functools
import os
import time

import click

from ppopt.cli import flush_stdout, main
from ppopt.cli.options import FLOAT, INT, complete_file, complete_schedule, emit_json, json_option, output_ending_in, quiet_option, working
from ppopt.errors import counted
from ppopt.units import UnitCosts


def run_options(command):
    """Model size and run settings shared by `run` and `profile`; they reach the command as ``settings``
    (a :class:`~ppopt.run.spec.RunSpec` without jobs)."""

    @functools.wraps(command)
    def wrapper(layers, hidden, heads, sequence, microbatch_size, vocab, steps, warmup, threads, seed, dtype, timeout, **params):
        from ppopt.run.spec import ModelSize, RunSpec

        model = ModelSize(layers, hidden, heads, sequence, microbatch_size, vocab)
        settings = RunSpec((), 0, model, steps, warmup, threads, seed, dtype, timeout_s=timeout)
        return command(settings=settings, **params)

    for option in reversed([
        click.option("--layers", type=INT, default=4, show_default=True, help="Transformer blocks of the tiny GPT."),
        click.option("--hidden", type=INT, default=32, show_default=True, help="Hidden size."),
        click.option("--heads", type=INT, default=2, show_default=True, help="Attention heads."),
        click.option("--sequence", type=INT, default=16, show_default=True, help="Tokens per sequence."),
        click.option("--micro-batch", "--microbatch-size", "microbatch_size", type=INT, default=2, show_default=True,
                     help="Sequences per microbatch (--microbatch-size, its former name, still works)."),
        click.option("--vocab", type=INT, default=64, show_default=True, help="Vocabulary size."),
        click.option("--steps", type=INT, default=5, show_default=True, help="Timed steps after the warm-up."),
        click.option("--warmup", type=INT, default=1, show_default=True, help="Untimed steps first."),
        click.option("--threads", type=INT, default=1, show_default=True, help="torch threads per process."),
        click.option("--seed", type=INT, default=0, show_default=True, help="Seed of the parameters and the synthetic batch."),
        click.option("--dtype", type=click.Choice(["float32", "float64"]), default="float32", show_default=True,
                     help="Parameter and activation type (float64 makes the gradient check tight)."),
        click.option("--timeout", type=FLOAT, default=120.0, show_default=True,
                     help="Seconds for every process group operation and for the run, from the launch of its ranks "
                          "(starting Python and torch comes before); `run --compare` shares it with the profiles after "
                          "the run, counted from before the run's torch start-up."),
    ]):
        wrapper = option(wrapper)
    return wrapper


def _schedules(files, names, devices, microbatches, chunks, legacy_backward=False):
    """The schedules given, validated before any process starts (files by ppopt's CSV reader)."""
    from ppopt.cli.options import check_file_sizes, check_option_values, refuse_unused_options, require_size
    from ppopt.errors import ConfigError
    from ppopt.generators import generate
    from ppopt.io.torch_csv import read_torch_csv_file
    from ppopt.run.execute import refuse_unrunnable
    from ppopt.run.spec import MAX_DEVICES, require_ranks
    from ppopt.validation import validate

    if not files and not names:
        raise click.UsageError("give schedule CSV files and/or --schedule NAME", click.get_current_context())
    # the same file twice (also as ./x.csv beside x.csv): one run, not two (-s is merged by the parser)
    first = {}  # real path -> the first name given for it
    for f in files:
        first.setdefault(f if f == "-" else os.path.realpath(f), f)
    files = tuple(first.values())
    if names:  # each name known, and --chunks taken by one of them and checked as evaluate checks it
        refuse_unused_options(tuple(names), {"chunks": chunks})
        check_option_values({"chunks": chunks})
    elif chunks is not None:  # each file holds its own chunks
        raise ConfigError("only applies with --schedule (a schedule file gives its own sizes)", field="chunks")
    if legacy_backward and not files:
        raise ConfigError("only applies to schedule files (the spelling of their backwards)", field="legacy_backward")
    schedules = [read_torch_csv_file(f, legacy_backward=legacy_backward) for f in files]
    # a/x.csv and b/x.csv, or 1f1b.csv beside -s 1f1b: rows of one name, told apart by the files' paths
    stems = [schedule.name for schedule in schedules] + list(names or ())
    schedules = [dataclasses.replace(schedule, name=str(f)) if stems.count(schedule.name) > 1 else schedule
                 for f, schedule in zip(files, schedules)]
    for file, schedule in zip(files, schedules):  # a file's rank count is no flag's: name the file
        if schedule.devices > MAX_DEVICES:
            raise ConfigError(f"{file}: {schedule.devices} ranks; a run takes at most {MAX_DEVICES} (processes on this machine)")
        if not names:  # -p and -m may repeat the files' sizes, as with evaluate --schedule-file
            check_file_sizes(schedule, file, devices, microbatches)
    if names:
        require_size(devices, microbatches)
        require_ranks(devices)  # before building a schedule of a million ranks (30 s)
        for name in names:
            schedules.append(validate(generate(name, devices, microbatches, chunks=chunks)))  # taken where it applies
    for schedule in schedules:
        refuse_unrunnable(schedule)
    return schedules


@main.command("run")
@click.argument("files", nargs=-1, type=click.Path())
@click.option("--schedule", "-s", "names", multiple=True, shell_complete=complete_schedule, help="A schedule by name (repeatable), with -p and -m.")
@click.option("--devices", "-p", "--pp", "devices", type=INT, default=None, help="Ranks (with --schedule; beside FILES only their own count).")
@click.option("--microbatches", "-m", type=INT, default=None, help="Microbatches per step (with --schedule; beside FILES only their own count).")
@click.option("--chunks", "-v", type=INT, default=None, help="Chunks (stages) per device (rank) for interleaved-1f1b and looped-bfs [default: 2].")
@click.option("--legacy-backward", is_flag=True, help="FILES use the old spelling: BW full backward, B input backward.")
@run_options
@click.option("--check/--no-check", default=True, show_default=True,
              help="Compare the first step's loss and gradients with the non-pipelined model.")
@click.option("--compare", "with_compare", is_flag=True, help="Also predict each step time from measured op costs and give the error.")
@click.option("--costs", default=None, shell_complete=complete_file, help="With --compare: a cost preset from `ppopt profile` [default: profile now].")
@json_option
@quiet_option
def run_command(files, names, devices, microbatches, chunks, legacy_backward, settings, check, with_compare, costs, as_json,
                quiet) -> None:
    """Execute schedules in PyTorch's pipelining runtime on local ranks (gloo on 127.0.0.1):
    step and op times, and the gradients checked against the model without pipelining."""
    from ppopt.errors import ConfigError, PpoptError
    from ppopt.report.run import run_json, run_text
    from ppopt.run import require_torch
    from ppopt.run.execute import check_run, run_schedules

    if costs and not with_compare:
        raise ConfigError("only applies with --compare", field="costs")
    schedules = _schedules(files, names, devices, microbatches, chunks, legacy_backward)
    settings = check_run(schedules, dataclasses.replace(settings, check=check))
    presets = _presets(schedules, costs, settings, quiet) if with_compare and costs else None  # a bad file fails before the run
    if with_compare and not costs:
        _check_profiles(schedules, settings)
    require_torch()
    if not quiet:
        click.echo(f"running {len(schedules)} schedule(s) on {counted(schedules[0].devices, 'local rank')} (gloo, 127.0.0.1)", err=True)
    note_shared_cores(schedules[0].devices, settings.threads)  # a note on the result: said with -q too
    deadline = time.monotonic() + settings.timeout_s  # --timeout covers the run and the profiles after it
    with working("run", quiet):
        results, _ = run_schedules(schedules, settings)
    comparisons, failed = None, None
    if with_compare:
        try:
            comparisons = _compare(schedules, results, settings, presets, quiet, deadline)
        except PpoptError as error:  # the run's figures still stand: printed, then the reason
            failed = error
    if as_json:  # with --compare, where the predictions' op costs came from
        source = {} if comparisons is None else {"predicted_from": str(costs) if costs else "a profile measured after the run"}
        emit_json(run_json(results, settings, comparisons) | source)
    else:
        click.echo(run_text(results, settings, comparisons))
    if failed is not None:
        where = "the run's JSON is on standard output" if as_json else "the run's table is above"
        raise ConfigError(f"{where}, without its comparison: profiling for it failed ({failed.reason}); "
                          "give --costs FILE from `ppopt profile`, or a longer --timeout", field="with_compare")
    if check and any(r.check is not None and not r.check["ok"] for r in results):
        raise ConfigError("gradients differ from the non-pipelined model (see the table)")


def note_shared_cores(ranks: int, threads: int) -> None:
    """A note on stderr when the ranks' threads outnumber this machine's cores: they then wait for a
    core, so measured steps include that wait, which no prediction knows (`run --compare` at p = 4 on
    2 cores was 62 % off without a word)."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    if ranks * threads > cores:
        click.echo(f"note: {ranks} ranks x {threads} thread(s) on {cores} core(s): the ranks take turns on the cores, "
                   "so the measured times include waiting for one", err=True)


def _presets(schedules, costs_file, settings, quiet: bool = False):
    """The cost preset file, by stage count; every schedule must have its stage count, and a preset
    from `ppopt profile` must have been measured with the same model, dtype and torch threads per
    rank as this run (each changes every op's time). A preset measured on another number of ranks
    gets a note on stderr: the ranks share the cores differently (:func:`note_shared_cores`)."""
    from ppopt.errors import ConfigError, counted
    from ppopt.io.cost_preset import read_cost_preset_file
    from ppopt.run.compare import check_stages

    costs, link, measured = read_cost_preset_file(costs_file)
    for schedule in schedules:
        check_stages(schedule, costs)
    ours = {"model": (dataclasses.asdict(settings.model), "the same model options"), "dtype": (settings.dtype, "the same --dtype"),
            "threads": (settings.threads, "the same --threads")}
    for key, (value, fix) in ours.items():
        if key in measured and measured[key] != value:
            theirs = measured[key]
            if isinstance(value, dict) and isinstance(theirs, dict):  # name the model options that differ, not both dicts
                fields = [f"{k} {theirs.get(k)} vs {value.get(k)}" for k in sorted(set(value) | set(theirs)) if theirs.get(k) != value.get(k)]
                raise ConfigError(f"{costs_file} was measured with another model ({', '.join(fields)}: the preset's vs this "
                                  f"run's); give {fix} or profile again", field="costs")
            raise ConfigError(f"{costs_file} was measured with {key} {theirs}, this run uses {value}; "
                              f"give {fix} or profile again", field="costs")
    ranks = schedules[0].devices
    if isinstance(measured.get("devices"), int) and measured["devices"] != ranks:  # a note on the result, -q or not
        click.echo(f"note: {costs_file} was measured on {counted(measured['devices'], 'rank')}, this run uses {ranks}: "
                   "the ranks share this machine's cores differently, so its op times may not hold here", err=True)
    return {costs.num_stages: (costs, link)}


def _profile_sizes(schedules):
    """The profiles `--compare` without `--costs` measures after the run (:func:`_compare`): the
    rank count, the most microbatches of the schedules, and each stage count."""
    return schedules[0].devices, max(s.microbatches for s in schedules), sorted({s.stages for s in schedules})


def _check_profiles(schedules, settings) -> None:
    """Refuse, before the run starts, a `--compare` whose profiles (:func:`_compare`) could not run:
    fewer than 2 ranks, a stage count that is not 1 or 2 stages per rank, or microbatches the
    profile's schedules cannot take (zb-h1 and zb-v need at least one per rank)."""
    from ppopt.cli import flag_for
    from ppopt.errors import ConfigError, PpoptError
    from ppopt.run.profile import check_profile

    devices, microbatches, counts = _profile_sizes(schedules)
    for stages in counts:
        try:
            if stages % devices:
                raise ConfigError("not a whole number of stages per rank")
            check_profile(devices, stages // devices, settings, microbatches)
        except PpoptError as error:
            reason = f"{flag_for(error.field, click.get_current_context().command)}: {error.reason}" if error.field else error.reason
            raise ConfigError(f"cannot profile {stages} stage(s) on {devices} rank(s) after the run ({reason}); "
                              "give --costs FILE from `ppopt profile`", field="with_compare") from None


def _compare(schedules, results, settings, presets, quiet=False, deadline: float | None = None):
    """Each schedule's measured step next to the prediction from ``presets`` (or a profile measured
    now, each in what is left of ``settings``' timeout at ``deadline``, a ``time.monotonic()`` value)."""
    from ppopt.run.compare import compare

    if presets is None:
        from ppopt.run import RunError
        from ppopt.run.profile import profile

        presets = {}
        devices, microbatches, counts = _profile_sizes(schedules)
        for stages in counts:
            left = settings.timeout_s if deadline is None else deadline - time.monotonic()
            if left <= 0:
                raise RunError(f"the --timeout of {settings.timeout_s:g} s was spent before the profile of {stages} stages")
            if not quiet:
                click.echo(f"profiling {stages} stages on {devices} ranks ({left:.0f} s of --timeout left)", err=True)
            with working("profile", quiet):
                measured = profile(devices, microbatches, stages // devices, dataclasses.replace(settings, timeout_s=left))
            presets[stages] = (measured.costs, measured.link)
    from ppopt.run.profile import costs_from_ops

    comparisons = []
    for schedule, result in zip(schedules, results, strict=True):
        costs, link = presets[schedule.stages]
        comparisons.append(compare(schedule, result, costs, link,
                                   costs_from_ops(settings, schedule.stages, schedule.microbatches, result.op_s)))
    return comparisons


@main.command("profile")
@click.option("--devices", "-p", "--pp", "devices", type=INT, default=2, show_default=True, help="Ranks.")
@click.option("--microbatches", "-m", type=INT, default=4, show_default=True, help="Microbatches per step.")
@click.option("--chunks", "-v", type=INT, default=1, show_default=True, help="Chunks (stages) per device (rank): 1 (1f1b, zb-h1) or 2 (interleaved-1f1b, zb-v).")
@run_options
@click.option("--output", "-o", required=True, shell_complete=complete_file, callback=output_ending_in(".json", "the cost preset is JSON"),
              help="Cost preset file to write (.json).")
@json_option
@quiet_option
def profile_command(devices, microbatches, chunks, settings, output, as_json, quiet) -> None:
    """Measure F, B, I, W per stage and the message time of the tiny GPT here; write a cost preset."""
    import os

    from ppopt.io.cost_preset import cost_preset_json, write_cost_preset
    from ppopt.report.run import profile_text
    from ppopt.run import require_torch
    from ppopt.run.profile import check_profile, profile

    check_profile(devices, chunks, settings, microbatches)
    require_torch()
    if not quiet:
        click.echo(f"profiling {counted(devices * chunks, 'stage')} on {counted(devices, 'local rank')} (gloo, 127.0.0.1)", err=True)
    note_shared_cores(devices, settings.threads)  # a note on the result: said with -q too
    with working("profile", quiet):
        measured = profile(devices, microbatches, chunks, settings)
    about = {"tool": "ppopt profile", "devices": devices, "microbatches": microbatches, "chunks": chunks,
             "threads": settings.threads, "dtype": settings.dtype, "model": dataclasses_dict(settings.model),
             "steps": settings.steps, "warmup": settings.warmup, "load_average": list(os.getloadavg()),
             "cpus": os.cpu_count()}
    if as_json:
        emit_json(cost_preset_json(measured.costs, measured.link, about))
    else:
        click.echo(profile_text(measured.costs, measured.link, devices))
    flush_stdout()  # the results reached standard output: only then the file (none when it cannot be written)
    write_cost_preset(output, measured.costs, measured.link, about)
    click.echo(f"wrote {output}", err=True)


def dataclasses_dict(value) -> dict:
    return dataclasses.asdict(value)


def evaluate_with_preset(schedule, costs_file, as_json, fmt="text", with_formula: bool = False) -> None:
    """`ppopt evaluate --costs FILE`: the schedule simulated with a measured cost preset and its link
    (``with_formula``: a named family's, whose closed forms --json gives as without --costs)."""
    from ppopt.io.cost_preset import read_cost_preset
    from ppopt.report.evaluation import timeline_json
    from ppopt.report.text import seconds
    from ppopt.run.compare import check_stages
    from ppopt.simulate import simulate

    costs, link = read_cost_preset(costs_file)
    check_stages(schedule, costs)
    simulation = simulate(schedule, costs, link=link)
    if as_json:  # evaluate --json's object (the table layer in unit slots), simulated with the preset
        from ppopt.evaluate import DEFAULT_UNITS, evaluate_schedule
        from ppopt.report.evaluation import evaluation_json

        timeline = timeline_json(simulation)
        if not any(stage.activation_bytes for stage in costs.stages):  # a timing profile measures no activations
            timeline |= {"peak_activation_bytes": None, "peak_memory_bytes": None}
        # a cost preset has no memory capacity: evaluate --json's keys for it, null
        timeline |= dict.fromkeys(("memory_capacity_bytes", "over_memory", "memory_excess_bytes", "over_memory_device"))
        evaluated = evaluate_schedule(schedule, with_formula=with_formula)
        emit_json(evaluation_json(evaluated, DEFAULT_UNITS) | {"costs": str(costs_file), "simulation": timeline})
    elif fmt == "text":
        click.echo(f"{schedule.name}: simulated with the measured costs of {costs_file}: step {seconds(simulation.step_time_s)}, "
                   f"idle ratio {simulation.idle_ratio:.4f}")
    else:  # --format markdown or csv: a table, as evaluate writes without --costs
        click.echo(_preset_table(f"simulated with the measured costs of {costs_file}",
                                 [[schedule.name, simulation.step_time_s, simulation.idle_ratio]], ["schedule"], fmt))


def run_model(stages: int):
    """`ppopt run`'s default model, with one block per stage where a schedule has more stages than
    its layers (``search --run`` has no --layers)."""
    from ppopt.run.spec import ModelSize

    return ModelSize(layers=max(ModelSize().layers, stages))


def check_run_before_search(devices: int, microbatches: int, stages: int) -> None:
    """`ppopt search --run`: what can refuse the run, checked before the search and its outputs
    (PyTorch, the rank count, the model's sizes, this machine's memory)."""
    from ppopt.run import require_torch
    from ppopt.run.execute import check_sizes
    from ppopt.run.spec import RunSpec

    require_torch()
    check_sizes(RunSpec((), devices, model=run_model(stages)), [stages], microbatches)


def run_found(schedule, start) -> None:
    """`ppopt search --run`: the schedule found, ordered by its simulated start times (as `--csv`
    writes it), run with the default settings of `ppopt run` and its default model, given one
    block per stage where the schedule has more stages than that model has layers (search has no
    --layers); the table on stdout."""
    from ppopt.io.torch_csv import format_torch_csv, parse_torch_csv
    from ppopt.report.run import run_text
    from ppopt.run import require_torch
    from ppopt.run.execute import check_run, refuse_unrunnable, run_schedules
    from ppopt.run.spec import RunSpec

    refuse_unrunnable(schedule)  # before the CSV round trip, which would drop what it cannot run
    ordered = parse_torch_csv(format_torch_csv(schedule, start), "search")
    model = run_model(ordered.stages)
    settings = check_run([ordered], RunSpec((), ordered.devices, model=model))
    require_torch()
    click.echo(f"running the schedule found on {counted(ordered.devices, 'local rank')} (gloo, 127.0.0.1), {model.layers} layers",
               err=True)
    note_shared_cores(ordered.devices, settings.threads)
    results, _ = run_schedules([ordered], settings)
    click.echo(run_text(results, settings))
    if results[0].check is not None and not results[0].check["ok"]:
        from ppopt.errors import ConfigError

        raise ConfigError("gradients differ from the non-pipelined model (see the table)")


def preset_units(costs_file, params) -> UnitCosts:
    """`search/gap/frontier --costs FILE`: the preset as the unit model (:func:`ppopt.run.profile.unit_flags`).

    The solver's modelled mode derives costs from a model and a system, so a measured preset enters
    through the unit model: one slot is the mean measured F, and per-stage differences are averaged.
    Durations the unit model cannot take (every F 0, a backward under half a hundredth of F) are
    the file's error, never one of the ``--forward``/``--backward`` flags the user did not give."""
    from ppopt.errors import ConfigError
    from ppopt.io.cost_preset import read_cost_preset
    from ppopt.run.profile import slot_s, unit_flags

    if params.get("model") or params.get("system"):
        raise ConfigError("replaces --model/--system (a measured preset is used in unit mode)", field="costs")
    costs, link = read_cost_preset(costs_file)
    try:
        flags = unit_flags(costs, link, params.get("devices"))
    except ConfigError as error:
        raise ConfigError(f"{costs_file}: {error.reason}", field="costs") from None
    try:
        units = UnitCosts(**flags)
    except ConfigError as error:
        rule = error.reason.split(", got ")[0]
        raise ConfigError(f"{costs_file}: in the unit model (one slot = the mean forward_s, ratios rounded to 2 decimals) "
                          f"its durations give {error.field} = {flags.get(error.field or '')} slots, which {rule}",
                          field="costs") from None
    # times are printed in slots: say what a slot is
    stages, devices, slot = len(costs.stages), params.get("devices"), slot_s(costs)
    what = f"its mean forward, {slot * 1e3:.4g} ms, on its {stages} stages" if devices in (None, stages) else \
        (f"a 1/{devices} share's forward, {stages}/{devices} of its mean stage forward ({slot * 1e3:.4g} ms on its {stages} "
         f"stages): about {slot * stages / devices * 1e3:.4g} ms if time scales with the layers")
    click.echo(f"note: {costs_file} enters as the unit model: B = {units.backward:g}, W = {units.weight_slots:g}, comm = {units.comm:g} "
               f"slots, one slot being {what}", err=True)
    return units


def compare_with_preset(devices, microbatches, options, costs_file, as_json, fmt) -> None:
    """`ppopt compare --costs FILE`: every schedule with the preset's stage count, simulated with the
    measured costs and link, fastest first; the others are skipped with the reason on stderr."""
    from ppopt.errors import ConfigError
    from ppopt.evaluate import competition_ranks, rank_with_costs
    from ppopt.io.cost_preset import read_cost_preset

    costs, link = read_cost_preset(costs_file)
    rows, skipped = rank_with_costs(devices, microbatches, costs, link, **options)
    if not rows:  # an empty ranking would read as a result
        reasons = "; ".join(f"{name}: {reason}" for name, reason in skipped.items())
        raise ConfigError(f"{costs_file}: no schedule to compare at p = {devices}, m = {microbatches} ({reasons})", field="costs")
    for name, reason in skipped.items():
        click.echo(f"skipped {name}: {reason}", err=True)
    ranks = competition_ranks({n: t for t, _, n in rows})  # equal steps share a rank, as compare's layers do
    if as_json:  # compare --json's entries (the simulation layer only), then the families skipped, as there
        from ppopt.report.evaluation import skipped_json

        emit_json([{"schedule": n, "devices": devices, "microbatches": microbatches, "costs": str(costs_file),
                    "simulation": {"step_time_s": t, "idle_ratio": i}, "rank": {"simulation": ranks[n]}} for t, i, n in rows]
                  + skipped_json(skipped))
    else:
        click.echo(_preset_table(f"simulated with the measured costs of {costs_file}, p = {devices}, m = {microbatches}",
                                 [[str(ranks[n]), n, t, i] for t, i, n in rows], ["rank", "schedule"], fmt))


def _preset_table(context: str, rows: list[list], columns: list[str], fmt: str) -> str:
    """The simulations of ``evaluate --costs`` and ``compare --costs`` (rows ending in step seconds
    and idle ratio) as the other tables are written: a context line except in CSV, whose cells are
    bare numbers under a header naming the unit (:func:`ppopt.report.text.csv_number`)."""
    from ppopt.report.text import csv_number, render_table, seconds, with_context

    step = csv_number if fmt == "csv" else seconds
    cells = [[*row[:-2], step(row[-2]), csv_number(row[-1]) if fmt == "csv" else f"{row[-1]:.4f}"] for row in rows]
    table = render_table([*columns, "step s" if fmt == "csv" else "step", "idle ratio"], cells, fmt)
    return with_context([context], table, [], fmt)
