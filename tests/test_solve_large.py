"""Large-neighbourhood search, method selection, and gap's shared searches."""

import pytest

import ppopt.solve.timeindexed as timeindexed
from ppopt.errors import ConfigError, ScheduleError
from ppopt.ir import Kind
from ppopt.solve.gap import gap_report
from ppopt.solve.instance import InstanceSpec
from ppopt.solve.options import SolveOptions
from ppopt.solve.relaxation import Chain
from ppopt.solve.search import search
from ppopt.solve.space import parse_space
from ppopt.units import UnitCosts
from ppopt.validation import validate


def _spec(p, m, comm=1.0, cap=None):
    return InstanceSpec(p, m, UnitCosts(1, 2, None, comm), memory_limit=cap)


def test_lns_proves_the_known_optimum_when_one_neighbourhood_holds_everything(monkeypatch):
    """p = 4, m = 8, one-slot messages, cap 4, split backward: the best hint takes 41 slots, above the
    bounds, so the large-neighbourhood search runs; its first neighbourhood holds every op, and
    solving it proves the optimum, which the plain CP-SAT search proves too. (In the full-backward
    space the hint meets the bound and the search never ran: this test could not fail.)"""
    import ppopt.solve.search as searching

    improved = []
    real = searching.improve
    monkeypatch.setattr(searching, "improve", lambda *args, **kwargs: improved.append(real(*args, **kwargs)) or improved[-1])
    space = parse_space("placement=linear,backward=split")
    result = search(_spec(4, 8, cap=4), space, SolveOptions(20, method="lns", workers=1, deterministic_time=5))
    plain = search(_spec(4, 8, cap=4), space, SolveOptions(20, method="cp", workers=1, deterministic_time=5))
    assert [i.proven for i in improved] == [True]
    assert result.status == plain.status == "optimal" and result.step_time == result.bound == plain.step_time
    assert result.step_time < result.hint_step_time


def test_lns_is_reproducible_and_improves_on_its_hint():
    """p = 7, m = 21, cap 7, one-slot messages: the search frees windows of 240 of the 294 ops
    (smaller than the problem at first) and finds a shorter schedule than its hint."""
    options = SolveOptions(60, method="lns", seed=3, deterministic_time=0.5)
    runs = [search(_spec(7, 21, cap=7), parse_space("placement=linear"), options) for _ in range(2)]
    first, second = runs
    assert first.schedule.orders == second.schedule.orders
    assert first.step_time < first.hint_step_time
    assert first.bound <= first.step_time
    validate(first.schedule)
    assert max(first.simulation.peak_activation_bytes) <= 7 + 1e-9


def test_lns_steps_keep_presolve_on_models_too_large_to_load_without_it(monkeypatch):
    """Without presolve CP-SAT loads a neighbourhood's model (a copy of the whole one) without
    watching its time limit: 24 s at 32,768 ops, so a 60 s search ran 132 s. From PRESOLVE_OPS ops
    every step keeps presolve, which does; below it, steps skip it. The same search (p = 7, m = 21:
    294 ops) on either side of the threshold."""
    import ppopt.solve.lns as lns
    from ppopt.solve.options import SolveOptions as Options

    seen: list[bool] = []
    inside = [False]  # the solves of the neighbourhood search only, not the search's others
    real_run, real_improve = Options.run, lns.improve

    def run(self, solver, model, callback=None):
        if inside[0]:
            seen.append(solver.parameters.cp_model_presolve)
        return real_run(self, solver, model, callback)

    def improve(*args, **kwargs):
        inside[0] = True
        try:
            return real_improve(*args, **kwargs)
        finally:
            inside[0] = False

    monkeypatch.setattr(Options, "run", run)
    monkeypatch.setattr("ppopt.solve.search.improve", improve)
    options = SolveOptions(60, method="lns", seed=3, deterministic_time=0.2)
    search(_spec(7, 21, cap=7), parse_space("placement=linear"), options)
    assert seen and not any(seen)
    seen.clear()
    monkeypatch.setattr(lns, "PRESOLVE_OPS", 294)
    search(_spec(7, 21, cap=7), parse_space("placement=linear"), options)
    assert seen and all(seen)


