"""The round-trip and one-machine bounds: hand-computed values, ≤ proven optima, ≤ every schedule."""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from ortools.sat.python import cp_model

from ppopt.errors import ScheduleError
from ppopt.generators import generate
from ppopt.ir import Kind
from ppopt.placement import placement
from ppopt.simulate import simulate
from ppopt.solve.bounds import Shape, critical_path, memory_lifetime, warmup
from ppopt.solve.greedy import best_greedy_schedule, greedy_schedule
from ppopt.solve.heads import jackson
from ppopt.solve.instance import unit_instance
from ppopt.solve.model import Frame, build_model
from ppopt.solve.options import SolveOptions
from ppopt.solve.periodic import _clashes, composed, period_bound, periodic_pattern
from ppopt.solve.search import analytic_bounds
from ppopt.solve.space import parse_space, with_backward
from ppopt.units import UnitCosts
from ppopt.validation import validate


def test_jackson_by_hand():
    # (release, duration, tail): job b is released at 1 with the larger tail and preempts a:
    # a runs [0, 1) and [2, 3) (3 + 5 = 8), b runs [1, 2) (2 + 10 = 12)
    assert jackson([(0, 2, 5), (1, 1, 10)]) == 12
    # idle until the first release, then back to back: 4 + 1 + 1 + 0
    assert jackson([(4, 1, 0), (4, 1, 1)]) == 6


def test_round_trip_by_hand():
    """p = 2, m = 2, F = 1, B = 2, one-slot messages, one live activation: microbatch 1 cannot
    start before microbatch 0 has gone up and come back (1 + 1 + 1 + 2 + 1 + 2 = 8), then runs the
    same 8 slots: 16, which is also the optimum (the devices never overlap usefully)."""
    instance = unit_instance(2, 2, 2, UnitCosts(1, 2, None, 1), memory_limit=1)
    bounds = analytic_bounds(instance, placement("linear", 2), False)
    assert bounds.round_trip == 16
    assert bounds.one_machine == 16


def _optimum(instance, space_text, horizon=400, tick=1.0, dominance=True):
    """The proven optimum (slots) of a small unit instance, by CP-SAT with no bound given, in ticks
    of ``tick`` slots (every duration and delay a whole number of them)."""
    space = parse_space(space_text)
    frame = Frame(tick, horizon, 0)
    built = build_model(instance, space, frame, dominance=dominance)
    solver = cp_model.CpSolver()
    solver.parameters.num_workers = 1
    # a deterministic budget, so that a loaded machine does not cut the proof (v, m = 5, cap 1.5,
    # split backward, no order rule takes 4.5 deterministic seconds: 9 s of wall time on a loaded
    # core, and once more than the 20 s a wall-clock limit gave); the wall limit only stops a hang
    solver.parameters.max_deterministic_time = 100
    solver.parameters.max_time_in_seconds = 600
    assert solver.solve(built.model) == cp_model.OPTIMAL
    return solver.objective_value * tick


@settings(max_examples=12, deadline=None)
@given(p=st.integers(2, 3), m=st.integers(1, 5), cap=st.sampled_from([None, 1, 2, 3]), comm=st.sampled_from([0, 1]),
       split=st.booleans())
def test_bounds_below_proven_optimum(p, m, cap, comm, split):
    units = UnitCosts(1, 2, 1 if split else None, comm)
    instance = unit_instance(p, m, p, units, memory_limit=cap)
    bounds = analytic_bounds(instance, placement("linear", p), split)
    optimum = _optimum(instance, "placement=linear" + (",backward=split" if split else ""))
    assert bounds.round_trip <= optimum + 1e-9
    assert bounds.one_machine <= optimum + 1e-9
    assert bounds.best <= optimum + 1e-9
    if not split:
        caps = [cap] * p
        assert period_bound(m, lambda s, k: instance.costs[s].forward_s if k is Kind.F else instance.costs[s].backward_s,
                            instance.comm, caps) <= optimum + 1e-9


