"""Options shared by several commands, declared once here; a command whose option differs (`job`'s
required --model and --system, `plan`'s several models, `run`'s rank count) declares its own."""

from __future__ import annotations

import contextlib
import errno
import functools
import math
import os
import re
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TextIO

import click

from ppopt.config import list_models, list_systems
from ppopt.errors import ConfigError
from ppopt.generators import OPTIONS, names
from ppopt.solve import options as solve_options
from ppopt.units import UnitCosts


class _PlainDigits:
    """A number as a command line should give it: ASCII digits without ``_`` (Python's ``int`` and
    ``float`` read ``4_0`` as 40 and the Arabic-Indic ``٤`` as 4, which click then accepted)."""

    name: str

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        if isinstance(value, str) and (not value.isascii() or "_" in value):
            self.fail(f"{value!r} is not a valid {self.name}.", param, ctx)  # type: ignore[attr-defined]
        return super().convert(value, param, ctx)  # type: ignore[misc]


class PlainInt(_PlainDigits, click.types.IntParamType):
    """click's integer, in ASCII digits only (:class:`_PlainDigits`)."""


class PlainFloat(_PlainDigits, click.types.FloatParamType):
    """click's float, in ASCII digits only (:class:`_PlainDigits`)."""


INT = PlainInt()
"""The type of every integer option."""
FLOAT = PlainFloat()
"""The type of every number option."""

_OTHERS = " Other schedules refuse it; over several schedules ('all', compare) it applies to those that take it."
_ONE = " Other schedules refuse it."
_SPACE = (" It fills in what --space leaves out (chunks of placement=looped or any, waves of zigzag, split of "
          "bidirectional) and sets fixed:NAME's option; a space without such stages refuses it.")
"""How a schedule option applies: over several schedules, to one, or to a search space (the solver
commands name no schedule: a space, or fixed:NAME, is what the option reaches)."""


def _compose(options: list[Callable]) -> Callable:
    def decorate(command: Callable) -> Callable:
        for option in reversed(options):
            command = option(command)
        return command

    return decorate


def _one_schedule(ctx: click.Context, param: click.Parameter, names: tuple[str, ...]) -> str | None:
    """``--schedule`` once: a second one used to replace the first without a word."""
    if len(names) > 1:
        raise click.BadParameter(f"given {len(names)} times ({', '.join(names)}): give one schedule "
                                 "(`evaluate -s all` or `compare` cover them all, `gap -s A -s B` several)")
    return names[0] if names else None


def refuse_misspelt_all(names: tuple[str, ...], field: str) -> None:
    """Where 'all' is a schedule name too (evaluate, gap, plan), ``ALL`` gets its suggestion, as a
    misspelt family's name does."""
    from ppopt.errors import did_you_mean
    from ppopt.generators import REGISTRY

    for name in names:
        if name != "all" and (close := did_you_mean(name, ["all"])):
            raise ConfigError(f"unknown schedule {name!r} (known: all, {', '.join(REGISTRY)}){close}", field=field)


def _one_schedule_or_all(ctx: click.Context, param: click.Parameter, names: tuple[str, ...]) -> str | None:
    """:func:`_one_schedule` where 'all' is a name too (:func:`refuse_misspelt_all`)."""
    refuse_misspelt_all(names, "name")
    return _one_schedule(ctx, param, names)


def schedule_options(name: bool = True, unit_costs: bool = True, all_schedules: bool = False, sizes_required: bool | None = None,
                     spaces: bool = False) -> Callable:
    """Devices, microbatches and the schedule options; they reach the command as ``options``.

    With ``unit_costs``, also the unit model's durations (:func:`unit_cost_options`), which reach
    the command as ``units``.

    With ``name``, the command also takes ``--schedule NAME`` (or ``all`` with ``all_schedules``)
    or ``--schedule-file FILE.csv`` (a PyTorch schedule CSV), and ``--devices``/``--microbatches``
    are only needed for a name; use :func:`resolve_schedule` to get the schedule. ``sizes_required``
    (default: not ``name``) makes them required. ``spaces``: the solver commands, where the options
    fill in a search space too.
    """
    required = not name if sizes_required is None else sizes_required
    applies = _SPACE if spaces else _OTHERS if all_schedules or not name else _ONE
    split_default = "chimera-asym's 1:2; placement=bidirectional's even split" if spaces else "1:2"
    options = [
        click.option("--devices", "-p", "--pp", "devices", type=INT, required=required,
                     help="Number of devices (pipeline ranks), p; --pp as in `ppopt job`."),
        click.option("--microbatches", "-m", type=INT, required=required, help="Microbatches per step, m."),
        click.option("--chunks", "-v", type=INT, default=None, help=f"Chunks (stages) per device for interleaved-1f1b and looped-bfs [default: {OPTIONS['chunks'][0]}].{applies}"),
        click.option("--waves", type=INT, default=None, help=f"Waves for hanayo [default: {OPTIONS['waves'][0]}].{applies}"),
        click.option("--split", default=None, help=f"Layer split A:B between the pipeline halves for chimera-asym [default: {split_default}].{applies}"),
    ]
    if unit_costs:
        options.append(unit_cost_options())
    if name:
        options.insert(0, click.option("--schedule", "-s", "name", multiple=True, callback=_one_schedule_or_all if all_schedules else _one_schedule,
                                       shell_complete=complete_schedule_or_all if all_schedules else complete_schedule, help="Schedule name (see `ppopt list`)" + (", or 'all'." if all_schedules else ".")))
        options.insert(1, click.option("--schedule-file", default=None, shell_complete=complete_file, help="A PyTorch schedule CSV to use instead of --schedule ('-': standard input)."))
        options.insert(2, click.option("--legacy-backward", is_flag=True, help="--schedule-file uses the old spelling: BW full backward, B input backward."))

    def decorate(command: Callable) -> Callable:
        @functools.wraps(command)
        def wrapper(chunks, waves, split, **kwargs):
            kwargs["options"] = {"chunks": chunks, "waves": waves, "split": split}
            check_option_values(kwargs["options"])
            return command(**kwargs)

        return _compose(options)(wrapper)

    return decorate