def test_search_progress_speaks_the_instance_unit():
    """The search's progress lines give times in the user's unit, never the solver's ticks or a float's
    last digits: the window search's improvements (p = 7, m = 21, as above) and the closing line."""
    lines: list[str] = []
    options = SolveOptions(60, method="lns", seed=3, deterministic_time=0.5, progress=lines.append)
    result = search(_spec(7, 21, cap=7), parse_space("placement=linear"), options)
    improvements = [line for line in lines if "lns step" in line]
    assert improvements and all(line.endswith("ops free)") and " slots (" in line for line in improvements)
    assert not any("ticks" in line for line in lines)
    assert lines[-1].endswith(f"step {result.step_time:.6g} slots, bound {result.bound:.6g} slots")


def test_method_is_checked():
    with pytest.raises(ConfigError) as error:
        SolveOptions(method="annealing")
    assert error.value.field == "method"
    with pytest.raises(ScheduleError, match="one device per stage"):
        search(_spec(4, 8), parse_space("placement=bidirectional"), SolveOptions(5, method="lns"))


def test_gap_searches_chimera_and_its_asymmetric_split_once_in_unit_mode():
    report = gap_report(_spec(4, 8, comm=0.0), {}, ["chimera", "chimera-asym"], SolveOptions(20, deterministic_time=2.0))
    assert len(report.searches) == 1
    # the report keeps the searches' figures, not their schedules (gigabytes at scale)
    assert all(r.schedule is None and r.simulation is None and r.handcrafted == () for r in report.searches.values())
    chimera, asym = report.rows
    assert chimera.bound == asym.bound
    assert "split=1:2" in asym.space and "split" not in chimera.space


def test_window_search_improves_1f1b_within_the_cap_reproducibly():
    """p = 6, m = 12, cap 6, one-slot messages: windows of time re-solved alone shorten 1F1B, keep
    it valid and within the cap, and the same seed gives the same schedule."""
    from ppopt.generators import generate
    from ppopt.simulate import simulate
    from ppopt.solve.lns import Timing, improve_windows

    instance = _spec(6, 12, cap=6).instance(6)
    timing = Timing(lambda op: 1 if op.kind.name == "F" else 2, lambda dep, op: 1, lambda op: op.stage, {s: 6 for s in range(6)}, 6,
                    False)
    start = generate("1f1b", 6, 12)
    before = simulate(start, instance.costs, instance.system).step_time_s
    runs = [improve_windows(start, timing, SolveOptions(60, seed=1, deterministic_time=0.3).start()) for _ in range(2)]
    (schedule, improved), (again, _) = runs
    assert schedule.orders == again.orders
    simulation = simulate(validate(schedule), instance.costs, instance.system)
    assert simulation.step_time_s == improved.makespan < before
    assert max(simulation.peak_activation_bytes) <= 6


def test_window_search_keeps_the_limit_of_a_device_holding_two_stages(monkeypatch):
    """V placement, split backward, p = 4, m = 16, F = 2, B = 4 per 1/p share, one-slot messages,
    a limit of 2.5 activations: the window search shortens V-Min within the limit. Each device holds
    two stages, whose activations share the device's room: without that cumulative the same search
    goes over the limit, so the test sees the constraint work. Windows of about 24 ops are narrower
    than a first stage's activation lives, so some stay live across a whole window and take room."""
    import ppopt.solve.lns as lns
    from ppopt.generators import generate
    from ppopt.simulate import simulate
    from ppopt.solve.model import device_rooms

    start = generate("v-min", 4, 16)
    instance = InstanceSpec(4, 16, UnitCosts(2, 4, 2, 1), memory_limit=2.5).instance(start.stages, placement=start.placement)
    device = [holders[0] for holders in start.placement]
    monkeypatch.setattr(lns, "TARGET_FREE", 24)
    ticks = {"F": 1, "I": 1, "W": 1}  # slots: a chunk's share of F = 2, I = 2, W = 2
    before = simulate(validate(start), instance.costs, instance.system)
    peaks = {}
    for shared in (device_rooms(instance, start.placement), {}):
        timing = lns.Timing(lambda op: ticks[op.kind.name], lambda dep, op: 1 if device[dep.stage] != device[op.stage] else 0,
                            lambda op: device[op.stage], {}, start.stages, True, shared)
        schedule, improved = lns.improve_windows(start, timing, SolveOptions(60, seed=1, deterministic_time=3.0).start())
        simulation = simulate(validate(schedule), instance.costs, instance.system)
        assert simulation.step_time_s == improved.makespan < before.step_time_s
        peaks[bool(shared)] = max(simulation.peak_activation_bytes)
    assert peaks[True] <= 2.5 < peaks[False]


