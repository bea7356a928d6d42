"""The time-indexed refutation (ppopt.solve.timeindexed): its windows, and its answers against the
optimum CP-SAT proves on the interval model (tests.test_bounds._optimum)."""

from __future__ import annotations

import re
import types
from dataclasses import replace

from hypothesis import given, settings
from hypothesis import strategies as st

import ppopt.solve.search as search_module
import ppopt.solve.timeindexed as timeindexed
from ppopt.ir import Kind
from ppopt.solve.heads import jackson
from ppopt.solve.instance import InstanceSpec, unit_instance
from ppopt.solve.options import SolveOptions
from ppopt.solve.relaxation import Chain
from ppopt.solve.search import _rungs
from ppopt.solve.space import parse_space
from ppopt.solve.timeindexed import chain_graph, refute, time_indexed_bound
from ppopt.units import UnitCosts
from tests.test_bounds import _optimum
from tests.test_relaxation import TO_THE_END, _heavier_last_stage


def _unit_chain(p: int, cap: int | None, comm: int) -> Chain:
    return Chain(p, lambda s, k: 1 if k is Kind.F else 2, lambda s, a, b: comm, [cap] * p)


def _meets_every_rule(graph, starts, horizon) -> bool:
    """Start times (by op) that meet every lag, run one op at a time per device and end by ``horizon``."""
    times = [starts[op] for op in graph.ops]
    if any(t + d > horizon or t < 0 for t, d in zip(times, graph.duration)):
        return False
    if any(times[b] < times[a] + lag for a, b, lag in graph.lags):
        return False
    busy: dict[int, list[tuple[int, int]]] = {}
    for o, t in enumerate(times):
        busy.setdefault(graph.device[o], []).append((t, t + graph.duration[o]))
    return all(a[1] <= b[0] for spans in busy.values() for a, b in zip(sorted(spans), sorted(spans)[1:]))


def test_one_microbatch_takes_its_round_trip():
    """p = 4, F = 1, B = 2, one-tick messages: up 4 forwards and 3 messages (7), down 4 backwards and
    3 messages (11): 18 ticks, every op on the one path (head + tail = 18)."""
    graph = chain_graph(_unit_chain(4, None, 1), 1)
    assert graph.shortest == 18
    assert all(h + t == 18 for h, t in zip(graph.head, graph.tail))
    assert refute(graph, 17, SolveOptions(10).start()).status == "infeasible"
    assert refute(graph, 18, SolveOptions(10).start()).status == "feasible"


def test_sixteen_microbatches_on_sixteen_devices_take_123_slots():
    """p = m = 16, cap 16, F = 1, B = 2, one-slot messages: the last device gets its first forward at
    15 + 15 = 30 and runs 16 forwards and 16 backwards (48 slots) to 78; the last backward then
    comes down 15 devices and 15 messages (45): 123, which the model proves optimal (it refutes 122)."""
    graph = chain_graph(_unit_chain(16, 16, 1), 16)
    assert refute(graph, 122, SolveOptions(60).start()).status == "infeasible"
    found = refute(graph, 123, SolveOptions(60).start())
    assert found.status == "feasible" and found.starts is not None and _meets_every_rule(graph, found.starts, 123)


@settings(max_examples=10, deadline=None)
@given(p=st.integers(2, 4), cap=st.integers(1, 3), extra_microbatches=st.integers(0, 4), comm=st.sampled_from([0, 1, 2]),
       extra=st.integers(0, 2))
def test_it_refutes_one_tick_under_the_proven_optimum_and_finds_the_optimum(p, cap, extra_microbatches, comm, extra):
    """Every horizon under the optimum is refuted (a valid bound), the optimum's is not, and its
    start times meet every rule: the model is the problem, not a relaxation of it (a heavier last
    stage too, as llama3-70b's)."""
    m = cap + extra_microbatches + 1
    instance, chain = _heavier_last_stage(p, m, cap, comm, extra)
    optimum = round(_optimum(instance, "placement=linear", 1000))
    graph = chain_graph(chain, m)
    assert refute(graph, optimum - 1, SolveOptions(TO_THE_END).start()).status == "infeasible"
    found = refute(graph, optimum, SolveOptions(TO_THE_END).start())
    assert found.status == "feasible" and found.starts is not None and _meets_every_rule(graph, found.starts, optimum)