def check_option_values(options: dict) -> None:
    """Refuse a schedule option value no schedule takes before any schedule is tried
    (:func:`ppopt.generators.check_option_values`), as a ConfigError naming the flag's field."""
    from ppopt.errors import ScheduleError
    from ppopt.generators import check_option_values as check

    try:
        check(options)
    except ScheduleError as error:
        raise ConfigError(error.reason, field=error.field) from None


def _completion(choices: Callable[[], list[str]], files: bool) -> Callable[[click.Context, click.Parameter, str], list]:
    """A ``shell_complete`` callback: the ``choices`` that start with what was typed, and, when
    ``files``, file names too once it looks like a path (a ``/`` or a ``.`` in it)."""

    def complete(ctx: click.Context, param: click.Parameter, incomplete: str) -> list:
        from click.shell_completion import CompletionItem

        items = [CompletionItem(name) for name in choices() if name.startswith(incomplete)]
        if files and ("/" in incomplete or "." in incomplete):
            items.append(CompletionItem(incomplete, type="file"))
        return items

    return complete


complete_model = _completion(list_models, files=True)
"""Shell completion of ``--model``: the model presets, or a file."""
complete_system = _completion(list_systems, files=True)
"""Shell completion of ``--system``: the system presets, or a file."""


def _path_completion(kind: str) -> Callable[[click.Context, click.Parameter, str], list]:
    """A ``shell_complete`` callback that leaves the word to the shell's ``kind`` completion ("file", "dir")."""

    def complete(ctx: click.Context, param: click.Parameter, incomplete: str) -> list:
        from click.shell_completion import CompletionItem

        return [CompletionItem(incomplete, type=kind)]

    return complete


complete_file = _path_completion("file")
"""Shell completion of a file argument or option (an input or an output): file names."""
complete_dir = _path_completion("dir")
"""Shell completion of an output directory: directory names."""


def complete_preset(ctx: click.Context, param: click.Parameter, incomplete: str) -> list:
    """Shell completion of `list models NAME` and `list systems NAME`: those presets, or a file."""
    what = ctx.params.get("what")
    complete = complete_model if what == "models" else complete_system if what == "systems" else None
    return [] if complete is None else complete(ctx, param, incomplete)


complete_schedule = _completion(names, files=False)
"""Shell completion of ``--schedule``: the schedule families."""
complete_schedule_or_all = _completion(lambda: [*names(), "all"], files=False)
"""Shell completion of a ``--schedule`` that also takes ``all``."""


def system_options(required: bool = False) -> Callable:
    """``--model`` / ``--system`` / ``--global-batch``: the cost model of a model on a system. A
    global batch without a model is refused for every command: unit mode has no sequences."""
    options = [
        click.option("--model", default=None, required=required, shell_complete=complete_model,
                     help="Model preset name (`ppopt list models`) or a .toml/.json file."),
        click.option("--system", default=None, required=required, shell_complete=complete_system,
                     help="System preset name (`ppopt list systems`) or a .toml/.json file."),
        click.option("--global-batch", type=INT, default=None, help="Sequences per step [default: the model's global_batch_size]."),
    ]

    def decorate(command: Callable) -> Callable:
        @functools.wraps(command)
        def wrapper(**kwargs):
            if not kwargs.get("unit") and kwargs.get("costs") is None:  # those refuse a model as the other mode
                require_model_and_system(kwargs["model"], kwargs["system"])
            if kwargs["global_batch"] is not None and kwargs["model"] is None:
                refuse_other_modes_flags(True, {"costs": kwargs.get("costs"), "global_batch": kwargs["global_batch"]})
            return command(**kwargs)

        return _compose(options)(wrapper)

    return decorate


def job_options(microbatches_given: bool = True) -> Callable:
    """``--tp/--dp/--micro-batch/--recompute/--sequence-parallel/--distributed-optimizer``: the job
    fields of a modelled command, reaching it as ``parallel`` (:class:`ppopt.job.Parallelism`; the
    defaults are pure pipeline parallelism, today's behaviour). Without ``microbatches_given``
    (``ppopt job``, where b and d set m) the micro batch defaults to one sequence."""
    needs = " (needs --model/--system)" if microbatches_given else ""
    micro_batch = (click.option("--micro-batch", type=INT, default=None,
                                help="Sequences per microbatch [default: global batch / (m·d)]; sets the global batch when that "
                                     "is not given.")
                   if microbatches_given else
                   click.option("--micro-batch", type=INT, default=1, show_default=True,
                                help="Sequences per microbatch (m = global batch / (b·d))."))
    options = [
        click.option("--tp", type=INT, default=1, show_default=True, help=f"Tensor-parallel degree t{needs}."),
        click.option("--dp", type=INT, default=1, show_default=True, help=f"Data-parallel degree d{needs}."),
        micro_batch,
        click.option("--recompute", type=click.Choice(["none", "selective", "full"]), default="none", show_default=True,
                     help="Activation recomputation (Korthikanti et al. 2022)."),
        click.option("--sequence-parallel", is_flag=True, help="Megatron sequence parallelism (activations split by t)."),
        click.option("--distributed-optimizer", is_flag=True, help="Shard the optimizer state across the d replicas."),
    ]

    def decorate(command: Callable) -> Callable:
        @functools.wraps(command)
        def wrapper(tp, dp, micro_batch, recompute, sequence_parallel, distributed_optimizer, **kwargs):
            from ppopt.job import Parallelism

            refuse_idle_job_flags(tp, dp, sequence_parallel, distributed_optimizer)
            kwargs["parallel"] = Parallelism(tp, dp, micro_batch, recompute, sequence_parallel, distributed_optimizer)
            return command(**kwargs)

        return _compose(options)(wrapper)

    return decorate