def _above_lns_threshold(monkeypatch):
    """Lower auto's thresholds so that a small instance takes the path of instances above
    AUTO_LNS_OPS ops (window search first, then one CP-SAT solve if it found nothing). A chain
    there takes the time-indexed search instead (tests.test_timeindexed); these tests are about
    the window search, so it is switched off."""
    import ppopt.solve.search as search_module
    monkeypatch.setattr(search_module, "AUTO_CP_OPS", 10)
    monkeypatch.setattr(search_module, "AUTO_LNS_OPS", 20)
    monkeypatch.setattr(search_module, "_time_indexed_start", lambda setup: None)
    return search_module


def _record_solves(monkeypatch, module) -> list[bool]:
    """The ``full`` flag of every ``_solve`` call the search makes (True: a whole-model solve)."""
    calls: list[bool] = []
    real_solve = module._solve

    def solve(setup, options, minimize_memory, full=True):
        calls.append(full)
        return real_solve(setup, options, minimize_memory, full)

    monkeypatch.setattr(module, "_solve", solve)
    return calls


def _fruitless_windows(monkeypatch, module) -> list:
    """Replace the window search by one that finds nothing; returns the schedules it was given."""
    given: list = []
    monkeypatch.setattr(module, "_improve", lambda setup, best, from_solver, options: (given.append(best), (best, from_solver))[1])
    return given


def test_auto_gives_the_rest_to_one_cp_solve_when_the_window_search_finds_nothing(monkeypatch):
    """p = 7, m = 21, cap 7, one-slot messages (294 ops): with a window search that finds nothing,
    the CP-SAT solve of the whole model that follows shortens the hint (as at 32 x 256, where it
    turns 1F1B's 1,417 slots into 1,415)."""
    module = _above_lns_threshold(monkeypatch)
    windows = _fruitless_windows(monkeypatch, module)
    notes = []
    result = search(_spec(7, 21, cap=7), parse_space("placement=linear"),
                    SolveOptions(60, deterministic_time=5.0, progress=notes.append))
    assert len(windows) == 1
    assert any("one CP-SAT solve of the whole model" in note for note in notes)
    assert result.step_time < result.hint_step_time
    validate(result.schedule)
    assert max(result.simulation.peak_activation_bytes) <= 7 + 1e-9


def test_auto_keeps_the_window_search_when_it_shortens_the_hint(monkeypatch):
    """When the window search's third finds a shorter schedule, it goes on with the rest of the time
    and no CP-SAT solve of the whole model runs."""
    from dataclasses import replace

    module = _above_lns_threshold(monkeypatch)
    solves, windows = _record_solves(monkeypatch, module), []

    def improve(setup, best, from_solver, options):
        windows.append(best)
        return (replace(best, note="shorter") if len(windows) == 1 else best), from_solver

    monkeypatch.setattr(module, "_improve", improve)
    search(_spec(7, 21, cap=7), parse_space("placement=linear"), SolveOptions(20, deterministic_time=1.0))
    assert solves == [False]  # only the hint's pick; no whole-model solve
    assert len(windows) == 2 and windows[1].note == "shorter"


def test_auto_runs_the_window_search_on_a_v_under_a_limit(monkeypatch):
    """Above the threshold, a space whose devices hold two stages (V, split backward) takes the
    window search too, and what it returns keeps the device's limit (2.5 activations of a 1/p
    share, p = 4, m = 16, F = 2, B = 4, one-slot messages)."""
    _above_lns_threshold(monkeypatch)
    notes: list[str] = []
    spec = InstanceSpec(4, 16, UnitCosts(2, 4, 2, 1), memory_limit=2.5)
    result = search(spec, parse_space("placement=v,backward=split"), SolveOptions(60, deterministic_time=4.0, progress=notes.append))
    assert any("windows of time" in note for note in notes)
    validate(result.schedule)
    assert result.step_time <= result.hint_step_time
    assert max(result.simulation.peak_activation_bytes) <= 2.5 + 1e-9


