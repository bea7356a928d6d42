"""The CP-SAT explorer: known optima, bound ordering, fixed points, dominance without loss."""

import contextlib
import math
import re
import threading
import time
from dataclasses import replace

import pytest

from ppopt.errors import ConfigError, InfeasibleError, ScheduleError
from ppopt.generators import generate, names
from ppopt.simulate import simulate
from ppopt.solve.gap import NOT_SEARCHED, frontier, gap_report
from ppopt.solve.instance import InstanceSpec, unit_instance
from ppopt.solve.options import MAX_WORKERS, SolveOptions
from ppopt.solve.search import search
from ppopt.solve.space import FAMILY_MEMBERS, parse_space
from ppopt.units import UnitCosts
from ppopt.validation import validate

DET = 5.0  # deterministic time limit: reproducible on any machine


def unit(p, m, *, backward=2.0, weight=None, comm=0.0, limit=None, forward=1.0):
    return InstanceSpec(p, m, UnitCosts(forward, backward, weight, comm), memory_limit=limit)


def run(instance_spec, space, minimize_memory=False, **kwargs):
    kwargs.setdefault("time_limit_s", 30)
    kwargs.setdefault("deterministic_time", DET)
    return search(instance_spec, parse_space(space), SolveOptions(**kwargs), minimize_memory=minimize_memory)


def assert_bounds_ordered(result):
    """analytic bound <= bound <= step time <= every fitting handcrafted step time (and the hint's);
    solver bound <= objective."""
    assert result.analytic.best <= result.bound + 1e-9
    assert result.bound <= result.step_time + 1e-9
    fitting = [c.simulation.step_time_s for c in result.handcrafted if c.fits]
    assert all(result.step_time <= step + 1e-9 for step in fitting)
    if result.hint_step_time is not None and (fitting or result.memory_semantics == "no memory limit"):
        assert result.step_time <= result.hint_step_time + 1e-9
    if result.solver_objective is not None:
        assert result.solver_bound <= result.solver_objective + 1e-9


def assert_found_schedule_is_sound(result, factory):
    schedule = validate(result.schedule)
    instance = factory.instance(schedule.stages, schedule.stage_weights)
    sim = simulate(schedule, instance.costs, instance.system)
    assert sim.step_time_s == pytest.approx(result.step_time)
    if instance.memory_limit is not None:
        assert max(sim.peak_activation_bytes) <= instance.memory_limit + 1e-9


@pytest.mark.parametrize("p, m", [(2, 3), (3, 5), (4, 8), (5, 6)])
@pytest.mark.parametrize("backward", [1.0, 2.0])
def test_linear_without_cap_is_proven_at_the_1f1b_closed_form(p, m, backward):
    factory = unit(p, m, backward=backward)
    result = run(factory, "placement=linear")
    assert result.status == "optimal"
    assert result.step_time == pytest.approx((m + p - 1) * (1 + backward))
    assert result.gap == pytest.approx(0.0)
    assert_bounds_ordered(result)


@pytest.mark.parametrize("m", [4, 6, 8, 12, 16])
def test_zb_h1_is_proven_optimal_with_cap_p_freed_at_w(m):
    p = 4
    factory = unit(p, m, backward=2, weight=1, limit=p)
    result = run(factory, "placement=linear,backward=split")
    zb_h1 = next(c for c in result.handcrafted if c.name == "zb-h1")
    assert result.status == "optimal"
    assert zb_h1.fits
    assert result.step_time == pytest.approx(zb_h1.simulation.step_time_s) == pytest.approx(3 * m + p - 1)
    assert_bounds_ordered(result)
    assert_found_schedule_is_sound(result, factory)


def test_with_communication_and_cap_p_the_solver_beats_1f1b_and_proves_it():
    p, m = 4, 8
    factory = unit(p, m, backward=2, comm=1, limit=p)
    result = run(factory, "placement=linear")
    one_f_one_b = next(c for c in result.handcrafted if c.name == "1f1b")
    assert result.status == "optimal"
    # 46 slots, proven optimal by CP-SAT (README, known results); the two end devices with the meetings
    # on the devices between already bound at 46, so the best hint is proven without a solve
    assert result.step_time == pytest.approx(46)
    assert result.step_time < one_f_one_b.simulation.step_time_s
    assert result.bound == pytest.approx(46)
    assert_bounds_ordered(result)
    assert_found_schedule_is_sound(result, factory)
    report = gap_report(factory, {}, ["1f1b"], SolveOptions(30, deterministic_time=DET))
    (row,) = report.rows
    assert row.gap == pytest.approx((one_f_one_b.simulation.step_time_s - result.bound) / result.bound)
    assert row.gap > 0


def test_the_report_says_when_the_solver_s_schedule_is_only_as_short_as_its_hint():
    """A solver that returns a schedule of the hint's length did not beat the hint, and the step line
    says so; one shorter by a slot, or the hint itself, is reported without the remark."""
    from ppopt.report.solve import search_text

    result = run(unit(4, 8, backward=2, comm=1, limit=4), "placement=linear")
    hint = result.hint_step_time
    assert hint is not None

    def step_line(**changes):
        return next(line for line in search_text(replace(result, **changes), show_grid=False).splitlines()
                    if line.startswith("step time"))

    assert step_line(from_solver=True, step_time=hint).endswith("(best from solver, the same length as the hint)")
    assert step_line(from_solver=True, step_time=hint - 1).endswith("(best from solver)")
    assert "as long as" not in step_line(from_solver=False, step_time=hint)


@pytest.mark.parametrize("name", names())
@pytest.mark.parametrize("comm", [0.0, 1.0])
def test_fixed_mode_reproduces_each_generator_exactly(name, comm):
    p, m = 4, 8
    factory = unit(p, m, backward=2, comm=comm)
    schedule = validate(generate(name, p, m))
    instance = factory.instance(schedule.stages, schedule.stage_weights)
    simulated = simulate(schedule, instance.costs, instance.system).step_time_s
    result = run(factory, f"fixed:{name}")
    assert result.status == "optimal"
    assert result.solver_objective == pytest.approx(simulated)
    assert result.step_time == pytest.approx(simulated)


@pytest.mark.parametrize(
    "spec, p, m, limit",
    [
        ("placement=linear", 3, 4, 2),
        ("placement=linear,backward=split", 3, 4, 2),
        ("placement=looped,chunks=2", 2, 4, 2),
        ("placement=bidirectional", 2, 4, None),
        ("placement=bidirectional,directions=free", 2, 3, 2),
        ("placement=v,backward=split", 2, 3, 2),
        # several stages per device, a cap that binds each stage (the per-stage precedence)
        ("placement=v", 2, 5, 1),
        ("placement=v,backward=split", 2, 4, 1),
        ("placement=looped,chunks=2", 2, 5, 1),
        ("placement=zigzag,waves=2", 2, 6, 1.25),
    ],
)
def test_dominance_rule_keeps_the_optimum(spec, p, m, limit):
    """The bare model of the space (no hint, no lower bound: a search takes the optimum of these
    small instances from a handcrafted hint that meets its bounds, and builds no model, so the rule
    would go untested) solved to optimality with and without the rule: the same optimum."""
    from ortools.sat.python import cp_model

    from ppopt.solve.model import Frame, build_model
    from ppopt.solve.search import space_instance

    space = parse_space(spec)
    instance = space_instance(unit(p, m, backward=2, comm=1, limit=limit), space)
    optima = []
    for dominance in (True, False):
        built = build_model(instance, space, Frame(1.0, 200), dominance=dominance)
        solver = cp_model.CpSolver()
        solver.parameters.num_workers = 1
        solver.parameters.max_deterministic_time = 60  # machine-independent: a loaded machine cannot cut it short
        assert solver.solve(built.model) == cp_model.OPTIMAL
        optima.append(solver.objective_value)
    assert optima[0] == optima[1]


def test_free_placement_is_at_least_as_good_as_linear():
    p, m = 2, 3
    factory = unit(p, m, comm=1)
    linear = run(factory, "placement=linear")
    free = run(factory, "placement=any,chunks=1")
    assert free.status == "optimal"
    assert free.step_time <= linear.step_time + 1e-9
    assert_found_schedule_is_sound(free, factory)