def refuse_idle_job_flags(tp: int = 1, dp: int = 1, sequence_parallel: bool = False, distributed_optimizer: bool = False,
                          overlap_gradient_sync: bool = False) -> None:
    """A job flag with nothing to act on (:func:`ppopt.job.idle_job_flag`) is refused, naming the flag."""
    from ppopt.job import idle_job_flag

    if (idle := idle_job_flag(tp, dp, sequence_parallel, distributed_optimizer, overlap_gradient_sync)) is not None:
        raise ConfigError(f"{idle.why}: give --{idle.degree} > 1 or leave it out",
                          field="overlap_grad_sync" if idle.field == "overlap_gradient_sync" else idle.field)


def unit_cost_options() -> Callable:
    """``--forward/--backward/--weight/--comm``: the one unit model (:class:`ppopt.units.UnitCosts`),
    declared once for every command; they reach the command as ``units``."""
    defaults = UnitCosts()
    options = [
        click.option("--forward", type=FLOAT, default=defaults.forward, show_default=True,
                     help="Unit model: slots of a forward F of a 1/p model share (chunk ops scale by p/S)."),
        click.option("--backward", type=FLOAT, default=defaults.backward, show_default=True,
                     help="Unit model: slots of a full backward B = I + W of a 1/p model share."),
        click.option("--weight", type=FLOAT, default=None,
                     help="Unit model: slots of the weight-gradient part W of B [default: backward/2]."),
        click.option("--comm", type=FLOAT, default=defaults.comm, show_default=True,
                     help="Unit model: slots per point-to-point message between devices."),
    ]

    def decorate(command: Callable) -> Callable:
        @functools.wraps(command)
        def wrapper(forward, backward, weight, comm, **kwargs):
            kwargs["units"] = UnitCosts(forward, backward, weight, comm)
            return command(**kwargs)

        return _compose(options)(wrapper)

    return decorate


def unit_options() -> Callable:
    """``--unit`` and the unit model's durations (:func:`unit_cost_options`, reaching the command as ``units``)."""
    return _compose(
        [
            click.option("--unit", is_flag=True, help="Unit mode: durations and delays in slots of the unit model (no model, no system)."),
            unit_cost_options(),
        ]
    )


NOTES_SAID = 3
"""Notes of one kind (rows left out, a label far from its dimensions, models out of time) given one
by one by :func:`note_first`; the rest are counted (a file of 100 models printed 100 notes)."""


def note_first(notes: list[str], noun: str, rest: str) -> None:
    """The first :data:`NOTES_SAID` of ``notes`` on stderr, then how many more: that count of
    ``noun`` (pluralised: ``2 more rows``), then ``rest``."""
    from ppopt.errors import counted

    for note in notes[:NOTES_SAID]:
        click.echo(f"note: {note}", err=True)
    if len(notes) > NOTES_SAID:
        click.echo(f"note: {counted(len(notes) - NOTES_SAID, noun)} {rest}", err=True)


json_option = click.option("--json", "as_json", is_flag=True, help="Print JSON instead of text.")
quiet_option = click.option("--quiet", "-q", is_flag=True, help="No progress on stderr (notes on the result and the files written are still said).")
format_option = click.option(
    "--format", "fmt", type=click.Choice(["text", "markdown", "csv"]), default="text", show_default=True,
    help="Layout of the tables (ignored with --json).",
)


def resolve_schedule(name, schedule_file, legacy_backward, devices, microbatches, options, note: bool = True,
                     deadline: float | None = None):
    """The validated schedule a command was given: generated from --schedule, or read from a file
    (with ``note``, a note when PyTorch's runtime could not run it: :func:`note_runtime_problem`;
    ``deadline``, the end of the command's --time-limit, when standard input must have ended)."""
    from ppopt.generators import generate
    from ppopt.validation import validate

    check_inputs(name, schedule_file, legacy_backward)
    if schedule_file is not None:
        schedule = read_schedule_file(schedule_file, legacy_backward, devices, microbatches, options, deadline)
        if note:
            note_runtime_problem(schedule, schedule_file)
        return schedule
    refuse_unused_options(name, options)
    require_size(devices, microbatches)
    return validate(generate(name, devices, microbatches, **options))


def read_schedule_file(schedule_file: str, legacy_backward: bool, devices: int | None, microbatches: int | None, options: dict,
                       deadline: float | None = None):
    """The validated schedule of a --schedule-file, which gives its own sizes and options: -p and -m
    may only repeat them, and a schedule option is refused. ``deadline``: standard input must have
    ended by then (``time.monotonic()``: the end of the command's time limit)."""
    from ppopt.io.torch_csv import read_torch_csv_file

    refuse_unused_options(None, options)
    schedule = read_torch_csv_file(schedule_file, legacy_backward=legacy_backward, deadline=deadline)
    check_file_sizes(schedule, schedule_file, devices, microbatches)
    return schedule


