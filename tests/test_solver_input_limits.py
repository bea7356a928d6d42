"""Solver commands at the edges of their input: sizes set inside --space, memory limits above what
any schedule holds, the work a search does on a short budget, and bounds that say nothing."""

import json
import math

import pytest
from click.testing import CliRunner

from ppopt.cli import main
from ppopt.errors import ScheduleError
from ppopt.ir import Kind
from ppopt.placement import placement
from ppopt.solve import bounds as bounding
from ppopt.solve import gap as gap_module
from ppopt.solve import search as searching
from ppopt.solve.instance import Instance, InstanceSpec, unit_instance
from ppopt.solve.options import SolveOptions
from ppopt.solve.space import parse_space
from ppopt.units import UnitCosts

SMALL = ["-p", "4", "-m", "8", "--unit", "--time-limit", "5", "-q"]


def invoke(*args):
    return CliRunner().invoke(main, [str(a) for a in args])


def unit(p, m, *, comm=0.0, limit=None):
    return InstanceSpec(p, m, UnitCosts(1.0, 2.0, None, comm), memory_limit=limit)


# ---- 1. chunks and waves inside --space count in the size checks ------------------------------------

TOO_MANY = "8 microbatches make 6,400,000 ops (stages x microbatches x kinds); this command holds about 3,400 bytes per op"


@pytest.mark.parametrize("args, line", [
    (["search", *SMALL, "--space", "placement=looped,chunks=100000"],
     f"error: --space: search too large: 4 devices x 100000 stages each (chunks=100000), {TOO_MANY} and takes at most 2,058,823 ops"),
    (["search", *SMALL, "--chunks", "100000", "--space", "placement=looped"],
     f"error: --space: search too large: 4 devices x 100000 stages each (chunks=100000), {TOO_MANY} and takes at most 2,058,823 ops"),
    (["frontier", *SMALL, "--space", "placement=looped,chunks=100000"],
     "error: --space: search too large: 4 devices x 100000 stages each (chunks=100000), 8 microbatches make 6,400,000 ops "
     "(stages x microbatches x kinds); this command holds about 4,500 bytes per op and takes at most 1,555,555 ops"),
    (["search", *SMALL, "--space", "placement=looped,chunks=1000000000"],
     "error: --space: schedule too large: 4 devices x 1000000000 stages each (chunks=1000000000), 8 microbatches make "
     "64,000,000,000 ops (stages x microbatches x kinds); the limit is 10,000,000 ops"),
    (["frontier", *SMALL, "--space", "placement=looped,chunks=1000000000"],
     "error: --space: schedule too large: 4 devices x 1000000000 stages each (chunks=1000000000), 8 microbatches make "
     "64,000,000,000 ops (stages x microbatches x kinds); the limit is 10,000,000 ops"),
    (["search", *SMALL, "--space", "placement=zigzag,waves=1000000000"],
     "error: --space: schedule too large: 4 devices x 2000000000 stages each (waves=1000000000), 8 microbatches make "
     "128,000,000,000 ops (stages x microbatches x kinds); the limit is 10,000,000 ops"),
    (["search", *SMALL, "--space", "placement=family,waves=1000000000"],
     "error: --space: schedule too large: 4 devices x 2000000000 stages each (waves=1000000000), 8 microbatches make "
     "128,000,000,000 ops (stages x microbatches x kinds); the limit is 10,000,000 ops"),
    # a split backward makes three ops per stage and microbatch: over what 5 s can build
    (["search", *SMALL, "--space", "placement=looped,chunks=10000,backward=split"],
     "error: --time-limit: 5 s is too short for 4 devices x 10000 stages each (chunks=10000), 8 microbatches (960,000 ops): "
     "building, simulating and printing one schedule at that size takes up to 24 s; give at least that"),
])
def test_chunks_and_waves_in_the_space_are_refused_before_any_placement_is_built(monkeypatch, args, line):
    def no_work(*args, **kwargs):
        raise AssertionError("refused before any work")

    monkeypatch.setattr("ppopt.solve.space.placement", no_work)
    monkeypatch.setattr(searching, "search", no_work)
    monkeypatch.setattr(gap_module, "search", no_work)  # frontier's own reference
    monkeypatch.setattr(searching, "handcrafted_in", no_work)
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 1
    assert result.stderr == line + "\n"