@pytest.mark.parametrize("m", [1, 2, 3])
@pytest.mark.parametrize("cap", [None, 2])
def test_bounds_below_proven_optimum_on_a_v_with_messages(m, cap):
    """On a V the turn (stage p - 1 to stage p) stays on one device: no message there, whatever the
    links cost elsewhere. Every bound stays at most the proven optimum (p = 2, 4 stages, messages of
    one slot, backward split)."""
    instance = unit_instance(2, m, 4, UnitCosts(1, 2, 1, 1), memory_limit=cap)
    bounds = analytic_bounds(instance, placement("v", 2), True)
    optimum = _optimum(instance, "placement=v,backward=split", tick=0.5)  # a chunk's F is half a slot
    for name in ("critical_path", "device_load", "memory", "warmup", "round_trip", "one_machine", "capped_warmup"):
        assert getattr(bounds, name) <= optimum + 1e-9, name


def test_round_trip_under_a_cap_on_a_device_holding_two_stages():
    """Looped placement, p = 2, 2 chunks (device 0 holds stages 0 and 2, device 1 stages 1 and 3),
    F = 1, B = 2 per 1/p share (a chunk's F is 0.5, its B 1), no messages, m = 3. A device's room of
    one activation of a 1/p share holds two of a chunk's: stage 0 alone can hold no more, so F(0, 2)
    waits for B(0, 0). Microbatch 0's round trip is 4 x 0.5 + 4 x 1 = 6 slots, and microbatch 2's
    another 6: 12 (the cap was only applied to devices holding one stage before: 11)."""
    instance = unit_instance(2, 3, 4, UnitCosts(1, 2, None, 0), memory_limit=1)
    bounds = analytic_bounds(instance, placement("looped", 2, chunks=2), False)
    assert bounds.round_trip == 12
    assert bounds.round_trip <= _optimum(instance, "placement=looped,chunks=2", tick=0.5)


def test_memory_area_of_a_device_holding_two_stages_by_hand():
    """Looped placement, p = 2, 2 chunks, F = 1, B = 2 per 1/p share (a chunk's F 0.5, B 1), no
    messages, m = 4, room for one activation of a share per device, i.e. K = 2 of one chunk's.
    Device 0 holds stages 0 and 2. Stage 0's activation lives at least 0.5 + 3 x 1.5 + 1 = 6 (its
    F, the F and B of the three stages above, its B), stage 2's 0.5 + 1.5 + 1 = 3; each takes half
    the room, so a microbatch uses 6/2 + 3/2 = 4.5 room-slots there, and all of them fit between
    slot 0 (stage 0's head) and the end (stage 0's tail is 0): T >= 4 x 4.5 = 18. Each stage alone
    (6 x 4 / 2 = 12 for stage 0) sees less, and the proven optimum is above it. (The room takes the
    fit check's relative slack of 1e-12, so the bound is 18 / (1 + 1e-12).)"""
    instance = unit_instance(2, 4, 4, UnitCosts(1, 2, None, 0), memory_limit=1)
    bounds = analytic_bounds(instance, placement("looped", 2, chunks=2), False)
    assert bounds.memory == pytest.approx(18, rel=1e-11)
    assert bounds.memory <= _optimum(instance, "placement=looped,chunks=2", tick=0.5, dominance=False)


@settings(max_examples=16, deadline=None)
@given(style=st.sampled_from(["v", "looped"]), m=st.integers(2, 5), cap=st.sampled_from([1, 1.5, 2]),
       comm=st.sampled_from([0, 1]), split=st.booleans())
def test_bounds_below_proven_optimum_with_two_stages_per_device(style, m, cap, comm, split):
    """Per-stage caps on a device holding two stages (p = 2, 4 stages): every bound stays at most
    the optimum of the model without the microbatch-order rule (its memory a cumulative only)."""
    instance = unit_instance(2, m, 4, UnitCosts(1, 2, 1 if split else None, comm), memory_limit=cap)
    bounds = analytic_bounds(instance, placement(style, 2, chunks=2), split)
    text = ("placement=v" if style == "v" else "placement=looped,chunks=2") + (",backward=split" if split else "")
    optimum = _optimum(instance, text, tick=0.5, dominance=False)
    for name in ("critical_path", "device_load", "memory", "warmup", "round_trip", "one_machine", "capped_warmup"):
        assert getattr(bounds, name) <= optimum + 1e-9, name


FAMILIES = {
    "linear": ("1f1b", "gpipe", "zb-h1"),
    "looped": ("interleaved-1f1b",),
    "v": ("zb-v", "v-min", "dualpipev"),
}