@pytest.mark.parametrize("space", ["placement=v,backward=split", "placement=zigzag,backward=split"])
def test_window_search_with_ops_that_last_no_time(monkeypatch, space):
    """W = 0 (--weight 0): chained W ops end at the instant they start, so start times cannot say
    which comes first; the window search orders them by its graph (it raised a KeyError)."""
    _above_lns_threshold(monkeypatch)
    spec = InstanceSpec(4, 12, UnitCosts(1, 2, 0, 1), memory_limit=3)
    result = search(spec, parse_space(space), SolveOptions(60, deterministic_time=3.0))
    validate(result.schedule)
    assert result.step_time <= result.hint_step_time
    assert max(result.simulation.peak_activation_bytes) <= 3 + 1e-9


def test_window_order_keeps_a_dependency_between_ops_that_last_no_time():
    """V placement, p = 2: device 1 holds stages 1 and 2, and I(2) sends its gradient to I(1) on the
    same device. With I lasting 0 ticks both may start at one instant; stage order alone would put
    I(1) first, a deadlock. The dependencies' topological rank puts I(2) first."""
    from ppopt.graph import topological_order
    from ppopt.ir import Kind, Op, dependencies, required_ops
    from ppopt.solve.lns import window_order

    ops = required_ops(4, 1, True)
    successors: dict[Op, list[Op]] = {op: [] for op in ops}
    for op in ops:
        for dep in dependencies(op, 4, True):
            successors[dep].append(op)
    rank = {op: k for k, op in enumerate(topological_order(successors))}
    first, second = Op(2, Kind.I, 0), Op(1, Kind.I, 0)
    assert window_order([second, first], {first: 5, second: 5}, lambda op: 0, rank) == [first, second]


def test_models_from_no_lp_ops_are_solved_without_the_linear_relaxation():
    """CP-SAT's one worker loads the linear relaxation of a 65,536-op model for about 90 s without
    watching the time limit (options.NO_LP_OPS): from that size on it is switched off, below it kept
    (given the time options.LP_S_PER_OP asks for: 600 s covers it)."""
    from ppopt.solve.options import NO_LP_OPS, NO_LP_SUBSOLVERS

    default = SolveOptions(600).start().solver().parameters.linearization_level
    assert SolveOptions(600).start().solver(NO_LP_OPS - 1).parameters.linearization_level == default == 1
    assert SolveOptions(600).start().solver(NO_LP_OPS).parameters.linearization_level == 0
    # with several workers the portfolio's LP workers are left out too
    assert list(SolveOptions(600, workers=2).start().solver(NO_LP_OPS).parameters.subsolvers) == list(NO_LP_SUBSOLVERS)
    assert not SolveOptions(600, workers=2).start().solver(NO_LP_OPS - 1).parameters.subsolvers
    # a short budget leaves them out below NO_LP_OPS as well
    assert list(SolveOptions(10, workers=2).start().solver(NO_LP_OPS - 1).parameters.subsolvers) == list(NO_LP_SUBSOLVERS)


def test_cp_above_cp_max_ops_is_refused_before_any_work():
    """32 x 1025 with a cap (65,600 ops): one CP-SAT solve would run past any time limit here, so
    ``--method cp`` and ``--minimize-memory`` are refused in one line naming the sizes."""
    from ppopt.solve.options import CP_MAX_OPS

    with pytest.raises(ScheduleError, match=f"65,600 ops .* \\({CP_MAX_OPS:,}\\)") as error:
        search(_spec(32, 1025, cap=32), parse_space("placement=linear"), SolveOptions(60, method="cp"))
    assert error.value.field == "method"
    # the memory solve of --minimize-memory is such a solve as well
    with pytest.raises(ScheduleError, match="65,600 ops") as error:
        search(_spec(32, 1025, cap=32), parse_space("placement=linear"), SolveOptions(60), minimize_memory=True)
    assert error.value.field == "minimize_memory"


