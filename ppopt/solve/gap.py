"""Optimality gaps of the handcrafted schedules, and the step-time vs memory frontier.

The gap of a handcrafted schedule is measured against its own family's relaxed space: the same
placement and kind of backward, with the per-device order free (and, for Chimera, the split of
microbatches between the directions free). ``gap = (handcrafted - bound) / bound``, where the bound
is valid for every schedule of that space under the same memory limit.
"""

from __future__ import annotations

import dataclasses
import math
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace

from ppopt.config import ModelConfig, SystemConfig
from ppopt.errors import ConfigError, InfeasibleError, MemoryShortError, ScheduleError, is_positive_number
from ppopt.generators import check_option_names, check_option_values, generate, get, names, too_many_stages
from ppopt.ir import Schedule
from ppopt.simulate import simulate
from ppopt.solve import options as solve_options
from ppopt.solve.instance import InstanceSpec
from ppopt.solve.options import SolveOptions
from ppopt.solve.search import (
    OVERLAP_REFUSED,
    SearchResult,
    cheap_bound,
    check_arguments,
    check_in_space,
    check_sizes,
    format_amount,
    lns_applies,
    minimum_memory,
    never_above,
    overlap_outside_model,
    peak_use,
    relative_gap,
    search,
    space_instance,
    too_late,
    with_known_step,
)
from ppopt.solve.space import Space, family_space, parse_space, placement_of, space_of, stage_count, with_backward
from ppopt.validation import validate


def searched(spec: InstanceSpec, space: Space) -> Space:
    """The space whose search gives ``space``'s bound: itself, except that in unit mode a layer split
    changes nothing (every stage costs the same there), so chimera-asym's space is chimera's and is
    searched once."""
    if spec.unit_mode and space.split is not None:
        return replace(space, split=None)
    return space


@dataclass(frozen=True)
class GapRow:
    """One handcrafted schedule against the bound of its family space. Times in the report's
    ``time_unit`` (slots or seconds), memory in its ``memory_unit`` (activations or bytes).

    Attributes:
        schedule: the schedule's name (a file's stem for a schedule of the user's).
        space: the relaxed space of the bound (``Space.describe()``).
        step_time: the schedule's simulated step.
        peak_memory: its worst device's peak.
        fits: whether that peak is within the memory limit (else no gap: it is not in the space).
        best: the best step found in the space (None when its search was not reached).
        bound: a lower bound on every schedule of the space (NaN when not searched).
        gap: (step_time - bound) / bound, or None (over the limit, not searched).
        status: the space search's: optimal, feasible, or "skipped (time limit)".
    """

    schedule: str
    space: str
    step_time: float
    peak_memory: float  # worst device, in the memory unit (activations or bytes)
    fits: bool
    best: float | None  # best step time found in the space
    bound: float
    gap: float | None  # None when the schedule is over the memory limit
    status: str  # of the space's search


@dataclass(frozen=True)
class GapReport:
    """What :func:`gap_report` measured: one row per schedule, in ``time_unit`` and ``memory_unit``;
    ``skipped`` names the schedules left out with the reason (not applicable, too large, ...)."""

    rows: tuple[GapRow, ...]
    searches: dict[str, SearchResult]  # per searched space: its figures only (no schedule, simulation or hints)
    skipped: dict[str, str]
    time_unit: str
    memory_semantics: str
    infeasible: dict[str, InfeasibleError] = dataclasses.field(default_factory=dict)
    """The schedules skipped because the memory limit is below what their space needs, and why."""
    memory_unit: str = ""
    """The unit of ``peak_memory`` in the rows: ``"bytes"`` or ``"activations"`` (unit mode)."""
    memory_capacity: float | None = None
    """The system's memory per device, bytes (None in unit mode). A row's ``fits`` is against the
    memory limit; without one a schedule can fit and still be over this (:meth:`over_memory`)."""
    memory_limit: float | None = None
    """The memory limit searched under (``memory_unit``; None: no limit, or one that limits nothing)."""

    def over_memory(self, row: GapRow) -> bool | None:
        """Whether ``row``'s peak is over the system's memory per device (None in unit mode)."""
        return None if self.memory_capacity is None else row.peak_memory > self.memory_capacity

    def infeasible_for_all(self) -> InfeasibleError | None:
        """When the memory limit left no schedule to report: one error naming the least minimum over
        their spaces and the schedules that share it (one reason each made a line of kilobytes)."""
        if self.rows or not self.infeasible:
            return None
        others = [name for name in self.skipped if name not in self.infeasible]
        def need(error: InfeasibleError) -> float:
            return math.inf if error.minimum is None else error.minimum

        least = min(self.infeasible.values(), key=need)
        names = [name for name, error in self.infeasible.items() if need(error) <= need(least) * (1 + 1e-12)]
        also = f"; {len(others)} more skipped for other reasons ({', '.join(others)})" if others else ""
        return InfeasibleError(f"no schedule fits the memory limit (the least need is that of {', '.join(names)}): "
                               f"{least.reason}{also}", field=least.field, minimum=least.minimum)