def test_bidirectional_free_directions_never_lose_to_even_directions():
    p, m = 4, 4
    factory = unit(p, m, comm=1)
    even = run(factory, "placement=bidirectional")
    free = run(factory, "placement=bidirectional,directions=free")
    assert free.step_time <= even.step_time + 1e-9
    assert_bounds_ordered(free)
    assert_found_schedule_is_sound(free, factory)


@pytest.mark.parametrize("p, m, costs, uneven", [(4, 6, {"comm": 1}, 27), (4, 2, {"forward": 0.5, "backward": 3, "comm": 2}, 29.5)])
def test_even_directions_split_the_microbatches_in_halves_when_p_does_not_divide_m(p, m, costs, uneven):
    """With no hint to take directions from, each microbatch's was Chimera's rule (the second half of
    each p goes up), which halves them only when p divides m: at p = 4, m = 6 it sent 4 down and 2 up
    and proved ``uneven`` = 27 slots "optimal" against the bound, which assumes m/2 each way; at
    m = 2 both went down (29.5). The halved space holds a shorter schedule (26 in both cases, found
    by an audit's own CP-SAT model): the search now finds one, proves it, and halves the directions."""
    factory = unit(p, m, **costs)
    found = run(factory, "placement=bidirectional")
    assert found.status == "optimal" and found.step_time == pytest.approx(found.bound) and found.step_time < uneven
    assert 2 * sum(found.schedule.replica_of) == m
    assert_bounds_ordered(found)
    assert_found_schedule_is_sound(found, factory)


def test_gap_with_method_lns_searches_the_spaces_lns_cannot_with_cp_sat():
    """`gap --method lns` searched the linear spaces and then failed on Chimera's bidirectional one
    (exit 1, the rows found thrown away). Such a space is now searched by CP-SAT alone, with a note."""
    notes = []
    options = SolveOptions(30, deterministic_time=DET, method="lns", progress=notes.append)
    rows = gap_report(unit(4, 8, comm=1, limit=3), {}, ["1f1b", "chimera"], options).rows
    assert [row.schedule for row in rows] == ["1f1b", "chimera"] and all(row.status == "optimal" for row in rows)
    assert any(note.startswith("--method lns does not apply to placement=bidirectional") for note in notes)


def test_a_free_placement_is_hinted_by_the_greedy_schedules_of_its_members_maps():
    """`placement=any` had no greedy hint (it needs a stage map), so when no handcrafted schedule fit
    the limit the solve started from nothing: llama3-8b at p = 4, m = 8 under 1,200 GiB ends at
    170.7 s in 10 s without these hints, 77.94 s with them (README). Its greedy hints now take the looped and V maps of its members, so
    the result is never worse than the best of them (and its hint fits)."""
    from ppopt.placement import placement
    from ppopt.solve.greedy import best_greedy_schedule
    from ppopt.solve.search import space_instance

    factory = unit(4, 8, comm=1, limit=3)
    space = parse_space("placement=any,chunks=2")
    instance = space_instance(factory, space)
    greedy = [simulate(validate(best_greedy_schedule(instance, placement(style, 4, chunks=2), False)), instance.costs,
                       instance.system).step_time_s for style in ("looped", "v")]
    found = run(factory, "placement=any,chunks=2", time_limit_s=20, deterministic_time=2)
    assert found.hint_fits and found.step_time <= min(greedy) + 1e-9
    assert_bounds_ordered(found)
    assert_found_schedule_is_sound(found, factory)


def test_a_hint_over_the_memory_limit_is_reported_as_such():
    """A bidirectional space under a cap of 3 has no greedy hint (replicas) and DualPipe's schedule
    needs more: it still starts the solve, and the report said `hint dualpipe: 27 slots` beside a
    result of 32 without a word."""
    found = run(unit(4, 8, limit=3), "placement=bidirectional")
    assert not found.hint_fits and found.hint_step_time < found.step_time
    from ppopt.report.solve import search_text

    assert "(over the memory limit: a start for the solver, not a schedule of the space)" in search_text(found)


def test_same_seed_reproduces_a_run_stopped_before_optimality():
    """One worker and a deterministic time limit that stops the solve early: the same seed gives the
    same schedule and objective; some other seed another schedule (so the comparison can tell: not
    that any one seed must differ, which CP-SAT does not promise)."""
    spec = unit(6, 12, comm=1, limit=3)

    def stopped(seed):
        return run(spec, "placement=looped", seed=seed, workers=1, deterministic_time=0.05, dominance=False)

    first, second = stopped(1), stopped(1)
    assert first.status == "feasible" and first.gap > 0  # stopped before proving optimality
    assert first.schedule.orders == second.schedule.orders
    assert first.solver_objective == second.solver_objective and first.bound == second.bound
    assert any(stopped(seed).schedule.orders != first.schedule.orders for seed in (2, 3, 4, 5))


def test_memory_limit_below_minimum_names_the_minimum():
    # two chunks of half a share each: one microbatch keeps both alive on a device
    with pytest.raises(InfeasibleError, match=r"memory limit 0.75 activations is below the minimum 1 activation"):
        run(unit(2, 4, limit=0.75), "placement=looped,chunks=2")


def test_modelled_memory_limit_below_persistent_state_is_infeasible():
    factory = InstanceSpec(4, 8, model="llama3-8b", system="dgx-h100", global_batch=8, memory_limit=1e9)
    with pytest.raises(InfeasibleError, match="below the minimum"):
        run(factory, "placement=linear")


def test_modelled_search_bounds_are_ordered():
    p, m = 4, 8
    factory = InstanceSpec(p, m, model="llama3-8b", system="dgx-h100", global_batch=8)
    result = run(factory, "placement=linear")
    assert result.status in ("optimal", "feasible")
    assert_bounds_ordered(result)
    assert_found_schedule_is_sound(result, factory)


@pytest.mark.parametrize(
    "spec, message",
    [
        ("placement=diagonal", "space key 'placement' must be one of"),
        ("colour=red", "unknown space key 'colour'"),
        ("placement", "is not KEY=VALUE"),
        ("chunks=0", "'chunks' must be a positive integer"),
        ("placement=looped,chunks=1_0", "'chunks' must be a positive integer, got '1_0'"),  # int() reads 10
        ("fixed:nope", "unknown schedule 'nope'"),
        ("placement=linear,split=1:2", "needs placement=bidirectional"),
        ("placement=linear,chunks=2", "space key 'chunks' needs placement=looped or any or family"),  # was ignored
        ("chunks=3", "space key 'chunks' needs placement=looped or any or family"),  # the default placement is linear
        ("placement=v,waves=2", "space key 'waves' needs placement=zigzag or family"),
        # a value of 10,000 characters was echoed whole in the message
        ("placement=" + "x" * 10_000, r"^space: 10,010 characters, longer than the 200 a space spec may take: "
                                      r"got 'placement=x{30}'\.\.\. \(10,010 characters\)$"),
    ],
)
def test_malformed_space_specs_are_named(spec, message):
    with pytest.raises(ScheduleError, match=message):
        parse_space(spec)


def test_the_longest_space_of_every_key_is_read():
    longest = "placement=bidirectional , chunks=99999999 , waves=99999999 , backward=split , order=free , directions=even , split=99999999:99999999"
    with pytest.raises(ScheduleError, match="needs placement=looped"):  # read whole: its keys conflict, its length does not
        parse_space(longest)


def test_unit_instance_scales_chunk_costs_by_share():
    instance = unit_instance(4, 8, 8, UnitCosts(forward=1, backward=2))
    assert instance.costs[0].forward_s == 0.5
    assert instance.costs[0].backward_s == 1.0
    assert instance.costs[0].activation_bytes == 0.5