def test_one_device_runs_all_its_work_before_the_step_ends():
    """One device, m microbatches, F = 1, B = 2, no cap: the lags alone give m forwards then the last
    backward (m + 2) or the first forward then m backwards (2m + 1); the device bound gives its whole
    work, 3m, which is the optimum."""
    for m in (1, 2, 5):
        graph = chain_graph(_unit_chain(1, None, 0), m)
        assert graph.shortest == 3 * m
        assert refute(graph, 3 * m - 1, SolveOptions(10).start()).status == "infeasible"
        assert refute(graph, 3 * m, SolveOptions(10).start()).status == "feasible"


def _windows_by_brute_force(graph):
    """Heads and tails from the lags and Jackson's schedule (zero tails) of each op's ancestors
    (descendants) on its device, the sets found by walking the lags: a second derivation of
    the windows of :func:`chain_graph`."""
    n = len(graph.ops)
    into: list[list[tuple[int, int]]] = [[] for _ in range(n)]
    out_of: list[list[tuple[int, int]]] = [[] for _ in range(n)]
    for a, b, lag in graph.lags:
        into[b].append((a, lag))
        out_of[a].append((b, lag))

    def reach(o, edges):
        seen, stack = set(), [o]
        while stack:
            for x, _ in edges[stack.pop()]:
                if x not in seen:
                    seen.add(x)
                    stack.append(x)
        return [x for x in seen if graph.device[x] == graph.device[o]]

    head, tail = [0] * n, list(graph.duration)
    for b in range(n):  # ids are topological
        jobs = [(head[a], graph.duration[a], 0) for a in reach(b, into)]
        head[b] = max([jackson(jobs)] + [head[a] + lag for a, lag in into[b]])
    for a in reversed(range(n)):
        jobs = [(tail[b] - graph.duration[b], graph.duration[b], 0) for b in reach(a, out_of)]
        tail[a] = max([graph.duration[a] + jackson(jobs)] + [lag + tail[b] for b, lag in out_of[a]])
    return head, tail


@settings(max_examples=30, deadline=None)
@given(p=st.integers(1, 4), m=st.integers(1, 7), data=st.data())
def test_windows_match_a_brute_force_derivation(p, m, data):
    """Random durations, delays and caps per stage (a cap of one stage can make another's backward an
    ancestor sooner than its own cap does): the windows equal the brute-force ones."""
    forward = data.draw(st.lists(st.integers(0, 3), min_size=p, max_size=p))
    backward = data.draw(st.lists(st.integers(0, 4), min_size=p, max_size=p))
    delays = data.draw(st.lists(st.integers(0, 2), min_size=p, max_size=p))
    caps = data.draw(st.lists(st.sampled_from([None, 1, 2, 3]), min_size=p, max_size=p))
    chain = Chain(p, lambda s, k: forward[s] if k is Kind.F else backward[s], lambda s, a, b: delays[s], caps)
    graph = chain_graph(chain, m)
    assert (list(graph.head), list(graph.tail)) == _windows_by_brute_force(graph)


def test_overlapping_ops_fixed_to_one_start_each_refute_the_horizon():
    """p = 4, m = 9, cap 3, two-tick messages, the last stage 3/6 against 2/4: the optimum is 136. At
    135 the windows fix B_2(3) at 62 (4 ticks) and F_2(5) at 65, which overlap with no Boolean left to
    say so: the model must still be infeasible (it once returned their overlap as a schedule)."""
    instance, chain = _heavier_last_stage(4, 9, 3, 2, 1)
    assert round(_optimum(instance, "placement=linear", 1000)) == 136
    graph = chain_graph(chain, 9)
    fixed = {op: h for op, h, t in zip(graph.ops, graph.head, graph.tail) if h == 135 - t}
    assert fixed[Kind.B, 3, 2] == 62 and fixed[Kind.F, 5, 2] == 65
    assert refute(graph, 135, SolveOptions(TO_THE_END).start()).status == "infeasible"
    found = refute(graph, 136, SolveOptions(TO_THE_END).start())
    assert found.status == "feasible" and found.starts is not None and _meets_every_rule(graph, found.starts, 136)


def test_the_bound_is_the_highest_horizon_refuted_plus_one():
    """p = 3, cap 2, m = 6, unit costs, one-tick messages: the proven optimum is O; refuting O - 3,
    O - 2, O - 1 proves O, and a horizon at the optimum stops the ladder with its schedule."""
    instance = unit_instance(3, 6, 3, UnitCosts(1, 2, None, 1), memory_limit=2)
    optimum = round(_optimum(instance, "placement=linear"))
    graph = chain_graph(_unit_chain(3, 2, 1), 6)
    proven, found = time_indexed_bound(graph, [optimum - 3, optimum - 2, optimum - 1], SolveOptions(60).start())
    assert (proven, found) == (optimum, None)
    proven, found = time_indexed_bound(graph, [optimum - 1, optimum, optimum + 1], SolveOptions(60).start())
    assert proven == optimum and found is not None and found.status == "feasible"


