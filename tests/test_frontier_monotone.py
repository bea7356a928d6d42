"""The step-time vs memory frontier keeps what it found: the unlimited optimum for every limit that
holds it, and no looser limit with a worse schedule or a lower bound than a tighter one."""

import math

import pytest

from ppopt.solve import gap as gapping
from ppopt.solve.gap import NOT_SEARCHED, FrontierPoint, frontier
from ppopt.solve.instance import InstanceSpec
from ppopt.solve.options import SolveOptions
from ppopt.solve.space import parse_space
from ppopt.units import UnitCosts


def test_limits_at_or_above_the_unlimited_optimum_take_it_without_a_search(monkeypatch):
    """p = 8, m = 32, one-slot messages, split backward: the unlimited search proves its optimum (110
    slots when written, with a peak of 31 activations). Under limits at or above that schedule's peak
    it is optimal too, so none is searched (each search had a sliver of the budget and reported 124 /
    bound 110 / feasible, and the handcrafted GPipe at 124 was on the frontier). The peak is read from
    the unlimited search, not pasted: another optimal schedule may peak elsewhere."""
    spec = InstanceSpec(8, 32, UnitCosts(1.0, 2.0, None, 1.0))
    space = parse_space("placement=linear,backward=split")
    # a budget far above the 2 s the unlimited proof takes, so that a loaded machine still proves it
    free = gapping.search(spec, space, SolveOptions(120))
    assert free.status == "optimal" and free.step_time == free.bound
    peak = free.peak_memory if free.peak_memory is not None else gapping.peak_use(gapping.space_instance(spec, space), free.simulation)
    limits = []
    search = gapping.search

    def recorded(spec, space, options, hints=()):
        limits.append(spec.memory_limit)
        return search(spec, space, options, hints=hints)

    monkeypatch.setattr(gapping, "search", recorded)
    given = [peak, peak + 1, peak + 9]
    result = frontier(spec, space, given, SolveOptions(120))
    assert limits == [None]
    assert [(p.memory_limit, p.step_time, p.bound, p.status, p.peak_memory) for p in result.points] == [
        (limit, free.step_time, free.bound, "optimal", peak) for limit in given]
    on_frontier = {name: on for name, _, _, on in result.handcrafted}
    if peak <= 32:  # GPipe+split peaks at 32 in 124 slots: the optimum fits its memory and beats it
        assert on_frontier["gpipe+split"] is False


def test_points_share_schedules_upwards_and_bounds_downwards():
    from ppopt.solve.gap import _monotone

    point = FrontierPoint
    points = [
        point(4, "feasible", 60, 40, 4),
        point(8, "feasible", 70, 35, 8),  # a worse schedule than under 4: takes that one
        point(12, "unknown", None, 0.0, None),  # found nothing: the schedule of limit 16 fits (peak 10)
        point(16, "optimal", 50, 50, 10),  # proves 50 for every tighter limit's bound
        point(20, NOT_SEARCHED, None, math.nan, None),
        point(24, "feasible", 58, 30, 20),  # the unlimited search's schedule (peak 18) is shorter
    ]
    free = point(math.nan, "feasible", 55, 30, 18)
    shared = _monotone(points, free)
    assert [(p.memory_limit, p.step_time, p.bound, p.status, p.peak_memory) for p in shared[:4]] == [
        (4, 60, 50, "feasible", 4), (8, 60, 50, "feasible", 4), (12, 50, 50, "optimal", 10), (16, 50, 50, "optimal", 10)]
    assert shared[4] is points[4]  # not searched: left as it is
    assert (shared[5].step_time, shared[5].bound, shared[5].status, shared[5].peak_memory) == (50, 30, "feasible", 10)
    steps = [p.step_time for p in shared if p.step_time is not None]
    bounds = [p.bound for p in shared if not math.isnan(p.bound)]
    assert steps == sorted(steps, reverse=True) and bounds == sorted(bounds, reverse=True)


def test_a_default_frontier_is_monotone():
    spec = InstanceSpec(4, 8, UnitCosts(1.0, 2.0, None, 1.0))
    result = frontier(spec, parse_space("placement=linear,backward=split"), None, SolveOptions(10))
    steps = [p.step_time for p in result.points]
    assert None not in steps and steps == sorted(steps, reverse=True)
    assert all(p.bound <= p.step_time for p in result.points)
    assert all(p.peak_memory <= p.memory_limit for p in result.points)