def test_minimize_memory_finds_the_least_peak_at_the_optimal_step():
    p, m = 4, 8
    factory = unit(p, m)
    linear = run(factory, "placement=linear", minimize_memory=True)
    assert linear.memory_status == "optimal"
    assert linear.step_time == pytest.approx((m + p - 1) * 3)
    assert linear.peak_memory == pytest.approx(p)  # 1F1B's device-0 peak is the least possible
    looped = run(factory, "placement=looped,chunks=2", minimize_memory=True)
    interleaved = next(c for c in looped.handcrafted if c.name == "interleaved-1f1b")
    assert looped.memory_status == "optimal"
    assert looped.step_time == pytest.approx(interleaved.simulation.step_time_s)
    assert looped.peak_memory < max(interleaved.simulation.peak_activation_bytes)
    assert max(looped.simulation.peak_activation_bytes) == pytest.approx(looped.peak_memory)


def test_analytic_bounds_by_hand():
    """p = 4, m = 8, F = 1, B = 2, one-slot messages, at most one live activation per device."""
    result = run(unit(4, 8, comm=1, limit=1), "placement=linear")
    bounds = result.analytic
    assert bounds.critical_path == 4 * 3 + 2 * 3  # one microbatch: 4 F, 4 B, 6 hops
    # device 3: head 3 * (F + hop) = 6, load 8 * 3 = 24, tail 3 * (B + hop) = 9
    assert bounds.device_load == 39
    # device 0 waits 1 + 3 * 3 + 6 = 16 slots for its first B and may run 1 F meanwhile: 0 + 24 + 15
    assert bounds.warmup == 39
    # each activation on device 0 lives >= 1 + 9 + 6 + 2 = 18 slots, one at a time: 8 * 18 = 144
    assert bounds.memory == 144
    assert result.status == "optimal" and result.step_time == 144


@pytest.mark.parametrize("p, m, comm, cap, spec", [(4, 8, 1, 4, "placement=linear"), (8, 16, 1, 3, "placement=linear,backward=split"),
                                                   (4, 8, 1, 2, "placement=looped,chunks=2"), (3, 5, 2, None, "placement=v"),
                                                   (8, 32, 1, 6, "placement=bidirectional,directions=free")])
def test_greedy_hint_is_valid_and_keeps_the_cap(p, m, comm, cap, spec):
    from ppopt.solve.greedy import greedy_schedule
    from ppopt.solve.space import placement_of

    space = parse_space(spec)
    placement = placement_of(space, p)
    instance = unit(p, m, comm=comm, limit=cap).instance(len(placement), None)
    schedule = validate(greedy_schedule(instance, placement, space.split_backward))
    sim = simulate(schedule, instance.costs, instance.system)
    if cap is not None:
        assert max(sim.peak_activation_bytes) <= cap + 1e-9


@pytest.mark.parametrize("spec, p, m, comm, cap, optimum", [
    # optimum confirmed by the MILP baseline (benchmarks/milp_baseline.py); the greedy hint takes 43.5
    ("placement=linear,backward=split", 4, 6, 1, 3, 43),
])
def test_solver_reaches_the_known_optimum_where_the_hint_falls_short(spec, p, m, comm, cap, optimum):
    """F = 1, B = 3 (I = W = 1.5)."""
    factory = unit(p, m, comm=comm, limit=cap, backward=3)
    result = run(factory, spec)
    assert result.status == "optimal" and result.from_solver
    assert result.step_time == optimum
    assert result.hint_step_time > optimum
    assert_found_schedule_is_sound(result, factory)


def test_with_free_directions_the_greedy_hint_fits_where_no_handcrafted_schedule_does():
    """p = 8, m = 32, one-slot messages, 6 live activations per device: DualPipe and Chimera are all
    over the cap, and the search, without a hint, reported no schedule within 3 s. The greedy
    schedule sends every microbatch down one route and fits, so there is always one."""
    result = run(unit(8, 32, comm=1, limit=6), "placement=bidirectional,directions=free", time_limit_s=20,
                 deterministic_time=1.0)
    assert result.handcrafted and not any(c.fits for c in result.handcrafted)
    assert result.hint == "greedy" and result.step_time is not None
    assert_found_schedule_is_sound(result, unit(8, 32, comm=1, limit=6))  # valid, its step, within the cap


def test_greedy_hint_fills_the_room_1f1b_leaves_under_delays():
    from ppopt.solve.greedy import greedy_schedule
    from ppopt.solve.space import placement_of

    spec = unit(4, 8, comm=1, limit=4)
    instance = spec.instance(4, None)
    greedy = greedy_schedule(instance, placement_of(parse_space("placement=linear"), 4), False)
    proven = search(spec, parse_space("placement=linear"), SolveOptions(30))
    one_f_one_b = simulate(generate("1f1b", 4, 8), instance.costs, instance.system).step_time_s
    # the greedy hint meets the space's proven optimum, where 1F1B waits (49 slots)
    assert proven.status == "optimal"
    assert simulate(greedy, instance.costs, instance.system).step_time_s == proven.bound < one_f_one_b


def test_schedule_flags_fill_what_the_space_leaves_out():
    assert parse_space("placement=looped", chunks=3).chunks == 3
    assert parse_space("placement=looped,chunks=4", chunks=4).chunks == 4
    with pytest.raises(ScheduleError, match="3 contradicts the space's chunks=4: give one of them") as contradicted:
        parse_space("placement=looped,chunks=4", chunks=3)  # the spec won, silently
    assert contradicted.value.field == "chunks"
    assert parse_space("fixed:interleaved-1f1b", chunks=3).fixed_options == {"chunks": 3}
    assert parse_space("placement=bidirectional,split=1:3", split="1:3").split == (1.0, 3.0)
    with pytest.raises(ScheduleError, match="1:2 contradicts the space's split") as split:
        parse_space("placement=bidirectional,split=1:1", split="1:2")
    assert split.value.field == "split"
    with pytest.raises(ScheduleError, match=r"1f1b does not take it \(fixed:1f1b\)") as untaken:
        parse_space("fixed:1f1b", chunks=3)  # accepted and ignored
    assert untaken.value.field == "chunks"
    assert parse_space("placement=zigzag", waves=2).waves == 2
    assert parse_space("placement=bidirectional", split="1:3").split == (1.0, 3.0)
    for placement, flag in (("linear", {"split": "1:3"}), ("linear", {"chunks": 3}), ("v", {"waves": 2})):
        with pytest.raises(ScheduleError, match="only applies to a space with placement=") as ignored:
            parse_space(f"placement={placement}", **flag)  # the flag would be ignored: it was, silently
        assert ignored.value.field == next(iter(flag))
    with pytest.raises(ScheduleError, match="must be a positive integer") as error:
        parse_space("placement=looped", chunks=0)
    assert error.value.field == "chunks"


def _no_solver(self):
    raise AssertionError("no CP-SAT call once the budget is spent")


def test_a_spent_budget_reports_the_hint_without_solving(monkeypatch):
    monkeypatch.setattr(SolveOptions, "solver", _no_solver)
    spent = replace(SolveOptions(5), deadline=time.monotonic() - 1)
    result = search(unit(4, 8, comm=1, limit=4), parse_space("placement=linear"), spent)
    assert result.status == "feasible" and not result.from_solver
    # the first hint that fits (1F1B, 49 slots) is reported; with no time left no other is built
    # (the greedy one, 46 slots, is what a search with time finds first). 1F1B's 49 at p = 4, m = 8,
    # F = 1, B = 2, one-slot messages is its critical path, 18 + 15 + 16:
    # - microbatch 0's round trip, 4 F + 4 B + 6 messages = 4 + 8 + 6 = 18 (B0 on device 0 ends at 18);
    # - device 0 runs F4 right after B0 (its steady state), F4 goes down to device 3 and its backward
    #   back up to device 1: 4 F + 3 B + 5 messages = 4 + 6 + 5 = 15 (B4 on device 1 ends at 33);
    # - device 1 runs F7 right after B4, F7 goes down to device 3 and its backward back up to device 0:
    #   3 F + 4 B + 5 messages = 3 + 8 + 5 = 16, so B7 on device 0 ends at 49.
    # ZB-H1's 41 (F = I = W = 1) is its critical path, written out in tests/test_zb_h2.py.
    assert result.hint == "1f1b" and result.step_time == result.hint_step_time == 49
    assert "time limit reached before the solve" in result.note
    lowered = search(unit(4, 8, comm=1, limit=4), parse_space("placement=linear"), spent, minimize_memory=True)
    assert lowered.peak_memory is None and lowered.memory_status.startswith("unknown (time limit")
    report = gap_report(unit(4, 8, comm=1, limit=4), {}, ["1f1b", "zb-h1"], spent)
    assert [row.status for row in report.rows] == [NOT_SEARCHED, NOT_SEARCHED]
    assert [row.step_time for row in report.rows] == [49, 41] and all(row.gap is None for row in report.rows)
    points = frontier(unit(4, 8, comm=1), parse_space("placement=linear"), [2, 4], spent).points
    assert [point.status for point in points] == [NOT_SEARCHED, NOT_SEARCHED]
    # in a split-backward space the families built for it come first (GPipe split was the first hint)
    split = search(unit(4, 8, comm=1), parse_space("placement=linear,backward=split"), spent)
    assert split.hint == "zb-h1" and [c.name for c in split.handcrafted] == ["zb-h1"]
    family = search(unit(4, 8, comm=1), parse_space("placement=family"), spent)
    assert family.step_time is not None and family.gap is None  # the unsearched placements leave no bound
    assert family.note == "time limit reached before placements looped, v"  # zigzag with one wave is the V


