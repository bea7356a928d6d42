"""``ppopt plan``: the fastest layout, micro batch, recomputation and schedule of a job under a memory
limit (:mod:`ppopt.plan`), then a CP-SAT search of the best few jobs' schedules (:mod:`ppopt.plan_search`)."""

from __future__ import annotations

import time
from collections import defaultdict

import click

from ppopt.cli import main, startup_s
from ppopt.cli.measured import _table
from ppopt.cli.options import (
    FLOAT,
    INT,
    check_plot,
    complete_file,
    complete_model,
    complete_schedule_or_all,
    complete_system,
    emit_json,
    format_option,
    json_option,
    note_first,
    output_not_named_as,
    parse_amount_and_unit,
    parse_layer_split,
    quiet_option,
    refuse_all_with_others,
    say_whether_reproducible,
    written_together,
)
from ppopt.host import LOCAL_CAP
from ppopt.job import RECOMPUTE_MODES, SCHEDULES
from ppopt.plan import DEFAULT_SCHEDULES, NEAR_STEP, balanced_first

DEFAULT_TIME_LIMIT_S = 60.0


def _gb(value: float) -> str:
    """Bytes as GB with two decimals (significant digits for a huge value or one that would read
    0.00 GB: :func:`ppopt.report.text.fixed`)."""
    from ppopt.report.text import fixed

    return fixed(value / 1e9, 2)


def _seconds(value: float) -> str:
    """A step time in seconds with three decimals (significant digits when huge, as :func:`_gb`)."""
    from ppopt.report.text import fixed

    return fixed(value, 3)


@main.command("plan")
@click.option("--model", default=None, shell_complete=complete_model, help="Model preset name (`ppopt list models`) or a .toml/.json file (needed unless --candidates).")
@click.option("--gpus", type=INT, default=None, help="GPUs N = t·p·d (needed unless --candidates).")
@click.option("--system", required=True, shell_complete=complete_system, help="System preset name (`ppopt list systems`) or a .toml/.json file.")
@click.option("--global-batch", type=INT, default=None, help="Sequences per step [default: the model's global_batch_size].")
@click.option("--memory-limit", default=None, help="Per-GPU memory limit, e.g. 80GiB or 7.5e10 [default: the system's memory].")
@click.option("--top", type=INT, default=10, show_default=True,
              help="Jobs to print (at least the --search ones, which the search table names; --json's 'top' holds --top).")
@click.option("--layers-per-stage", "layers_per_stage", default="even", show_default=True,
              help="Stage split: even (equal counts: p divides the layers; chimera-asym keeps its own A:B split), balanced (counts minimising the slowest stage, any p), or "
                   "counts like 7,8,8,7, one per schedule stage (S = stages per device x p; jobs with S stages take them); n*k is k stages of n, as the table prints them.")
@click.option("--recompute", multiple=True, type=click.Choice(RECOMPUTE_MODES),
              help="Recomputation modes to consider (repeatable) [default: all].")
@click.option("--schedule", "-s", "schedules", multiple=True, shell_complete=complete_schedule_or_all,
              help="Schedule families to consider (repeatable; see `ppopt list`) [default: every family a job supports, with their chunks and "
                   "waves, but chimera-asym, whose A:B layer split --layers-per-stage covers; 'all' adds it].")
@click.option("--micro-batch", "micro_batches", multiple=True, type=INT, help="Micro batch sizes to consider (repeatable) [default: every divisor].")
@click.option("--tp", "tensor_parallel", multiple=True, type=INT,
              help="Tensor-parallel degrees t to consider (repeatable) [default: every valid one].")
@click.option("--pp", "-p", "--devices", "pipeline_parallel", multiple=True, type=INT,
              help="Pipeline depths p to consider (repeatable; --devices, as elsewhere, is the same flag) [default: every valid one].")
@click.option("--dp", "data_parallel", multiple=True, type=INT,
              help="Data-parallel degrees d to consider (repeatable) [default: every valid one].")
@click.option("--overlap-grad-sync", is_flag=True, help="Bucket the gradient all-reduce and overlap it with the last backward.")
@click.option("--candidates", type=click.Path(), default=None,
              help="Rank only the jobs this measured-data CSV lists (columns of data/measured; '-': standard input), per model, "
                   "GPU count and global batch.")
@click.option("--search", "search_top", type=INT, default=3, show_default=True,
              help="Search the schedules of this many best jobs with CP-SAT (0: no search).")
@click.option("--time-limit", type=FLOAT, default=DEFAULT_TIME_LIMIT_S, show_default=True, help="Seconds for the whole command.")
@click.option("--seed", type=INT, default=0, show_default=True, help="CP-SAT random seed (and the neighbourhoods of lns).")
@click.option("--deterministic-time", type=FLOAT, default=None,
              help="A budget of CP-SAT deterministic time for the schedule searches (see `ppopt search --help`): "
                   "with it, a plan the time limit does not cut is reproducible (a note says which).")