def check_file_sizes(schedule, file: str, devices: int | None, microbatches: int | None) -> None:
    """-p and -m beside a schedule file may only repeat its sizes: a ConfigError naming the flag otherwise."""
    for field, given, read in (("devices", devices, schedule.devices), ("microbatches", microbatches, schedule.microbatches)):
        if given is not None and given != read:
            source = "standard input" if file == "-" else file
            raise ConfigError(f"{given} differs from the {read} of {source} (a schedule file gives its own sizes)", field=field)


def note_runtime_problem(schedule, file: str) -> None:
    """A note on stderr when PyTorch's runtime could not run the schedule read from ``file``, or
    would train it with wrong gradients (:func:`ppopt.io.torch_csv.runtime_problem`): ppopt
    evaluates it, but `run` and a PyTorch CSV export refuse it."""
    from ppopt.io.torch_csv import runtime_problem

    problem = runtime_problem(schedule)
    if problem is not None:
        click.echo(f"note: {file}: {problem} (`ppopt run` and `export --format torch-csv` refuse it)", err=True)


def refuse_all_with_others(schedules: tuple[str, ...]) -> None:
    """'all' in a repeatable --schedule stands for every family: a name beside it is refused, not
    dropped (gap, plan); ``ALL`` gets its suggestion (:func:`refuse_misspelt_all`)."""
    refuse_misspelt_all(schedules, "schedules")
    if "all" in schedules and len(schedules) > 1:
        raise ConfigError("'all' stands for every schedule: give it alone", field="schedules")


def check_inputs(name: str | None, schedule_file: str | None, legacy_backward: bool) -> None:
    """Exactly one of --schedule and --schedule-file; --legacy-backward only with a file."""
    if (name is None) == (schedule_file is None):
        raise click.UsageError("give exactly one of --schedule NAME and --schedule-file FILE.csv", click.get_current_context())
    if legacy_backward and schedule_file is None:
        raise ConfigError("only applies to --schedule-file (how the file spells its backward ops)", field="legacy_backward")


def refuse_unused_options(name: str | None | tuple[str, ...], options: dict) -> None:
    """One schedule (``name``, or a schedule file for None) refuses a schedule option it would ignore;
    several (a tuple: ``gap -s A -s B``) refuse an option none of them takes.

    The error names the option (as a field, which the CLI shows as its flag) and the schedules that
    take it. Over all schedules (``evaluate -s all``, ``compare``) an option applies to those
    that take it instead.
    """
    from ppopt.generators import REGISTRY, get

    if name == "all":
        raise ConfigError("'all' is for `ppopt evaluate`, `gap` and `plan` (`ppopt compare` ranks them all); this command takes one schedule", field="schedule")
    given = name if isinstance(name, tuple) else (name,)
    takes = {option for one in given if one is not None for option in get(one).options}
    for option, value in options.items():
        if value is not None and option not in takes:
            users = ", ".join(g.name for g in REGISTRY.values() if option in g.options)
            if name is None:  # the file's rows already hold every chunk and wave
                raise ConfigError(f"a --schedule-file sets it itself; only generated schedules take it ({users})", field=option)
            what = f"schedule {name} does not take it" if isinstance(name, str) else "none of the schedules given takes it"
            raise ConfigError(f"{what} (only {users})", field=option)


UNIT_FLAGS = ("forward", "backward", "weight", "comm")
"""The unit model's flags (:func:`ppopt.cli.options.unit_cost_options`)."""


def note_selective_saves_nothing(model: Any, recompute: str) -> None:
    """A note on stderr when selective recomputation is asked of a model with fused attention: it
    stores no attention scores, which is all selective recomputation drops, so the mode only adds
    its recomputed attention core (:mod:`ppopt.job`, "Recomputation")."""
    if recompute == "selective" and model is not None and model.flash_attention:
        click.echo(f"note: --recompute selective saves no memory for {model.name} (flash_attention: no attention scores are "
                   "stored) and adds the recomputed attention core; --recompute none is faster at the same memory", err=True)


def refuse_with_preset(parallel: Any, global_batch: int | None, split: str | None = None) -> None:
    """--costs gives measured durations: a unit-model duration, a global batch, a job field
    (``parallel``, a :class:`ppopt.job.Parallelism`) or chimera-asym's layer ``split`` would be
    ignored, so each is refused."""
    refuse_other_modes_flags(False, {"costs": True, "global_batch": global_batch})
    if split is not None:
        raise ConfigError("does not apply with --costs: the preset's measured stage costs fix how the layers are split",
                          field="split")
    if parallel is not None and not parallel.is_default:
        raise ConfigError("does not apply with --costs: a measured cost preset already holds its job's parallelism "
                          "and recomputation", field=parallel.first_set)


MAX_LAYER_COUNTS = 100_000
"""The most per-stage counts ``--layers-per-stage`` expands to (``1*1000000000`` must not fill the
memory before the job finds them more than its layers)."""


def layer_counts(text: str, also: str = "") -> tuple[int, ...]:
    """``--layers-per-stage 7,8,8,7`` as counts (their sum and number are the job's to check); a run
    of k stages of n layers may be written ``n*k``, as ``plan`` prints them (``3,2*14,1``). ``also``
    names the other values a command takes ("even, balanced or "), for the error."""
    counts: list[int] = []
    for item in text.split(","):
        layers, times = item.split("*", 1) if "*" in item else (item, "1")
        try:
            n, k = int(layers), int(times)
        except ValueError:
            raise ConfigError(f"must be {also}counts like 7,8,8,7 or 3,2*14,1, got {text!r}", field="layers_per_stage") from None
        if k < 1:
            raise ConfigError(f"{item!r}: a run n*k needs k >= 1 stages", field="layers_per_stage")
        if len(counts) + k > MAX_LAYER_COUNTS:
            raise ConfigError(f"more than {MAX_LAYER_COUNTS:,} stages", field="layers_per_stage")
        counts += [n] * k
    return tuple(counts)