@settings(max_examples=25, deadline=None)
@given(p=st.integers(2, 8), extra=st.integers(0, 12), cap=st.sampled_from([None, 1, 2, "p"]), comm=st.sampled_from([0, 1, 2]),
       style=st.sampled_from(sorted(FAMILIES)), split=st.booleans())
def test_bounds_below_every_schedule(p, extra, cap, comm, style, split):
    """Every fitting handcrafted schedule (and the greedy one) of the placement is no faster than
    the bound, under caps and delays."""
    m = p + extra
    limit = float(p) if cap == "p" else cap
    where = placement(style, p, chunks=2)
    instance = unit_instance(p, m, len(where), UnitCosts(1, 2, None, comm), memory_limit=limit)
    bounds = analytic_bounds(instance, where, split)
    schedules = []
    for name in FAMILIES[style]:
        try:
            schedules.append(with_backward(generate(name, p, m, chunks=2), split))
        except ScheduleError:
            continue
    schedules += [g for g in (greedy_schedule(instance, where, split), best_greedy_schedule(instance, where, split)) if g is not None]
    for schedule in schedules:
        simulation = simulate(validate(schedule), instance.costs, instance.system)
        if limit is not None and max(simulation.peak_activation_bytes) > limit + 1e-9:
            continue  # outside the capped space
        assert bounds.best <= simulation.step_time_s + 1e-9, schedule.name


def test_tick_from_the_durations_structure_and_its_rounding_cost():
    from ppopt.solve.ticks import resolution, rounding_cost

    assert resolution([1.0, 2.0, 0.5]) == 0.5
    assert rounding_cost([1.0, 2.0, 0.5], 0.5) == 0
    # a message a little over a thousandth of a forward: the message is one tick, F = floor(769.2) = 769
    # ticks, B = 1538; rounding costs 1.0 / (769 * 0.0013) - 1 = 0.03 %, while 1/1000 of the longest op
    # (0.002) would drop the message altogether
    values = [1.0, 2.0, 0.0013]
    tick = resolution(values)
    assert tick == 0.0013
    assert abs(rounding_cost(values, tick) - (1.0 / (769 * 0.0013) - 1)) < 1e-12
    assert rounding_cost(values, 0.002) == float("inf")


def test_periodic_pattern_meets_the_rate_bound_and_composes_for_any_m():
    """p = 4, cap 4, F = 1, B = 2, one-slot messages: an activation on device 0 lives at least
    1 + 3 * (1 + 2) + 6 * 1 + 2 = 18 slots, so 4 microbatches need 18 slots in any steady state; the
    pattern reaches it, and its first m microbatches are a valid schedule within the cap."""
    for m in (5, 8, 13):
        instance = unit_instance(4, m, 4, UnitCosts(1, 2, None, 1), memory_limit=4)
        duration = lambda s, k: int({Kind.F: 1, Kind.B: 2}[k])  # noqa: E731
        pattern = periodic_pattern(4, m, duration, lambda s, a, b: 1, [4] * 4, SolveOptions(10).start())
        assert pattern is not None
        schedule = composed(pattern, 4, m, duration, lambda s, a, b: 1)
        assert (pattern.k, pattern.period, pattern.rate_bound) == (4, 18, 18) and pattern.optimal
        simulation = simulate(validate(schedule), instance.costs, instance.system)
        assert simulation.step_time_s == pattern.step
        assert max(simulation.peak_activation_bytes) <= 4


def test_clashes_are_the_offsets_at_which_two_microbatches_meet_on_a_device():
    """One device, F = 1 at offset 0 and B = 2 at offset 1: a microbatch runs [0, 1) and [1, 3).
    Another entering d later meets it when d is within one tick of the same op (F on F: d = 0; B on
    B: d in -1..1), or its F meets the first's B (d = 1, 2) or its B the first's F (d = -2, -1). On a
    circle of 6 that leaves d = 3 alone: [3, 4) and [4, 6) fill the rest. With a period of 2 the
    microbatch's own B wraps onto its F: no pattern."""
    assert _clashes(6, [0], [1], [1], [2]) == {4, 5, 0, 1, 2}
    assert _clashes(2, [0], [1], [1], [2]) is None