@click.option("--jobs", "-j", type=INT, default=1, show_default=True, help=f"Parallel evaluations: local processes, or the CPUs of a local Ray (at most {LOCAL_CAP}).")
@click.option("--executor", type=click.Choice(["local", "ray"]), default="local", show_default=True, help="Where evaluations run.")
@click.option("--address", default=None, help="Ray cluster address (--executor ray) [default: start a local Ray].")
@quiet_option
@click.option("--plot", "plot_path", callback=check_plot, shell_complete=complete_file, default=None,
              help="Also draw step time vs per-GPU memory of every evaluated job (.png or .svg).")
@click.option("--torch-csv", "--csv", "torch_csv", shell_complete=complete_file, callback=output_not_named_as(".csv", "PyTorch's schedule CSV"), default=None,
              help="Write the first job's schedule (the searched one when it is faster) as a PyTorch schedule CSV "
                   "(--csv, as in `search`, is the same flag).")
@format_option
@json_option
def plan_command(model, gpus, system, global_batch, memory_limit, top, layers_per_stage, recompute, schedules, micro_batches,
                 tensor_parallel, pipeline_parallel, data_parallel, overlap_grad_sync, candidates, search_top, time_limit, seed, deterministic_time, jobs, executor, address,
                 quiet, plot_path, torch_csv, fmt, as_json) -> None:
    """The fastest tensor x pipeline x data parallel layout, micro batch size, recomputation mode and
    pipeline schedule of a training job under a per-GPU memory limit.

    Enumerates every valid job, drops those over the memory limit (counting them and naming the
    closest), predicts the others' step times (ppopt job's model), prints the top jobs, then
    searches the best few jobs' schedules with CP-SAT and reports the handcrafted step, the best
    found, the proven bound and the gap. Every job with t > 1 uses sequence parallelism and every
    job with d > 1 the distributed optimizer, as Megatron-LM recommends (the "#1 as a ppopt job"
    line gives the flags).
    """
    from ppopt.config import load_model, load_system
    from ppopt.errors import ConfigError
    from ppopt.plan import PlanRequest
    from ppopt.solve.options import SolveOptions

    options = SolveOptions(time_limit_s=time_limit, seed=seed, deterministic_time=deterministic_time,
                           progress=None if quiet else (lambda line: click.echo(line, err=True))).start(startup_s())
    if plot_path:  # the time limit covers the whole command: keep the picture's drawing
        from ppopt.report.plot import PICTURE_FIXED_S

        options = options.reserve(PICTURE_FIXED_S)
    if top < 1:
        raise ConfigError(f"must be at least 1, got {top}", field="top")
    if search_top < 0:
        raise ConfigError(f"must be 0 or more, got {search_top}", field="search_top")
    if jobs < 1:  # worded as sweep and study (ppopt.sweep.executors) word it
        raise ConfigError(f"must be >= 1, got {jobs}", field="jobs")
    refuse_all_with_others(schedules)
    limit, unit = parse_amount_and_unit(memory_limit, unit_mode=False) or (None, None)
    split = parse_layer_split(layers_per_stage)
    system_config = load_system(system)
    if limit is not None and limit > system_config.memory_capacity_bytes:  # a what-if, but say so: job would not fit
        # in another unit than GB (80GiB: 85.89934592 GB), as the user wrote it too
        given = f" ({memory_limit.strip()})" if unit is not None and unit.lower() != "gb" else ""
        click.echo(f"note: --memory-limit {limit / 1e9:.12g} GB{given} is above {system_config.name}'s "
                   f"{system_config.memory_capacity_bytes / 1e9:.12g} GB "
                   "per GPU: jobs ranked above that would not fit its GPUs (`ppopt job` says so)", err=True)
    common = dict(memory_limit_bytes=limit, split=split, recompute=recompute or RECOMPUTE_MODES,
                  schedules=SCHEDULES if schedules == ("all",) else schedules or DEFAULT_SCHEDULES, micro_batches=micro_batches or None,
                  tensor_parallel=tensor_parallel or None, pipeline_parallel=pipeline_parallel or None,
                  data_parallel=data_parallel or None, overlap_gradient_sync=overlap_grad_sync)
    if torch_csv:  # none can be written: refused now, not after the plan
        from ppopt.generators import REGISTRY

        if not any(REGISTRY[name].torch for name in common["schedules"] if name in REGISTRY):
            raise ConfigError(f"none of the schedules planned ({', '.join(common['schedules'])}) fits PyTorch's schedule "
                              "CSV, which holds one rank per stage (see `ppopt list`); add one that does, such as 1f1b",
                              field="torch_csv")
    if candidates is not None:  # '' too: the reader names an empty file name
        if model or gpus or global_batch:
            raise ConfigError("gives the model, GPUs and global batch of each job; drop --model, --gpus and --global-batch",
                              field="candidates")
        fixed = [flag for flag, given in (("--schedule", schedules), ("--recompute", recompute), ("--micro-batch", micro_batches),
                                          ("--tp", tensor_parallel), ("--pp", pipeline_parallel), ("--dp", data_parallel),
                                          ("--overlap-grad-sync", overlap_grad_sync), ("--layers-per-stage COUNTS", isinstance(split, tuple)))
                 if given]
        if fixed:  # the listed jobs are the measured runs' (1F1B, full recomputation): these filters would be ignored
            raise ConfigError(f"lists each job whole (layout, micro batch, schedule and recomputation: its 'schedule' and "
                              f"'recompute' columns, else 1F1B with full recomputation as measured); drop {', '.join(fixed)}",
                              field="candidates")
        groups = _candidate_groups(candidates, system_config, options)
        requests = [(PlanRequest(g[0].model, system_config, g[0].gpus, g[0].global_batch, **common), g) for g in groups]
    else:
        missing = [flag for flag, value in (("--model", model), ("--gpus", gpus)) if value is None]
        if missing:
            raise click.UsageError(f"missing {' and '.join(missing)} (or give --candidates)", click.get_current_context())
        requests = [(PlanRequest(load_model(model), system_config, gpus, global_batch, **common), None)]

    if search_top:  # the solver's imports (about 0.4 s) before the budget may end, not after
        import ppopt.solve.search  # noqa: F401
    # the simulations leave the searches a share of the time (those left out are estimated slowest)
    keep_share = SEARCH_SHARE if search_top else 0.0
    plans = _run_plans(requests, jobs, executor, address, quiet, options, keep_share)
    # a job of an even plan that balanced counts make faster than #1, said after the report; checked
    # before the searches, which take the time left (after them the check was cut, with nothing said)
    balanced = None
    if candidates is None and not plans[0].unevaluated:
        balanced = balanced_first(plans[0], go_on=lambda job: options.remaining_s() > BALANCED_NOTE_S + _evaluation_s(job))
    searches = [_search(p, search_top, options) for p in plans]
    csv_schedule = _torch_csv_choice(plans[0], searches[0]) if torch_csv else None  # refused before the report
    if as_json:
        emit_json([_json(p, s, top, None) for p, s in zip(plans, searches)] if candidates is not None
                  else _json(plans[0], searches[0], top, (model, system), balanced))
    else:
        for k, (p, s) in enumerate(zip(plans, searches)):
            if k and fmt != "csv":
                click.echo("")
            _print(p, s, top, fmt, header=k == 0, rerun=None if candidates is not None else (model, system))
    with written_together(plot_path, torch_csv):  # after the report, as search and evaluate write theirs
        if plot_path:
            from ppopt.report.plan_plot import plot_plan

            plot_plan(plans, plot_path)
        if csv_schedule is not None:
            from ppopt.io.torch_csv import write_torch_csv

            write_torch_csv(csv_schedule, torch_csv)
    if memory_limit is None:
        _note_no_headroom(plans)
    if balanced is not None:
        _note_balanced(plans[0], balanced, (model, system))
    say_whether_reproducible(options)


