"""Tests of the communication-aware simulator (ppopt.simulate)."""

from __future__ import annotations

import heapq
import math
import random

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from ppopt.config import LinkConfig, SystemConfig
from ppopt.costs import Costs, StageCost, allreduce_time_s, link_between, transfer_time_s
from ppopt.errors import ScheduleError
from ppopt.generators import generate, names
from ppopt.ir import Kind, Op, Schedule, dependencies, linear_placement
from ppopt.simulate import busy_s, op_duration_s, prepare, simulate
from ppopt.table import build_table, peak_live
from ppopt.units import UnitCosts
from ppopt.validation import ScheduleValidationError, validate
from tests.test_validate import outside_rules

FREE_LINK = LinkConfig(bandwidth_bytes_per_s=math.inf, latency_s=0.0)


def stage_cost(
    forward: float = 1.0,
    backward: float = 2.0,
    input_grad: float = 1.0,
    weight_grad: float = 1.0,
    *,
    activation: float = 1.0,
    persistent: float = 0.0,
    params: float = 0.0,
    send: float = 0.0,
    **extra: float,
) -> StageCost:
    return StageCost(
        layers=1, forward_s=forward, backward_s=backward, input_grad_s=input_grad, weight_grad_s=weight_grad,
        activation_bytes=activation, persistent_bytes=persistent, param_count=params, send_bytes=send, **extra,
    )


def costs_of(*stages: StageCost, microbatches: int = 1) -> Costs:
    return Costs(stages=tuple(stages), microbatch_size=1, microbatches=microbatches)


def uniform(stages: int, **kwargs) -> Costs:
    return costs_of(*(stage_cost(**kwargs) for _ in range(stages)))


def hockney(latency: float, bandwidth: float) -> LinkConfig:
    return LinkConfig(bandwidth_bytes_per_s=bandwidth, latency_s=latency)


def system(**overrides) -> SystemConfig:
    fields = dict(
        name="test", peak_flops=1e15, memory_bandwidth_bytes_per_s=100.0, memory_capacity_bytes=1e12,
        devices_per_node=2, intra_node=hockney(0.0, 1.0), inter_node=hockney(0.0, 1.0),
    )
    fields.update(overrides)
    return SystemConfig(**fields)


def unit_stage_costs(schedule: Schedule, units: UnitCosts, **extra: float) -> Costs:
    """The table's durations (slots of a 1/p model share, scaled by p/S) as simulator costs, seconds."""
    d = units.durations(schedule.devices, schedule.stages)
    return uniform(schedule.stages, forward=d[Kind.F], backward=d[Kind.B], input_grad=d[Kind.I],
                   weight_grad=d[Kind.W], **extra)


# --------------------------------------------------------------------------------------------------
# Identity with the table layer
# --------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", names())  # each family checked (hypothesis fails if assume rejects every example)
@settings(max_examples=10, deadline=None)
@given(
    p=st.sampled_from([2, 4, 6]),
    units=st.integers(1, 3),
    backward=st.sampled_from([1, 2]),
    free_link=st.booleans(),
)
def test_unit_costs_without_communication_reproduce_the_table(name, p, units, backward, free_link):
    m = units * p
    assume(not outside_rules(name, p, m))  # dualpipe and dualpipev need m >= 2p
    schedule = generate(name, p, m)  # a size within the family's rules is never refused
    # The table's unit durations as seconds. No communication cost: either zero-byte messages, or
    # big messages on a zero-latency, infinite-bandwidth link.
    unit = UnitCosts(backward=backward)
    if free_link:
        sim = simulate(schedule, unit_stage_costs(schedule, unit, send=1e6), link=FREE_LINK)
    else:
        sim = simulate(schedule, unit_stage_costs(schedule, unit))
    table = build_table(schedule, unit)
    assert sim.step_time_s == table.length
    assert sim.start_s == {op: float(t) for op, t in table.start.items()}
    assert sim.idle_ratio == pytest.approx(table.bubble_ratio)
    assert sim.peak_activation_bytes == tuple(float(x) for x in table.peak_activations)


@pytest.mark.parametrize("name", names())
def test_identity_for_every_generator_at_p4_m8(name):
    schedule = generate(name, 4, 8)  # p = 4, m = 8 is within every family's rules
    for backward in (1, 2):
        unit = UnitCosts(backward=backward)
        sim = simulate(schedule, unit_stage_costs(schedule, unit))
        assert sim.step_time_s == build_table(schedule, unit).length


