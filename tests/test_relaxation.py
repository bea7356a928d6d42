"""The reduced-problem bound: hand-computed, the proven optimum with every device kept, ≤ every schedule."""

from dataclasses import replace

from hypothesis import given, settings
from hypothesis import strategies as st

from ppopt.generators import generate
from ppopt.ir import Kind
from ppopt.placement import placement
from ppopt.simulate import simulate
from ppopt.solve.greedy import greedy_schedule
from ppopt.solve.instance import unit_instance
from ppopt.solve.options import SolveOptions
from ppopt.solve.periodic import composed, period_bound, periodic_pattern
from ppopt.solve.relaxation import (
    Chain,
    block_bound,
    block_cuts,
    chain_with_blocks,
    cut_sizes,
    kept_sets,
    relaxation_bound,
    tail_bound,
)
from ppopt.solve.search import _block_size, analytic_bounds
from ppopt.units import UnitCosts
from ppopt.validation import validate
from tests.test_bounds import _optimum

TO_THE_END = 600.0
"""The wall-clock budget of the solves whose bound is asserted equal to a proven one: far more than
these tiny models take (milliseconds to seconds), so a loaded machine cannot cut them short."""


def _unit(comm: int):
    return (lambda s, k: {Kind.F: 1, Kind.B: 2}[k]), (lambda s, a, b: comm)


def test_kept_sets_grow_from_three_devices_to_every_device():
    assert kept_sets(5) == [(0, 2, 4), (0, 1, 2, 3, 4)]
    assert kept_sets(16)[0] == (0, 8, 15) and len(kept_sets(16)[1]) == 5
    assert kept_sets(2) == [(0, 1)]
    assert kept_sets(1) == []


def test_round_trip_by_hand():
    """p = 2, m = 2, F = 1, B = 2, one-slot messages, one live activation: microbatch 1 enters only
    after microbatch 0's round trip (1 + 1 + 1 + 2 + 1 + 2 = 8 slots), and runs the same 8: 16."""
    duration, delay = _unit(1)
    assert relaxation_bound(2, 2, duration, delay, [1, 1], SolveOptions(10).start()) == 16


@settings(max_examples=10, deadline=None)
@given(p=st.integers(2, 4), m=st.integers(1, 6), cap=st.sampled_from([None, 1, 2, 3]), comm=st.sampled_from([0, 1]))
def test_every_device_kept_gives_the_proven_optimum(p, m, cap, comm):
    """The last reduced problem keeps every device: it is the full problem with microbatches in order,
    so (with time to finish) its bound is the proven optimum of the search's own model."""
    duration, delay = _unit(comm)
    bound = relaxation_bound(m, p, duration, delay, [cap] * p, SolveOptions(TO_THE_END).start())
    instance = unit_instance(p, m, p, UnitCosts(1, 2, None, comm), memory_limit=cap)
    assert bound == _optimum(instance, "placement=linear")


@settings(max_examples=8, deadline=None)
@given(p=st.integers(3, 8), extra=st.integers(0, 10), comm=st.sampled_from([0, 1, 2]), capped=st.booleans(),
       meetings=st.booleans())
def test_bound_below_every_schedule(p, extra, comm, capped, meetings):
    """With a short (deterministic) budget, a partial bound, still ≤ 1F1B, GPipe and the greedy schedule that fit, and
    at least the two ends' reduced problem is no weaker than the critical path; the same for the two
    ends with the meetings on the devices between."""
    m = p + extra
    cap = p if capped else None
    duration, delay = _unit(comm)
    ends = {"pairs": 2, "sets": [(0, p - 1)]} if meetings else {}
    bound = relaxation_bound(m, p, duration, delay, [cap] * p, SolveOptions(60, deterministic_time=0.3).start(), **ends)
    instance = unit_instance(p, m, p, UnitCosts(1, 2, None, comm), memory_limit=cap)
    assert bound >= analytic_bounds(instance, placement("linear", p), False).critical_path
    schedules = [generate("1f1b", p, m), generate("gpipe", p, m)]
    greedy = greedy_schedule(instance, placement("linear", p), False)
    schedules += [greedy] if greedy is not None else []
    for schedule in schedules:
        simulation = simulate(validate(schedule), instance.costs, instance.system)
        if cap is not None and max(simulation.peak_activation_bytes) > cap + 1e-9:
            continue
        assert bound <= simulation.step_time_s + 1e-9, schedule.name