BALANCED_NOTE_S = 1.0
"""Seconds the time limit must still hold, beyond one more job's estimated simulation, for the
balanced split's note to simulate it (what follows it: the notes, the exit)."""


def _evaluation_s(job) -> float:
    """Seconds simulating ``job`` may take, by its schedule's op count (:func:`ppopt.evaluate.evaluation_seconds`)."""
    from ppopt.evaluate import evaluation_seconds
    from ppopt.generators import get

    return evaluation_seconds(get(job.schedule).ops(job.pp, job.microbatches, job.schedule_options))


def _note_balanced(result, check, rerun: tuple[str, str]) -> None:
    """The note on stderr naming :func:`ppopt.plan.balanced_first`'s job, with the `ppopt job`
    command that predicts it: the even split is the default, and a user would not know to ask for
    the other. A check the time limit cut short is said too: silence would mean none is faster."""
    from ppopt.plan import describe

    faster = check.faster
    if faster is not None:
        gain = 1 - faster.step_time_s / result.rows[0].step_time_s
        click.echo(f"note: with balanced layer counts, {describe(faster.job)} ({_counts(faster.job.stage_layers)}) takes "
                   f"{faster.step_time_s:.3f} s, {100 * gain:.1f} % less than #1 ({_job_command(faster.job, *rerun)}); "
                   "--layers-per-stage balanced plans every job so", err=True)
    if not check.complete:
        click.echo(f"note: the time limit cut the check of the first jobs with balanced layer counts after "
                   f"{check.checked} of {check.to_check}" + ("" if faster is not None else ", none faster so far")
                   + "; --layers-per-stage balanced plans every job so", err=True)