# --------------------------------------------------------------------------------------------------
# Closed forms with communication
# --------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["gpipe", "1f1b"])
@pytest.mark.parametrize("p", [1, 2, 3, 5])
def test_one_microbatch_closed_form(name, p):
    forwards = [0.5 + 0.25 * s for s in range(p)]
    backwards = [1.0 + 0.5 * s for s in range(p)]
    latency, bandwidth, nbytes = 0.125, 64.0, 16.0
    costs = costs_of(*(stage_cost(f, b, send=nbytes) for f, b in zip(forwards, backwards)))
    sim = simulate(generate(name, p, 1), costs, link=hockney(latency, bandwidth))
    expected = sum(forwards) + sum(backwards) + 2 * (p - 1) * (latency + nbytes / bandwidth)
    assert sim.step_time_s == pytest.approx(expected)


def test_one_microbatch_uses_intra_and_inter_node_links():
    # devices_per_node = 2: hops 0->1 and 2->3 are intra-node, 1->2 inter-node.
    sys = system(intra_node=hockney(0.5, 8.0), inter_node=hockney(2.0, 1.0))
    costs = uniform(4, forward=1, backward=2, send=4.0)
    sim = simulate(generate("1f1b", 4, 1), costs, sys)
    intra, inter = 0.5 + 4 / 8, 2.0 + 4 / 1
    assert link_between(sys, 1, 2) is sys.inter_node
    assert sim.step_time_s == pytest.approx(4 * 3 + 2 * (2 * intra + inter))


def gpipe_step(p: int, m: int, f: float, b: float, c: float) -> float:
    """GPipe with uniform stages and per-hop message time c, links serialised.

    Forward messages leave device r at the pace of its forwards and queue on the link, so from device 1
    on the forwards arrive every P_f = max(F, c): F(r, j) starts at r(F + c) + j·P_f (device 0: j·F).
    The last device then runs its backwards back to back; gradients flow up every P_b = max(B, c), so
    B(p-1-k, j) starts at T0 + k(B + c) + j·P_b with T0 = (p-1)(F + c) + (m-1)P_f + F. The step ends
    with B(0, m-1):  (p-1)(F + B + 2c) + (m-1)(P_f + P_b) + F + B,
    which is (m + p - 1)(F + B) + 2(p - 1)c when c <= F and c <= B.
    """
    return (p - 1) * (f + b + 2 * c) + (m - 1) * (max(f, c) + max(b, c)) + f + b


@pytest.mark.parametrize(
    ("p", "m", "f", "b", "c"),
    [(2, 2, 1, 2, 0.5), (4, 8, 1, 2, 1), (4, 8, 2, 3, 0.25), (3, 5, 1, 1, 1), (5, 3, 2, 4, 1.5)],
)
def test_gpipe_closed_form_when_messages_are_shorter_than_ops(p, m, f, b, c):
    costs = uniform(p, forward=f, backward=b, send=c)
    sim = simulate(generate("gpipe", p, m), costs, link=hockney(0.0, 1.0))
    assert sim.step_time_s == pytest.approx((m + p - 1) * (f + b) + 2 * (p - 1) * c)
    assert sim.step_time_s == pytest.approx(gpipe_step(p, m, f, b, c))


@pytest.mark.parametrize(("p", "m", "f", "b", "c"), [(2, 2, 1, 2, 3), (4, 6, 1, 2, 1.5), (3, 4, 1, 1, 4)])
def test_gpipe_closed_form_when_links_serialise(p, m, f, b, c):
    costs = uniform(p, forward=f, backward=b, send=c)
    sim = simulate(generate("gpipe", p, m), costs, link=hockney(0.0, 1.0))
    assert sim.step_time_s == pytest.approx(gpipe_step(p, m, f, b, c))


# --------------------------------------------------------------------------------------------------
# Link serialisation and blocking sends, by hand
# --------------------------------------------------------------------------------------------------


def timeline_of(sim, kind):
    return [(e.what, e.where, e.start_s, e.end_s) for e in sim.events(kind)]