def test_a_limit_given_twice_is_one_point_and_one_share_of_the_budget(monkeypatch):
    """Limits [3, 2, 3]: two searches under limits (2, then 3) after the unlimited one, so the budget
    is split three ways, not four: the unlimited search gets a third of the deterministic time (10 of
    30), the limit 2 half of what is left, the limit 3 all of what is left then. (The duplicate took a
    quarter, 7.5, before; and each search's share used to ignore what the earlier ones had spent, so
    the three could get 10 + 15 + 30.)"""
    searches = []
    search = gapping.search

    def recorded(spec, space, options, hints=()):
        searches.append((spec.memory_limit, options.deterministic_time, options.work.spent))
        return search(spec, space, options, hints=hints)

    monkeypatch.setattr(gapping, "search", recorded)
    spec = InstanceSpec(4, 8, UnitCosts(1.0, 2.0, None, 1.0))
    options = SolveOptions(20, deterministic_time=30.0).start()
    result = frontier(spec, parse_space("placement=linear"), [3, 2, 3], options)
    assert [limit for limit, _, _ in searches] == [None, 2, 3]
    (_, first, _), (_, second, spent_second), (_, third, spent_third) = searches
    assert first == 10.0
    assert second == pytest.approx((30.0 - spent_second) / 2) and third == pytest.approx(30.0 - spent_third)
    assert options.work.spent <= 30.0
    assert [point.memory_limit for point in result.points] == [2, 3]


def test_a_handcrafted_schedule_dominated_by_another_is_off_the_frontier():
    """V space, p = 3, m = 6, no messages: ZB-V takes 19 slots in 3 activations, DualPipeV 19 in 3.5.
    DualPipeV was marked on the frontier (no searched point strictly faster at or below 3.5);
    ZB-V needs less memory for the same step, so it is off. ZB-V, which meets the optimum at the
    least memory that allows 19, stays on."""
    from ppopt.solve.gap import _dominates

    assert _dominates((3, 19), (3.5, 19)) and _dominates((3, 18), (3, 19))
    assert not _dominates((3, 19), (3, 19)) and not _dominates((2, 21.5), (3, 19))
    spec = InstanceSpec(3, 6, UnitCosts(1.0, 2.0, None, 0.0))
    result = frontier(spec, parse_space("placement=v,backward=split"), None, SolveOptions(60))
    on = {name: (peak, step, on) for name, peak, step, on in result.handcrafted}
    assert on["zb-v"] == (3, 19, True) and on["dualpipev+split"] == (3.5, 19, False)


def test_every_handcrafted_peak_is_a_default_limit():
    """V space, p = 3, m = 6, no messages: DualPipeV holds 3.5 activations, off the one-activation
    grid; its peak is searched too, so "on the frontier" compares it with a search at that peak."""
    spec = InstanceSpec(3, 6, UnitCosts(1, 2, None, 0.0))
    result = frontier(spec, parse_space("placement=v,backward=split"), options=SolveOptions(20, deterministic_time=5.0))
    limits = [point.memory_limit for point in result.points]
    peaks = {name: peak for name, peak, _, _ in result.handcrafted}
    assert peaks["dualpipev+split"] == 3.5
    assert limits == [1, 2, 3, 3.5]
    assert all(any(abs(limit - peak) < 1e-9 for limit in limits) for peak in peaks.values())


def test_no_point_is_slower_than_a_handcrafted_schedule_that_fits_its_limit():
    """V space, p = 8, m = 64, one-slot messages, searches short of time (hints skipped): V-Min (4
    activations, 559.5 slots) and V-Half (5, 401.5) were listed on the frontier while the points at
    limits 4, 5 and 6 showed their searches' best, 613.5, 507 and 416.5. A handcrafted schedule of
    the space fits every limit at or above its peak, so it counts as found there."""
    searched = [FrontierPoint(4, "feasible", 613.5, 220.5, 4), FrontierPoint(5, "feasible", 507, 219.5, 5),
                FrontierPoint(6, "feasible", 416.5, 218.5, 6)]
    handcrafted = [FrontierPoint(math.nan, "feasible", 559.5, math.nan, 4), FrontierPoint(math.nan, "feasible", 401.5, math.nan, 5)]
    shared = gapping._monotone(searched, None, handcrafted)
    assert [(pt.step_time, pt.peak_memory) for pt in shared] == [(559.5, 4), (401.5, 5), (401.5, 5)]
    assert [pt.bound for pt in shared] == [220.5, 219.5, 218.5] and {pt.status for pt in shared} == {"feasible"}


def test_an_optimal_point_above_its_bound_says_the_ticks_round():
    """With a model the search proves the optimum in ticks, and a step up to the rounding above the
    bound is still called optimal (107.20 s against 107.11 s): the table read as a contradiction."""
    from ppopt.report.solve import frontier_text
    from ppopt.solve.gap import Frontier

    def table(step):
        point = FrontierPoint(100.0, "optimal", step, 107.11, 90.0)
        return frontier_text(Frontier("placement=linear", (point,), (), "s", "bytes", 50.0), 2, 4)

    assert "optimal: proven in the solver's ticks" in table(107.20)
    assert "optimal: proven in the solver's ticks" not in table(107.11)