SEARCH_SHARE = 0.25
"""Share of the time left after sizing that the plan's simulations leave to the schedule searches
(``--search K`` > 0). Without it, where the simulations took the whole budget (gpt3-175b on 1,024
GPUs at 60 s), every search was skipped."""

HEADROOM = 0.02
"""With the default limit (the system's memory), a first job within this share of it gets a note."""


def _note_no_headroom(plans) -> None:
    """A note on stderr when a plan's first job fills the system's memory to within :data:`HEADROOM`: the
    model counts weights, gradients, optimizer state and activations, not the CUDA context, NCCL's
    buffers or the allocator's fragmentation, which take some GB on a real GPU."""
    for result in plans:
        row, limit = result.rows[0], result.request.limit
        if limit is not None and row.memory.peak_bytes >= (1 - HEADROOM) * limit:
            kept = " (80e9 bytes keep 5.5 to 5.9 GB of an 80 GiB GPU)" if row.job.system.memory_capacity_bytes == 80e9 else ""
            click.echo(f"note: #1 ({row.job.describe()} {row.job.schedule_label}) uses {100 * row.memory.peak_bytes / limit:.1f} % "
                       "of the system's memory, and the model does not count the CUDA context, NCCL buffers or fragmentation: "
                       f"the system's memory_capacity_bytes should keep a few GB of the GPU's for them{kept}, or give "
                       "--memory-limit", err=True)


def _candidate_groups(path: str, system, options):
    """The jobs a measured-data file lists, one group per model, GPU count and global batch (file
    order): a plan compares the layouts of one job, and a row on fewer GPUs or a smaller batch takes
    less time without being a better layout. Reading stops with an error once ``options``' time
    budget is spent."""
    from ppopt.errors import ConfigError
    from ppopt.io.measured import MeasuredDataError, read_measured
    from ppopt.report.text import seconds

    def check(read: int) -> None:
        if options.expired:
            raise ConfigError(f"no job evaluated within {seconds(options.time_limit_s)}: reading the candidates took the "
                              f"budget ({read:,} rows read); give more time or fewer rows", field="time_limit_s")

    try:
        rows, unmodelled = read_measured(path, system, check, options.deadline)
    except MeasuredDataError as error:
        raise ConfigError(error.reason, field="candidates") from None
    groups: dict[tuple[str, int, int], list] = defaultdict(list)
    first: dict = {}  # job -> the first row listing it: a job listed twice is ranked once
    repeated = []
    for row in rows:
        earlier = first.setdefault(row.job, row)
        if earlier is not row:
            repeated.append((row, earlier))
            continue
        groups[row.model_key, row.job.gpus, row.job.batch].append(row.job)
    if not groups:  # as `validate` refuses it: the first row's reason (a file has at least one row)
        from ppopt.cli.measured import no_rows_reason

        raise ConfigError(no_rows_reason(unmodelled, "be planned"), field="candidates")
    note_first([f"{row.source}, line {row.line} left out: {row.reason}" for row in unmodelled],
               "more row", "left out (`ppopt validate` lists each with its reason)")
    note_first([f"{row.source}, line {row.line} lists the job of line {earlier.line} again: ranked once" for row, earlier in repeated],
               "more row", "listing an earlier row's job again: each job is ranked once")
    return list(groups.values())


class _Phases:
    """Progress on stderr, one bar per phase (generating the schedules that size the jobs, sizing
    the jobs, simulating them); each bar starts its clock when its phase starts, so its rate and ETA
    are its own."""

    def __init__(self, name: str):
        from ppopt.cli.options import ProgressBar

        self.name, self.phase = name, ""
        self.bar: ProgressBar | None = None

    def _update(self, phase: str, done: int, total: int) -> None:
        from ppopt.cli.options import ProgressBar

        if phase != self.phase:
            self.close()
            self.phase, self.bar = phase, ProgressBar(f"plan {self.name}: {phase}")
        assert self.bar is not None
        self.bar(done, total)

    def generating(self, done: int, total: int) -> None:
        self._update("generating", done, total)

    def sizing(self, done: int, total: int) -> None:
        self._update("sizing    ", done, total)

    def simulating(self, done: int, total: int) -> None:
        self._update("simulating", done, total)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()
        self.bar = None