def parse_layer_split(text: str) -> str | tuple[int, ...]:
    """``--layers-per-stage`` as plan and job take it: ``even``, ``balanced`` or counts like 7,8,8,7."""
    return text if text in ("even", "balanced") else layer_counts(text, also="even, balanced or ")


def check_layers(name: str, devices: int, options: dict, layers: int) -> None:
    """A schedule with more stages than the model has layers, refused before its table is built
    (hanayo with 100,000 waves took 20 s to reach the same error)."""
    from ppopt.errors import ConfigError
    from ppopt.generators import get, too_many_stages

    if (reason := too_many_stages(name, devices, options, layers)) is not None:
        given = [option for option in ("waves", "chunks") if options.get(option) is not None and option in get(name).options]
        raise ConfigError(reason, field=given[0] if given else "devices")  # the flag that made the stages


def deadline_of(time_limit: float | None, reserve_s: float = 0.0, kept_for: str = "", work: str = "the points") -> float | None:
    """The ``time.monotonic()`` value at which a ``--time-limit`` counted from the process's start
    ends, less ``reserve_s`` kept for ``kept_for`` after the ``work`` (a sweep's points, say); None
    without a limit."""
    from ppopt.cli import startup_s

    if time_limit is None:
        return None
    solve_options.check_time_limit(time_limit, "time_limit")
    deadline = time.monotonic() + time_limit - startup_s() - reserve_s
    if reserve_s and deadline <= time.monotonic():
        raise ConfigError(f"{time_limit:g} s leaves nothing for {work} once {reserve_s:.3g} s are kept for {kept_for}",
                          field="time_limit")
    return deadline


def family_ops(devices: int, microbatches: int, options: dict, families) -> int:
    """Ops of ``families``' schedules at (p, m) together (:meth:`ppopt.generators.Family.ops`), known
    before any is built: what a picture or a trace of them would hold."""
    from ppopt.generators import get

    return sum(get(n).ops(devices, microbatches, get(n).taken(options)) or 0 for n in families)


def size_outputs_first(name: str | None, devices: int | None, microbatches: int | None, options: dict, picture: bool = False,
                       trace: bool = False) -> None:
    """Refuse a picture or a trace of the named schedule too large to write before it is built
    (seconds at millions of ops): its op count is known from (p, m) (:func:`family_ops`). A schedule
    read from a file is sized once read."""
    if name is None or not devices or not microbatches or not (picture or trace):
        return
    ops = family_ops(devices, microbatches, options, [name])
    if picture:
        from ppopt.report.plot import check_picture_size

        check_picture_size(ops)
    if trace:
        from ppopt.report.trace import check_trace_size

        check_trace_size(ops)


@contextlib.contextmanager
def written_together(*paths: str | None) -> Iterator[None]:
    """Write a command's output files inside the block all or none (:func:`ppopt.io.output_group`),
    then say on stderr which were written."""
    from ppopt.io import output_group

    with output_group():
        yield
    for path in paths:
        if path:
            click.echo(f"wrote {path}", err=True)


def require_model_and_system(model: str | None, system: str | None, required: bool = False) -> None:
    """--model and --system come together (and, when ``required``, always: ``compare``, whose other
    source of durations is --costs): a usage error otherwise."""
    if (model is None) != (system is None) or (required and model is None):
        raise click.UsageError("give --model and --system, or --costs FILE (the simulation layer needs durations; "
                               "`ppopt evaluate -s all` gives the formula and table layers alone)"
                               if required else "give both --model and --system", click.get_current_context())


def refuse_other_modes_flags(unit: bool, params: dict) -> None:
    """A flag the chosen mode would ignore is an error: --unit with a model or a system, the unit
    model's durations with a model and a system (their durations come from the cost model) or a cost
    preset (``params["costs"]``), a global batch in unit mode."""
    ctx = click.get_current_context()
    given = {name for name in ctx.params if ctx.get_parameter_source(name) == click.core.ParameterSource.COMMANDLINE}
    if unit and (params.get("model") is not None or params.get("system") is not None):  # the first thing wrong
        raise ConfigError("give either unit mode or a model and a system, not both", field="unit")
    modelled = params.get("model") is not None or params.get("system") is not None or params.get("costs") is not None
    if modelled:
        for name in UNIT_FLAGS:
            if name in given:
                reason = ("--costs gives the durations" if params.get("costs") is not None
                          else "with --model and --system the durations come from the cost model")
                raise ConfigError(f"is a unit-mode duration: {reason}", field=name)
    if params.get("global_batch") is not None:
        if params.get("costs") is not None:
            raise ConfigError("does not apply with --costs: the measured durations are those of the preset's microbatches",
                              field="global_batch")
        if unit:
            raise ConfigError("needs --model and --system (unit mode has no sequences)", field="global_batch")


def require_size(devices, microbatches) -> None:
    """--devices and --microbatches are needed unless a schedule file gives them: a missing one is a
    usage error, like any missing required option."""
    missing = [flag for flag, value in (("--devices", devices), ("--microbatches", microbatches)) if value is None]
    if missing:
        raise click.UsageError(f"missing {' and '.join(missing)} (needed with --schedule)", click.get_current_context())