def test_messages_on_one_link_queue():
    # GPipe p=2 m=2, F=1, B=2, each message takes 3 s: the second activation waits for the first.
    costs = uniform(2, forward=1, backward=2, send=3.0)
    sim = simulate(generate("gpipe", 2, 2), costs, link=hockney(0.0, 1.0))
    F, B = Kind.F, Kind.B
    assert timeline_of(sim, "transfer") == [
        ((Op(0, F, 0), Op(1, F, 0)), (0, 1), 1.0, 4.0),
        ((Op(0, F, 1), Op(1, F, 1)), (0, 1), 4.0, 7.0),  # ready at 2, link busy until 4
        ((Op(1, B, 0), Op(0, B, 0)), (1, 0), 10.0, 13.0),
        ((Op(1, B, 1), Op(0, B, 1)), (1, 0), 13.0, 16.0),  # ready at 12, link busy until 13
    ]
    assert [(op, sim.start_s[op], sim.end_s[op]) for op in generate("gpipe", 2, 2).orders[1]] == [
        (Op(1, F, 0), 4.0, 5.0), (Op(1, F, 1), 7.0, 8.0), (Op(1, B, 0), 8.0, 10.0), (Op(1, B, 1), 10.0, 12.0),
    ]
    assert (sim.start_s[Op(0, B, 0)], sim.start_s[Op(0, B, 1)]) == (13.0, 16.0)
    assert sim.step_time_s == 18.0
    assert all(e.bytes == 3.0 for e in sim.events("transfer"))


def test_two_directions_and_two_pairs_do_not_interfere():
    # 1F1B p=3 m=1: messages on (0,1), (1,2), (2,1), (1,0) each take 5 s, none queue.
    costs = uniform(3, forward=1, backward=1, send=5.0)
    sim = simulate(generate("1f1b", 3, 1), costs, link=hockney(0.0, 1.0))
    assert sim.step_time_s == 3 + 3 + 4 * 5


def test_sender_blocks_without_overlap():
    costs = uniform(2, forward=1, backward=2, send=3.0)
    schedule = generate("gpipe", 2, 2)
    F, B = Kind.F, Kind.B
    for sim in (
        simulate(schedule, costs, link=hockney(0.0, 1.0), overlap_comm_compute=False),
        simulate(schedule, costs, system(overlap_comm_compute=False)),
    ):
        # device 0: F0 [0,1] sends [1,4] (blocked), F1 [4,5] sends [5,8]; device 1: F0 [4,5], F1 [8,9],
        # B0 [9,11] sends [11,14] (blocked), B1 [14,16] sends [16,19]; device 0: B0 [14,16], B1 [19,21].
        starts = {op: sim.start_s[op] for op in schedule.ops()}
        assert starts == {
            Op(0, F, 0): 0.0, Op(0, F, 1): 4.0, Op(0, B, 0): 14.0, Op(0, B, 1): 19.0,
            Op(1, F, 0): 4.0, Op(1, F, 1): 8.0, Op(1, B, 0): 9.0, Op(1, B, 1): 14.0,
        }
        assert sim.step_time_s == 21.0
        assert sim.busy_s == (6.0, 6.0)
        assert sim.idle_ratio == pytest.approx(1 - 12 / 42)


def test_same_device_stages_communicate_for_free():
    # Interleaved-style looped placement on one device: every dependency is local.
    schedule = Schedule(
        "looped", 1, 1, linear_placement(2, 1),
        ((Op(0, Kind.F, 0), Op(1, Kind.F, 0), Op(1, Kind.B, 0), Op(0, Kind.B, 0)),),
    )
    sim = simulate(schedule, uniform(2, send=100.0), link=hockney(1.0, 1.0))
    assert sim.step_time_s == 6.0
    assert sim.events("transfer") == []


# --------------------------------------------------------------------------------------------------
# Replicas: gradient all-reduce
# --------------------------------------------------------------------------------------------------


def tiny_chimera() -> Schedule:
    """p = 2, two stages each on both devices; microbatch 0 runs down (stage s on device s), 1 up."""
    F, B = Kind.F, Kind.B
    return Schedule(
        "tiny-chimera", 2, 2, ((0, 1), (1, 0)),
        (
            (Op(0, F, 0), Op(1, F, 1), Op(1, B, 1), Op(0, B, 0)),
            (Op(0, F, 1), Op(1, F, 0), Op(1, B, 0), Op(0, B, 1)),
        ),
        replica_of=(0, 1),
    )