NOT_SEARCHED = "skipped (time limit)"
"""Status of a gap row or frontier point whose search the time budget did not reach (no bound)."""


def gap_report(
    spec: InstanceSpec,
    schedule_options: dict | None = None,
    schedules: Sequence[str] | None = None,
    options: SolveOptions | None = None,
    given: Schedule | None = None,
) -> GapReport:
    """Gap of every applicable handcrafted schedule (or those named) against its family's bound;
    with ``given`` (a schedule of the user's, read from a file), of that schedule alone against the
    space it is a point of (:func:`ppopt.solve.space.space_of`), searched with it as a hint.

    ``schedule_options`` (chunks, waves, split; None: the defaults) configure the handcrafted schedules. The family
    spaces are searched one after another, each with an equal share of the time left of
    ``options.time_limit_s`` (the budget of the whole report); spaces not reached within it (a
    search starts only while one search's least time remains: :func:`ppopt.solve.search.too_late`)
    are reported with the status :data:`NOT_SEARCHED` and no bound.
    """
    check_arguments(spec, options=options, given=[] if given is None else [given], given_field="given")
    options = (options or SolveOptions()).start()
    schedule_options = schedule_options or {}
    if not isinstance(schedule_options, Mapping):  # a string was read letter by letter as option names
        raise ConfigError(f"must be a mapping of option names to values, got {schedule_options!r}", field="schedule_options")
    check_option_names(schedule_options, "schedule_options")  # every family would skip it: an empty report
    check_option_values(schedule_options)
    if isinstance(schedules, str):  # one name given alone, not its letters
        schedules = (schedules,)
    for name in schedules or ():  # a misspelt name is an error, as on the command line, not a skipped row
        get(name)
    devices, microbatches = spec.devices, spec.microbatches
    given_space = None if given is None else space_of(given)  # no space holds it: an error, not an empty report
    if given is not None:
        check_sizes(given, devices, microbatches)
    if given is not None and overlap_outside_model(given, instance := spec.instance(given.stages, given.stage_weights, given.placement)):
        # the space's bound would not hold for it: an error, as for a schedule no space holds
        raise ConfigError(f"{given.name} " + OVERLAP_REFUSED.format(share=instance.system.overlap_f_b_share), field="given")
    # each schedule is simulated and let go before the next is generated (at hundreds of thousands
    # of ops a schedule with its simulation holds a gigabyte): only its figures stay
    simulated, skipped, infeasible = [], {}, {}
    settled: dict[str, float] = {}  # spaces a handcrafted schedule proves the optimum of: their bounds
    semantics, unit, memory_unit, limit = "", "", "", None
    wanted = [given.name] if given is not None else list(schedules or names())
    began = time.monotonic()
    for done, name in enumerate(wanted, 1):
        if time.monotonic() - began >= solve_options.PROGRESS_AFTER_S:  # long only at hundreds of thousands of ops
            options.note(f"gap: simulating {name} ({done}/{len(wanted)})")
        model = spec.model
        too_many = None if not isinstance(model, ModelConfig) or given is not None \
            else too_many_stages(name, devices, schedule_options, model.num_layers)
        try:
            if given is not None and given_space is not None:  # (both or neither: the checks above)
                schedule, space = given, given_space
            elif too_many is not None:
                raise ScheduleError(too_many)
            else:
                schedule, space = validate(generate(name, devices, microbatches, **schedule_options)), family_space(name, schedule_options)
        except MemoryShortError:  # this machine's state, not the family's: the caller decides (a sweep retries later)
            raise
        except ScheduleError as error:
            skipped[name] = error.reason
            continue
        instance = spec.instance(schedule.stages, schedule.stage_weights, schedule.placement)
        if overlap_outside_model(schedule, instance):
            skipped[name] = "it " + OVERLAP_REFUSED.format(share=instance.system.overlap_f_b_share)
            continue
        semantics, unit, memory_unit = instance.memory_semantics(), instance.time_unit, instance.memory_unit
        limit = instance.memory_limit
        simulation = simulate(schedule, instance.costs, instance.system)
        peak = peak_use(instance, simulation)
        step, fits = simulation.step_time_s, instance.fits(peak)
        simulated.append((name, space, step, peak, fits))
        del schedule, simulation
        target = searched(spec, space)
        key = target.describe()
        if fits and key not in settled and (bound := _bound_met(spec, target, step)) is not None:
            settled[key] = bound
            options.note(f"{name} meets the analytic bound {bound:g} {unit} of {key}: optimal without search")
    row_keys = [searched(spec, space).describe() for _, space, _, _, _ in simulated]
    keys = list(dict.fromkeys(row_keys))
    pending = [key for key in keys if key not in settled]  # the spaces a search must bound
    # a handcrafted schedule that fits is a point of its space: the best found there is never longer
    # (a search short of time builds few hints: 12,410 slots at 64 x 4,096 in the split space, where
    # ZB-H1 takes 12,350), and one that meets the bound proves the space's optimum
    known: dict[str, float] = {}
    for key, (_, _, step, _, fits) in zip(row_keys, simulated):
        if fits:
            known[key] = min(known.get(key, math.inf), step)
    rows, searches = [], {}
    for key, (name, space, step, peak, fits) in zip(row_keys, simulated):
        if key in settled:  # a handcrafted schedule meets the space's analytic bound: its optimum, no search
            bound = never_above(settled[key], known[key])
            gap = relative_gap(step, bound) if fits else None
            rows.append(GapRow(name, space.describe(), step, peak, fits, known[key], bound, gap, "optimal"))
            continue
        if key not in searches and too_late(options, spec, searched(spec, space)):  # no further searches once the budget is spent
            rows.append(GapRow(name, space.describe(), step, peak, fits, None, math.nan, None, NOT_SEARCHED))
            continue
        if key not in searches:
            target = searched(spec, space)
            share = options.share(len(pending) - pending.index(key))
            if share.method == "lns" and not lns_applies(target, placement_of(target, devices)):
                options.note(f"--method lns does not apply to {key} (it needs a free order and one device per stage): "
                             "searched with CP-SAT alone")
                share = replace(share, method="cp")
            try:
                result = search(spec, target, share, hints=() if given is None else (given,))
            except InfeasibleError as error:
                skipped[name] = error.reason
                infeasible[name] = error
                continue
            # the figures the rows need; the schedules and simulations would hold gigabytes at scale
            searches[key] = replace(result, schedule=None, simulation=None, handcrafted=())
        result = searches[key]
        best, bound, status = with_known_step(result, known.get(key))
        # a schedule over the limit is not in the space, so the bound says nothing about it
        gap = relative_gap(step, bound) if fits else None
        rows.append(GapRow(name, space.describe(), step, peak, fits, best, bound, gap, status))
    return GapReport(tuple(rows), searches, skipped, unit, semantics, infeasible, memory_unit, memory_capacity(spec), limit)