def test_the_periodic_pattern_meets_the_rate_bound_at_32_devices():
    """p = 32, cap 32, F = 1, B = 2, one-slot messages (the acceptance instances' chain): an
    activation on device 0 lives at least 32 + 31 + 64 + 31 = 158 slots and 32 may be live, so no
    steady state runs 32 microbatches faster than every 158 slots. The pattern does, and the first
    64 microbatches of it are a valid schedule within the cap and the step it claims."""
    duration = lambda s, k: int({Kind.F: 1, Kind.B: 2}[k])  # noqa: E731
    pattern = periodic_pattern(32, 64, duration, lambda s, a, b: 1, [32] * 32, SolveOptions(60, workers=1).start())
    assert pattern is not None and (pattern.k, pattern.period, pattern.rate_bound) == (32, 158, 158) and pattern.optimal
    instance = unit_instance(32, 64, 32, UnitCosts(1, 2, None, 1), memory_limit=32)
    simulation = simulate(validate(composed(pattern, 32, 64, duration, lambda s, a, b: 1)), instance.costs, instance.system)
    assert simulation.step_time_s <= pattern.step and max(simulation.peak_activation_bytes) <= 32


def _unit_duration(s, k):
    return {Kind.F: 1.0, Kind.B: 2.0}[k]


def test_period_bound_counts_the_last_round_on_the_top_device():
    """p = 32, m = 256, cap 32, F = 1, B = 2, one-slot messages. An activation on device 0 lives at least
    l = 1 + 31 * (1 + 2) + 62 + 2 = 158 slots, so F_0(224) starts at least 7 * 158 = 1106 after time 0.
    The last 32 microbatches then reach device 31 no earlier than 62 slots later, run there one after
    another (32 * 3 = 96 slots), and the last gradient needs 31 * (2 + 1) = 93 slots to come down:
    1106 + 62 + 96 + 93 = 1357. One round trip per round (the chain alone) gives
    31 + 8 * 158 = 1295."""
    assert period_bound(256, _unit_duration, lambda s, a, b: 1.0, [32.0] * 32) == 1357