def test_three_devices_beat_the_graph_bounds_at_16_by_64():
    """p = 16, m = 64, cap 16, one-slot messages: keeping devices 0, 8 and 15 exactly (the first
    reduced problem) already bounds above the round-trip and one-machine bounds, and stays below 1F1B.
    The solve is limited in deterministic time (it proves the reduced optimum well within it), so the
    outcome does not depend on the machine's load."""
    p, m = 16, 64
    duration, delay = _unit(1)
    instance = unit_instance(p, m, p, UnitCosts(1, 2, None, 1), memory_limit=p)
    graph = analytic_bounds(instance, placement("linear", p), False)
    options = SolveOptions(600, deterministic_time=3.0).start()
    bound = relaxation_bound(m, p, duration, delay, [p] * p, options, int(graph.best), sets=kept_sets(p)[:1])
    one_f_one_b = simulate(validate(generate("1f1b", p, m)), instance.costs, instance.system).step_time_s
    assert graph.best < bound <= one_f_one_b


def test_backward_lag_counts_the_backwards_between_the_kept_devices():
    """p = 2, m = 1, F = 1, B = 5 on stage 0 and 1 on stage 1, no messages: the one microbatch takes
    1 + 1 + 1 + 5 = 8. The lag from B_1 to B_0 is B_1 (1), not B_0 (5), which would give 12."""
    duration = lambda s, k: {Kind.F: 1, Kind.B: (5, 1)[s]}[k]  # noqa: E731
    delay = lambda s, a, b: 0  # noqa: E731
    assert relaxation_bound(1, 2, duration, delay, [None, None], SolveOptions(10).start()) == 8


def test_meetings_on_the_dropped_device_reach_the_optimum():
    """p = 3, m = 6, cap 3, one-slot messages, devices 0 and 2 kept: as pure lags, device 1 lets the
    reduced problem reach 32; the meetings of F(j) and B(i) there (j - i = 1, 2) give 33, the optimum
    CP-SAT proves for the full problem.

    The 32 by hand (F = 1, B = 2; F_2(i) >= F_0(i) + 4, two forwards and two messages; B_0(i) >= B_2(i)
    + 6, B_2, a message, B_1 and a message; B_2(i) >= F_2(i) + 1). At least 32: device 2 runs F_2(0),
    F_2(1) and B_2(0), all from slot 4, before B_2(1), so B_2(1) >= 4 + 1 + 1 + 2 = 8 and B_0(1) ends at
    least 8 + 6 + 2 = 16; the cap holds F_0(4) until then, so F_2(4) >= 20; device 2 then runs F_2(4),
    F_2(5) and B_2(4) before B_2(5): B_2(5) >= 20 + 4 = 24, and B_0(5) ends at least 24 + 6 + 2 = 32.
    At most 32: F_0 = 0, 1, 2, 13, 16, 19, F_2 = 4, 7, 10, 17, 20, 23, B_2 = 5, 8, 11, 18, 21, 24 and B_0 =
    11, 14, 17, 24, 27, 30 meet every constraint (F_0(i + 3) at the end of B_0(i), no overlap on either
    device): B_0(5) ends at 32, and B_2(5) at 26, 6 before it."""
    p, m, cap = 3, 6, 3
    duration, delay = _unit(1)
    ends = [(0, p - 1)]
    lags = relaxation_bound(m, p, duration, delay, [cap] * p, SolveOptions(10).start(), sets=ends)
    meetings = relaxation_bound(m, p, duration, delay, [cap] * p, SolveOptions(10).start(), pairs=2, sets=ends)
    optimum = _optimum(unit_instance(p, m, p, UnitCosts(1, 2, None, 1), memory_limit=cap), "placement=linear")
    assert (lags, meetings, optimum) == (32, 33, 33)