def test_a_library_search_refuses_a_space_too_large_before_building_its_placement(monkeypatch):
    def no_work(*args, **kwargs):
        raise AssertionError("refused before any work")

    monkeypatch.setattr("ppopt.solve.space.placement", no_work)
    for space in ("placement=looped,chunks=100000", "placement=family,chunks=100000"):
        with pytest.raises(ScheduleError) as error:
            searching.search(unit(4, 8), parse_space(space), SolveOptions(5))
        assert error.value.field == "space"
        assert error.value.reason.endswith("on 4 devices has 400,000 stages; with 8 microbatches that makes 6,400,000 ops "
                                           "(stages x microbatches x kinds), and a search takes at most 2,058,823")


def test_chunks_a_linear_space_does_not_use_are_refused_not_counted():
    """--chunks only matters for spaces with chunks: on a linear one it is refused as ignored (it was
    accepted and ignored), not as a search of 100,000 chunks too large."""
    result = invoke("search", *SMALL, "--chunks", "100000", "--no-grid")
    assert (result.exit_code, result.stderr) == (
        1, "error: --chunks: only applies to a space with placement=looped or any or family (this one's is linear)\n")


# ---- 2. a memory limit above what any schedule holds is no limit -------------------------------------

def test_a_limit_at_or_above_the_most_a_device_holds_limits_nothing():
    most = 8 * 4.0  # m x p activations of a 1/p share: every stage's activation of every microbatch
    unbound = unit_instance(4, 8, 8, memory_limit=most)
    assert unbound.most_held == most
    assert unbound.memory_limit is None and unbound.unbinding_limit == most
    assert unbound.memory_semantics() == ("no memory limit: the limit of 32 live activations per device is at least the "
                                          "most a device can hold here (32 live activations)")
    assert unit_instance(4, 8, 8, memory_limit=most - 0.5).memory_limit == most - 0.5
    assert unit_instance(4, 8, 8, memory_limit=1e19).memory_limit is None


@pytest.mark.parametrize("args, expected", [
    (["search", *SMALL, "--memory-limit", "1e19", "--no-grid"],
     ["memory: no memory limit: the limit of 1e+19 live activations per device is at least the most a device can hold "
      "here (32 live activations)", "status     optimal", "step time  33 slots"]),
    (["gap", *SMALL, "--memory-limit", "1e19", "-s", "1f1b"], ["memory: no memory limit: the limit of 1e+19", "1f1b      33"]),
    (["search", "-p", "4", "-m", "8", "--model", "llama3-8b", "--system", "dgx-h100", "--memory-limit", "1e30GiB",
      "--time-limit", "10", "-q", "--no-grid"],
     ["memory: no memory limit: the limit of 1.074e+39 bytes per device is at least the most", "status     optimal"]),
])
def test_a_huge_memory_limit_is_no_limit_instead_of_a_crash(args, expected):
    result = invoke(*args)
    assert result.exit_code == 0, result.output
    assert result.stderr == ""
    for text in expected:
        assert text in result.stdout


def test_a_huge_frontier_limit_is_no_limit():
    result = invoke("frontier", *SMALL, "--limits", "4,1e19", "--json")
    assert result.exit_code == 0, result.output
    points = json.loads(result.stdout)["points"]
    assert [(p["memory_limit"], p["step_time_s"], p["status"]) for p in points] == [(4, 33, "optimal"), (1e19, 33, "optimal")]


# ---- 3. the work of a search fits its budget ---------------------------------------------------------