def memory_capacity(spec: InstanceSpec) -> float | None:
    """The system's memory per device, bytes (None in unit mode, which has no system)."""
    return spec.system.memory_capacity_bytes if isinstance(spec.system, SystemConfig) else None


def _bound_met(spec: InstanceSpec, space: Space, step: float) -> float | None:
    """The analytic bound of ``space`` (:func:`ppopt.solve.search.cheap_bound`, milliseconds) when a
    schedule of it that fits, of step ``step``, meets it, else None. That step is then the space's
    optimum and a search would only build the same schedule again (at 64 x 4,096 the searches of the
    five spaces settled so spent 35 s rebuilding their hints), so the spaces left get its time."""
    placement = placement_of(space, spec.devices)
    if space.fixed or placement is None:
        return None
    bound = cheap_bound(space_instance(spec, space), placement, space)
    return bound if step <= bound * (1 + 1e-9) else None


@dataclass(frozen=True)
class FrontierPoint:
    """One memory limit of a frontier (the frontier's units): the best step found within it
    (``step_time``, None when none was), a lower bound on every schedule within it (``bound``:
    NaN when not searched, inf when infeasible), ``status`` (optimal, feasible, infeasible,
    "skipped (time limit)") and the peak of the schedule found (``peak_memory``)."""

    memory_limit: float
    status: str
    step_time: float | None
    bound: float
    peak_memory: float | None  # of the schedule found