@settings(max_examples=10, deadline=None)
@given(p=st.integers(3, 5), m=st.integers(1, 7), cap=st.sampled_from([None, 1, 2, 3]), comm=st.sampled_from([0, 1, 2]),
       pairs=st.integers(1, 3))
def test_meetings_stay_below_the_proven_optimum(p, m, cap, comm, pairs):
    """The two ends with the meetings on every device between: never above the proven optimum."""
    duration, delay = _unit(comm)
    bound = relaxation_bound(m, p, duration, delay, [cap] * p, SolveOptions(10).start(), pairs=pairs, sets=[(0, p - 1)])
    assert bound <= _optimum(unit_instance(p, m, p, UnitCosts(1, 2, None, comm), memory_limit=cap), "placement=linear")


def test_tail_bound_by_hand():
    """p = 2, m = 3, one live activation, one-slot messages: each microbatch's round trip (1 + 1 + 1 +
    2 + 1 + 2 = 8 slots) runs alone, so the chain to microbatch 2 is 16 and its tail 8: 24, the optimum."""
    duration, delay = _unit(1)
    assert tail_bound(Chain(2, duration, delay, [1, 1]), 3, 1, SolveOptions(10).start()) == 24


def test_tail_bound_ends_the_chain_on_a_whole_round():
    """p = 2, m = 4, two live activations, one-slot messages, a tail of 1: j = 3 is rounded down to 2.
    The chain to microbatch 2 is one round trip (8 slots); the last two microbatches then need 11
    (F_0 at 0 and 1, F_1 at 2 and 3, B_1 at 4 and 6, B_0 at 7 and 9, ending at 11): 19, the optimum.
    Without the rounding it would be 8 + 1 (the chain to microbatch 3) + 8 (one round trip) = 17."""
    duration, delay = _unit(1)
    chain = Chain(2, duration, delay, [2, 2])
    assert tail_bound(chain, 4, 1, SolveOptions(10).start()) == 19
    assert tail_bound(chain, 4, 2, SolveOptions(10).start()) == 19


def test_chain_with_blocks_by_hand():
    """K = 3, m = 64, F_0 = 1095, round trip 26652 ticks (llama3-70b's chain): the chain alone is 21 round
    trips to F_0(63) and one more for its own: 22 × 26652. Two blocks of 31 microbatches (31 + 2 + 31 = 64)
    that each last 1000 more than their chain (11 round trips) add 2000; blocks no longer than their
    chain add nothing, and without a cap only the last block counts."""
    chain = 22 * 26652
    assert chain_with_blocks(64, 3, 1095, 26652, 31, 11 * 26652 + 1000) == chain + 2000
    assert chain_with_blocks(64, 3, 1095, 26652, 31, 11 * 26652) == chain
    assert chain_with_blocks(64, None, 1095, 26652, 31, 10**6) == 33 * 1095 + 10**6


def test_blocks_hold_whole_rounds_and_at_least_two_fit():
    assert _block_size(64, 3) == 31  # 31 + 2 + 31 = 64, 31 = 1 mod 3
    assert _block_size(66, 3) == 31  # 32 rounded down to 1 mod 3
    assert _block_size(52, 3) == 25  # 25 + 2 + 25 = 52
    assert _block_size(256, 3) == 31  # at most 10 rounds of 3, plus one
    assert _block_size(64, 16) is None  # a block of 24 would hold fewer than 8 rounds of 16
    assert _block_size(40, 3) is None  # 19 microbatches: 6 rounds
    assert _block_size(64, None) is None