class Counting(tuple):
    """A placement that counts how often its stages are looked up."""

    reads = 0

    def __getitem__(self, index):
        Counting.reads += 1
        return super().__getitem__(index)


def test_the_analytic_bounds_take_time_linear_in_the_stages():
    """Looped placement with 1,000 chunks (4,000 stages): each stage's head, tail and round trip, and
    which stages sit alone, come from passes over the placement, not from a pass per stage (which
    made chunks=1000 with --time-limit 5 run 11 to 15 s)."""
    stages = 4000
    where = Counting(placement("looped", 4, chunks=1000))
    calls = []

    def delay(s, a, b):
        calls.append(s)
        return 1.0

    shape = bounding.Shape(stages, 2, 4, where, False)
    Counting.reads = 0
    found = bounding.lower_bounds(shape, lambda s, k: 1.0 if k is Kind.F else 2.0, delay, lambda s: 3.0)
    assert found.device_load == 2 * 1000 * 3 + 3 * 2 + 3 * 3  # device 3: head 3 x (F + hop), its load, tail 3 x (B + hop)
    assert Counting.reads <= 50 * stages and len(calls) <= 50 * stages
    linear = Counting(placement("linear", 400))
    Counting.reads, calls[:] = 0, []
    bounding.lower_bounds(bounding.Shape(400, 2, 400, linear, False), lambda s, k: 1.0, delay, lambda s: 1.0)
    # one stage per device: the memory and warm-up bounds of each stage
    assert Counting.reads <= 50 * 400 and len(calls) <= 50 * 400


def test_the_tick_looks_at_one_delay_per_stage_and_kind_of_link(monkeypatch):
    """The resolution needs each distinct delay, not those of every pair of p devices (p^2 x S delays
    took 30 s at p = 300)."""
    instance = unit(64, 2, comm=1).instance(64)
    asked = []
    comm = Instance.comm
    monkeypatch.setattr(Instance, "comm", lambda self, s, a, b: asked.append((a, b)) or comm(self, s, a, b))
    tick, _, delay, rounding = searching._ticks(instance)
    assert tick == 1 and rounding == 0 and delay(3, 3, 40) == 1
    assert len(asked) <= 2 * 64


def test_exact_ticks_compute_the_graph_bounds_once(monkeypatch):
    calls = []
    windows = bounding.windows

    def counted(*args):
        calls.append(args[0])
        return windows(*args)

    monkeypatch.setattr(bounding, "windows", counted)
    result = searching.search(unit(4, 8, comm=1, limit=2), parse_space("placement=linear"), SolveOptions(10))
    assert len(calls) == 1  # the ticks are exact (1 slot): the bounds in slots are those in ticks
    assert result.analytic == searching.analytic_bounds(unit(4, 8, comm=1, limit=2).instance(4), placement("linear", 4), False)
    assert result.analytic.round_trip > 0


def test_graph_bounds_the_time_left_cannot_cover_are_skipped(monkeypatch):
    """At 192,000 ops the graph bounds took 5 s per pass, twice, on a 10 s budget (17.5 s in all):
    a search now leaves them out when the time left is below their cost, and says so."""
    monkeypatch.setattr(searching, "GRAPH_BOUNDS_S_PER_OP", 1.0)  # 64 ops: 64 s
    notes: list[str] = []
    result = searching.search(unit(4, 8, comm=1, limit=2), parse_space("placement=linear"), SolveOptions(10, progress=notes.append))
    assert "time limit: graph bounds (round trip, one machine, capped warm-up) skipped: they take up to 64.0 s here" in notes
    assert result.analytic.round_trip == result.analytic.one_machine == result.analytic.capped_warmup == 0
    assert result.step_time is not None and 0 < result.bound <= result.step_time