@pytest.fixture
def clock(still_clock):
    return still_clock("ppopt.solve.options")


def test_the_budget_is_shared_by_the_steps_of_a_request(clock):
    options = SolveOptions(10).start()
    first = options.share(4)
    assert options.deadline == 10 and first.deadline == first.remaining_s() == 10 / 4
    clock.now = 4.0  # 6 s left: an equal share of what remains, never past the request's deadline
    assert options.share(3).deadline == 4.0 + 6 / 3
    assert options.share(1).deadline == options.deadline
    assert SolveOptions(10, deterministic_time=8).share(4).deterministic_time == 2
    assert options.start() is options  # the deadline is fixed once


def test_a_spent_deterministic_budget_leaves_the_next_steps_a_sliver_not_an_error():
    """Steps that overran their shares left 0 for the next, which SolveOptions refused: `frontier
    --deterministic-time 0.5` at p = 8, m = 64 ended with "--deterministic-time: must be a finite
    number > 0, got 0.0"."""
    from ppopt.solve.options import LEAST_DETERMINISTIC_SHARE

    options = SolveOptions(10, deterministic_time=1.0).start()
    options.charge(1.5)  # more than the whole budget
    assert options.deterministic_left() == 0
    assert options.share(3).deterministic_time == LEAST_DETERMINISTIC_SHARE


@pytest.mark.parametrize("kwargs, field", [
    ({"time_limit_s": math.nan}, "time_limit_s"), ({"time_limit_s": math.inf}, "time_limit_s"),
    ({"time_limit_s": 0}, "time_limit_s"), ({"time_limit_s": -1}, "time_limit_s"),
    ({"workers": 0}, "workers"), ({"workers": MAX_WORKERS + 1}, "workers"), ({"workers": 100000}, "workers"),
    ({"seed": -1}, "seed"), ({"deterministic_time": math.nan}, "deterministic_time"),
])
def test_bad_solve_options_name_their_field(kwargs, field):
    with pytest.raises(ConfigError) as error:
        SolveOptions(**kwargs)
    assert error.value.field == field


@pytest.mark.parametrize("limit", [0, -1, math.nan, math.inf])
def test_bad_memory_limits_name_their_field(limit):
    with pytest.raises(ConfigError) as error:
        unit(4, 8, limit=limit)
    assert error.value.field == "memory_limit"


def test_a_fractional_unit_memory_limit_counts_chunk_activations():
    """Chunk activations are p/S = 1/2 here: a limit of 1.5 admits three of them, between 1 and 2."""
    steps = {}
    for limit in (1, 1.5, 2):
        result = run(unit(2, 4, comm=1, limit=limit), "placement=looped,chunks=2")
        assert result.status == "optimal"
        assert max(result.simulation.peak_activation_bytes) <= limit
        steps[limit] = result.step_time
    assert steps[1] > steps[1.5] > steps[2]


def test_a_limit_just_under_a_whole_count_of_activations_is_not_rounded_up():
    """2.9999999 activations admit two, not three: the limit's short fraction (3) was taken, so the
    solver's schedule held three (over the limit) at a step of 31 slots beside an analytic bound of
    39. A typed decimal still means itself: 1.5 is three half activations (the test above)."""
    from ppopt.solve.model import integer_memory

    # activations of 1/10, 1/3 and 1 under limits typed as decimals: whole counts, not a float's hair less
    assert integer_memory([0.1], 0.3)[:2] == ([1], 3) and integer_memory([1 / 3], 1.0)[:2] == ([1], 3)
    assert integer_memory([1.0], 2.9999999)[:2] == ([1], 2)
    under, two = (run(unit(4, 8, comm=1, limit=limit), "placement=linear,backward=split") for limit in (2.9999999, 2))
    assert max(under.simulation.peak_activation_bytes) <= 2
    assert under.status == "optimal" and under.step_time == two.step_time and under.bound <= under.step_time


def test_a_bytes_limit_exactly_at_two_activations_beside_fractional_state_admits_two():
    """Llama 3 8B, t = 2, d = 20 with a distributed optimizer (the state over 20 replicas is a
    fractional byte count), p = 3, m = 4: a limit of exactly device 0's state and two activations.
    The model rounded the state up and the limit down, a byte short of two activations, and proved
    2.005 s "optimal" where a schedule of 1.189 s fits (the simulator's check is exact): a limit a
    byte higher gives the same answer now."""
    from ppopt.job import Parallelism
    from ppopt.solve.space import placement_of

    space = parse_space("placement=linear")
    spec = InstanceSpec(3, 4, model="llama3-8b", system="dgx-h100", global_batch=80,
                        parallel=Parallelism(tp=2, dp=20, distributed_optimizer=True))
    first = spec.instance(3, placement=placement_of(space, 3)).costs.stages[0]
    assert first.persistent_bytes != round(first.persistent_bytes)  # the case: fractional state
    limit = first.persistent_bytes + 2 * first.activation_bytes
    # a hair under it (within the fit check's relative slack of 1e-12: 0.01 bytes here) fits the same
    at, under, above = (search(replace(spec, memory_limit=limit), space, SolveOptions(30, deterministic_time=DET))
                        for limit in (limit, limit * (1 - 5e-13), limit + 1))
    assert at.status == under.status == above.status == "optimal" and at.step_time == under.step_time == above.step_time
    assert max(at.simulation.peak_memory_bytes) <= limit


def test_a_free_placement_and_the_memory_solve_keep_a_limit_set_exactly_at_fractional_state():
    """Llama 3 8B, d = 40 with a distributed optimizer (fractional state): a free placement under
    exactly the peak of its best schedule without a limit, and a memory solve under exactly the
    peak of its schedule. The model rounded the state up and the limit down: the first "proved"
    2.05 s above the 2.044 s schedule that fits, the second called the memory solve infeasible."""
    from ppopt.job import Parallelism

    parallel = Parallelism(dp=40, distributed_optimizer=True)
    free = InstanceSpec(2, 4, model="llama3-8b", system="dgx-h100", global_batch=160, parallel=parallel)
    # the least peak of a member of the free space at its best step
    unlimited = search(free, parse_space("placement=v"), SolveOptions(30, deterministic_time=DET), minimize_memory=True)
    peak = max(unlimited.simulation.peak_memory_bytes)
    assert peak != round(peak)  # the case: a fractional peak
    assert unlimited.peak_memory == peak  # the reported least peak is its schedule's, not the model's, bytes lower
    at = search(replace(free, memory_limit=peak), parse_space("placement=any,chunks=2"), SolveOptions(30, deterministic_time=DET))
    assert at.bound <= unlimited.step_time + 1e-12 and at.step_time <= unlimited.step_time
    linear = InstanceSpec(4, 8, model="llama3-8b", system="dgx-h100", global_batch=320, parallel=parallel)
    first = search(linear, parse_space("placement=linear"), SolveOptions(30, deterministic_time=DET))
    lowered = search(replace(linear, memory_limit=max(first.simulation.peak_memory_bytes)), parse_space("placement=linear"),
                     SolveOptions(30, deterministic_time=DET), minimize_memory=True)
    assert lowered.memory_status == "optimal" and lowered.peak_memory <= max(first.simulation.peak_memory_bytes) * (1 + 1e-12)


