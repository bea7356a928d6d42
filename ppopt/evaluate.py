"""One schedule through the evaluation layers: formula, unit-slot table and, given a model and a
system, the communication-aware simulation.

Pure functions returning plain dataclasses; the CLI and reports turn them into text or JSON. A
schedule is validated once, into its flat form (:mod:`ppopt.flat`), which the table layer and the
simulator then share.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any, cast

from ppopt.config import LinkConfig, ModelConfig, SystemConfig, load_model, load_system
from ppopt.costs import Costs, check_global_batch, partition_layers
from ppopt.errors import ConfigError, ScheduleError, counted, require_bool
from ppopt.flat import Flat
from ppopt.formula import Formula, formula
from ppopt.generators import check_option_names, generate, get, names, schedule_label, too_many_stages
from ppopt.generators.common import require_positive
from ppopt.ir import MAX_OPS, Schedule, check_total_size
from ppopt.job import NEEDS_A_MODEL, Parallelism, job_costs, job_work, simulate_pipeline
from ppopt.report.text import span, time_left
from ppopt.simulate import Simulation, simulate
from ppopt.table import Table, TableMetrics, build_table, table_metrics
from ppopt.units import UnitCosts
from ppopt.validation import validated

DEFAULT_UNITS = UnitCosts()


@dataclass(frozen=True)
class Evaluation:
    """A schedule's metrics in each layer: ``formula`` and ``table`` in slots of the unit model the
    evaluation was given, ``simulation`` (only when a model and system are given) in seconds and
    bytes. The simulated step is the pipeline's: :func:`ppopt.job.evaluate_job` adds the gradient
    all-reduce and the optimizer step (``ppopt job``)."""

    schedule: str
    devices: int
    microbatches: int
    options: dict
    formula: Formula | None
    """The family's closed forms; None when not asked (a schedule read from a file or found by a
    search) or for a family without any (``ppopt.generators.get(name).no_closed_forms`` says why;
    ``formula.outside`` says when the forms do not hold at these sizes)."""
    table: TableMetrics
    simulation: Simulation | None = None
    memory_capacity_bytes: float | None = None
    """The system's memory per device (with ``simulation``)."""

    @property
    def label(self) -> str:
        """The family with the options not at their defaults (``hanayo w2``), as reports name it."""
        return schedule_label(self.schedule, self.options, changed_only=True)

    @property
    def memory_over(self) -> MemoryOver | None:
        """The worst device whose simulated peak exceeds the system's memory, or None."""
        if self.simulation is None or self.memory_capacity_bytes is None:
            return None
        return memory_over(self.simulation.peak_memory_bytes, self.memory_capacity_bytes)


@dataclass(frozen=True)
class MemoryOver:
    """A device whose peak memory exceeds the system's capacity. Bytes."""

    device: int
    peak_bytes: float
    capacity_bytes: float

    @property
    def excess_bytes(self) -> float:
        """Bytes of the peak above the capacity (positive when over)."""
        return self.peak_bytes - self.capacity_bytes


def memory_over(peaks: Sequence[float], capacity_bytes: float) -> MemoryOver | None:
    """The device with the largest peak if it exceeds ``capacity_bytes`` (the lowest index among
    equals), else None."""
    if not peaks:
        return None
    device = max(range(len(peaks)), key=lambda d: (peaks[d], -d))
    return MemoryOver(device, float(peaks[device]), float(capacity_bytes)) if peaks[device] > capacity_bytes else None


def schedule_costs(schedule: Schedule, model: ModelConfig | str, system: SystemConfig | str, global_batch: int | None = None,
                   parallel: Parallelism | None = None) -> Costs:
    """Per-stage costs of ``model`` cut into the schedule's stages (its stage weights, if any): the
    pipeline cost model, or with tensor/data parallelism or recomputation (``parallel``) the job
    model's costs of one GPU of each stage (:func:`ppopt.job.job_costs`). ``model`` and ``system``
    may be preset names or files."""
    model, system = load_model(model), load_system(system)
    layers = partition_layers(model.num_layers, schedule.stages, schedule.stage_weights)
    parallel = parallel or Parallelism()
    costs = parallel.pipeline_costs(model, system, layers, schedule.microbatches, global_batch)
    return costs if costs is not None else job_costs(parallel.job(model, system, layers, schedule.microbatches, global_batch))