def test_auto_runs_no_cp_solve_above_cp_max_ops(monkeypatch):
    """With CP_MAX_OPS lowered to 100: where the window search applies (linear, p = 7, m = 21, 294
    ops) auto keeps to it and never solves the whole model; where it does not (bidirectional
    placement) auto reports the best hint without a solve."""
    module = _above_lns_threshold(monkeypatch)
    monkeypatch.setattr(module, "CP_MAX_OPS", 100)
    full_solves = _record_solves(monkeypatch, module)
    _fruitless_windows(monkeypatch, module)
    search(_spec(7, 21, cap=7), parse_space("placement=linear"), SolveOptions(20, deterministic_time=1.0))
    assert full_solves == [False]

    notes = []
    result = search(_spec(4, 16), parse_space("placement=bidirectional"),
                    SolveOptions(20, deterministic_time=1.0, progress=notes.append))
    assert any("no CP-SAT solve" in note for note in notes)
    assert result.step_time == result.hint_step_time
    assert full_solves == [False, True]  # asked of _solve, which declines it above CP_MAX_OPS (the note)


def test_auto_keeps_the_windows_when_the_whole_model_would_not_be_built_in_time(monkeypatch):
    """When the time left after the window search's third cannot build the whole model (the
    build estimate raised here), the windows get the rest instead of a skipped solve."""
    module = _above_lns_threshold(monkeypatch)
    monkeypatch.setattr(module, "BUILD_S_PER_OP", 1e6)
    full_solves, windows = _record_solves(monkeypatch, module), _fruitless_windows(monkeypatch, module)
    search(_spec(7, 21, cap=7), parse_space("placement=linear"), SolveOptions(20, deterministic_time=1.0))
    assert full_solves == [False] and len(windows) == 2


def test_auto_bounds_by_refutation_after_its_solve():
    """p = 8, m = 96, cap 8, one-slot messages (1,536 ops, so ``auto`` runs cp+lns): after the solve
    the time-indexed refutation proves that no schedule of 484 slots exists, so the bound is at least
    485 (the reduced problems' 481 before, the block cuts' 484 alone in the test below), below the
    schedule found; its next rung stops at its deterministic time, and the block cuts take the time
    left. Deterministic time limits keep the outcome independent of the load."""
    notes: list[str] = []
    result = search(_spec(8, 96, cap=8), parse_space("placement=linear"),
                    SolveOptions(120, deterministic_time=2.0, progress=notes.append))
    refuted = next(k for k, note in enumerate(notes) if note.startswith("time-indexed refutation: a schedule of 484 slots or less? none"))
    assert any(note.startswith("block cuts: ") for note in notes[refuted:])
    (before,) = [note for note in notes if note.startswith("reduced-problem bound: ")]
    assert int(before.split()[-2]) < 485 <= result.bound <= result.step_time


def test_auto_bounds_with_block_cuts_where_the_refutation_does_not_apply(monkeypatch):
    """The same instance with the refutation's model over its size: after the solve the bound comes
    from the whole chain with the cuts of blocks of 10 to 16 microbatches. It beats the one-machine
    bound and stays below the schedule found."""
    monkeypatch.setattr(timeindexed, "MAX_LITERALS", 0)
    notes: list[str] = []
    result = search(_spec(8, 96, cap=8), parse_space("placement=linear"),
                    SolveOptions(120, deterministic_time=2.0, progress=notes.append))
    graph = timeindexed.chain_graph(Chain(8, lambda s, k: 1 if k is Kind.F else 2, lambda s, a, b: 1, [8] * 8), 96)
    assert [note for note in notes if note.startswith("time-indexed refutation: ")] == \
        [f"time-indexed refutation: a schedule of 482 slots or less? not asked: its model would hold {graph.literals(482):,} Booleans, "
         "over the limit"]
    (cuts,) = [note.removeprefix("block cuts: ") for note in notes if note.startswith("block cuts: ")]
    assert [int(part.split()[0]) for part in cuts.split(", ")] == [10, 12, 14, 16]
    (before,) = [note for note in notes if note.startswith("reduced-problem bound: ")]  # still runs first
    assert int(before.split()[-2]) <= result.bound
    assert not any(note.startswith("large-neighbourhood search") for note in notes)  # the cuts took its time
    assert result.analytic.one_machine < result.analytic.relaxation == result.bound <= result.step_time