_BYTES = re.compile(r"^\s*([0-9.eE+-]+)\s*([KMGT]i?B|B)?\s*$", re.IGNORECASE)  # memory is never given in bits
_UNITS = ("B", "KB", "MB", "GB", "TB", "KiB", "MiB", "GiB", "TiB")
_FACTORS = dict(zip((unit.lower() for unit in _UNITS), (1, 1e3, 1e6, 1e9, 1e12, 2**10, 2**20, 2**30, 2**40)))
"""Bytes per unit, by the unit's lower-case name (any case is read: gib is GiB)."""


def parse_amount(text: str | None, unit_mode: bool, flag: str = "--memory-limit") -> float | None:
    """``--memory-limit``: a number of live activations (unit mode) or bytes, with an optional
    suffix B, KB, MB, GB, TB, KiB, MiB, GiB, TiB in any case (gib is GiB: a memory is not given
    in bits) (modelled)."""
    parsed = parse_amount_and_unit(text, unit_mode, flag)
    return None if parsed is None else parsed[0]


def parse_amount_and_unit(text: str | None, unit_mode: bool, flag: str = "--memory-limit") -> tuple[float, str | None] | None:
    """:func:`parse_amount`'s value and the unit suffix it read (``"GiB"`` of ``80GiB``; None when bare)."""
    if text is None:
        return None
    match = _BYTES.match(text)
    if not match or (unit_mode and match.group(2)):
        what = "a number of live activations" if unit_mode else \
            f"bytes, e.g. 60GiB or 6.4e10 (units: {', '.join(_UNITS)})"
        raise ConfigError(f"{flag}: must be {what}, got {text!r}")
    unit = match.group(2)
    try:
        value = float(match.group(1)) * (1 if unit is None else _FACTORS[unit.lower()])
    except ValueError:
        raise ConfigError(f"{flag}: must be a number, got {text!r}") from None
    if not math.isfinite(value):
        raise ConfigError(f"{flag}: must be a finite amount, got {text!r} (beyond the largest number)")
    if not value > 0:
        raise ConfigError(f"{flag}: must be positive, got {text!r}")
    if not unit_mode and unit is None and value < BARE_BYTES_AT_LEAST:
        raise ConfigError(f"{flag}: {text!r} would be {value:g} bytes: give a unit, e.g. {text.strip()}GB or {text.strip()}GiB")
    return value, unit


BARE_BYTES_AT_LEAST = 2**20
"""A memory limit given as a bare number of bytes must be at least this many (1 MiB): below it no job
fits, and ``--memory-limit 80`` meant 80 GB."""


PRETTY_JSON_BYTES = 1 << 20
"""Above this many bytes of compact JSON, :func:`emit_json` prints it compact: nobody reads a
megabyte of JSON by eye, and indenting the millions of ops of a `table --json` doubles the text."""


def emit_json(value: object) -> None:
    """Print ``value`` as strict JSON (see :func:`ppopt.io.json_bytes`: no NaN or Infinity), indented
    for reading up to :data:`PRETTY_JSON_BYTES`, compact above."""
    from ppopt.io import json_bytes

    data = json_bytes(value)
    click.echo(json_bytes(value, pretty=True) if len(data) <= PRETTY_JSON_BYTES else data)


class Phases:
    """Progress by phases on stderr for a command that is long only at large sizes (reading or
    writing millions of ops): after each phase, once the command has run
    :data:`ppopt.solve.options.PROGRESS_AFTER_S`,
    a line ``LABEL: WHAT HAPPENED (T s since the start)``; none when ``quiet``."""

    def __init__(self, label: str, quiet: bool = False):
        self.label, self.began, self.quiet = label, time.monotonic(), quiet

    def done(self, phase: str) -> None:
        elapsed = time.monotonic() - self.began
        if elapsed >= solve_options.PROGRESS_AFTER_S and not self.quiet:
            click.echo(f"{self.label}: {phase} ({elapsed:.1f} s)", err=True)


STILL_WORKING_S = 5.0
"""Seconds between the lines of :func:`working` once the first is out."""


@contextlib.contextmanager
def working(label: str, quiet: bool = False) -> Iterator[None]:
    """Progress for one step whose length ppopt cannot divide (one simulation of millions of ops, one
    measured row of a huge batch): a line ``LABEL: still working (T s)`` on stderr once it has run
    :data:`ppopt.solve.options.PROGRESS_AFTER_S`, then every :data:`STILL_WORKING_S`
    (:func:`ppopt.solve.options.heartbeat`); none when ``quiet`` or when the step is quick."""
    if quiet:
        yield
        return
    with solve_options.heartbeat(lambda elapsed: click.echo(f"{label}: still working ({elapsed:.0f} s)", err=True),
                                 STILL_WORKING_S, first_s=solve_options.PROGRESS_AFTER_S):
        yield