@settings(max_examples=15, deadline=None)
@given(p=st.integers(2, 8), extra=st.integers(0, 20), cap=st.integers(1, 8), comm=st.sampled_from([0, 1, 2]))
def test_period_bound_at_least_the_chain_and_below_every_schedule(p, extra, cap, comm):
    """At least the memory chain repeated on device 0 (a_0 = 0, no cool-down below it), and no more than
    1F1B, GPipe, the greedy schedule and the periodic one wherever they fit the cap."""
    m = p + extra
    instance = unit_instance(p, m, p, UnitCosts(1, 2, None, comm), memory_limit=cap)
    bound = period_bound(m, _unit_duration, lambda s, a, b: float(comm), [float(cap)] * p)
    life = p * (1 + 2) + 2 * (p - 1) * comm
    assert bound >= ((m - 1) % cap) * 1 + ((m - 1) // cap + 1) * life
    schedules = [generate("1f1b", p, m), generate("gpipe", p, m)]
    greedy = greedy_schedule(instance, placement("linear", p), False)
    ticks, delay = (lambda s, k: int(_unit_duration(s, k))), (lambda s, a, b: comm)
    pattern = periodic_pattern(p, m, ticks, delay, [cap] * p, SolveOptions(5).start())
    schedules += [s for s in (greedy, composed(pattern, p, m, ticks, delay) if pattern else None) if s is not None]
    for schedule in schedules:
        simulation = simulate(validate(schedule), instance.costs, instance.system)
        if max(simulation.peak_activation_bytes) > cap + 1e-9:
            continue
        assert bound <= simulation.step_time_s + 1e-9, schedule.name


@settings(max_examples=6, deadline=None)
@given(m=st.integers(4, 8), cap=st.integers(2, 4), comm=st.sampled_from([0, 1]))
def test_period_bound_below_the_proven_optimum_at_four_devices(m, cap, comm):
    """p = 4, where the last round's work on the top device (m a multiple of the cap) already counts."""
    instance = unit_instance(4, m, 4, UnitCosts(1, 2, None, comm), memory_limit=cap)
    bound = period_bound(m, _unit_duration, lambda s, a, b: float(comm), [float(cap)] * 4)
    assert bound <= _optimum(instance, "placement=linear") + 1e-9


# Each analytic bound's own value on an instance small enough to add up by hand (durations per
# kind, a delay per device pair); ppopt.solve.bounds documents the formulas.
SPLIT = {Kind.F: 1.0, Kind.I: 2.0, Kind.W: 3.0, Kind.B: 5.0}


def _linear(p):
    return tuple((s,) for s in range(p))


def test_critical_path_by_hand_with_a_split_backward():
    """p = 3, F = 1, I = 2, W = 3, messages 1: forwards 3 + input grads 6 + two hops each way 4 +
    stage 0's W 3 (it needs stage 0's I, the chain's last op) = 16."""
    shape = Shape(3, 2, 3, _linear(3), True)
    assert critical_path(shape, lambda s, kind: SPLIT[kind], lambda s, a, b: 1.0) == 16


def test_a_replicated_stage_takes_the_nearest_replica_s_delay():
    """Two stages, each on two devices (0, 3) and (1, 2), nodes of two devices: 0-1 and 3-2 share a
    node (delay 1), the other pairs do not (10). A microbatch may take the near pair both ways:
    F 2 + B 4 + 1 + 1 = 8; the farthest pair's 10 would claim 26, above a schedule that ends at 8."""
    shape = Shape(2, 1, 4, ((0, 3), (1, 2)), False)
    near = {(0, 1), (1, 0), (3, 2), (2, 3)}
    delay = lambda s, a, b: 1.0 if (a, b) in near else 10.0  # noqa: E731
    assert critical_path(shape, lambda s, kind: {Kind.F: 1.0, Kind.B: 2.0}[kind], delay) == 8


def test_warmup_bound_by_hand():
    """p = 2, m = 2, one live activation, free messages, F = 1, B = 2 on stage 0 and 1 on stage 1.
    Stage 0 runs one forward, then waits for stage 1's F + B (2) before its first backward: window
    1 + 2 = 3 less its one forward = 2 idle, plus its load 2 x 3 = 8. Stage 1: head 1 + load 2 x 2
    + tail 2 = 7. The bound is 8 (a schedule: F0 0-1, stage 1 1-3, B0 3-5, then again: 10)."""
    durations = lambda s, kind: {Kind.F: 1.0, Kind.B: 2.0 if s == 0 else 1.0}[kind]  # noqa: E731
    assert warmup(Shape(2, 2, 2, _linear(2), False), durations, lambda s, a, b: 0.0, lambda s: 1) == 8


def test_memory_lifetime_bound_by_hand_with_a_split_backward():
    """p = 2, m = 2, one live activation, free messages, F = 1, I = 2, W = 3: stage 0's activation
    lives from its F through stage 1's F and I (3) to its own I and W: 1 + 3 + 2 + 3 = 9 slots, and
    only one lives at a time: 2 x 9 = 18. Stage 1: head 1 + 2 x (1 + 2 + 3) = 13."""
    shape = Shape(2, 2, 2, _linear(2), True)
    assert memory_lifetime(shape, lambda s, kind: SPLIT[kind], lambda s, a, b: 0.0, lambda s: 1) == 18


@settings(max_examples=30, deadline=None)
@given(p=st.integers(2, 4), cap=st.integers(1, 4), comm=st.sampled_from([0, 1, 2]), m=st.integers(2, 9),
       backward=st.sampled_from([1, 2, 3]))
def test_a_periodic_pattern_keeps_every_cap_and_at_most_the_step_it_claims(p, cap, comm, m, backward):
    """Whatever the cap, the pattern's schedule for m microbatches is valid, holds at most the cap of
    live activations on every device, and takes at most the step the pattern claims (its no-wait
    timing; run as soon as each op may, a microbatch can enter earlier)."""
    instance = unit_instance(p, m, p, UnitCosts(1, backward, None, comm), memory_limit=cap)
    duration = lambda s, k: int({Kind.F: 1, Kind.B: backward}[k])  # noqa: E731
    pattern = periodic_pattern(p, m, duration, lambda s, a, b: comm, [cap] * p, SolveOptions(10).start())
    if pattern is None:
        return
    simulation = simulate(validate(composed(pattern, p, m, duration, lambda s, a, b: comm)), instance.costs, instance.system)
    assert max(simulation.peak_activation_bytes) <= cap
    assert simulation.step_time_s <= pattern.step