def test_the_default_grid_holds_at_most_max_limits():
    """In unit mode the default limits were one activation apart: GPipe's peak at m = 8,000 made
    8,000 searches. Wider whole steps keep the grid within MAX_LIMITS, from the minimum on."""
    from ppopt.solve.gap import MAX_LIMITS, default_limits

    assert default_limits(2, 9, "activations") == [2, 3, 4, 5, 6, 7, 8, 9]
    wide = default_limits(2, 8000, "activations")
    assert len(wide) <= MAX_LIMITS and wide[0] == 2 and wide[-1] <= 8000
    steps = {b - a for a, b in zip(wide, wide[1:])}
    assert len(steps) == 1 and steps.pop() == 8  # the smallest whole step that fits: ceil(7,999 / 1,000)


def test_a_limit_no_device_can_reach_is_said_to_limit_nothing():
    """p = 4, m = 8 in unit mode, linear placement: a device holds one stage, so at most m = 8
    activations (the note said m · S = 32, every stage's, so limits of 8 to 31 read as binding); a
    limit of 1e9 limits nothing, and so does 8. With placement=any a device may hold every stage: m · S
    there."""
    from ppopt.report.solve import frontier_json, frontier_text

    result = frontier(InstanceSpec(4, 8, UnitCosts()), parse_space("placement=linear"), [2, 1e9], SolveOptions(20, workers=1))
    assert result.most_held == 8 and frontier_json(result)["most_held"] == 8
    assert ("a limit at or above 8, the most a device can hold here (its stages' activations of every microbatch), limits "
            "nothing") in frontier_text(result, 4, 8)
    tight = frontier(InstanceSpec(4, 8, UnitCosts()), parse_space("placement=linear"), [2, 7], SolveOptions(20, workers=1))
    assert "limits nothing" not in frontier_text(tight, 4, 8)
    v = frontier(InstanceSpec(3, 6, UnitCosts()), parse_space("placement=v,backward=split"), [6], SolveOptions(20, workers=1))
    assert v.most_held == 6  # two stages of half an activation each, six microbatches
    free = frontier(InstanceSpec(3, 4, UnitCosts()), parse_space("placement=any"), [11], SolveOptions(20, workers=1))
    assert free.most_held == 3 * 4


def test_of_equally_short_schedules_a_point_takes_the_one_needing_least_memory():
    """A looser limit's search ended on the optimal step in 127.3 GiB where a tighter limit's took
    83.82 GiB; the looser point showed the larger peak, so "peak used" rose and fell down the
    table for one step time. A point now takes, of the shortest schedules that fit it, the smallest."""
    tight = FrontierPoint(84.0, "optimal", 2.232, 2.232, 83.82)
    loose = FrontierPoint(128.0, "optimal", 2.232, 2.232, 127.3)
    slower = FrontierPoint(200.0, "feasible", 2.3, 2.232, 60.0)
    shared = gapping._monotone([tight, loose, slower], None)
    assert [(p.step_time, p.peak_memory, p.status) for p in shared] == [
        (2.232, 83.82, "optimal"), (2.232, 83.82, "optimal"), (2.232, 83.82, "optimal")]


def test_a_limit_whose_search_meets_the_unlimited_bound_covers_every_looser_limit(monkeypatch):
    """The unlimited search's optimum peaks high (GPipe's 64 at 16 x 64); a tighter limit's search that
    reaches its bound (267 under 31) is optimal under every looser limit too. Each of them was searched
    again (33 searches re-proving 267), in shares taken from the tight limits, which then stopped at
    their hints. Here the unlimited search is stood in for: bound 10, proved by a schedule peaking
    at 6; the limit 3 reaches 10 with a peak of 3, so 4 and 5 take it without a search, and the time
    they leave goes to a second search of the one point left unproven, the limit 2."""
    from types import SimpleNamespace

    def result(step, bound, status):  # a simulation to be there: its peak is stood in for below
        return SimpleNamespace(status=status, step_time=step, bound=bound, simulation=SimpleNamespace(), schedule=None,
                               handcrafted=(), peak_memory=None)

    searched = []

    def stand_in(spec, space, options, hints=()):
        searched.append(spec.memory_limit)
        step = {None: 10.0, 2: 12.0}.get(spec.memory_limit, 10.0)
        return result(step, 10.0, "optimal" if step == 10.0 else "feasible")

    peaks = {None: 6.0, 2: 2.0, 3: 3.0}
    monkeypatch.setattr(gapping, "search", stand_in)
    monkeypatch.setattr(gapping, "peak_use", lambda instance, simulation: peaks[searched[-1]])
    monkeypatch.setattr(gapping, "minimum_memory", lambda *args: (1.0, ""))
    spec = InstanceSpec(4, 8, UnitCosts())
    points = frontier(spec, "placement=linear", [2, 3, 4, 5], SolveOptions(30)).points
    assert searched == [None, 2, 3, 2]
    assert [(p.memory_limit, p.step_time, p.status, p.peak_memory) for p in points] == [
        (2, 12.0, "feasible", 2.0), (3, 10.0, "optimal", 3.0), (4, 10.0, "optimal", 3.0), (5, 10.0, "optimal", 3.0)]