class ProgressBar:
    """A one-line progress bar, redrawn with ``\\r`` at most every 0.2 s (1 s off a tty); call it
    as ``progress(done, total)`` (``run_sweep``'s, ``calibrate``'s, ``evaluate_all``'s) and
    :meth:`close` it at the end. With ``after_s`` (e.g. :data:`ppopt.solve.options.PROGRESS_AFTER_S`), nothing is drawn
    before that many seconds have passed, so a quick run prints nothing."""

    def __init__(self, label: str, stream: TextIO | None = None, after_s: float = 0.0):
        self.label, self.done, self.total, self.after_s = label, 0, 0, after_s
        self.stream: TextIO | None = stream if stream is not None else sys.stderr
        self.began = self.last = time.monotonic()
        self.tty = bool(getattr(self.stream, "isatty", lambda: False)())
        self.drawn = -1

    def __call__(self, done: int, total: int) -> None:
        self.done, self.total = done, total
        now = time.monotonic()
        if now - self.began < self.after_s:
            return
        if total > 0 and (now - self.last >= (0.2 if self.tty else 1.0) or done == total):
            self.last = now
            self._draw(now)

    def _draw(self, now: float) -> None:
        self.drawn = self.done
        width = 28
        filled = int(width * self.done / self.total)
        elapsed = now - self.began
        rate = self.done / elapsed if elapsed > 0 else 0.0
        eta = (self.total - self.done) / rate if rate > 0 else 0.0
        self._write(f"\r{self.label} [{'#' * filled}{'.' * (width - filled)}] {self.done}/{self.total} "
                    f"{rate:6.1f}/s eta {eta:5.0f}s ")

    def _write(self, text: str) -> None:
        if self.stream is None:
            return
        try:
            self.stream.write(text)
            self.stream.flush()
        except OSError:  # stderr closed or full: the sweep goes on without a bar
            self.stream = None

    def close(self) -> None:
        if self.drawn < 0 and time.monotonic() - self.began < self.after_s:
            return  # a quick run: no bar at all
        if self.done:
            if self.drawn != self.done:
                self._draw(time.monotonic())
            self._write("\n")


def check_output(ctx: click.Context, param: click.Parameter, path: str | None) -> str | None:
    """Callback of every option naming a file to write: refuse, before any work starts (a search or a
    calibration can take minutes), a path that is a directory or whose directory does not exist or
    cannot be written to (a temporary file is tried there: root passes every permission check), a
    file another output option of the command already names, and ``-``: standard output carries
    the command's report (only :func:`check_output_or_stdout` lets ``-`` through)."""
    if path == "-":
        raise click.BadParameter("'-' (standard output) carries the report here: give a file name")
    return check_output_or_stdout(ctx, param, path)


def output_ending_in(suffix: str, why: str) -> Callable[[click.Context, click.Parameter, str | None], str | None]:
    """A callback like :func:`check_output` that also wants a name ending in ``suffix``: a file the
    command writes in one format, and that ppopt reads back by its suffix (a calibrated system is
    TOML, a cost preset JSON)."""

    def check(ctx: click.Context, param: click.Parameter, path: str | None) -> str | None:
        path = check_output(ctx, param, path)
        if path is not None and not path.lower().endswith(suffix):
            raise click.BadParameter(f"{path}: {why}: give a name ending in {suffix}")
        return path

    return check


OUTPUT_SUFFIXES = {".csv": "a CSV", ".json": "a JSON", ".png": "a picture", ".svg": "a picture", ".toml": "a TOML"}
"""The suffixes of ppopt's outputs, and what each names."""


def output_suffix(path: str) -> tuple[str, bool]:
    """The suffix that names an output's format, lower case, and whether the name ends in ``.gz``
    (then the suffix before it: ``t.json.gz`` is a compressed ``.json``). A name that is a suffix
    alone (``.csv``, a hidden file to Python's ``Path``) has that suffix."""
    name = path.lower()
    compressed = name.endswith(".gz")
    return Path("_" + Path(name.removesuffix(".gz")).name).suffix, compressed  # "_": a leading dot starts a suffix too


OTHER_COMPRESSION = (".bz2", ".xz", ".zst", ".lz4", ".zip", ".7z")
"""Suffixes of compressors ppopt does not write: an output named so would be plain text."""


def output_not_named_as(suffix: str, what: str, compressed: bool = False) -> Callable[[click.Context, click.Parameter, str | None], str | None]:
    """A callback like :func:`check_output` that refuses a name ending in another output's suffix
    (``--csv a.png``, ``--trace t.csv``: flags swapped, most likely); any other name is the user's.
    ``compressed``: the output is written gzip-compressed under a name ending in ``.gz`` (a trace:
    :func:`ppopt.io.write_json`), whose suffix is then the one before; otherwise ``.gz`` is refused,
    since the file would not be compressed."""

    def check(ctx: click.Context, param: click.Parameter, path: str | None) -> str | None:
        path = check_output(ctx, param, path)
        if path is None:
            return None
        other, gzipped = output_suffix(path)
        if gzipped and not compressed:
            raise click.BadParameter(f"{path} ends in .gz, but {what} is written uncompressed: give a name without .gz")
        if other in OTHER_COMPRESSION:  # written as plain text under a name that promises otherwise
            raise click.BadParameter(f"{path} ends in {other}, but {what} is written "
                                     + ("uncompressed" if not compressed else "compressed by gzip alone (.gz)"))
        if other in OUTPUT_SUFFIXES and other != suffix:
            raise click.BadParameter(f"{path} looks like {OUTPUT_SUFFIXES[other]} file's name, but this writes {what}: "
                                     f"give a name ending in {suffix} (or any name without one of ppopt's suffixes)")
        return path

    return check


def check_output_or_stdout(ctx: click.Context, param: click.Parameter, path: str | None) -> str | None:
    """:func:`check_output` for an option whose ``-`` writes to standard output instead of a file."""
    if path is None or path == "-":
        return path
    if not path:
        raise click.BadParameter("cannot write '': empty file name")
    if path.endswith(("/", os.sep)) or Path(path).name != os.path.basename(path):  # `out.csv/`, `out.csv/.` wrote out.csv
        raise click.BadParameter(f"cannot write {path}: it names a directory; give a file name")
    try:
        _check_writable(ctx, param, path)
    except OSError as error:  # a name too long to look up, ...
        raise click.BadParameter(f"cannot write {path}: {error.strerror or error}") from None
    return path