def test_rungs_prove_one_percent_then_half_then_the_optimum_with_doubling_steps_on_the_way():
    """A best step of 371: 371 / 1.01 = 367.3, so refuting 367 proves a bound of 368 (a gap of
    0.82 %); 371 / 1.005 = 369.2, so 369 (0.27 %); then 370 (optimal). On the way from a bound of
    360: 361, 363 and 367 (360 + 1, 3, 7; 360 + 15 would pass the best). Horizons under the bound so
    far prove nothing and are left out."""
    assert _rungs(371, 360) == [361, 363, 367, 369, 370]
    assert _rungs(371, 368) == [369, 370]
    assert _rungs(371, 371) == []
    # far from the gap rungs (16 x 128: bound 672, best 695): the doubling steps come first
    assert _rungs(695, 672) == [673, 675, 679, 687, 688, 691, 694]


def _setup_5_12():
    """p = 5, m = 12, cap 3, F = 1, B = 2, one-slot messages: the greedy hint takes 100 slots, the
    proven optimum, and the analytic bound is 98."""
    spec = InstanceSpec(5, 12, units=UnitCosts(1, 2, None, 1), memory_limit=3)
    setup = search_module._prepare(spec, parse_space("placement=linear"), SolveOptions(60).start())
    chain = search_module._relaxation_chain(setup)
    assert chain is not None and setup.hint is not None
    assert (setup.hint_end, setup.lower) == (100, 98)
    assert _optimum(unit_instance(5, 12, 5, UnitCosts(1, 2, None, 1), memory_limit=3), "placement=linear", 1000) == 100
    return setup, chain_graph(chain, 12)


def test_the_refutation_raises_the_search_s_bound_to_the_optimum():
    """From a best step of 100: the rungs 98 and 99 are refuted, so the bound becomes 100."""
    setup, graph = _setup_5_12()
    assert setup.hint is not None
    best = search_module._Solved("feasible", 0.0, objective_ticks=100, simulation=setup.hint.simulation)
    raised, kept, _ = search_module._with_time_indexed(setup, graph, best, False, SolveOptions(60).start())
    assert raised.lower == 100 and raised.analytic.relaxation == 100 and kept is best


def test_a_feasible_rung_gives_the_search_its_shorter_schedule():
    """From a best step said to be 103 slots and a bound of 98: the first rung, 99, is refuted (the
    bound becomes 100, the optimum), and the next, 101 (98 + 3, and the 1 % rung: 103 / 1.01 =
    101.98, less one), is feasible, so its schedule, at most 101 slots, replaces the best."""
    setup, graph = _setup_5_12()
    assert setup.hint is not None
    slower = replace(setup.hint.simulation, step_time_s=103.0)
    best = search_module._Solved("feasible", 0.0, objective_ticks=103, simulation=slower)
    same, found, from_solver = search_module._with_time_indexed(setup, graph, best, False, SolveOptions(60).start())
    assert same.lower == 100 and from_solver and found.simulation is not None and found.schedule is not None
    assert found.simulation.step_time_s <= 101 and found.objective_ticks is not None and found.objective_ticks <= 101


def test_the_refutation_runs_only_with_its_time_and_above_the_bound():
    """It needs TIME_INDEXED_MIN_S left (a 60 s search at 16 x 64 has about 25 s after its solve) and
    a best step above the bound (each rung's size is checked as it comes: the test below)."""
    setup, _ = _setup_5_12()
    chain = search_module._relaxation_chain(setup)
    assert chain is not None and setup.hint is not None
    best = search_module._Solved("feasible", 0.0, objective_ticks=100, simulation=setup.hint.simulation)
    assert search_module._time_indexed_graph(setup, chain, best, SolveOptions(60).start()) is not None
    assert search_module._time_indexed_graph(setup, chain, best, SolveOptions(search_module.TIME_INDEXED_MIN_S - 1).start()) is None
    assert search_module._time_indexed_graph(setup, chain, replace(best, objective_ticks=98), SolveOptions(60).start()) is None