def test_allreduce_of_replicated_stages_occupies_both_directions():
    schedule = validate(tiny_chimera())
    # Messages are free (0 bytes); gradients 1.5 params x 2 bytes over a 1 B/s link: 3 s each.
    costs = costs_of(stage_cost(1, 2, persistent=10.0, params=1.5), stage_cost(1, 2, persistent=20.0, params=1.5))
    sim = simulate(schedule, costs, link=hockney(0.0, 1.0))
    # Ops: F [0,1] and [1,2], B of stage 1 [2,4] on both devices, B of stage 0 [4,6].
    # Stage 1's gradients are complete at 4: its all-reduce runs [4,7] on (0,1) and (1,0); the
    # gradient messages ready at 4 go first (0 s). Stage 0's all-reduce is ready at 6 and waits.
    assert sim.end_s[Op(0, Kind.B, 0)] == 6.0
    assert timeline_of(sim, "allreduce") == [(1, (1, 0), 4.0, 7.0), (0, (0, 1), 7.0, 10.0)]
    assert [e.bytes for e in sim.events("allreduce")] == [3.0, 3.0]
    assert sim.step_time_s == 10.0
    assert sim.idle_ratio == pytest.approx(1 - 12 / 20)
    assert sim.persistent_bytes == (30.0, 30.0)  # each replica counts in full


def test_allreduce_uses_explicit_gradient_bytes_and_ring_formula():
    costs = costs_of(*(stage_cost(1, 2, params=1.5, gradient_bytes=8.0) for _ in range(2)))
    link = hockney(0.25, 2.0)
    sim = simulate(tiny_chimera(), costs, link=link)
    assert [e.end_s - e.start_s for e in sim.events("allreduce")] == [allreduce_time_s(8.0, link, 2)] * 2


def test_messages_queue_behind_an_allreduce_on_a_shared_link():
    # Stage 0 on device 0, stage 1 on device 1, stage 2 replicated on both (microbatch 0 on device 0,
    # microbatch 1 on device 1). F = B = 1, messages 2 s, stage 2's all-reduce 3 s.
    F, B = Kind.F, Kind.B
    schedule = validate(Schedule(
        "shared", 2, 2, ((0,), (1,), (0, 1)),
        (
            (Op(0, F, 0), Op(0, F, 1), Op(2, F, 0), Op(2, B, 0), Op(0, B, 0), Op(0, B, 1)),
            (Op(1, F, 0), Op(1, F, 1), Op(2, F, 1), Op(2, B, 1), Op(1, B, 0), Op(1, B, 1)),
        ),
        replica_of=(0, 1),
    ))
    costs = costs_of(stage_cost(1, 1, send=2.0), stage_cost(1, 1, send=2.0), stage_cost(1, 1, send=2.0, params=1.5))
    link = hockney(0.0, 1.0)
    sim = simulate(schedule, costs, link=link)
    # 0F0 [0,1] -> [1,3]; 0F1 [1,2] -> queued [3,5]; 1F0 [3,4] -> [4,6]; 1F1 [5,6]; 2F1 [6,7]; 2B1 [7,8];
    # 2F0 [6,7]; 2B0 [7,8] -> [8,10] (ready with the all-reduce at 8: the message goes first);
    # all-reduce [10,13] on both directions; 1B0 [10,11] -> queued behind it [13,15]; 0B0 [15,16];
    # 1B1 [11,12] -> [15,17]; 0B1 [17,18].
    assert timeline_of(sim, "allreduce") == [(2, (0, 1), 10.0, 13.0)]
    assert [(e.what[0], e.start_s, e.end_s) for e in sim.events("transfer")] == [
        (Op(0, F, 0), 1.0, 3.0), (Op(0, F, 1), 3.0, 5.0), (Op(1, F, 0), 4.0, 6.0),
        (Op(2, B, 0), 8.0, 10.0), (Op(1, B, 0), 13.0, 15.0), (Op(1, B, 1), 15.0, 17.0),
    ]
    assert (sim.start_s[Op(0, B, 0)], sim.start_s[Op(0, B, 1)], sim.step_time_s) == (15.0, 17.0, 18.0)
    assert_matches_reference(schedule, costs, link, overlap=True)
    assert_matches_reference(schedule, costs, link, overlap=False)


# --------------------------------------------------------------------------------------------------
# Memory
# --------------------------------------------------------------------------------------------------