@dataclass(frozen=True)
class Frontier:
    """Step time against memory limit in ``space`` (:func:`frontier`): ``points`` by limit, and
    ``handcrafted`` as (name, peak memory, step time, on the frontier) of every handcrafted schedule
    of the space (and the user's, with ``given``); ``minimum`` is the least memory any schedule of
    the space needs."""

    space: str
    points: tuple[FrontierPoint, ...]
    handcrafted: tuple[tuple[str, float, float, bool], ...]  # (name, peak memory, step time, on the frontier)
    time_unit: str
    memory_unit: str
    minimum: float
    most_held: float = math.inf
    """The most a device can hold (every activation of every microbatch, plus the persistent state):
    a limit at or above it limits nothing."""
    memory_capacity: float | None = None
    """The system's memory per device, bytes (None in unit mode): a peak above it would not run."""

    def over_memory(self, peak: float | None) -> bool | None:
        """Whether ``peak`` (the frontier's memory unit) is over the system's memory per device (None
        in unit mode)."""
        return None if self.memory_capacity is None or peak is None else peak > self.memory_capacity


MAX_LIMITS = 1000
"""The most memory limits one frontier takes (:func:`frontier`, :func:`default_limits`)."""


def default_limits(minimum: float, maximum: float, unit: str, count: int = 6) -> list[float]:
    """Limits from the minimum any schedule needs to ``maximum`` (the largest peak of the handcrafted
    schedules and of the unlimited search's, :func:`frontier`): one activation
    apart in unit mode (a whole number of them when that would make more than :data:`MAX_LIMITS`:
    GPipe's peak of 8,000 at m = 8,000 made 8,000 searches), ``count`` even steps in bytes."""
    maximum = max(maximum, minimum)
    if unit == "activations":
        span = int(math.floor(maximum - minimum + 1e-9))
        step = max(1, math.ceil((span + 1) / MAX_LIMITS))
        values = [minimum + k * step for k in range(span // step + 1)]
        return values or [minimum]
    if count < 2 or maximum <= minimum:
        return [minimum]
    return [minimum + (maximum - minimum) * k / (count - 1) for k in range(count)]


def _refuse_limits_below(limits: Sequence[float], minimum: float, why: str, space: Space, unit: str) -> None:
    """Raise InfeasibleError, naming the minimum, when every limit asked for is below what any
    schedule of the space needs (a frontier of "infeasible" rows, exit 0, read as a result); a limit
    below it among others stays an "infeasible" point."""
    if all(limit < minimum * (1 - 1e-12) for limit in limits):
        which = "the limit is" if len(limits) == 1 else f"all {len(limits)} limits are"
        raise InfeasibleError(f"{which} below the minimum {format_amount(minimum, unit, least=True)} any schedule of "
                              f"{space.describe()} needs{f' ({why})' if why else ''}", field="limits", minimum=minimum)


def frontier(
    spec: InstanceSpec,
    space: Space | str,
    limits: Sequence[float] | None = None,
    options: SolveOptions | None = None,
    given: Schedule | None = None,
) -> Frontier:
    """Best step time per memory limit in ``space``, with the handcrafted schedules placed on it
    (and ``given``, a schedule of the user's in that space, among them: a hint of every search).

    ``spec``'s own memory limit is ignored: the unlimited search comes first. When it proves its
    schedule optimal, every limit at or above that schedule's peak takes it with its proof (no
    schedule under a limit beats the best without one). Every other limit (``limits``, or
    :func:`default_limits`) is searched, each with an equal share of the time left of
    ``options.time_limit_s`` (the budget of the whole frontier; limits not reached within it, as in
    :func:`gap_report`, get the status :data:`NOT_SEARCHED` and no bound). The points then share
    their schedules and bounds (:func:`_monotone`), so no looser limit shows a longer step. A handcrafted schedule is on the frontier
    when no schedule known (a searched point's, the unlimited search's, another handcrafted one)
    dominates it: none needs no more memory and takes no longer, and is better in one of the two.
    The default limits include every handcrafted peak, so each is judged against a search at its
    own peak (with an even grid alone, 1F1B at 38.8 GiB was called on the frontier while a search at
    40 GiB found a faster schedule within the same peak).
    """
    check_arguments(spec, space, options, [] if given is None else [given], given_field="given")
    options = (options or SolveOptions()).start()
    devices = spec.devices
    if isinstance(space, str):  # its text, as search takes it
        space = parse_space(space)
    if limits is not None:
        if isinstance(limits, (str, bytes)) or not isinstance(limits, Iterable):
            raise ConfigError(f"must be a list of memory limits (None: the default ones), got {limits!r}", field="limits")
        limits = list(limits)  # a generator is read once, here
        if bad := [x for x in limits if not is_positive_number(x)]:
            raise ConfigError(f"must be positive numbers, got {bad[0]!r}", field="limits")
        if not limits:
            raise ConfigError("must hold at least one memory limit (None: the default ones)", field="limits")
        limits = sorted(set(limits))  # a limit given twice is one point
        if len(limits) > MAX_LIMITS:  # sharing their results compares every pair: 10,000 limits took 18 s after the searches
            raise ConfigError(f"{len(limits):,} memory limits: a frontier takes at most {MAX_LIMITS:,} (each gets a share of "
                              "the time limit)", field="limits")
        if not space.fixed:  # before any search (a fixed space's minimum needs its schedule simulated)
            early = space_instance(spec.with_limit(None), space)
            least, why = minimum_memory(early, space, placement_of(space, devices))
            _refuse_limits_below(limits, least, why, space, early.memory_unit)
    if given is not None:  # as search checks its hints, named as this call names it
        check_in_space(given, space, devices, spec.microbatches, "given")
    # the frontier lists every handcrafted schedule, so the unlimited search builds them all
    hints = () if given is None else (given,)
    free = search(spec.with_limit(None), space,
                  replace(options.share(1 + len(limits) if limits is not None else 2), every_hint=True), hints=hints)
    instance = spec.with_limit(None).instance(stage_count(space, devices), free.schedule.stage_weights if free.schedule else None,
                                                placement_of(space, devices))
    minimum, _ = minimum_memory(instance, space, placement_of(space, devices), free.simulation if space.fixed else None)
    if limits is not None and space.fixed:
        _refuse_limits_below(limits, minimum, "", space, instance.memory_unit)
    # the file as it is, not as the search's hint ran it (a mixed backward's B split into I and W), but
    # a full-backward file in a split space as that space runs it, each B as I then W, and named so
    # (warm+split), as the handcrafted schedules beside it; those by their mark, not their names (a
    # user's 1f1b.csv is named 1f1b)
    points_handcrafted = [(c.name, peak_use(instance, c.simulation), c.simulation.step_time_s) for c in free.handcrafted if not c.given]
    if given is not None:
        shown = with_backward(given, True) if space.split_backward and not given.split_backward else given
        own = simulate(shown, instance.costs, instance.system)
        points_handcrafted = [(shown.name, peak_use(instance, own), own.step_time_s)] + points_handcrafted
    free_peak = peak_use(instance, free.simulation) if free.simulation else None
    if limits is None:  # the even grid, and every handcrafted schedule's own peak: "on the frontier" is judged there
        top = max([p for _, p, _ in points_handcrafted] + [free_peak if free_peak is not None else minimum])
        merged = sorted(default_limits(minimum, top, instance.memory_unit)
                        + [p for _, p, _ in points_handcrafted if p >= minimum * (1 - 1e-12)])
        limits = [v for k, v in enumerate(merged) if k == 0 or v - merged[k - 1] > 1e-9 * max(1.0, v)]  # once each
    free_point = None if free_peak is None or free.step_time is None else FrontierPoint(math.nan, free.status, free.step_time,
                                                                                        free.bound, free_peak)
    ordered = sorted(limits)
    # the unlimited search's proven optimum, with its peak: the limits it fits need no search
    optimum = free_point if free_point is not None and free.status == "optimal" else None

    def covered(limit: float) -> bool:
        return optimum is not None and optimum.peak_memory is not None and optimum.peak_memory <= limit * (1 + 1e-12)

    to_search = sum(not covered(limit) for limit in ordered)
    points = []
    first_round, searched = time.monotonic(), 0
    for limit in ordered:
        if optimum is not None and covered(limit):
            points.append(replace(optimum, memory_limit=limit))
            continue
        to_search -= 1  # the searches after this one
        if too_late(options, spec, space):  # no further searches once the budget is spent
            points.append(FrontierPoint(limit, NOT_SEARCHED, None, math.nan, None))
            continue
        try:
            result = search(spec.with_limit(limit), space, options.share(1 + to_search), hints=hints)
        except InfeasibleError:
            points.append(FrontierPoint(limit, "infeasible", None, math.inf, None))
            continue
        searched += 1
        peak = peak_use(instance, result.simulation) if result.simulation else None
        points.append(FrontierPoint(limit, result.status, result.step_time, result.bound, peak))
        if free_point is not None and result.step_time is not None and peak is not None \
                and (optimum is None or optimum.peak_memory is None or peak < optimum.peak_memory) \
                and math.isfinite(free_point.bound) and result.step_time <= free_point.bound * (1 + 1e-9):
            # no schedule under any limit beats the unlimited bound: this one is optimal under every looser
            # limit too, which then take it without a search (at 16 x 64 limits 31 to 63 each proved 267 again)
            optimum = FrontierPoint(limit, "optimal", result.step_time, free_point.bound, peak)
            to_search = sum(not covered(later) for later in ordered if later > limit)
    per_search = (time.monotonic() - first_round) / max(searched, 1)
    points = _second_round(points, spec, space, options, hints, instance, per_search)
    handcrafted_points = [FrontierPoint(math.nan, "feasible", step, math.nan, peak) for _, peak, step in points_handcrafted]
    points = _monotone(points, free_point, handcrafted_points)
    # every schedule known, as (peak memory, step): the searched points' (a point's peak, else its
    # limit), the unlimited search's and the handcrafted ones
    known = [(pt.peak_memory if pt.peak_memory is not None else pt.memory_limit, pt.step_time)
             for pt in [*points, *([free_point] if free_point is not None else [])] if pt.step_time is not None]
    known += [(peak, step) for _, peak, step in points_handcrafted]
    handcrafted = []
    for name, peak, step in points_handcrafted:
        handcrafted.append((name, peak, step, not any(_dominates(other, (peak, step)) for other in known)))
    return Frontier(space.describe(), tuple(points), tuple(handcrafted), instance.time_unit, instance.memory_unit, minimum,
                    instance.most_held_on(placement_of(space, devices)), memory_capacity(spec))


SECOND_ROUND_GAIN = 2.0
"""A frontier searches its unproven points again when each would get at least this many times the
time a first-round search took (:func:`_second_round`)."""


def _second_round(points: list[FrontierPoint], spec: InstanceSpec, space: Space, options: SolveOptions,
                  hints: tuple[Schedule, ...], instance, per_search_s: float) -> list[FrontierPoint]:
    """The points not proven optimal searched again, tightest first, in the time the first round left:
    limits covered by a point that met the unlimited bound need no search, and what their shares
    would have had is only known once that point is found (16 x 64: 10.9 s of a 30 s frontier used).
    A point keeps the shorter step and the higher bound of its two searches."""
    again = [k for k, pt in enumerate(points) if pt.status in ("feasible", "unknown")]
    if not again or options.remaining_s() < SECOND_ROUND_GAIN * per_search_s * len(again):
        return points
    points = list(points)
    for done, k in enumerate(again):
        if too_late(options, spec, space):
            break
        pt = points[k]
        try:
            result = search(spec.with_limit(pt.memory_limit), space, options.share(len(again) - done), hints=hints)
        except InfeasibleError:  # pragma: no cover - the first round found it feasible
            continue
        bound = max(pt.bound, result.bound)
        step: float | None
        peak: float | None
        if result.step_time is not None and (pt.step_time is None or result.step_time < pt.step_time - 1e-9):
            peak = peak_use(instance, result.simulation) if result.simulation else None
            step = result.step_time
        else:
            step, peak = pt.step_time, pt.peak_memory
        proven = step is not None and step <= bound * (1 + 1e-9)
        points[k] = FrontierPoint(pt.memory_limit, "optimal" if proven else "feasible" if step is not None else pt.status,
                                  step, bound, peak)
    return points


def _dominates(a: tuple[float, float], b: tuple[float, float]) -> bool:
    """Whether the (peak memory, step) ``a`` is at least as good as ``b`` in both and better in one
    (Pareto dominance, with a relative tolerance for float sums)."""
    (peak_a, step_a), (peak_b, step_b) = a, b
    no_more_memory = peak_a <= peak_b * (1 + 1e-12)
    no_longer = step_a <= step_b + 1e-9
    return no_more_memory and no_longer and (peak_a < peak_b * (1 - 1e-12) or step_a < step_b - 1e-9)


def _shorter_then_smaller(point: FrontierPoint) -> tuple[float, float]:
    """Sort key of the schedules a point may take: the shorter step (to 12 significant digits: sums
    of the same durations in another order differ in the last bit), then the smaller peak."""
    return (float(f"{point.step_time or 0.0:.12g}"), math.inf if point.peak_memory is None else point.peak_memory)


def _monotone(points: list[FrontierPoint], free: FrontierPoint | None,
              handcrafted: Sequence[FrontierPoint] = ()) -> list[FrontierPoint]:
    """The points with what each finds or proves shared with the others.

    - **Schedules.** A schedule found under one limit (or by the unlimited search, ``free``: its
      step, bound and peak), or a handcrafted schedule of the space (``handcrafted``: its step and
      peak), fits every limit at or above its peak, so each searched point takes the shortest
      schedule known that fits its limit (a search short of time may miss V-Half where it fits),
      and of the shortest the one needing least memory (a looser limit's search may end on the
      same step in more memory: 127.3 GiB where a tighter one's took 83.82).
    - **Bounds, downwards.** The optimum under a limit is at least the optimum under any looser
      limit (or none), so each searched point's bound is the largest of its own, the looser points'
      and the unlimited search's.

    A point whose step then meets its bound is optimal; points not searched (time limit) or
    infeasible stay as they are. So, as the limit grows, neither the steps nor the bounds rise.
    """
    searched = [pt.step_time is not None or math.isfinite(pt.bound) for pt in points]
    found = [pt for pt in [*points, free, *handcrafted] if pt is not None and pt.step_time is not None and pt.peak_memory is not None]
    floor = free.bound if free is not None and math.isfinite(free.bound) else 0.0
    shared = []
    for k, pt in enumerate(points):
        if not searched[k]:
            shared.append(pt)
            continue
        looser = [o.bound for o, ok in zip(points, searched) if ok and o.memory_limit >= pt.memory_limit]
        bound = max([floor, *looser])
        fitting = [o for o in found if (o.peak_memory or 0.0) <= pt.memory_limit * (1 + 1e-12)]
        best = min(fitting, key=_shorter_then_smaller, default=None)
        if best is None or (pt.step_time is not None and _shorter_then_smaller(best) >= _shorter_then_smaller(pt)):
            best = pt  # its own schedule unless another is shorter, or as short in less memory
        gap = relative_gap(best.step_time, bound)
        as_short = pt.step_time is not None and abs((best.step_time or 0.0) - pt.step_time) <= 1e-9 * max(1.0, pt.step_time)
        status = "optimal" if gap is not None and gap <= 1e-9 else (pt.status if as_short else "feasible")
        shared.append(FrontierPoint(pt.memory_limit, status, best.step_time, bound, best.peak_memory))
    return shared