def _heavier_last_stage(p: int, m: int, cap: int, comm: int, extra: int):
    """Unit instance with F = 2, B = 4 on every stage but the last, which runs F = 2 + extra and
    B = 4 + 2·extra (as llama3-70b's last stage, which also holds the output layer)."""
    instance = unit_instance(p, m, p, UnitCosts(2, 4, None, comm), memory_limit=cap)
    last = instance.costs.stages[-1]
    heavier = replace(last, forward_s=2.0 + extra, backward_s=4.0 + 2 * extra, input_grad_s=2.0 + extra,
                      weight_grad_s=2.0 + extra)
    instance = replace(instance, costs=replace(instance.costs, stages=(*instance.costs.stages[:-1], heavier)))

    def duration(s, k):
        return {Kind.F: 2, Kind.B: 4}[k] + (extra if s == p - 1 else 0) * (1 if k == Kind.F else 2)

    return instance, Chain(p, duration, lambda s, a, b: comm, [cap] * p)


def test_two_blocks_price_the_waits_of_a_heavier_last_stage():
    """p = 3, cap 2, m = 35, one-tick messages, the last stage 3/6 against 2/4: the round trip is
    2 + 2 + 3 + 6 + 4 + 4 + 4 messages = 25, so the chain alone is 17 round trips to F_0(34) and one
    more: 450. Two blocks of 17 (17 + 1 + 17 = 35) see the waits the heavier stage forces and give
    more, never above the proven optimum. With one microbatch more (m = 36), the chain adds one
    forward (452), and the blocks of 17 still give more: they need not tile the step."""
    instance, chain = _heavier_last_stage(3, 35, 2, 1, 1)
    bound = block_bound(chain, 35, 17, SolveOptions(TO_THE_END).start(), pairs=2, sets=[(0, 2)], core=False)
    assert chain_with_blocks(35, 2, 2, 25, 17, 0) == 450 < bound <= _optimum(instance, "placement=linear", 1000)
    assert block_bound(chain, 36, 17, SolveOptions(TO_THE_END).start(), pairs=2, sets=[(0, 2)], core=False) > 450 + 2


@settings(max_examples=10, deadline=None)
@given(p=st.integers(2, 3), cap=st.integers(1, 3), block=st.integers(1, 7), extra_microbatches=st.integers(0, 2),
       comm=st.sampled_from([0, 1]), extra=st.integers(0, 2))
def test_blocks_stay_below_the_proven_optimum(p, cap, block, extra_microbatches, comm, extra):
    m = 2 * block + cap - 1 + extra_microbatches
    instance, chain = _heavier_last_stage(p, m, cap, comm, extra)
    bound = block_bound(chain, m, block, SolveOptions(60, deterministic_time=2.0).start(), pairs=2,
                        sets=[(0, p - 1)], core=False)
    assert bound <= _optimum(instance, "placement=linear", 1000)


@settings(max_examples=10, deadline=None)
@given(p=st.integers(2, 4), m=st.integers(2, 7), cap=st.sampled_from([None, 1, 2, 3]), comm=st.sampled_from([0, 1]),
       data=st.data())
def test_tail_bound_stays_below_the_proven_optimum(p, m, cap, comm, data):
    duration, delay = _unit(comm)
    tail = data.draw(st.integers(1, m - 1))
    bound = tail_bound(Chain(p, duration, delay, [cap] * p), m, tail, SolveOptions(60, deterministic_time=2.0).start())
    assert bound <= _optimum(unit_instance(p, m, p, UnitCosts(1, 2, None, comm), memory_limit=cap), "placement=linear")


def test_tail_bound_beats_the_period_bound_and_stays_below_every_schedule():
    """p = 8, m = 64, cap 8, one-slot messages, a tail of 16 microbatches: above the period bound (the
    chain alone), and below 1F1B, the greedy and the steady-state schedules."""
    p, m = 8, 64
    duration, delay = _unit(1)
    instance = unit_instance(p, m, p, UnitCosts(1, 2, None, 1), memory_limit=p)
    options = SolveOptions(600, deterministic_time=2.0).start()
    bound = tail_bound(Chain(p, duration, delay, [p] * p), m, 2 * p, options)
    period = period_bound(m, lambda s, k: float(duration(s, k)), lambda s, a, b: 1.0, [float(p)] * p)
    pattern = periodic_pattern(p, m, duration, delay, [p] * p, options)
    schedules = [generate("1f1b", p, m), greedy_schedule(instance, placement("linear", p), False),
                 composed(pattern, p, m, duration, delay) if pattern else None]
    assert bound > period
    for schedule in filter(None, schedules):
        simulation = simulate(validate(schedule), instance.costs, instance.system)
        assert max(simulation.peak_activation_bytes) <= p + 1e-9
        assert bound <= simulation.step_time_s + 1e-9, schedule.name