def test_the_rungs_stop_where_their_models_grow_past_max_literals(monkeypatch):
    """p = 5, m = 12, cap 3 (optimum 100, longest path 98): with MAX_LITERALS set to the size of the
    model at 98, that rung is refuted and the ladder stops before 99, whose model is larger (a bound
    of 99), and says why it stopped; it once refused every rung for the size of the last."""
    _, graph = _setup_5_12()
    assert graph.shortest == 98 and 0 < graph.literals(98) < graph.literals(99)
    monkeypatch.setattr(timeindexed, "MAX_LITERALS", graph.literals(98))
    told: list[tuple[int, str]] = []
    assert time_indexed_bound(graph, [98, 99], SolveOptions(60).start(), lambda *said: told.append(said)) == (99, None)
    assert told == [(98, "infeasible"), (99, "too large")]


def test_past_a_rung_too_large_the_ladder_goes_on_one_tick_at_a_time(monkeypatch):
    """p = 5, m = 12, cap 3 (optimum 100): with MAX_LITERALS at the size of the model at 99, the
    ladder 98, 103 refutes 98, finds 103 too large, and then tries the horizons between that fit,
    one tick at a time: 99 is refuted, so the bound is the optimum, 100. Before, the ladder stopped
    at 103 with a bound of 99 and the time of the rungs between unused."""
    _, graph = _setup_5_12()
    assert graph.literals(99) < graph.literals(100)
    monkeypatch.setattr(timeindexed, "MAX_LITERALS", graph.literals(99))
    told: list[tuple[int, str]] = []
    assert time_indexed_bound(graph, [98, 103], SolveOptions(60).start(), lambda *said: told.append(said)) == (100, None)
    assert told == [(98, "infeasible"), (103, "too large"), (99, "infeasible")]


def test_a_rung_is_not_started_with_less_time_left_than_the_last_one_took(monkeypatch):
    """The same ladder with a clock on which the first refutation took 100 s of a 60 s budget: the
    second is not started (it would be cut short and prove nothing), the bound is the first's, and
    the clock's decision is recorded as a cut."""
    _, graph = _setup_5_12()
    readings = iter([0.0, 100.0])  # before and after the first refutation
    monkeypatch.setattr(timeindexed, "time", types.SimpleNamespace(monotonic=lambda: next(readings)))
    options = SolveOptions(60).start()
    told: list[tuple[int, str]] = []
    assert time_indexed_bound(graph, [98, 99], options, lambda *said: told.append(said)) == (99, None)
    assert told == [(98, "infeasible"), (99, "no time")]
    assert options.cuts == ["a time-indexed refutation not started"]


def test_a_horizon_whose_model_cannot_be_built_in_time_is_not_tried(monkeypatch):
    """The model's build does not watch the clock (1.6 s at 16 x 64): a rung proven with a second
    left went on to build the next one past the deadline. With building priced above the time left,
    no horizon is tried, and the clock's decision is recorded as a cut."""
    graph = chain_graph(_unit_chain(3, 2, 1), 6)
    monkeypatch.setattr(timeindexed, "BUILD_S_PER_LITERAL", 1.0)  # every horizon's model would take longer than 60 s
    options = SolveOptions(60).start()
    tried: list[int] = []
    horizons = [graph.shortest + 2, graph.shortest + 3]  # windows of two and three ticks: a model to build
    assert graph.literals(horizons[0]) > 60
    assert time_indexed_bound(graph, horizons, options, lambda horizon, status: tried.append(horizon)) == (None, None)
    assert tried == [] and options.cuts == ["a time-indexed refutation not built"]


# ---- the time-indexed search (shorten) -----------------------------------------------------------
def _start(setup):
    """The time-indexed search's start (search._time_indexed_start): at p = 5, m = 12, cap 3 no
    handcrafted schedule fits, and a fitted one (101 slots) comes before the greedy hint (100)."""
    start = search_module._time_indexed_start(setup)
    assert start is not None and start.name.startswith("fitted")
    return start.starts


def test_no_start_is_built_where_no_step_could_fit(monkeypatch):
    """At p = 4, m = 8,192 building the chain's graph spent 30 s of a 5 s search, then no radius fit
    the Boolean limit: the start is now refused before the graph when even the least radius cannot
    fit (120 ops x 3 ticks over a limit lowered to 359), and built at the limit (360)."""
    setup, _ = _setup_5_12()
    assert setup.ops == 120
    built = []
    monkeypatch.setattr(search_module, "chain_graph", lambda *args: built.append(args) or chain_graph(*args))
    monkeypatch.setattr(search_module, "MAX_STEP_LITERALS", 359)
    assert search_module._time_indexed_start(setup) is None and built == []
    monkeypatch.setattr(search_module, "MAX_STEP_LITERALS", 360)
    search_module._time_indexed_start(setup)
    assert len(built) == 1