def simulate_on(schedule: Schedule | Flat, model: ModelConfig, system: SystemConfig, global_batch: int | None = None,
                parallel: Parallelism | None = None) -> Simulation:
    """Simulate one step of ``schedule`` (or its flat form) training ``model`` on ``system``: the
    pipeline part of the step (with ``parallel``, on the system one stage's GPUs see,
    :func:`ppopt.job.pipeline_system`; ``ppopt job`` adds the gradient all-reduce and optimizer)."""
    plain = schedule.schedule if isinstance(schedule, Flat) else schedule
    if parallel is None or parallel.pipeline_only:
        return simulate(schedule, schedule_costs(plain, model, system, global_batch, parallel), system)
    layers = partition_layers(model.num_layers, plain.stages, plain.stage_weights)
    job = parallel.job(model, system, layers, plain.microbatches, global_batch)
    return simulate_pipeline(job, schedule, job_work(job))[1]


def evaluate_schedule(
    schedule: Schedule,
    units: UnitCosts = DEFAULT_UNITS,
    model: ModelConfig | str | None = None,
    system: SystemConfig | str | None = None,
    global_batch: int | None = None,
    with_formula: bool = False,
    parallel: Parallelism | None = None,
    **options: object,
) -> Evaluation:
    """Evaluate an already built schedule in the table layer (lengths in slots of ``units``), the
    simulation layer when ``model`` and ``system`` are given (configs, preset names or files), and,
    with ``with_formula``, the formula layer of the family ``schedule.name`` names with the options
    that built it (``schedule.options``, then ``options``): only for a schedule :func:`generate` built,
    since a schedule read from a file or found by a search carries no family's closed form."""
    if not isinstance(schedule, Schedule):  # a name belongs to evaluate(), which builds it
        raise ConfigError(f"must be a Schedule (evaluate() takes a family's name), got {schedule!r}", field="schedule")
    if not isinstance(units, UnitCosts):
        raise ConfigError(f"must be a UnitCosts, got {units!r}", field="units")
    require_bool(with_formula, "with_formula")  # "no" is true to Python
    check_option_names(options)  # chunk=3 was ignored without a word
    check_global_batch(global_batch)
    flat = validated(schedule)
    model, system = model_and_system(model, system)
    if parallel is not None and not parallel.is_default and (model is None or system is None):
        raise ConfigError(NEEDS_A_MODEL, field=parallel.first_set)
    simulation = simulate_on(flat, model, system, global_batch, parallel) if model is not None and system is not None else None
    closed = family_formula(schedule, units, {**options, **schedule.options}) if with_formula else None
    return Evaluation(
        schedule=schedule.name,
        devices=schedule.devices,
        microbatches=schedule.microbatches,
        options=dict(schedule.options),
        formula=closed,
        table=table_metrics(build_table(flat, units)),
        simulation=simulation,
        memory_capacity_bytes=system.memory_capacity_bytes if simulation is not None and system is not None else None,
    )


def family_formula(schedule: Schedule, units: UnitCosts, options: dict[str, object]) -> Formula | None:
    """The closed forms (in slots of ``units``) of the family ``schedule.name`` names, with
    ``options``, for a schedule that family's generator built. A schedule whose name is no family
    (``search``, a file's name) or whose placement or op count is not the family's at these options
    (a ZB-V written to ``1f1b.csv``; interleaved-1f1b with 4 chunks read back, its options lost) is
    refused: the forms would describe another schedule. An order changed within the family's
    placement is not detected."""
    try:
        family = get(schedule.name)
        taken = family.taken(options)
        from ppopt.job import placement

        placed = placement(schedule.name, schedule.devices, tuple(sorted(taken.items())))
    except (ConfigError, ScheduleError) as error:
        raise ScheduleError(f"no closed form for a schedule named {schedule.name!r}: {error.reason}; only a schedule "
                            "ppopt.generate built has its family's (leave with_formula False)", field="with_formula") from None
    ops = sum(len(order) for order in schedule.orders)
    if placed != schedule.placement or ops != family.ops(schedule.devices, schedule.microbatches, taken):
        given = ", ".join(f"{key}={value!r}" for key, value in taken.items()) or "its default options"
        raise ScheduleError(f"{schedule.name!r} is not the schedule {schedule.name} builds with {given} (its placement or op "
                            "count differs): a schedule read from a file or changed has no family's closed form (leave "
                            "with_formula False, or give the options that built it)", field="with_formula")
    return formula(schedule.name, schedule.devices, schedule.microbatches, units, **taken)