def _run_plans(requests, jobs, executor, address, quiet, options, keep_share):
    """The plan of each request. With listed jobs (one request per model, GPU count and global batch
    of ``--candidates``), each gets an equal share of the time left, and one whose share ends before
    any of its jobs is evaluated is left out with a note (the others' results stand); only when every
    one runs out is it an error."""
    from ppopt.errors import InfeasibleError
    from ppopt.plan import depths_left_out

    plans, left_out = [], []
    for k, (request, listed) in enumerate(requests):
        depths = depths_left_out(request) if listed is None else []
        if depths:  # a model whose layers few depths divide (37) was planned at p = 1 alone, without a word
            click.echo(f"note: p = {', '.join(map(str, depths))} left out: the even split needs p to divide the "
                       f"{request.model.num_layers} layers; --layers-per-stage balanced plans them too", err=True)
        budget = options if listed is None else _model_share(options, len(requests) - k)
        try:
            plans.append(_run_plan(request, listed, jobs, executor, address, quiet, budget, keep_share))
        except InfeasibleError as error:
            if listed is None:  # a model of --candidates that no time or memory is left for: the others still stand
                raise
            left_out.append((f"{request.model.name} on {request.gpus} GPUs, global batch {request.batch}", error))
    if not plans:
        raise left_out[0][1]
    for name, reason in left_out:
        if reason.field != "time_limit_s":
            click.echo(f"note: {name} left out: {reason.reason}", err=True)
    # those out of time named up to a few, then counted (a file of 100 models printed 100 notes)
    note_first([f"{name} left out: {reason.reason}" for name, reason in left_out if reason.field == "time_limit_s"],
               "more model", "(with GPU count and global batch) left out the same way, no job evaluated within its "
               "share of the time; give more time")
    for result in plans:  # a few named with their reason, the rest counted (a global batch of 2 on 512 GPUs gave 10)
        note_first([f"no job of {family} on {result.request.gpus} GPUs: {why}" for family, why in result.families_left_out],
                   "more schedule", "without a job here either (--json lists each with its reason)")
    return plans


def _model_share(options, parts: int):
    """The next of ``parts`` models' equal share of the time left, as a budget of its own: its
    messages ("no job evaluated within N s") give the share's seconds, not the whole limit's."""
    from dataclasses import replace

    share = options.share(parts)
    seconds = share.remaining_s()
    return replace(share, time_limit_s=seconds) if seconds > 0 else share


def _run_plan(request, listed, jobs, executor, address, quiet, options, keep_share=0.0):
    """The plan of ``request`` within the budget ``options``, its simulations leaving ``keep_share``
    of the time left when they begin; the budget's error when it ended before any job was
    evaluated (nothing is printed then)."""
    from ppopt.errors import ConfigError
    from ppopt.plan import PlanProgress, out_of_time, plan
    from ppopt.sweep import make_executor
    from ppopt.sweep.executors import starting_s

    phases = None if quiet else _Phases(request.model.name)
    progress = PlanProgress(phases.generating, phases.sizing, phases.simulating) if phases else None
    try:
        if jobs > 1 or executor != "local" or address is not None:  # make_executor refuses an address without ray
            least = starting_s(executor, address)
            if least and options.remaining_s() <= least:  # refused before Ray starts, not after
                raise ConfigError(f"{options.remaining_s():.1f} s left cannot cover starting a local Ray (at least {least:.0f} s) "
                                  "and any job: give more time, or --executor local", field="time_limit")
            starting = time.monotonic()
            with make_executor(executor, jobs, address, options.deadline) as pool:  # its closing counts in the budget too
                if options.expired:  # starting Ray can take seconds: say so, not "generating took the budget"
                    raise out_of_time(options, f"starting the {executor} executor took the budget "
                                               f"({time.monotonic() - starting:.1f} s)")
                result = plan(request, pool.map_unordered, progress, options.reserve(pool.closing_s), listed, keep_share)
        else:
            result = plan(request, None, progress, options, listed, keep_share)
    finally:
        if phases is not None:
            phases.close()
    if not result.rows:
        raise result.out_of_time(options, listed=listed is not None)
    return result


def _search(result, count: int, options):
    """Search the first ``count`` jobs (each an equal share of the time left)."""
    from ppopt.plan_search import search_job

    rows = result.rows[:count]
    found = []
    for k, row in enumerate(rows):
        found.append(search_job(row, result.request.limit, options.share(len(rows) - k)))
    return found


def _ranking(result, searches) -> list[tuple[int, int]]:
    from ppopt.plan_search import ranking_changes

    return ranking_changes([r.step_time_s for r in result.rows], searches)


def _first(result, searches):
    """The plan's #1 once the searched schedules count: its row and the search it runs (or None)."""
    from ppopt.plan_search import first_after_search

    index, search = first_after_search([r.step_time_s for r in result.rows], searches)
    return result.rows[index], search


def _split(job):
    """A job's layers per stage, as Megatron's layout string and torchtitan's per-stage modules. The
    Megatron string is None where its layout cannot say the placement: Megatron puts stage i on
    pipeline rank i mod p, which a V, zig-zag or bidirectional placement does not (in a ZB-V job
    stage 2p - 1, with the output layer, is on rank 0, not p - 1)."""
    counts = job.stage_layers
    from ppopt.plan import megatron_layout, torchtitan_stages

    p = job.pp
    placed_round_robin = all(devices == (i % p,) for i, devices in enumerate(job.stage_devices))
    return counts, megatron_layout(counts) if placed_round_robin else None, torchtitan_stages(counts)