@pytest.mark.parametrize("space", ["fixed:zb-h1", "placement=linear,backward=split"])
def test_a_limit_that_only_an_early_release_at_i_meets_is_searched_and_bounded(space):
    """llama3-8b on dgx-h100, p = 4, m = 8: ZB-H1's last device frees the loss's softmax (less the
    logits' gradient) at each I, so it peaks below its activations freed whole at W. With the limit
    at that peak, the solver's memory model must free the same way: ZB-H1 fits, the bound is at
    most its step, and what the search reports fits."""
    spec = InstanceSpec(4, 8, model="llama3-8b", system="dgx-h100", global_batch=32)
    instance = spec.instance(4, None)
    zb = simulate(generate("zb-h1", 4, 8), instance.costs, instance.system)
    last = instance.costs.stages[-1]
    assert last.input_grad_release_bytes > 0 and instance.costs.stages[0].input_grad_release_bytes == 0
    whole = max(zb.persistent_bytes[-1] + 4 * last.activation_bytes, max(zb.peak_memory_bytes[:-1]))
    limit = max(zb.peak_memory_bytes)
    assert limit < whole  # the case: freed whole at W, ZB-H1 would not fit
    result = search(replace(spec, memory_limit=limit), parse_space(space), SolveOptions(60, deterministic_time=DET))
    assert result.status in ("optimal", "feasible")
    assert result.bound <= zb.step_time_s * (1 + 1e-9) and result.step_time <= zb.step_time_s * (1 + 1e-9)
    assert max(result.simulation.peak_memory_bytes) <= limit * (1 + 1e-12)
    # the CP-SAT model itself (the search above settles analytically): ZB-H1's order fits its memory
    from ortools.sat.python import cp_model

    from ppopt.solve.model import Frame, build_model
    from ppopt.solve.search import _prepare

    setup = _prepare(replace(spec, memory_limit=limit), parse_space("fixed:zb-h1"), SolveOptions(60))
    built = build_model(setup.instance, parse_space("fixed:zb-h1"), Frame(setup.tick, setup.horizon), setup.hint.schedule,
                        setup.hint_starts, True)
    solver = cp_model.CpSolver()
    solver.parameters.num_workers, solver.parameters.max_time_in_seconds = 1, 20
    assert solver.solve(built.model) in (cp_model.OPTIMAL, cp_model.FEASIBLE)


def test_fractional_activation_bytes_never_make_the_model_count_above_the_simulator():
    """An activation split over t = 4 ranks and its part freed at I are fractional in bytes
    (25,153,628.5 here). The model rounded the part up and the rest up too, a byte over the
    simulator per microbatch between I and W, so at a limit just above a found schedule's peak it
    proved a bound above that schedule's step (1.9705 ms against 1.9351). It now rounds both down:
    a relaxation, whose schedules are simulated and checked."""
    from ppopt.config import ModelConfig
    from ppopt.job import Parallelism

    toy = ModelConfig.model_validate(dict(
        name="toy", num_layers=8, hidden_size=512, ffn_hidden_size=1368, num_attention_heads=8, num_kv_heads=8,
        vocab_size=50257, seq_length=1001, global_batch_size=8, bytes_per_element=2, activation="swiglu",
        flash_attention=True, tie_embeddings=False, dropout=False, learned_position_embeddings=False))
    spec = InstanceSpec(4, 8, model=toy, system="dgx-h100", global_batch=8, parallel=Parallelism(tp=4))
    instance = spec.instance(4, None)
    assert instance.costs.stages[-1].input_grad_release_bytes % 1 == 0.5  # the case: half a byte
    zb = simulate(generate("zb-h1", 4, 8), instance.costs, instance.system)
    space = parse_space("placement=linear,backward=split")
    first = search(replace(spec, memory_limit=max(zb.peak_memory_bytes) - 1), space, SolveOptions(60, deterministic_time=DET))
    peak = max(first.simulation.peak_memory_bytes)
    assert first.step_time is not None and peak != round(peak)
    again = search(replace(spec, memory_limit=math.ceil(peak)), space, SolveOptions(60, deterministic_time=DET))
    assert again.bound <= first.step_time * (1 + 1e-9) and again.step_time <= first.step_time * (1 + 1e-9)
    assert max(again.simulation.peak_memory_bytes) <= math.ceil(peak)


def test_the_analytic_bounds_keep_the_fit_slack_of_a_limit_a_hair_under_a_peak():
    """A limit 9e-13 under 1F1B's peak, within the fit check's relative slack of 1e-12, so 1F1B fits.
    With 1,800 activations of room (full recomputation, 64-token sequences) the bounds' caps lost an
    activation (their room had no slack, their rounding an absolute 1e-9): a bound of 0.17 s beside
    the 0.096 s 1F1B, reported optimal. (Llama 3 8B's layers at 64 tokens and a 256-word vocabulary.)"""
    from ppopt.config import load_model
    from ppopt.job import Parallelism

    model = load_model("llama3-8b").model_copy(update={"name": "tiny-seq", "seq_length": 64, "vocab_size": 256})
    spec = InstanceSpec(2, 8, model=model, system="dgx-h100", global_batch=320,
                        parallel=Parallelism(dp=40, distributed_optimizer=True, recompute="full"))
    space = parse_space("placement=linear")
    instance = spec.instance(2, placement=((0,), (1,)))
    one_f_one_b = simulate(validate(generate("1f1b", 2, 8)), instance.costs, instance.system)
    limit = max(one_f_one_b.peak_memory_bytes) * (1 - 9e-13)
    shaved = search(replace(spec, memory_limit=limit), space, SolveOptions(30, deterministic_time=DET))
    assert shaved.bound <= one_f_one_b.step_time_s + 1e-12 and shaved.step_time <= one_f_one_b.step_time_s


def test_the_periodic_and_spaced_greedy_hints_reach_the_optimum_the_default_greedy_misses():
    """p = 4, m = 8, two-slot messages, cap 3: 75 slots is optimal (confirmed by the MILP baseline);
    the default greedy schedule takes 81, the steady-state pattern (3 microbatches every 24 slots) 75,
    and so do the greedy variant with spaced entries and GPipe fitted to the cap (ppopt.solve.fitted;
    the tie goes to the greedy one, built first)."""
    from ppopt.solve.greedy import best_greedy_schedule, greedy_schedule
    from ppopt.solve.space import placement_of

    factory = unit(4, 8, comm=2, limit=3)
    result = run(factory, "placement=linear")
    assert result.status == "optimal" and result.step_time == 75
    assert result.hint in ("periodic", "greedy") and result.hint_step_time == 75
    assert result.period.startswith("3 microbatches every 24 slots")
    instance = factory.instance(4, None)
    where = placement_of(parse_space("placement=linear"), 4)
    default, best = (simulate(validate(g(instance, where, False)), instance.costs, instance.system).step_time_s
                     for g in (greedy_schedule, best_greedy_schedule))
    assert best == result.bound < default  # the default alone misses the proven optimum; a spaced variant meets it