def evaluate(name: str, devices: int, microbatches: int, units: UnitCosts = DEFAULT_UNITS, model: ModelConfig | str | None = None,
             system: SystemConfig | str | None = None, global_batch: int | None = None, parallel: Parallelism | None = None,
             **options: object) -> Evaluation:
    """Generate schedule ``name`` and evaluate it (see :func:`evaluate_schedule`). With a model, a
    family with more stages than the model has layers, or a batch that does not split into the
    microbatches, is refused before its schedule is built (at p = 1,024, m = 4,096 building
    Chimera's took 85 s before the simulator refused it; at p = 4, m = 10^6, 9 s before the batch
    did)."""
    require_positive(devices, microbatches)  # before the stage count is weighed against the layers
    model, system = model_and_system(model, system)
    if model is not None and (why := too_many_stages(name, devices, options, model.num_layers)):
        raise ScheduleError(why)
    if model is not None:
        (parallel or Parallelism()).check_batch(model, microbatches, global_batch)
    schedule = generate(name, devices, microbatches, **options)
    return evaluate_schedule(schedule, units, model, system, global_batch, True, parallel, **cast(dict[str, Any], options))


def model_and_system(model: ModelConfig | str | None, system: SystemConfig | str | None
                     ) -> tuple[ModelConfig | None, SystemConfig | None]:
    """Both loaded (a preset name or a file; a config unchanged), or neither: one without the other
    is a :class:`ConfigError` (there would be nothing to simulate, silently)."""
    if (model is None) != (system is None):
        raise ConfigError("give both a model and a system, or neither", field="system" if system is None else "model")
    return (None, None) if model is None or system is None else (load_model(model), load_system(system))


def evaluation_seconds(ops: int | None) -> float:
    """Seconds to keep for evaluating a schedule of ``ops`` ops (:data:`EVALUATE_S_PER_OP` each); 0
    when the count is unknown or over :data:`ppopt.ir.MAX_OPS` (such a schedule is refused at once)."""
    return EVALUATE_S_PER_OP * ops if ops is not None and ops <= MAX_OPS else 0.0


EVALUATE_S_PER_OP = 4.5e-6
"""Seconds per op to evaluate a schedule (generate, validate, table, formula and, with a model,
simulate), with a margin: every schedule at p = 32, m = 1,024 (1.64 million ops in all) took 4.5 s
as a whole ``evaluate -s all`` command in unit mode and 6.1 s with the study model on mid-mid, and
at p = 4, m = 140,000 (28 million ops) 81 s in unit mode, on this project's 2-core machine (2.7,
3.7 and 2.9 microseconds per op)."""


def evaluate_all(devices: int, microbatches: int, units: UnitCosts = DEFAULT_UNITS, model: ModelConfig | str | None = None,
                 system: SystemConfig | str | None = None, global_batch: int | None = None,
                 parallel: Parallelism | None = None, progress: Callable[[int, int], None] | None = None,
                 deadline: float | None = None, timelines: bool = True, **options: object) -> tuple[list[Evaluation], dict[str, str]]:
    """Evaluate every registered schedule that applies to (p, m); also return why the others don't.
    Without ``timelines`` each simulation keeps only its figures (:meth:`ppopt.simulate.Simulation.summary`),
    so the memory of one schedule's op times is let go before the next is built.
    ``progress(done, total)`` is called after each schedule, if given. With a ``deadline`` (a
    ``time.monotonic()`` value), a schedule whose estimated time (:data:`EVALUATE_S_PER_OP` per op)
    no longer fits before it is skipped with that reason. Raises :class:`~ppopt.errors.ScheduleError`
    when none applies (every one too large, say), naming the time limit when it left out every one."""
    require_positive(devices, microbatches)  # otherwise every schedule would just be "skipped"
    model, system = model_and_system(model, system)
    results, skipped = [], {}
    every = names()
    # every result is kept for the report: their sum, not each schedule alone, is what must fit
    # (without the families skipped for more stages than the model has layers)
    too_many = {} if model is None else {n: why for n in every if (why := too_many_stages(n, devices, options, model.num_layers))}
    sized = [name for name in every if name not in too_many]
    sizes = [get(name).ops(devices, microbatches, get(name).taken(options)) for name in sized]
    check_total_size(sum(size for size in sizes if size is not None and size <= MAX_OPS),
                     f"the {len(sized)} schedules at p = {devices}, m = {microbatches}")
    size_of = dict(zip(sized, sizes))
    late: dict[str, float] = {}  # the schedules the deadline left out, with their estimated seconds
    for done, name in enumerate(every, 1):
        size = size_of.get(name)
        needed = evaluation_seconds(size)
        if deadline is not None and needed and time.monotonic() + needed > deadline:
            late[name] = needed
            skipped[name] = f"time limit: about {span(needed)} to evaluate, {time_left(deadline - time.monotonic())}"
        else:
            try:  # evaluate refuses the families of too_many before building them
                evaluated = evaluate(name, devices, microbatches, units, model, system, global_batch, parallel, **options)
                if not timelines and evaluated.simulation is not None:
                    evaluated = replace(evaluated, simulation=evaluated.simulation.summary())
                results.append(evaluated)
            except ScheduleError as error:
                skipped[name] = error.reason
        if progress is not None:
            progress(done, len(every))
    if not results and late:
        quickest = min(late, key=late.__getitem__)
        left = deadline - time.monotonic() if deadline is not None else 0.0
        raise ScheduleError(f"no schedule evaluated within the time limit: the quickest, {quickest}, needs about "
                            f"{span(late[quickest])}, and {time_left(left)} (it counts from the command's "
                            "start, imports included)", field="time_limit")
    if not results:
        raise ScheduleError(f"no schedule applies at p = {devices}, m = {microbatches} ({skipped_reasons(skipped)})")
    return results, skipped