def _print(result, searches, top: int, fmt: str, header: bool = True, rerun: tuple[str, str] | None = None) -> None:
    """The plan as text; ``rerun``: the --model and --system given, for the `ppopt job` line (None
    with --candidates, whose models are not presets a command can name)."""
    from ppopt.plan import describe, layout_filters
    from ppopt.report.text import csv_number, per_device, percent, percent_header, tokens_per_s

    request = result.request
    evaluated = len(result.rows)
    columns = ["rank", "job", "recompute", "schedule", "layers", "step s", "tokens/s", percent_header("MFU", fmt), "peak GB",
               "bound by"]
    rows = [[str(k + 1), r.job.describe(), r.job.recompute, r.job.schedule_label,
             per_device(r.job.stage_layers, "csv") if fmt == "csv" else _counts(r.job.stage_layers),  # CSV lists use ';'
             csv_number(r.step_time_s) if fmt == "csv" else _seconds(r.step_time_s),
             csv_number(r.tokens_per_s) if fmt == "csv" else tokens_per_s(r.tokens_per_s), percent(r.mfu, fmt),
             csv_number(r.memory.peak_bytes / 1e9) if fmt == "csv" else _gb(r.memory.peak_bytes), r.memory.bound()]
            for k, r in enumerate(result.rows[:max(top, len(searches or ()))])]  # every rank the search table names
    if fmt == "csv":  # one table, nothing else (the search and the counts are in --json)
        text = _table(["model", *columns], [[request.model.name, *row] for row in rows], fmt)
        click.echo(text if header else text.split("\n", 1)[1])
        if header:
            left = ("the schedule search, " if searches else "") + "the stage split and the `ppopt job` line"
            click.echo(f"note: --format csv prints the ranking only; {left} are in the text, markdown and --json outputs",
                       err=True)
        return
    filters = layout_filters(request)
    click.echo(f"{request.model.name} on {request.gpus:,} x {request.system.name}, global batch {request.batch:,}, "
               f"memory limit {_gb(request.limit)} GB per GPU" + (f", layouts with {filters}" if filters else ""))
    line = f"{result.enumerated} job{'' if result.enumerated == 1 else 's'}: {result.over_limit} over the memory limit"
    if result.closest_over:
        job, memory = result.closest_over
        needs = _gb(memory.peak_bytes)
        if needs == _gb(request.limit):  # 80.00 GB over a limit of 80.00 GB: say by how much
            needs = f"{memory.peak_bytes / 1e9:.12g}"
        line += f" (closest: {describe(job)} needs {needs} GB, {memory.bound()})"
    line += f", {evaluated} evaluated"
    if result.both_splits:  # splits are evaluated, jobs counted: say how the two counts meet
        within = result.enumerated - result.over_limit
        line += (f" (the {within} jobs within the limit, {result.both_splits} of them with the balanced and the even "
                 "split alike)")
    if result.unevaluated:
        line += f", {result.unevaluated} not evaluated (time limit; those estimated slowest)"
    click.echo(line)
    click.echo(_table(columns, rows, fmt))
    gap = "\n" if fmt == "markdown" else ""  # a line right under a markdown table would be read as its row
    if (near := _near_first(result.rows[:top])) is not None:
        click.echo(gap + _near_text(result.rows, *near))
    if searches:
        click.echo("")
        click.echo("schedule search (CP-SAT, job's own stage durations, same memory limit; gap of the pipeline part):")
        srows = []
        for k, found in enumerate(searches):
            for s in found:
                srows.append([str(k + 1), s.job.describe(), s.job.recompute, s.job.schedule_label, s.space, _seconds(s.handcrafted_step_s),
                              "-" if s.best_step_s is None else _seconds(s.best_step_s),
                              _seconds(s.bound_step_s) if s.best_step_s is not None else "-",
                              percent(s.gap, fmt, decimals=2), s.status])
        click.echo(_table(["rank", "job", "recompute", "schedule", "space", "handcrafted s", "best s", "bound s", "gap", "status"],
                          srows, fmt))
        moves = _ranking(result, searches)
        click.echo(gap + "ranking with the searched schedules: " + (
            "unchanged" if not moves else ", ".join(f"#{old} -> #{new}" for old, new in moves)))
    first, searched = _first(result, searches)
    if rerun is not None:  # `ppopt job` times handcrafted schedules: the table's #1 is the one it reproduces
        click.echo(f"{gap if not searches and near is None else ''}#1 as a ppopt job: {_job_command(result.rows[0].job, *rerun)}")
        if searched is not None:
            rank = result.rows.index(first) + 1
            click.echo(f"  faster after the search: #{rank} with its searched schedule ({searched.best_step_s:.3f} s), "
                       "which `ppopt job` cannot time; --torch-csv writes it")
    counts, megatron, titan = _split(first.job)
    if len(counts) > 1:
        moved = first is not result.rows[0]  # another job is first once searched
        flag = f"--pipeline-model-parallel-layout \"{megatron}\""
        layout = (f"Megatron {f'`{flag}`' if fmt == 'markdown' else flag}" if megatron is not None else
                  f"no Megatron layout (it places stage i on rank i mod p, {first.job.schedule} does not)")
        click.echo(f"stage split of #1{' (after the search)' if moved else ''}: {','.join(map(str, counts))}; {layout}; "
                   f"torchtitan module_fqns_per_model_part: {_compact_titan(titan)}")