def test_the_unhinted_dive_hands_a_shorter_schedule_to_the_main_solve_and_keeps_the_hint_otherwise():
    from ppopt.solve.model import Frame, build_model
    from ppopt.solve.search import _prepare, _unhinted_dive

    # looped, two chunks: the hint (interleaved 1F1B fitted to the cap) takes 72 slots (144 ticks of
    # half a slot; the greedy one 74), the optimum 66
    space = parse_space("placement=looped")
    setup = _prepare(unit(4, 8, comm=1, limit=3), space, SolveOptions(60))
    frame = Frame(setup.tick, setup.horizon, min(setup.lower, setup.horizon))
    built = build_model(setup.instance, space, frame, setup.hint.schedule, setup.hint_starts, True)

    def hints() -> dict[int, int]:
        proto = built.model.proto.solution_hint
        return dict(zip(proto.vars, proto.values))

    before = hints()
    assert before and setup.hint.name == "fitted interleaved-1f1b" and setup.hint_end * setup.tick == 72
    options = SolveOptions(10).start()
    unbeatable = _unhinted_dive(replace(setup, hint_end=0), built, options, time.monotonic())
    assert unbeatable is not None and unbeatable.found
    assert hints() == before
    dive = _unhinted_dive(setup, built, options, time.monotonic())
    assert dive is not None and dive.solver.objective_value < setup.hint_end
    after = hints()
    assert all(after[var.index] == dive.solver.value(var) for var in built.start.values())
    assert after[built.makespan.index] == round(dive.solver.objective_value)
    # a hint over the memory limit is no schedule: whatever the dive finds replaces it, however short
    built.model.clear_hints()
    over = replace(setup, hint=replace(setup.hint, fits=False), hint_end=0)
    dive = _unhinted_dive(over, built, options, time.monotonic())
    assert dive is not None and dive.found
    assert hints()[built.makespan.index] == round(dive.solver.objective_value)


def test_gap_and_frontier_start_no_search_the_time_left_cannot_cover(monkeypatch):
    """A search needs minimum_time_s of its ops at the least; with less time left, gap and frontier
    report the rest as not searched instead of overrunning (here a schedule costs a second per op,
    so 64 ops need more than the 10 s budget)."""
    import ppopt.solve.search as searching

    options = SolveOptions(10)
    searched = gap_report(unit(4, 8, comm=1, limit=4), {}, ["1f1b"], options)
    (row,) = searched.rows  # with the real per-op costs the one search runs and bounds the schedule
    assert row.status in ("optimal", "feasible") and 0 < row.bound <= row.step_time
    monkeypatch.setattr(searching, "SCHEDULE_S_PER_OP", 1.0)
    report = gap_report(unit(4, 8, comm=1, limit=4), {}, ["1f1b"], SolveOptions(10))
    assert [row.status for row in report.rows] == [NOT_SEARCHED]
    points = frontier(unit(4, 8, comm=1), parse_space("placement=linear"), [2, 4], SolveOptions(10)).points
    assert [point.status for point in points] == [NOT_SEARCHED, NOT_SEARCHED]
    notes: list[str] = []  # placement=family: the first member only, so no bound for the union
    family = search(unit(4, 8, comm=1), parse_space("placement=family"), SolveOptions(10, progress=notes.append))
    assert family.bound == 0 and family.gap is None and family.step_time is not None
    skipped = [line for line in notes if line.startswith("skipped placement=") and line.endswith(": time limit reached")]
    # zigzag with one wave is the V's stage map: one placement, not searched twice nor given time of its own
    assert FAMILY_MEMBERS == ("linear", "looped", "v", "zigzag")
    assert skipped == ["skipped placement=looped: time limit reached", "skipped placement=v: time limit reached"]
    assert "skipped placement=zigzag: the same stage map as placement=v" in notes


def test_gap_announces_its_schedules_only_once_simulating_them_takes_a_while(monkeypatch):
    """At hundreds of thousands of ops simulating every schedule takes a minute before any search:
    once PROGRESS_AFTER_S has passed, each further schedule is a progress line; a small report
    prints none."""
    import ppopt.solve.options as shared

    quick: list[str] = []
    gap_report(unit(4, 8), {}, ["1f1b", "gpipe"], SolveOptions(10, progress=quick.append))
    assert not [line for line in quick if line.startswith("gap: simulating")]
    monkeypatch.setattr(shared, "PROGRESS_AFTER_S", 0.0)
    slow: list[str] = []
    gap_report(unit(4, 8), {}, ["1f1b", "gpipe"], SolveOptions(10, progress=slow.append))
    assert [line for line in slow if line.startswith("gap: simulating")] == ["gap: simulating 1f1b (1/2)",
                                                                             "gap: simulating gpipe (2/2)"]


@pytest.mark.parametrize("space", ["placement=linear", "fixed:1f1b", "placement=linear,backward=split", "placement=v"])
def test_ops_shorter_than_a_tick_keep_their_dependency_order(space):
    """Messages of 10^6 slots beside ops of 1 and 2 make the tick 1,000 slots: F and B round down to
    0 ticks and start at the same tick, so the order read off the start times put 1B0 before 1F0
    (sorted by name) and the search failed its own validation. The schedule found is valid, and its
    step is the messages' (at least one round trip, 2·10^6 slots)."""
    result = search(unit(2, 2, comm=1e6), parse_space(space), SolveOptions(10))
    assert result.schedule is not None
    validate(result.schedule)
    assert 2e6 <= result.step_time <= result.simulation.step_time_s + 1e-6


def test_best_found_in_a_space_counts_its_handcrafted_schedules(monkeypatch):
    """A search short of time builds few hints; a handcrafted schedule of the space that fits is a point
    of it all the same, so the gap table's best found is never longer than it, and one that meets the
    bound proves the space's optimum (64 x 4,096, split space: the search reported 12,410 slots,
    feasible, beside ZB-H1's 12,350, the bound)."""
    from ppopt.solve import gap as gap_module

    real = gap_module.search

    def short(spec, space, options, **kwargs):  # 10 slots worse than what the search found, and unproven
        result = real(spec, space, options, **kwargs)
        return replace(result, step_time=result.step_time + 10, status="feasible")

    monkeypatch.setattr(gap_module, "search", short)
    options = SolveOptions(30, deterministic_time=DET)
    # no messages, no limit: 1F1B takes (m + p - 1)(F + B) = 33 slots, the bound of its space
    free = gap_report(unit(4, 8), {}, ["1f1b", "gpipe"], options).rows
    assert [(row.step_time, row.best, row.bound, row.status) for row in free] == [(33, 33, 33, "optimal"), (33, 33, 33, "optimal")]
    # one-slot messages, 4 activations: 1F1B's 49 beats the search's 46 + 10, but not the bound 46;
    # GPipe is over the limit, so it is not a point of the space
    capped = gap_report(unit(4, 8, comm=1, limit=4), {}, ["1f1b", "gpipe"], options).rows
    assert [(row.best, row.bound, row.status) for row in capped] == [(49, 46, "feasible"), (49, 46, "feasible")]


def test_gap_searches_no_space_a_handcrafted_schedule_already_solves(monkeypatch, still_clock):
    """A fitting handcrafted schedule that meets its space's analytic bound is that space's optimum,
    so gap runs no search there (at 64 x 4,096 the searches of five such spaces spent 35 s rebuilding
    their hints) and the spaces left share the budget."""
    from ppopt.solve import gap as gap_module

    real, searched = gap_module.search, []

    def recorded(spec, space, options, **kwargs):
        searched.append((space.describe(), options.remaining_s()))
        return real(spec, space, options, **kwargs)

    monkeypatch.setattr(gap_module, "search", recorded)
    # no messages, no limit: 1F1B's and GPipe's (m + p - 1)(F + B) = 11 x 3 = 33 slots is the load bound
    rows = gap_report(unit(4, 8), {}, ["1f1b", "gpipe"], SolveOptions(30, deterministic_time=DET)).rows
    assert searched == []
    assert [(row.step_time, row.best, row.bound, row.gap, row.status) for row in rows] == [(33, 33, 33, 0.0, "optimal")] * 2
    # Hanayo's 33 slots is above its space's bound, so that space is searched, alone: with the whole
    # 30 s, not half of it (time stands still here, so the share is exact whatever the simulations took).
    # The bound 28.5 is device 3's load: it holds chunks 3 and 4 of the zig-zag's 8 (F = 1/2, B = 1 each),
    # 8 microbatches x 2 chunks x 1.5 = 24 slots of work; its first op, F of chunk 3, waits for the
    # forwards of chunks 0-2 (1.5), and after its last, a B of chunk 3, the backwards of chunks 2-0 run
    # on devices 2-0 (3): 1.5 + 24 + 3 = 28.5, which the search meets ("optimal": best = bound).
    still_clock("ppopt.solve.options")
    rows = gap_report(unit(4, 8), {}, ["1f1b", "hanayo"], SolveOptions(30, deterministic_time=DET)).rows
    assert [space for space, _ in searched] == ["placement=zigzag,waves=1,backward=full,order=free"]
    assert searched[0][1] == 30
    assert [(row.step_time, row.bound, row.status) for row in rows] == [(33, 33, "optimal"), (33, 1.5 + 24 + 3, "optimal")]