def test_memory_of_1f1b_p2_m2_by_hand():
    # device 0: F0 F1 B0 B1 -> 2 activations of stage 0; device 1: F0 B0 F1 B1 -> 1 of stage 1.
    costs = costs_of(stage_cost(activation=10.0, persistent=1000.0), stage_cost(activation=100.0, persistent=2000.0))
    sim = simulate(generate("1f1b", 2, 2), costs)
    assert sim.peak_activation_bytes == (20.0, 100.0)
    assert sim.persistent_bytes == (1000.0, 2000.0)
    assert sim.peak_memory_bytes == (1020.0, 2100.0)
    assert sim.max_peak_memory_bytes == 2100.0


def test_memory_of_gpipe_keeps_every_microbatch():
    costs = costs_of(stage_cost(activation=10.0), stage_cost(activation=100.0))
    sim = simulate(generate("gpipe", 2, 3), costs, link=hockney(0.5, 1.0))
    assert sim.peak_activation_bytes == (30.0, 300.0)


@pytest.mark.parametrize(
    ("order", "peak"),
    [("F0 F1 I0 W0 I1 W1", 2.0), ("F0 I0 F1 W0 I1 W1", 2.0), ("F0 I0 W0 F1 I1 W1", 1.0)],
)
def test_split_backward_frees_at_w(order, peak):
    ops = tuple(Op(0, Kind(cell[0]), int(cell[1:])) for cell in order.split())
    schedule = validate(Schedule("one", 1, 2, ((0,),), (ops,)))
    sim = simulate(schedule, uniform(1, activation=1.0))
    assert sim.peak_activation_bytes == (peak,)


@pytest.mark.parametrize("order, peak", [("F0 F1 I0 W0 I1 W1", 2.0), ("F0 I0 F1 W0 I1 W1", 1.75), ("F0 I0 W0 F1 I1 W1", 1.0),
                                         ("F0 B0 F1 B1", 1.0)])
def test_a_split_backward_frees_its_early_part_at_i(order, peak):
    """A quarter of each activation freed at the end of I, the rest at the end of W (a last stage's
    loss softmax less the logits' gradient W keeps): F0 I0 F1 holds 0.75 + 1."""
    ops = tuple(Op(0, Kind(cell[0]), int(cell[1:])) for cell in order.split())
    schedule = validate(Schedule("one", 1, 2, ((0,),), (ops,)))
    costs = uniform(1, activation=1.0, input_grad_release_bytes=0.25)
    sim = simulate(schedule, costs)
    assert sim.peak_activation_bytes == (peak,)
    assert peak_live(schedule, sim.start_s, sim.end_s, lambda s: 1.0, lambda s: 0.25) == (peak,)


def test_an_early_release_larger_than_the_activation_is_refused():
    with pytest.raises(ValueError, match="input_grad_release_bytes must lie between 0 and activation_bytes"):
        stage_cost(activation=1.0, input_grad_release_bytes=2.0)


def test_release_counts_before_allocation_at_the_same_instant():
    ops = (Op(0, Kind.F, 0), Op(0, Kind.B, 0), Op(0, Kind.F, 1), Op(0, Kind.B, 1))
    sim = simulate(Schedule("one", 1, 2, ((0,),), (ops,)), uniform(1, activation=7.0))
    assert sim.peak_activation_bytes == (7.0,)


@pytest.mark.parametrize("name", names())
def test_memory_walk_agrees_with_table_peak_live(name):
    schedule = generate(name, 4, 8)  # p = 4, m = 8 is within every family's rules
    sizes = [3.0 + s for s in range(schedule.stages)]
    early = [0.5 * s for s in range(schedule.stages)]  # what a split backward frees at I
    costs = costs_of(*(stage_cost(1 + 0.1 * s, 2, 1, 1, activation=sizes[s], send=0.5, input_grad_release_bytes=early[s])
                       for s in range(schedule.stages)))
    sim = simulate(schedule, costs, link=hockney(0.1, 1.0))
    assert sim.peak_activation_bytes == peak_live(schedule, sim.start_s, sim.end_s, lambda s: sizes[s], lambda s: early[s])


# --------------------------------------------------------------------------------------------------
# Optimizer step, busy time, errors
# --------------------------------------------------------------------------------------------------