def test_shorten_reaches_the_proven_optimum_from_a_fitted_schedule():
    """p = 5, m = 12, cap 3, one-slot messages: the fitted schedule takes 101 slots, the optimum 100
    (tests.test_bounds._optimum). Windows of STEP_RADIUS ticks either way hold that optimum, so the search
    reaches it, and its starts meet every rule of the chain."""
    setup, graph = _setup_5_12()
    starts = _start(setup)
    end = max(t + d for t, d in zip((starts[op] for op in graph.ops), graph.duration))
    assert end == 101 and timeindexed.lags_hold(graph, starts)
    radius = timeindexed.step_radius(graph, starts)
    assert radius == timeindexed.STEP_RADIUS
    result = timeindexed.shorten(graph, starts, radius, SolveOptions(60, deterministic_time=30).start())
    assert result.end == 100 and result.improvements == 1 and _meets_every_rule(graph, result.starts, 100)


def test_a_step_moves_no_op_further_than_its_radius():
    """One step (the deterministic budget of one), radius 2: every op starts within 2 ticks of its
    start, the schedule meets every rule, and it is no longer than the start's."""
    setup, graph = _setup_5_12()
    starts = _start(setup)
    end = max(t + d for t, d in zip((starts[op] for op in graph.ops), graph.duration))
    one_step = SolveOptions(60, deterministic_time=timeindexed.STEP_FLOOR_S).start()  # each step is charged at least that
    result = timeindexed.shorten(graph, starts, 2, one_step)
    assert result.steps == 1
    assert all(abs(result.starts[op] - starts[op]) <= 2 for op in graph.ops)
    assert result.end <= end and _meets_every_rule(graph, result.starts, result.end)


def test_shorten_is_reproducible_with_a_seed():
    """The same seed and deterministic budget give the same starts: every step is limited by
    CP-SAT's deterministic time, not the clock."""
    setup, graph = _setup_5_12()
    starts = _start(setup)
    runs = [timeindexed.shorten(graph, starts, 4, SolveOptions(60, seed=3, deterministic_time=2.0).start())
            for _ in range(2)]
    assert runs[0].starts == runs[1].starts and runs[0].end == runs[1].end


def test_starts_that_break_a_lag_are_not_a_start():
    """lags_hold refuses starts whose microbatches run out of order on a device (the model's
    dominance rule) or that overlap on a device."""
    setup, graph = _setup_5_12()
    starts = _start(setup)
    swapped = dict(starts)
    swapped[Kind.F, 0, 0], swapped[Kind.F, 1, 0] = starts[Kind.F, 1, 0], starts[Kind.F, 0, 0]
    assert not timeindexed.lags_hold(graph, swapped)
    overlapping = dict(starts)
    overlapping[Kind.B, 11, 0] = overlapping[Kind.B, 10, 0] + 1  # the last backward starts before the previous one ends
    assert not timeindexed.lags_hold(graph, overlapping)


def test_the_radius_shrinks_to_the_step_limit_and_none_fits_below_the_least(monkeypatch):
    """step_radius gives the widest radius whose model is within MAX_STEP_LITERALS: STEP_RADIUS when
    it fits, a narrower one when the limit is that radius's model, None when not even MIN_RADIUS's
    model fits."""
    setup, graph = _setup_5_12()
    starts = _start(setup)
    current = [starts[op] for op in graph.ops]
    end = max(t + d for t, d in zip(current, graph.duration))

    def size(radius):
        first, after = timeindexed._step_windows(graph, current, end, radius)
        return sum(a - f for f, a in zip(first, after))

    assert timeindexed.step_radius(graph, starts) == timeindexed.STEP_RADIUS
    narrower = timeindexed.MIN_RADIUS + 1
    assert size(narrower) < size(narrower + 1)
    monkeypatch.setattr(timeindexed, "MAX_STEP_LITERALS", size(narrower))
    assert timeindexed.step_radius(graph, starts) == narrower
    monkeypatch.setattr(timeindexed, "MAX_STEP_LITERALS", size(timeindexed.MIN_RADIUS) - 1)
    assert timeindexed.step_radius(graph, starts) is None