def test_no_greedy_hint_once_a_handcrafted_one_meets_the_analytic_bound():
    """No messages, no limit: 1F1B's (m + p - 1)(F + B) = 33 slots at p = 4, m = 8 is the load bound of
    the linear space (GPipe's too: the tie goes to 1F1B, 4 live activations against GPipe's 8), so no greedy hint is built (it took about 15 of a 30 s search at 64 x 4,096, split,
    where ZB-H1 meets the bound); with one-slot messages and a cap of 4, 1F1B's 49 is above the bound
    and the greedy hint (46) is built and wins (GPipe fitted to the cap, built after it, ties it)."""
    notes: list[str] = []
    optimal = search(unit(4, 8), parse_space("placement=linear"), SolveOptions(10, progress=notes.append))
    assert optimal.status == "optimal" and optimal.step_time == 33 and optimal.hint == "1f1b"
    assert "greedy hint skipped: a handcrafted one meets the analytic bound" in notes
    notes.clear()
    capped = search(unit(4, 8, comm=1, limit=4), parse_space("placement=linear"), SolveOptions(10, progress=notes.append))
    assert capped.hint == "greedy" and capped.hint_step_time == 46
    assert not any("greedy hint skipped" in line for line in notes)


@pytest.mark.parametrize("spec, space", [
    (unit(4, 8, comm=1.0), "placement=v,backward=split,order=free"),
    (InstanceSpec(16, 32, model="llama3-8b", system="dgx-h100"), "placement=linear,order=free"),  # two nodes
    (InstanceSpec(8, 16, model="llama3-8b", system="dgx-h100"), "placement=bidirectional,backward=split,order=free"),
    (InstanceSpec(4, 16, model="llama3-8b", system="dgx-a100", memory_limit=60e9), "placement=v,backward=split,order=free"),
])
def test_hint_timing_in_ticks_matches_the_general_layout(spec, space):
    """The search times its hints on the flat form with per-(stage, kind) durations and
    per-(stage, devices) delays; the general earliest-start layout, asked op by op, agrees on every
    start and on the makespan, for every hint of unit and modelled spaces (delays differ by link)."""
    from ppopt.solve.search import _candidates, _ticked, _ticks
    from ppopt.table import earliest_starts

    instance, candidates = _candidates(spec, parse_space(space), SolveOptions(every_hint=True))
    _, duration, delay, _ = _ticks(instance)
    assert len(candidates) >= 2
    for candidate in candidates:
        schedule = candidate.schedule
        general = earliest_starts(schedule, lambda op: duration(op.stage, op.kind),
                                  lambda dep, op, device=schedule.device_of: delay(dep.stage, device(dep), device(op)))
        starts, end = _ticked(schedule, duration, delay)
        assert starts == {op: int(t) for op, t in general.items()}
        assert end == max(t + duration(op.stage, op.kind) for op, t in general.items())


def test_a_frontier_point_names_the_least_memory_its_step_needs():
    """p = 4, m = 8, no messages: GPipe (8 live activations) and 1F1B (4) both take the optimal 33 slots.
    Every limit from 4 up is met by that step, and each point's peak is 1F1B's 4 (the point at 8 named
    GPipe's 8 when a tie went to the first schedule built); GPipe is off the frontier."""
    from ppopt.solve.gap import frontier

    found = frontier(unit(4, 8), parse_space("placement=linear"), options=SolveOptions(10))
    top = [pt for pt in found.points if pt.memory_limit >= 4]
    assert top and all(pt.step_time == 33 and pt.peak_memory == 4 for pt in top), top
    assert {name: on for name, _, _, on in found.handcrafted}["gpipe"] is False


def test_an_optimal_hint_keeps_the_steady_state_pattern_without_its_schedule(monkeypatch):
    """No memory limit: GPipe meets the analytic bound (and 1F1B ties it with less memory, so it is the
    hint), so the steady-state schedule cannot win and is
    not composed, while its pattern is still reported; under a cap the hint is above the bound and
    the schedule is composed (and simulated) as a candidate."""
    import ppopt.solve.search as searching

    built = []
    original = searching.composed
    monkeypatch.setattr(searching, "composed", lambda *args: built.append(args) or original(*args))
    free = run(unit(4, 16), "placement=linear,order=free", time_limit_s=10)
    assert free.status == "optimal" and free.hint == "1f1b"
    assert free.period is not None and "every" in free.period
    assert built == []
    capped = run(unit(4, 16, comm=1.0, limit=4), "placement=linear,order=free", time_limit_s=10)
    assert capped.period is not None
    assert len(built) == 1