def test_optimizer_step_is_memory_bound_and_ends_the_step():
    sys = system(memory_bandwidth_bytes_per_s=100.0, memory_efficiency=0.5, memory_latency_s=1.0)
    costs = uniform(2, persistent=1000.0)
    schedule = generate("1f1b", 2, 2)
    without = simulate(schedule, costs, sys)
    with_step = simulate(schedule, costs, sys, optimizer=True)
    length = 2 * 1000 / (100 * 0.5) + 1.0
    last_end = [max(without.end_s[op] for op in order) for order in schedule.orders]
    assert sorted(timeline_of(with_step, "optimizer"), key=lambda e: e[1]) == [
        (None, d, last_end[d], last_end[d] + length) for d in range(2)
    ]
    assert with_step.step_time_s == max(last_end) + length
    assert with_step.busy_s == tuple(b + length for b in without.busy_s)
    with pytest.raises(ScheduleError, match="optimizer"):
        simulate(schedule, costs, optimizer=True)
    # timed by the system's op_time_rule, as ppopt.job times the step: additive adds the compute
    # latency to the memory time (it was timed by the roofline's memory side whatever the rule)
    additive = system(memory_bandwidth_bytes_per_s=100.0, memory_efficiency=0.5, memory_latency_s=1.0,
                      compute_latency_s=0.25, op_time_rule="additive")
    steps = simulate(schedule, costs, additive, optimizer=True).events("optimizer")
    assert [e.end_s - e.start_s for e in steps] == [2 * 1000 / (100 * 0.5) + 0.25] * 2


def test_optimizer_waits_for_the_allreduce():
    costs = costs_of(*(stage_cost(1, 2, params=1.5, persistent=100.0) for _ in range(2)))
    sim = simulate(tiny_chimera(), costs, system(memory_bandwidth_bytes_per_s=200.0), optimizer=True)
    assert [(e.start_s, e.end_s) for e in sim.events("optimizer")] == [(10.0, 12.0), (10.0, 12.0)]
    assert sim.step_time_s == 12.0


def test_busy_time_and_op_durations():
    costs = costs_of(stage_cost(1, 2, 1.5, 0.5), stage_cost(3, 4, 2.5, 1.5))
    schedule = generate("1f1b", 2, 3)
    assert busy_s(schedule, costs) == (9.0, 21.0)
    assert simulate(schedule, costs).busy_s == (9.0, 21.0)
    assert op_duration_s(Op(1, Kind.I, 0), costs) == 2.5


def test_costs_must_match_the_stages():
    with pytest.raises(ScheduleError, match="3 stages"):
        simulate(generate("1f1b", 2, 2), uniform(3))


def tampered(schedule: Schedule, device: int, order) -> Schedule:
    orders = list(schedule.orders)
    orders[device] = tuple(order)
    return Schedule(schedule.name, schedule.devices, schedule.microbatches, schedule.placement, tuple(orders),
                    schedule.replica_of)


@pytest.mark.parametrize(
    "change",
    [
        lambda o: o[:-1],  # a missing op
        lambda o: o + o[:1],  # a duplicate
        lambda o: o[1:] + o[:1],  # F0 after everything, incl. its own backward
        lambda o: o[:1] + (Op(1, Kind.F, 0),) + o[1:],  # an op on the wrong device
        lambda o: o[:1] + (Op(0, Kind.F, 9),) + o[1:],  # a microbatch outside the schedule
    ],
)
def test_invalid_schedules_raise_the_validators_error(change):
    schedule = tampered(generate("1f1b", 2, 2), 0, change(generate("1f1b", 2, 2).orders[0]))
    with pytest.raises(ScheduleValidationError) as expected:
        validate(schedule)
    with pytest.raises(ScheduleValidationError) as raised:
        simulate(schedule, uniform(2))
    assert str(raised.value) == str(expected.value)


def test_w_without_i_is_rejected():
    order = generate("1f1b", 2, 2).orders[0]
    schedule = tampered(generate("1f1b", 2, 2), 0, order[:1] + (Op(0, Kind.W, 0),) + order[1:])
    with pytest.raises(ScheduleValidationError, match="op 0W0 is a weight-gradient W"):
        simulate(schedule, uniform(2))


def test_deadlock_raises_and_names_what_each_device_waits_for():
    F, B = Kind.F, Kind.B
    schedule = Schedule(
        "bad", 2, 2, linear_placement(2, 2),
        (
            (Op(0, F, 0), Op(0, B, 0), Op(0, F, 1), Op(0, B, 1)),
            (Op(1, F, 1), Op(1, F, 0), Op(1, B, 0), Op(1, B, 1)),  # waits for 0F1, which waits for 1B0
        ),
    )
    with pytest.raises(ScheduleValidationError, match="deadlock") as raised:
        simulate(schedule, uniform(2), link=hockney(1.0, 1.0))
    assert "device 0 waits at 0B0 for 1B0" in str(raised.value)
    assert "device 1 waits at 1F1 for 0F1" in str(raised.value)
    # Also when the schedule was prepared (prepare does not look for deadlocks).
    with pytest.raises(ScheduleValidationError, match="deadlock"):
        simulate(prepare(schedule), uniform(2))