NEAR_MEMORY = 0.9
"""A job as fast as #1 (within :data:`ppopt.plan.NEAR_STEP`) is worth naming when it needs at most this
share of #1's peak memory."""


def _near_first(rows) -> tuple[int, object] | None:
    """(rank, row) of the listed job that needs the least memory of those as fast as #1 (within
    :data:`ppopt.plan.NEAR_STEP`) on much less memory (:data:`NEAR_MEMORY`), the best-ranked among equals: the
    table ranks by step time alone, and a 0.03 % gain that fills the GPU is rarely worth it (with
    #2 to #4 tied, #2 was named though #4 needed half its memory). None when no such job is listed."""
    first = rows[0]
    near = [(row.memory.peak_bytes, k, row) for k, row in enumerate(rows[1:], start=2)
            if row.step_time_s <= first.step_time_s * (1 + NEAR_STEP) and row.memory.peak_bytes <= NEAR_MEMORY * first.memory.peak_bytes]
    if not near:
        return None
    _, k, row = min(near, key=lambda item: item[:2])
    return k, row


def _near_text(rows, k: int, row) -> str:
    """The line naming :func:`_near_first`'s job."""
    first = rows[0]
    slower = row.step_time_s / first.step_time_s - 1
    return (f"#{k} ({row.job.describe()}, {row.job.schedule_label}) is within {100 * slower:.2f} % of #1's step with "
            f"{(first.memory.peak_bytes - row.memory.peak_bytes) / 1e9:.1f} GB less per GPU")


def _job_command(job, model: str, system: str) -> str:
    """The `ppopt job` command that predicts ``job`` with its handcrafted schedule: the --model and
    --system as the user gave them (quoted for a shell), and every option the plan set, sequence
    parallelism and the distributed optimizer included (job's defaults are off)."""
    import shlex

    options = [f"--model {shlex.quote(model)}", f"--system {shlex.quote(system)}", f"--tp {job.tp}", f"--pp {job.pp}",
               f"--dp {job.dp}", f"--micro-batch {job.micro_batch}"]
    options += [f"--global-batch {job.global_batch}"] if job.global_batch is not None else []
    options += [f"--recompute {job.recompute}", f"--schedule {job.schedule}"]
    options += [f"--{name} {shlex.quote(str(value))}" for name, value in job.schedule_options.items()
                if not (name == "split" and job.layers is not None)]  # given layers replace the split
    options += [flag for flag, on in (("--sequence-parallel", job.sequence_parallel),
                                      ("--distributed-optimizer", job.distributed_optimizer),
                                      ("--overlap-grad-sync", job.overlap_gradient_sync)) if on]
    if job.layers is not None:
        options.append(f"--layers-per-stage {','.join(map(str, job.layers))}")
    return "ppopt job " + " ".join(options)


def _counts(counts: tuple[int, ...]) -> str:
    """Layers per stage for the table; past 8 stages runs of equal counts as ``n*k`` (k stages of n)."""
    if len(counts) <= 8:
        return ",".join(map(str, counts))
    runs: list[list[int]] = []
    for n in counts:
        if runs and runs[-1][0] == n:
            runs[-1][1] += 1
        else:
            runs.append([n, 1])
    return ",".join(f"{n}*{k}" if k > 1 else str(n) for n, k in runs)


def _compact_titan(stages: list[list[str]]) -> str:
    """torchtitan's per-stage lists, long runs of layers shortened (``layers.0..layers.19``)."""
    parts = []
    for names in stages:
        layers = [n for n in names if n.startswith("layers.")]
        others_first = [n for n in names if not n.startswith("layers.") and names.index(n) == 0]
        others_last = [n for n in names if not n.startswith("layers.") and n not in others_first]
        middle = [f"{layers[0]}..{layers[-1]}"] if len(layers) > 2 else layers
        parts.append("[" + ", ".join(others_first + middle + others_last) + "]")
    return "[" + ", ".join(parts) + "]"