def test_under_a_limit_no_handcrafted_hint_meets_the_greedy_one_comes_first_when_time_covers_only_it(monkeypatch):
    """p = 4, m = 8 under 4 activations: GPipe (peak 8) does not fit. With a schedule costing 3.8 s
    and the greedy one 3.2 s more here, 10 s cover the greedy one but not 1F1B before it: the greedy
    one is next (at p = 64, m = 4,096 the handcrafted ones took 20 s of 30 before it; the command
    now ends in 13 s)."""
    monkeypatch.setattr(searching, "SCHEDULE_S_PER_OP", 0.06)
    monkeypatch.setattr(searching, "GREEDY_S_PER_OP", 0.05)
    monkeypatch.setattr(SolveOptions, "remaining_s", lambda self: 10.0)  # the budget as the costs see it, not the clock
    notes: list[str] = []
    result = searching.search(unit(4, 8, comm=1, limit=4), parse_space("placement=linear"), SolveOptions(10, progress=notes.append))
    assert [c.name for c in result.handcrafted] == ["gpipe"] and not result.handcrafted[0].fits
    assert result.hint == "greedy" and "time limit: no further handcrafted hints tried" in notes
    assert result.step_time is not None and max(result.simulation.peak_activation_bytes) <= 4


def test_no_model_is_built_when_the_time_left_cannot_cover_it(monkeypatch):
    """p = 4, m = 8, cap 3, looped placement with two chunks: the hint (interleaved 1F1B fitted to the
    cap, 72 slots; the greedy one 74) is short of the optimum (66); with a model costing a second per
    op, none is built and the hint is reported."""
    def no_solver(self):
        raise AssertionError("no CP-SAT call")

    monkeypatch.setattr(searching, "BUILD_S_PER_OP", 1.0)
    monkeypatch.setattr(SolveOptions, "solver", no_solver)
    notes: list[str] = []
    result = searching.search(unit(4, 8, comm=1, limit=3), parse_space("placement=looped"),
                              SolveOptions(10, progress=notes.append))
    assert "time limit: building the model of 128 ops takes about 128 s, more than the time left" in notes
    assert result.status == "feasible" and result.step_time == result.hint_step_time == 72
    lowered = searching.search(unit(4, 8, comm=1, limit=3), parse_space("placement=looped"),
                               SolveOptions(10), minimize_memory=True)
    assert lowered.peak_memory is None and lowered.memory_status.startswith("unknown (time limit")


def test_a_long_search_reports_each_step_before_solving(monkeypatch):
    """A large search spends seconds per hint and on the bounds: once PROGRESS_AFTER_S has passed,
    each is a progress line (the first came after 20 s at p = 64, m = 1,500); a quick one prints none."""
    import ppopt.solve.options as shared

    quick: list[str] = []
    monkeypatch.setattr(shared, "PROGRESS_AFTER_S", math.inf)  # a search that never grows long (no wall clock)
    searching.search(unit(4, 8), parse_space("placement=linear"), SolveOptions(10, progress=quick.append))
    assert not [line for line in quick if "] hint " in line or "analytic bounds" in line]
    monkeypatch.setattr(shared, "PROGRESS_AFTER_S", 0.0)
    notes: list[str] = []
    # GPipe meets the analytic bound here, so only every_hint builds the hints after it
    searching.search(unit(4, 8), parse_space("placement=linear"), SolveOptions(10, progress=notes.append, every_hint=True))
    steps = [line.split("] ", 1)[1] for line in notes if line.startswith("[")]
    assert steps[:2] == ["hint gpipe", "hint 1f1b"] and "analytic bounds: 33 slots" in steps