def test_deterministic_and_prepared_runs_agree():
    schedule = generate("chimera", 4, 8)
    costs = uniform(4, forward=1e-3, backward=2e-3, send=1e6, params=1e6)
    link = hockney(5e-6, 50e9)
    first, second = simulate(schedule, costs, link=link), simulate(schedule, costs, link=link)
    again = simulate(prepare(schedule), costs, link=link)
    assert first.timeline == second.timeline == again.timeline
    assert first == second == again
    kinds = {e.kind for e in first.timeline}
    assert kinds == {"compute", "transfer", "allreduce"}
    assert [e.start_s for e in first.timeline] == sorted(e.start_s for e in first.timeline)


# --------------------------------------------------------------------------------------------------
# Cross-check against a plain event-heap simulator on random schedules
# --------------------------------------------------------------------------------------------------


def reference(schedule: Schedule, costs: Costs, link: LinkConfig, overlap: bool):
    """A direct event simulation: every op completion is an event in a heap keyed (time, 0, sequence);
    an all-reduce is an event (ready time, 1, stage); messages are placed on their link when popped."""
    split = schedule.split_pairs  # the backward kind is per (stage, microbatch)
    ops = list(schedule.ops())
    device = {op: schedule.device_of(op) for op in ops}
    duration = {op: op_duration_s(op, costs) for op in ops}
    remote_pred = {}
    successor = {}
    for op in ops:
        for dep in dependencies(op, schedule.stages, split):
            if device[dep] != device[op]:
                remote_pred[op] = dep
                successor[dep] = op
    replicated = {s: tuple(dict.fromkeys(h)) for s, h in enumerate(schedule.placement) if len(set(h)) > 1}
    left = {s: schedule.microbatches for s in replicated}
    ready_at = dict.fromkeys(replicated, 0.0)
    position = [0] * schedule.devices
    busy = [False] * schedule.devices
    free = [0.0] * schedule.devices
    arrival: dict[Op, float] = {}
    link_free: dict[tuple[int, int], float] = {}
    start, end, allreduces = {}, {}, []
    heap, counter = [], 0

    def try_start(d):
        nonlocal counter
        if busy[d] or position[d] == len(schedule.orders[d]):
            return
        op = schedule.orders[d][position[d]]
        if op in remote_pred and op not in arrival:
            return
        start[op] = max(free[d], arrival.get(op, 0.0))
        end[op] = start[op] + duration[op]
        position[d] += 1
        busy[d] = True
        heapq.heappush(heap, (end[op], 0, counter, op))
        counter += 1

    for d in range(schedule.devices):
        try_start(d)
    while heap:
        t, what, _, item = heapq.heappop(heap)
        if what == 1:
            replicas = replicated[item]
            pairs = [(a, b) for a in replicas for b in replicas if a != b]
            t0 = max([t] + [link_free.get(pair, 0.0) for pair in pairs])
            length = allreduce_time_s(costs.stages[item].param_count * 2, link, len(replicas))
            for pair in pairs:
                link_free[pair] = t0 + length
            allreduces.append((item, t0, t0 + length))
            continue
        op, d = item, device[item]
        busy[d] = False
        free[d] = t
        if op in successor:
            nxt = successor[op]
            pair = (d, device[nxt])
            t0 = max(t, link_free.get(pair, 0.0))
            nbytes = costs.stages[op.stage].send_bytes
            link_free[pair] = t0 + nbytes / link.bandwidth_bytes_per_s  # latency does not hold the link
            arrival[nxt] = t0 + transfer_time_s(nbytes, link)
            if not overlap:
                free[d] = arrival[nxt]
            try_start(device[nxt])
        if op.stage in replicated and op.kind in (Kind.B, Kind.W):  # completes a weight gradient
            left[op.stage] -= 1
            ready_at[op.stage] = max(ready_at[op.stage], t)
            if left[op.stage] == 0:
                heapq.heappush(heap, (ready_at[op.stage], 1, op.stage, op.stage))
        try_start(d)
    return start, end, sorted(allreduces)