def test_a_solve_short_of_time_for_its_size_gets_no_linear_relaxation():
    """CP-SAT's one worker does not watch the time limit while it builds and first solves the linear
    relaxation (seconds at thousands of ops), so a solve whose budget is below LP_S_PER_OP per op
    runs without it; from NO_LP_OPS ops on, never with it."""
    from ppopt.solve.options import LP_S_PER_OP, NO_LP_OPS, READBACK_SHARE

    ops = 8192
    enough = SolveOptions(2 * ops * LP_S_PER_OP / (1 - READBACK_SHARE)).start()  # twice what it needs
    short = SolveOptions(0.5 * ops * LP_S_PER_OP / (1 - READBACK_SHARE)).start()  # half of it
    assert enough.solver(ops).parameters.linearization_level != 0
    assert short.solver(ops).parameters.linearization_level == 0
    assert short.solver(ops // 4).parameters.linearization_level != 0
    # the clock decided, so a reproducibility claim must not be made (the CLI's note reads the cuts)
    assert enough.cuts == [] and len(short.cuts) == 1 and "linear relaxation" in short.cuts[0]
    assert SolveOptions(600).start().solver(NO_LP_OPS).parameters.linearization_level == 0


def test_a_long_solve_says_it_is_still_solving(monkeypatch):
    """CP-SAT reports nothing until it finds a solution: SolveOptions.run prints a line every
    HEARTBEAT_S meanwhile, so a long solve does not look like a hang (and none without progress)."""

    monkeypatch.setattr("ppopt.solve.options.HEARTBEAT_S", 0.01)
    lines, heard = [], threading.Event()

    def progress(line):
        lines.append(line)
        heard.set()

    options = SolveOptions(100, progress=progress).start()
    with options._heartbeat():
        assert heard.wait(30)  # an event, not a timing: the first beat arrives
    count = len(lines)
    assert re.fullmatch(r"\[ *\d+\.\d\ds\] still solving", lines[0])
    threading.Event().wait(0.05)
    assert len(lines) == count  # the beats stop with the block
    with SolveOptions(100).start()._heartbeat():  # no progress wanted: no thread, nothing printed
        pass
    # and every solve runs inside it (SolveOptions.run is the one way the project calls CP-SAT)
    from ortools.sat.python import cp_model

    model = cp_model.CpModel()
    model.minimize(model.new_int_var(0, 3, "x"))
    entered = []

    @contextlib.contextmanager
    def recorded(self):
        entered.append(self)
        yield

    monkeypatch.setattr(SolveOptions, "_heartbeat", recorded)
    options = SolveOptions(100, progress=progress).start()
    assert options.run(options.solver(), model) == cp_model.OPTIMAL
    assert entered == [options]

def test_a_model_cp_sat_rejects_is_an_error_not_a_result():
    """A cumulative whose capacity summed placement literals was rejected by CP-SAT, and the search
    printed 'status invalid' with exit 0; a rejected model is ppopt's bug and now ends the command."""
    from ortools.sat.python import cp_model

    from ppopt.errors import PpoptError

    model = cp_model.CpModel()
    a, b = model.new_bool_var("a"), model.new_bool_var("b")
    start = model.new_int_var(0, 10, "s")
    model.add_cumulative([model.new_fixed_size_interval_var(start, 2, "")], [1], 3 - a - b)
    options = SolveOptions(100).start()
    with pytest.raises(PpoptError, match=r"internal error: CP-SAT rejected ppopt's model \(.*must be affine"):
        options.run(options.solver(), model)


@pytest.mark.parametrize("family", ["zb-v", "interleaved-1f1b", "chimera"])
def test_a_fixed_search_s_peaks_are_evaluate_s_for_a_job_with_working_sets(family):
    """A job beyond a pure pipeline adds each device's transient working set (the largest of its
    stages') to its peak; the solver held every stage's, so a device with two stages counted two:
    search --space fixed:zb-v reported 18.02 GiB where evaluate, job and plan give 17.49, and
    refused a 19 GB limit the schedule fits. The peaks now agree, and so does the limit."""
    from ppopt.evaluate import evaluate
    from ppopt.job import Parallelism

    parallel = Parallelism(tp=2, dp=2, micro_batch=1, recompute="full", sequence_parallel=True, distributed_optimizer=True)
    kwargs = {"model": "llama3-8b", "system": "dgx-a100", "parallel": parallel}
    evaluated = evaluate(family, 4, 16, **kwargs).simulation
    peak = max(evaluated.peak_memory_bytes)
    found = search(InstanceSpec(4, 16, memory_limit=peak, **kwargs), parse_space(f"fixed:{family}"), SolveOptions(time_limit_s=20))
    assert found.simulation.peak_memory_bytes == pytest.approx(evaluated.peak_memory_bytes, rel=1e-12)
    assert found.simulation.step_time_s == pytest.approx(evaluated.step_time_s, rel=1e-12)
    with pytest.raises(InfeasibleError, match="below the minimum"):
        search(InstanceSpec(4, 16, memory_limit=peak * 0.999, **kwargs), parse_space(f"fixed:{family}"), SolveOptions(time_limit_s=20))


@pytest.mark.parametrize("given, field", [({"chunks": 0}, "chunks"), ({"chunks": "x"}, "chunks"), ({"waves": -1}, "waves"),
                                          ({"split": "0:0"}, "split"), ("chunks=2", "schedule_options")])
def test_gap_report_refuses_option_values_no_family_takes(given, field):
    """gap_report skipped every family that takes the option, with the reason, and returned a
    report without them; a string was read letter by letter as option names."""
    with pytest.raises((ConfigError, ScheduleError)) as raised:
        gap_report(unit(4, 8), schedule_options=given, options=SolveOptions(5))
    assert raised.value.field == field


@pytest.mark.parametrize("call, field", [
    (lambda u: search(None, "placement=linear"), "spec"),
    (lambda u: search(u, None), "space"),
    (lambda u: search(u, 3), "space"),
    (lambda u: search(u, "placement=linear", "fast"), "options"),
    (lambda u: search(u, "placement=linear", hints="1f1b"), "hints"),
    (lambda u: search(u, "placement=linear", hints=[None]), "hints"),
    (lambda u: search(u, "placement=linear", minimize_memory="yes"), "minimize_memory"),
    (lambda u: gap_report(None), "spec"),
    (lambda u: gap_report(u, given="1f1b"), "given"),
    (lambda u: frontier(u, 3), "space"),
])
def test_library_calls_of_the_solver_name_an_argument_of_another_type(call, field):
    """search(None, ...), gap_report(u, given="1f1b") and the like raised AttributeError from deep
    inside, naming no argument; "yes" switched minimize_memory on."""
    with pytest.raises(ConfigError) as raised:
        call(unit(4, 8))
    assert raised.value.field == field


@pytest.mark.parametrize("space", ["placement=looped", "fixed:1f1b", "placement=family"])
def test_frontier_names_its_given_schedule_when_the_space_does_not_hold_it(space):
    """The frontier passes its given schedule to search as a hint, whose refusal named `hints`,
    an argument frontier does not have."""
    with pytest.raises(ConfigError) as raised:
        frontier(unit(4, 8), space, given=generate("1f1b", 4, 8))
    assert raised.value.field == "given"


def test_a_hint_or_given_schedule_of_another_microbatch_count_is_refused():
    """search took a hint of m = 2 on an m = 4 instance and reported its 9-slot step as optimal
    under a bound of 15; frontier did the same with its given schedule."""
    with pytest.raises(ConfigError) as raised:
        search(unit(2, 4), "placement=linear", SolveOptions(time_limit_s=5), hints=generate("gpipe", 2, 2))
    assert raised.value.field == "hints" and "m = 2" in raised.value.reason
    with pytest.raises(ConfigError) as raised:
        frontier(unit(4, 8), "placement=linear", given=generate("1f1b", 4, 4))
    assert raised.value.field == "given" and "m = 4" in raised.value.reason


def test_gap_report_names_the_size_that_differs():
    with pytest.raises(ConfigError) as raised:
        gap_report(unit(4, 8), given=generate("1f1b", 4, 6))
    assert raised.value.field == "microbatches"
    with pytest.raises(ConfigError) as raised:
        gap_report(unit(4, 8), given=generate("1f1b", 2, 8))
    assert raised.value.field == "devices"


@pytest.mark.parametrize("given, field", [(dict(dominance="no"), "dominance"), (dict(every_hint="x"), "every_hint"),
                                          (dict(progress="x"), "progress"), (dict(deadline="x"), "deadline"),
                                          (dict(deterministic_time="2"), "deterministic_time"), (dict(workers="2"), "workers")])
def test_solve_options_of_another_type_are_refused(given, field):
    """dominance="no" switched the rule on and a text deadline failed later with a TypeError; a
    text worker count read "got 2", hiding that it was text."""
    with pytest.raises(ConfigError) as raised:
        SolveOptions(**given)
    assert raised.value.field == field and repr(given[field]) in raised.value.reason


def test_instance_spec_without_a_mode_names_its_units_argument():
    """The library's argument is `units`; the error named `unit`, the command line's flag (which the
    CLI still shows: its field maps to --unit)."""
    with pytest.raises(ConfigError) as raised:
        InstanceSpec(4, 16).instance(4)
    assert raised.value.field == "units"


def test_a_search_result_reads_in_one_line():
    """Its dataclass repr held a simulation per handcrafted schedule: 3.9 KB at 16 x 32."""
    result = search(unit(16, 32), "placement=linear", SolveOptions(time_limit_s=10))
    shown = repr(result)
    assert "\n" not in shown and len(shown) < 400
    assert f"status={result.status!r}" in shown and f"step_time={result.step_time!r}" in shown and "bound=" in shown


def test_a_misspelt_schedule_option_is_refused_by_parse_space_and_evaluate_schedule():
    """parse_space("placement=looped", chunk=3) gave chunks=2, and evaluate_schedule(..., chunk=3)
    ran as if nothing were given, where evaluate() and generate() refuse the typo."""
    from ppopt.evaluate import evaluate_schedule

    with pytest.raises(ScheduleError, match="unknown schedule option"):
        parse_space("placement=looped", chunk=3)
    with pytest.raises(ScheduleError, match="unknown schedule option"):
        evaluate_schedule(generate("1f1b", 4, 8), with_formula=True, chunk=3)
    assert parse_space("placement=looped", chunks=3).chunks == 3


def test_the_family_shares_its_time_among_the_members_it_searches(monkeypatch):
    """placement=family gave each member a share counted over all four, so on 4 devices, where
    zigzag with one wave is the V and is skipped, the V search got half the time left instead of all
    of it (15.9 s of a 25 s limit used). The shares now count the members searched: linear, looped
    and V, a third, a half and all of what is left."""
    import inspect

    shares = []
    original = SolveOptions.share

    def recorded(self, parts):
        if inspect.stack()[1].function == "_search_family":
            shares.append(parts)
        return original(self, parts)

    monkeypatch.setattr(SolveOptions, "share", recorded)
    spec = InstanceSpec(4, 8, UnitCosts(comm=1.0))
    result = search(spec, parse_space("placement=family"), SolveOptions(30, deterministic_time=0.5))
    assert shares == [3, 2, 1] and result.step_time is not None