def _check_writable(ctx: click.Context, param: click.Parameter, path: str) -> None:
    from ppopt.io import replaced_file, temporary_beside

    target = Path(path)
    if target.is_symlink():  # a loop of links reads as missing, and its write failed only after the work
        with contextlib.suppress(FileNotFoundError):  # a link to a file still to be made is written through
            os.stat(target)
    if target.is_dir():
        raise click.BadParameter(f"cannot write {path}: it is a directory")
    if target.exists() and not target.is_file():  # a device or FIFO (or a link to one) is written in place
        _refuse_twice(ctx, param, target)
        return
    final = replaced_file(target)  # a link is written through: its target's directory takes the file
    folder = final.parent
    if not folder.is_dir():
        where = f" (where the link {path} points)" if final != target else ""
        problem = f"{folder} is a file, not a directory" if folder.exists() else f"no directory {folder}{where}"
        raise click.BadParameter(f"cannot write {path}: {problem}")
    if not os.access(folder, os.W_OK):
        raise click.BadParameter(f"cannot write {path}: directory {folder} is not writable")
    if target.is_file() and not os.access(target, os.W_OK):  # replacing it by rename would not ask the file
        raise click.BadParameter(f"cannot write {path}: the file is read-only")
    if not target.exists() or target.is_file():  # a file goes in via a temporary one beside it: try that one
        try:
            fd, probe = temporary_beside(final)
            os.close(fd)
            os.unlink(probe)
        except OSError as error:  # /proc, a read-only mount (os.access says yes to root), a name too long
            if error.errno == errno.ENAMETOOLONG:
                named = "the name" if final == target else f"the name it links to, {final.name},"
                raise click.BadParameter(f"cannot write {path}: {named} is too long for its directory (ppopt "
                                         f"writes through a temporary file named 14 characters longer)") from None
            raise click.BadParameter(f"cannot write {path}: directory {folder} takes no new file "
                                     f"({error.strerror or error})") from None
    _refuse_twice(ctx, param, target)


def _refuse_twice(ctx: click.Context, param: click.Parameter, target: Path) -> None:
    """Two output options of one command naming the same file: the second would silently replace
    the first's output. A device or FIFO (``/dev/null``) may take both."""
    if target.exists() and not target.is_file():
        return
    seen = ctx.meta.setdefault("ppopt.outputs", {})
    flag = param.opts[0] if param.opts else param.name
    first = seen.setdefault(os.path.realpath(target), flag)
    if first != flag:
        raise click.BadParameter(f"{target} is also the {first} file: give each output its own name")


def check_output_dir(ctx: click.Context, param: click.Parameter, path: str | None) -> str | None:
    """Callback of an option naming a directory to write into (created if missing): refuse, before
    any work starts, an empty name, a file in its place, and a missing parent directory (as
    :func:`check_output` refuses a file in a missing directory, rather than creating a tree)."""
    if path is None:
        return path
    if not path:
        raise click.BadParameter("empty directory name")
    if path == "-":  # standard output is no directory: `-` would be created as one
        raise click.BadParameter("'-' (standard output) cannot hold a directory of results: give a directory name")
    from ppopt.io import broken_link

    target = Path(path)
    try:
        if (problem := broken_link(target)) is not None:  # mkdir then said only "File exists"
            raise click.BadParameter(f"cannot create {path}: {problem}")
        if target.exists() and not target.is_dir():
            raise click.BadParameter(f"{path} is not a directory")
        if not target.exists() and not target.parent.is_dir():
            raise click.BadParameter(f"cannot create {path}: no directory {target.parent}")
    except OSError as error:  # a name too long to look up, ...
        raise click.BadParameter(f"cannot create {path}: {error.strerror or error}") from None
    return path


def check_plot(ctx: click.Context, param: click.Parameter, path: str | None) -> str | None:
    """Callback of every ``--plot``: a writable path (:func:`check_output`), and without matplotlib,
    refuse before any work starts."""
    if path is not None:
        from ppopt.errors import PpoptError
        from ppopt.report.plot import picture_format, require_matplotlib

        check_output(ctx, param, path)
        try:
            picture_format(path)
            require_matplotlib()
        except PpoptError as error:
            raise click.BadParameter(error.reason) from None
    return path


def say_whether_reproducible(solve: solve_options.SolveOptions) -> None:
    """With ``--deterministic-time``, one line on stderr: whether another run with the same flags gives
    the same result (one worker, and the wall-clock budget never decided: :attr:`ppopt.solve.options.SolveOptions.cuts`),
    or that it did not apply (no CP-SAT solve ran: :attr:`ppopt.solve.options.SpentWork.solves`); the
    same of a ``--seed`` given when no solve ran."""
    context = click.get_current_context(silent=True)
    seed_given = context is not None and context.get_parameter_source("seed") == click.core.ParameterSource.COMMANDLINE
    if seed_given and not solve.work.solves and not solve.cuts:
        click.echo("note: --seed: no CP-SAT solve ran, so it did not apply", err=True)
    if solve.deterministic_time is None:
        return
    if not solve.work.solves and not solve.cuts:  # settled without CP-SAT (analytic bounds, --search 0)
        click.echo("note: --deterministic-time: no CP-SAT solve ran, so it did not apply", err=True)
    elif solve.workers > 1:
        click.echo(f"note: not reproducible: {solve.workers} CP-SAT workers race each other; use --workers 1", err=True)
    elif solve.cuts:
        click.echo(f"note: not reproducible: the time limit decided before the deterministic time ({solve.cuts[0]}); "
                   "give a longer --time-limit or a smaller --deterministic-time", err=True)
    else:  # printed with --quiet too: it is the answer to a question the flag asked, not progress
        click.echo(f"note: reproducible: seed {solve.seed}, one worker, every step within its deterministic time "
                   "(all but the wall times printed)", err=True)