def rank_with_costs(devices: int, microbatches: int, costs: Costs, link: LinkConfig | None = None,
                    **options: object) -> tuple[list[tuple[float, float, str]], dict[str, str]]:
    """Every family with the stage count of ``costs`` (a measured cost preset) simulated with those
    costs and ``link``: (step seconds, idle ratio, name) fastest first, and the families skipped
    with the reason (not defined at this size, or another stage count)."""
    rows, skipped = [], {}
    for name in names():
        try:
            schedule = generate(name, devices, microbatches, **options)  # each family takes its own options
        except ScheduleError as error:
            skipped[name] = error.reason  # without the field's prefix ("devices: ..."), as evaluate_all says it
            continue
        if schedule.stages != costs.num_stages:
            skipped[name] = f"{counted(schedule.stages, 'stage')}, the cost preset describes {costs.num_stages}"
            continue
        simulation = simulate(schedule, costs, link=link)
        rows.append((simulation.step_time_s, simulation.idle_ratio, name))
    return sorted(rows), skipped


def skipped_reasons(skipped: dict[str, str]) -> str:
    """Why nothing applied, short: the first schedule's reason and a count of the others."""
    (first, reason), *rest = skipped.items()
    return f"{first}: {reason}" + (f"; {len(rest)} more skipped" if rest else "")


def table_of(name: str, devices: int, microbatches: int, units: UnitCosts = DEFAULT_UNITS, **options: object) -> Table:
    """The validated unit-slot table of schedule ``name``."""
    return build_table(generate(name, devices, microbatches, **options), units)


@dataclass(frozen=True)
class Ranking:
    """Ranks (1 = best) of each schedule per layer; ``flips`` lists schedules whose rank changes."""

    formula: dict[str, int]
    table: dict[str, int]
    simulation: dict[str, int]
    flips: tuple[str, ...]


TIE = 1e-9
"""Relative tolerance under which two metrics rank equal (a nanosecond in a second: float noise,
never a difference between schedules)."""


def competition_ranks(values: dict[str, float]) -> dict[str, int]:
    """Competition ranking ("1, 2, 2, 4", smallest first): values within a relative :data:`TIE`
    share a rank."""
    ordered = sorted(values.values())
    return {name: 1 + sum(v < value - TIE * max(1.0, abs(value)) for v in ordered) for name, value in values.items()}


def rank_layers(results: list[Evaluation]) -> Ranking:
    """Rank schedules by bubble ratio (formula, table layers) and by simulated step time.

    Bubble ratios, not lengths, are compared in the first two layers: they are what the formulas
    state, and they do not depend on the unit model. Closed forms outside their range
    (:attr:`ppopt.formula.Formula.outside`) and families without any are not ranked in the formula layer.
    """
    formula_ranks = competition_ranks({r.schedule: r.formula.bubble_ratio for r in results if r.formula is not None and r.formula.valid})
    table_ranks = competition_ranks({r.schedule: r.table.bubble_ratio for r in results})
    sim_ranks = competition_ranks({r.schedule: r.simulation.step_time_s for r in results if r.simulation is not None})
    flips = tuple(
        r.schedule for r in results
        if len({formula_ranks.get(r.schedule, table_ranks[r.schedule]), table_ranks[r.schedule],
                sim_ranks.get(r.schedule, table_ranks[r.schedule])}) > 1
    )
    return Ranking(formula_ranks, table_ranks, sim_ranks, flips)