def test_the_block_cuts_take_the_time_a_refutation_stopped_by_size_leaves(monkeypatch):
    """The same instance with MAX_LITERALS at the size of the model at 482 slots: the rung 482 is
    refuted (a bound of 483) and 484's model is too large, so the ladder stops with most of
    the time left. The block cuts then take it and raise the bound past the refutation's; before, a
    refutation that raised the bound at all skipped them and the time went unused."""
    graph = timeindexed.chain_graph(Chain(8, lambda s, k: 1 if k is Kind.F else 2, lambda s, a, b: 1, [8] * 8), 96)
    assert graph.literals(482) < graph.literals(484)
    monkeypatch.setattr(timeindexed, "MAX_LITERALS", graph.literals(482))
    notes: list[str] = []
    result = search(_spec(8, 96, cap=8), parse_space("placement=linear"),
                    SolveOptions(120, deterministic_time=2.0, progress=notes.append))
    refuted = [note for note in notes if note.startswith("time-indexed refutation: ")]
    assert [note.split("? ")[1].split(" (")[0].split(":")[0] for note in refuted] == ["none", "not asked"]
    assert refuted[1] == (f"time-indexed refutation: a schedule of 484 slots or less? not asked: its model would hold "
                          f"{graph.literals(484):,} Booleans, over the limit")
    (cuts,) = [note for note in notes if note.startswith("bound with the block cuts: ")]
    assert 483 < int(cuts.split()[-2]) == result.bound <= result.step_time


def test_an_explicit_method_keeps_the_reduced_problems_where_auto_would_cut():
    """The same instance with ``--method cp``: the block cuts belong to cp+lns (they take the window
    search's time), so the bound comes from the reduced problems before the solve, as before them."""
    notes: list[str] = []
    result = search(_spec(8, 96, cap=8), parse_space("placement=linear"),
                    SolveOptions(120, deterministic_time=1.0, method="cp", progress=notes.append))
    assert any(note.startswith("reduced-problem bound: ") for note in notes)
    assert not any(note.startswith("block cuts: ") for note in notes)
    assert result.analytic.one_machine < result.bound <= result.step_time


def test_a_short_budget_keeps_the_large_neighbourhood_search_instead_of_the_block_cuts():
    """The same instance in 10 s: fewer than BLOCK_CUTS_MIN_S are left after the solve, so the search
    runs as without the cuts (reduced problems, CP-SAT, then the large-neighbourhood search), and the
    skipped cuts are recorded as a decision of the clock."""
    notes: list[str] = []
    options = SolveOptions(10, progress=notes.append).start()
    result = search(_spec(8, 96, cap=8), parse_space("placement=linear"), options)
    assert any(note.startswith("reduced-problem bound: ") for note in notes)
    assert any(note.startswith("large-neighbourhood search") for note in notes)
    assert not any(note.startswith("block cuts: ") for note in notes)
    assert "the block cuts skipped" in options.cuts
    # how far the reduced problems get in a loaded 10 s is the clock's business: only validity here
    assert result.analytic.one_machine <= result.bound <= result.step_time


def test_auto_gives_cp_sat_the_whole_budget_when_the_neighbourhoods_could_not_be_built(monkeypatch):
    """At 4,096 ops auto runs CP-SAT in half the budget, then the large-neighbourhood search in the
    rest; when that rest cannot build the search's model, it went unused (a 3 s search returned its
    hint after 1.7 s). Model building made slow here, so the rule decides whatever the machine."""
    monkeypatch.setattr("ppopt.solve.search.BUILD_S_PER_OP", 0.3 * 6.0 / 4096)  # 1.8 s for the whole model
    lines = []
    spec = InstanceSpec(16, 128, units=UnitCosts(comm=1.0), memory_limit=16)
    result = search(spec, "placement=linear", SolveOptions(time_limit_s=6.0, progress=lines.append))
    assert not any("large-neighbourhood search skipped" in line for line in lines), lines
    assert result.solver_bound > 0  # CP-SAT built its model and solved it