def test_auto_uses_the_time_indexed_search_above_the_window_search_size(monkeypatch):
    """With AUTO_LNS_OPS lowered under p = 8, m = 24 (384 ops; cap 8, one-slot messages), ``auto``
    runs the time-indexed search instead of the window search: from 1F1B (which fits a cap of p) it
    finds 140, the bound the refutation proves before it, and stops there."""
    monkeypatch.setattr(search_module, "AUTO_LNS_OPS", 300)
    monkeypatch.setattr(search_module, "AUTO_CP_OPS", 200)
    lines: list[str] = []
    spec = InstanceSpec(8, 24, units=UnitCosts(1, 2, None, 1), memory_limit=8)
    result = search_module.search(spec, "placement=linear", SolveOptions(60, progress=lines.append))
    assert any(line.startswith("time-indexed search from 1f1b (") for line in lines)
    assert not any("windows of time" in line for line in lines)
    # the bound before it comes from the refutation, in the reduced problems' place
    assert any(line.startswith("time-indexed refutation: a schedule of ") for line in lines)
    assert not any(line.startswith("reduced-problem bound") for line in lines)
    assert (result.step_time, result.bound, result.status) == (140, 140, "optimal")
    (summary,) = [line for line in lines if line.startswith("time-indexed search: ")]
    steps, improvements = re.match(r"time-indexed search: (\d+) steps?, (\d+) improvements?, makespan 140 slots$", summary).groups()
    assert steps == improvements  # every step shortened it, and it stopped once at the bound


def test_where_the_tail_bound_applies_the_refutation_follows_it(monkeypatch):
    """p = 6, m = 40, cap 4, one-slot messages (480 ops; AUTO_LNS_OPS lowered under them, so the
    time-indexed search applies, and m is over TAIL_ROUNDS times the cap, so the tail bound does):
    with the tail bound and the reduced problems made to prove nothing, the refutation that follows
    them raises the bound from the analytic one to the hint's 293 slots, the optimum (which the tail
    bound proves alone), and the search stops without a step. Before, where the tail bound applied,
    the refutation did not run: at 8 x 512 the bound stayed 4 slots under the optimal hint."""
    monkeypatch.setattr(search_module, "AUTO_LNS_OPS", 300)
    monkeypatch.setattr(search_module, "AUTO_CP_OPS", 200)
    monkeypatch.setattr(search_module, "tail_bound", lambda chain, microbatches, tail, options: 0)
    monkeypatch.setattr(search_module, "relaxation_bound", lambda *args, **kwargs: args[6])  # its lower bound
    lines: list[str] = []
    spec = InstanceSpec(6, 40, units=UnitCosts(1, 2, None, 1), memory_limit=4)
    result = search_module.search(spec, "placement=linear", SolveOptions(60, progress=lines.append))
    assert search_module.TAIL_ROUNDS * 4 < 40 and any(line.startswith("tail bound: ") for line in lines)
    refuted = [line for line in lines if line.startswith("time-indexed refutation: a schedule of ")]
    assert refuted and refuted[-1].startswith("time-indexed refutation: a schedule of 292 slots or less? none")
    assert (result.step_time, result.bound, result.status) == (293, 293, "optimal")
    assert result.analytic.one_machine < 293 and not any(line.startswith("time-indexed search") for line in lines)
    (before,) = [line for line in lines if line.startswith("reduced-problem bound: ")]  # what the refutation starts from
    assert int(before.split()[-2]) < 293


def test_real_durations_keep_the_window_search():
    """Ticks of a thousandth of the longest op: windows of STEP_RADIUS ticks move no op past another, so the
    time-indexed search does not start (a modelled 4 x 8 chain)."""
    spec = InstanceSpec(4, 8, model="llama3-8b", system="dgx-h100", global_batch=8)
    setup = search_module._prepare(spec, parse_space("placement=linear"), SolveOptions(60).start())
    chain = search_module._relaxation_chain(setup)
    assert chain is not None
    # 1F1B fits (no limit) and meets the lags; only its radius, under the longest op, rules it out
    graph = chain_graph(chain, 8)
    candidate = next(c for c in setup.candidates if c.name == "1f1b")
    ticks = search_module._ticked(candidate.schedule, *setup.ticked)[0]
    starts = {(op.kind, op.microbatch, op.stage): t for op, t in ticks.items()}
    radius = timeindexed.step_radius(graph, starts)
    assert candidate.fits and timeindexed.lags_hold(graph, starts)
    assert radius is not None and radius <= max(graph.duration)
    assert search_module._time_indexed_start(setup) is None