def assert_matches_reference(schedule, costs, link, overlap):
    sim = simulate(schedule, costs, link=link, overlap_comm_compute=overlap)
    start, end, allreduces = reference(schedule, costs, link, overlap)
    assert sim.start_s == start
    assert sim.end_s == end
    assert sorted((e.what, e.start_s, e.end_s) for e in sim.events("allreduce")) == allreduces
    assert sim.step_time_s == max([*end.values(), *(e for *_, e in allreduces)])


def random_schedule(rng: random.Random) -> Schedule:
    """Random placement (some stages replicated on two devices) and a random valid order."""
    p, stages, m = rng.randint(1, 4), rng.randint(1, 5), rng.randint(1, 4)
    split = rng.random() < 0.5
    placement = []
    for _ in range(stages):
        if p > 1 and rng.random() < 0.3:
            placement.append(tuple(rng.sample(range(p), 2)))
        else:
            placement.append((rng.randrange(p),))
    replica_of = tuple(rng.randrange(2) for _ in range(m)) if any(len(h) > 1 for h in placement) else ()
    schedule = Schedule("random", p, m, tuple(placement), tuple(() for _ in range(p)), replica_of)
    kinds = (Kind.F, Kind.I, Kind.W) if split else (Kind.F, Kind.B)
    ops = [Op(s, k, mb) for s in range(stages) for k in kinds for mb in range(m)]
    deps = {op: dependencies(op, stages, split) for op in ops}
    done, orders = set(), [[] for _ in range(p)]
    while len(done) < len(ops):  # a random topological order, split by device
        op = rng.choice([op for op in ops if op not in done and all(d in done for d in deps[op])])
        done.add(op)
        orders[schedule.device_of(op)].append(op)
    return validate(Schedule("random", p, m, tuple(placement), tuple(map(tuple, orders)), replica_of))


@settings(max_examples=200, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), overlap=st.booleans())
def test_matches_a_plain_event_simulation_on_random_schedules(seed, overlap):
    rng = random.Random(seed)
    schedule = random_schedule(rng)
    # Small integer durations make ties frequent: the tie rules must agree too.
    costs = costs_of(*(
        stage_cost(rng.randint(0, 3), rng.randint(0, 3), rng.randint(0, 3), rng.randint(0, 3),
                   send=rng.randint(0, 4), params=rng.randint(0, 3) / 2)
        for _ in range(schedule.stages)
    ))
    link = hockney(rng.choice([0.0, 0.5]), rng.choice([1.0, 2.0]))
    assert_matches_reference(schedule, costs, link, overlap)



@pytest.mark.parametrize("name", names())
@pytest.mark.parametrize("overlap", [True, False])
def test_generators_match_the_plain_event_simulation(name, overlap):
    schedule = generate(name, 4, 8)  # p = 4, m = 8 is within every family's rules
    costs = costs_of(*(stage_cost(1, 2, 1, 1, send=0.7, params=3.0) for _ in range(schedule.stages)))
    assert_matches_reference(schedule, costs, hockney(0.1, 1.0), overlap)


def test_latency_does_not_hold_the_link():
    # GPipe p=2 m=2, F=1: each message is 3 s of latency, no bandwidth time. The second activation
    # leaves as soon as it is ready (t=2), in flight beside the first, and arrives at 5.
    costs = uniform(2, forward=1, backward=2, send=1.0)
    sim = simulate(generate("gpipe", 2, 2), costs, link=hockney(3.0, math.inf))
    sends = timeline_of(sim, "transfer")
    assert [(start, end) for *_, start, end in sends[:2]] == [(1.0, 4.0), (2.0, 5.0)]


def test_a_summary_keeps_the_figures_and_lets_the_op_times_go():
    """``evaluate -s all`` and ``compare`` keep one summary per family (the report needs only the
    figures): the same figures as the full simulation, and no op times to hold on to."""
    from ppopt.evaluate import evaluate_all

    full, _ = evaluate_all(4, 8, model="study", system="mid-mid", global_batch=32)
    kept, _ = evaluate_all(4, 8, model="study", system="mid-mid", global_batch=32, timelines=False)
    assert [r.schedule for r in kept] == [r.schedule for r in full]
    for whole, summary in zip(full, kept):
        assert whole.simulation is not None and summary.simulation is not None
        assert summary.simulation == whole.simulation  # every figure (the op times take no part in equality)
        assert whole.simulation.start_s and summary.simulation._run is None
        with pytest.raises(ValueError, match="keeps only its figures"):
            summary.simulation.op_times()