def test_cut_sizes_run_from_a_quarter_round_past_the_cap_to_two_rounds():
    assert cut_sizes(16) == [20, 24, 28, 32]
    assert cut_sizes(9) == [12, 14, 16, 18]  # quarters rounded up, two rounds always the last
    assert cut_sizes(10) == [13, 15, 18, 20]
    assert cut_sizes(5) == [7, 8, 9, 10]
    assert cut_sizes(3) == [4, 5, 6]
    assert cut_sizes(1) == [2]


def test_a_block_that_waits_raises_the_bound_by_hand():
    """p = 3, cap 3, one-slot messages (F = 1, B = 2). A microbatch's round trip from device 0 is
    3 + 6 + 4 = 13 slots, so the chain puts F_0(i + 3) at least 13 after F_0(i). Blocks of 4, 5 and 6
    microbatches take at least 26, 29 and 33 slots (the proven optima of those instances): two rounds,
    plus one slot per microbatch past the first of the second round, plus one wait in the block of 6.
    At m = 9 the two ends alone give 45 (F_0(6) >= 26, then a block of 3: 19); the cut of 6 puts
    F_0(8) at least 33 after F_0(0), then microbatch 8's round trip: 46. The optimum is 47."""
    p, cap, m = 3, 3, 9
    duration, delay = _unit(1)
    chain = Chain(p, duration, delay, [cap] * p)
    cuts = block_cuts(chain, cut_sizes(cap), SolveOptions(TO_THE_END).start())
    assert cuts == {n: _optimum(unit_instance(p, n, p, UnitCosts(1, 2, None, 1), memory_limit=cap), "placement=linear")
                    for n in (4, 5, 6)} == {4: 26, 5: 29, 6: 33}
    ends = [(0, p - 1)]
    plain = relaxation_bound(m, p, duration, delay, [cap] * p, SolveOptions(TO_THE_END).start(), sets=ends)
    with_cuts = relaxation_bound(m, p, duration, delay, [cap] * p, SolveOptions(TO_THE_END).start(), sets=ends, blocks=cuts)
    optimum = _optimum(unit_instance(p, m, p, UnitCosts(1, 2, None, 1), memory_limit=cap), "placement=linear")
    assert (plain, with_cuts, optimum) == (45, 46, 47)


@settings(max_examples=10, deadline=None)
@given(p=st.integers(2, 4), cap=st.integers(1, 3), extra_microbatches=st.integers(1, 4), comm=st.sampled_from([0, 1, 2]),
       extra=st.integers(0, 2), every=st.booleans())
def test_block_cuts_stay_below_the_proven_optimum(p, cap, extra_microbatches, comm, extra, every):
    """With the cuts of blocks of up to two rounds (a heavier last stage too), the reduced problem of the
    two ends, or of every device, never exceeds the proven optimum; with every device kept and time to
    finish, it is the optimum."""
    m = 2 * cap + extra_microbatches
    instance, chain = _heavier_last_stage(p, m, cap, comm, extra)
    cuts = block_cuts(chain, cut_sizes(cap), SolveOptions(TO_THE_END).start())
    sets = [tuple(range(p))] if every else [(0, p - 1)]
    bound = relaxation_bound(m, p, chain.duration, chain.delay, chain.caps, SolveOptions(TO_THE_END).start(), sets=sets, blocks=cuts)
    optimum = _optimum(instance, "placement=linear", 1000)
    assert bound <= optimum
    if every:
        assert bound == optimum