def _json(result, searches, top: int, rerun: tuple[str, str] | None, balanced=None) -> dict:
    request = result.request
    first = _first(result, searches)[0]
    counts, megatron, titan = _split(first.job)
    moves = _ranking(result, searches)
    near = _near_first(result.rows[:top])

    def row(r):
        return r.job.layout_json() | {
            "step_time_s": r.step_time_s, "pipeline_s": r.pipeline_s, "gradient_sync_s": r.gradient_sync_s,
            "optimizer_s": r.optimizer_s, "tokens_per_s": r.tokens_per_s, "mfu": r.mfu,
            "peak_memory_bytes": r.memory.peak_bytes, "bound_by": r.memory.bound()}

    return {
        "model": request.model.name, "system": request.system.name, "gpus": request.gpus, "global_batch": request.batch,
        "memory_limit_bytes": request.limit,
        "layouts": {name: None if getattr(request, name) is None else sorted(set(getattr(request, name)))
                    for name in ("tensor_parallel", "pipeline_parallel", "data_parallel")},
        "enumerated": result.enumerated, "over_limit": result.over_limit,
        "closest_over": None if not result.closest_over else {
            "job": result.closest_over[0].describe(), "recompute": result.closest_over[0].recompute,
            "schedule": result.closest_over[0].schedule, "schedule_options": result.closest_over[0].schedule_options,
            "peak_memory_bytes": result.closest_over[1].peak_bytes,
            "bound_by": result.closest_over[1].bound()},
        "evaluated": len(result.rows), "unevaluated": result.unevaluated, "both_splits": result.both_splits,
        "families_left_out": dict(result.families_left_out),
        "top": [row(r) for r in result.rows[:top]],
        "search": [{"rank": k + 1, "job": s.job.describe(), "recompute": s.job.recompute, "schedule": s.job.schedule, "space": s.space,
                    "handcrafted_step_s": s.handcrafted_step_s, "best_step_s": s.best_step_s,
                    "bound_step_s": s.bound_step_s if s.best_step_s is not None else None,
                    "gap": s.gap, "status": s.status, "note": s.note or None}  # null when none, as search --json
                   for k, found in enumerate(searches) for s in found],
        "ranking_changes": [{"from": old, "to": new} for old, new in moves],
        "split": {"layers_per_stage": list(counts), "megatron_layout": megatron, "torchtitan_module_fqns_per_model_part": titan},
        "job_command": None if rerun is None else _job_command(result.rows[0].job, *rerun),
        # the note on stderr: a job of the first ten that balanced layer counts make faster than #1
        "balanced_beats_first": None if balanced is None or balanced.faster is None else row(balanced.faster),
        # how many of the first jobs the check took with balanced counts, of how many (a time limit cuts it)
        "balanced_checked": None if balanced is None else {"jobs": balanced.checked, "of": balanced.to_check},
        # the text's line: a listed job as fast as #1 on much less memory
        "as_fast_on_less_memory": None if near is None else {"rank": near[0]} | row(near[1]),
    }


def _torch_csv_choice(result, searches):
    """The schedule ``--torch-csv`` writes, chosen before the report is printed (so that a refusal
    comes before it): the plan's #1 after the search (its searched schedule when that is faster),
    or, when PyTorch's CSV cannot hold that one (a stage on two ranks), the fastest job whose
    schedule it can, with a note. ConfigError when no job's schedule fits it."""
    from ppopt.errors import ConfigError, ScheduleError
    from ppopt.generators import REGISTRY, generate
    from ppopt.io.torch_csv import refuse_replicas
    from ppopt.plan_search import order_after_search

    order, chosen = order_after_search([r.step_time_s for r in result.rows], searches)
    first_reason = None
    for rank, k in enumerate(order, 1):
        job, search = result.rows[k].job, chosen[k]
        if search is None and not REGISTRY[job.schedule].torch:  # the family never fits: no need to build it
            first_reason = first_reason or f"{job.schedule} places a stage on two ranks"
            continue
        schedule = search.schedule if search is not None and search.schedule is not None else \
            generate(job.schedule, job.pp, job.microbatches, **job.schedule_options)
        try:
            refuse_replicas(schedule)
        except ScheduleError as error:
            first_reason = first_reason or error.reason
            continue
        if rank > 1:
            click.echo(f"note: --torch-csv: #1 cannot be written ({first_reason}; PyTorch's schedule CSV holds one rank per "
                       f"stage): it gets #{rank}, the fastest job it can hold ({job.describe()}, {schedule.name})", err=True)
        return schedule
    raise ConfigError(f"no planned job's schedule fits PyTorch's schedule CSV ({first_reason}; it holds one rank per stage): "
                      "keep to the --schedule families `ppopt list` marks 'torch csv yes', or leave --torch-csv out",
                      field="torch_csv")