def test_the_period_bound_matches_its_definition():
    """The period bound (numpy over devices, 2 s in Python loops at p = 64, m = 1,500) against the
    formula of its docstring, term by term."""
    from ppopt.solve.periodic import _offsets, period_bound

    forward, backward, hop = [1.0, 1.5, 1.0, 2.0], [2.0, 3.0, 2.5, 4.0], 0.5
    duration = lambda s, k: forward[s] if k is Kind.F else backward[s]  # noqa: E731
    for caps in ([2, None, 3.5, 1], [None] * 4, [1, 1, 1, 1]):
        for m in (1, 5, 9):
            a, b = _offsets(4, forward, backward, [hop] * 3, [0.0] + [hop] * 3)
            cool = [b[0] + backward[0] - b[t] - backward[t] for t in range(4)]
            best = 0.0
            for s, cap in enumerate(caps):
                if cap is None:
                    continue
                k, life = math.floor(cap), b[s] + backward[s] - a[s]
                for j in range(m):
                    rest = m - j
                    after = max([(rest - 1) * forward[s] + life + cool[s]] + [
                        (a[t] if t >= s else b[t]) - a[s] + rest * (forward[t] + backward[t] if t >= s else backward[t]) + cool[t]
                        for t in range(4)])
                    best = max(best, a[s] + (j // k) * life + (j % k) * forward[s] + after)
            assert period_bound(m, duration, lambda s, x, y: hop, caps) == best


# ---- 5. a period bound of 0 says nothing ------------------------------------------------------------

# The period bound at p = 4, m = 8, F = 1, B = 2, no messages, a cap of 3 (ppopt.solve.periodic.period_bound,
# checked term by term in test_the_period_bound_matches_its_definition): an activation on device 0 lives at
# least l = 4F + 4B = 12 slots, so F_0(6) starts at least 2l = 24 after time 0; microbatches 6 and 7 reach
# device 3 no earlier than 3F = 3 slots later and run there one after the other, 2(F + B) = 6, and the last
# gradient needs 3B = 6 slots to come down to device 0: 24 + 3 + 6 + 6 = 39.
PERIOD_BOUND_CAP_3 = 2 * (4 * 1 + 4 * 2) + 3 * 1 + 2 * (1 + 2) + 3 * 2

def test_no_period_bound_is_printed_without_a_memory_limit():
    result = invoke("search", *SMALL, "--no-grid")
    assert result.exit_code == 0, result.output
    assert "period     4 microbatches every 12 slots (rate bound 12 slots: optimal)\n" in result.stdout
    assert "period bound" not in result.stdout
    data = json.loads(invoke("search", *SMALL, "--json").stdout)
    assert data["period_bound_s"] is None
    limited = invoke("search", *SMALL, "--no-grid", "--memory-limit", "3")
    assert f"; period bound for m = 8: {PERIOD_BOUND_CAP_3} slots" in limited.stdout


def test_the_search_result_has_no_period_bound_without_a_cap():
    result = searching.search(unit(4, 8), parse_space("placement=linear"), SolveOptions(10))
    assert result.period is not None and result.period_bound is None
    capped = searching.search(unit(4, 8, limit=3), parse_space("placement=linear"), SolveOptions(10))
    assert capped.period_bound == PERIOD_BOUND_CAP_3



@pytest.mark.parametrize("args, line", [
    (["search", "-p", "4", "-m", "8", "--unit", "--global-batch", "8"],
     "error: --global-batch: needs --model and --system (unit mode has no sequences)"),
    (["search", "-p", "4", "-m", "8", "--costs", "preset.json", "--global-batch", "8"],  # a cost preset is unit mode
     "error: --global-batch: does not apply with --costs: the measured durations are those of the preset's microbatches"),
    (["search", "-p", "4", "-m", "8", "--model", "llama3-8b", "--system", "dgx-h100", "--forward", "2"],
     "error: --forward: is a unit-mode duration: with --model and --system the durations come from the cost model"),
    (["gap", "-p", "4", "-m", "8", "--model", "llama3-8b", "--system", "dgx-h100", "--comm", "1"],
     "error: --comm: is a unit-mode duration: with --model and --system the durations come from the cost model"),
    (["gap", "-p", "4", "-m", "8", "--unit", "-s", "1f1b", "-v", "4"],
     "error: --chunks: none of the schedules given takes it (only interleaved-1f1b, looped-bfs)"),
    (["gap", "-p", "4", "-m", "8", "--unit", "-s", "chimera", "--split", "1:3"],
     "error: --split: none of the schedules given takes it (only chimera-asym)"),
    (["search", "-p", "4", "-m", "8", "--unit", "--space", "placement=linear,placement=v"],
     "error: --space: space key 'placement' is given twice"),
])
def test_a_flag_the_request_would_ignore_is_refused(args, line):
    result = invoke(*args, "--time-limit", "5")
    assert result.exit_code == 1, result.output
    assert result.stderr.strip() == line


def test_repeated_schedules_and_limits_are_one_row_each():
    gap = invoke("gap", "-p", "4", "-m", "8", "--unit", "-s", "1f1b", "-s", "1f1b", "--time-limit", "5", "-q", "--json")
    assert gap.exit_code == 0, gap.output
    assert [row["schedule"] for row in json.loads(gap.stdout)["schedules"]] == ["1f1b"]
    frontier = invoke("frontier", "-p", "4", "-m", "8", "--unit", "--limits", "2,2,3", "--time-limit", "5", "-q", "--json")
    assert frontier.exit_code == 0, frontier.output
    assert [point["memory_limit"] for point in json.loads(frontier.stdout)["points"]] == [2, 3]


def test_a_reported_bound_is_never_above_the_step_found():
    """In seconds the bound and the step are different float sums of the same durations: here they
    differed in the last bit, the bound above (11.653681734423145 > ...143). A bound meeting the step
    within 1e-9 is the step."""
    result = invoke("search", "-p", "4", "-m", "8", "--model", "llama3-8b", "--system", "dgx-h100", "--global-batch", "32",
                    "--time-limit", "8", "-q", "--json")
    assert result.exit_code == 0, result.output
    found = json.loads(result.stdout)
    assert found["bound_s"] <= found["step_time_s"] and found["gap"] == 0 and found["status"] == "optimal"


def test_a_period_above_a_fractional_rate_bound_is_not_called_optimal():
    """p = 4, m = 3, a cap of 4, one-slot messages: a microbatch's activation on device 0 lives
    l = 4F + 4B + 2·3 = 18 slots, so K = 4 microbatches can run every 18 and 3 every 13.5 at best;
    the pattern of 3 runs every 14 (its least whole period), which was printed as optimal though the
    pattern of 4 runs faster."""
    result = invoke("search", "--unit", "-p", "4", "-m", "3", "--memory-limit", "4", "--comm", "1", "--no-grid", "--workers", "1")
    assert result.exit_code == 0, result.output
    assert "period     3 microbatches every 14 slots (rate bound 13.5 slots); " in result.stdout


def test_a_model_and_system_given_as_paths_are_loaded_and_checked_when_the_spec_is_built():
    """A pathlib.Path passed the spec unloaded and the search failed deep inside with a bare
    AssertionError, the batch check skipped: 7 sequences do not split into 8 microbatches."""
    from pathlib import Path

    from ppopt.config import ModelConfig
    from ppopt.errors import ConfigError

    root = Path(__file__).resolve().parent.parent
    model, system = root / "models" / "llama3-8b.toml", root / "configs" / "dgx-h100.toml"
    spec = InstanceSpec(4, 8, model=model, system=system)
    assert isinstance(spec.model, ModelConfig) and spec.model.name == "llama3-8b" and spec.system.name == "dgx-h100"
    with pytest.raises(ConfigError, match="global batch of 7 sequences"):
        InstanceSpec(4, 8, model=model, system=system, global_batch=7)
    with pytest.raises(ConfigError, match="must be a preset name") as raised:
        InstanceSpec(4, 8, model=42, system=system)  # type: ignore[arg-type]
    assert raised.value.field == "model"
