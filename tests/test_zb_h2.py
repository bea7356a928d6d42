"""ZB-H2 (Qi et al. 2024, "Zero Bubble Pipeline Parallelism", ICLR 2024, §2.2)."""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ppopt.evaluate import evaluate
from ppopt.generators import generate
from ppopt.ir import Kind, dependencies
from ppopt.table import build_table
from ppopt.units import UnitCosts
from ppopt.validation import validate


@settings(max_examples=30, deadline=None)
@given(p=st.integers(1, 7), m=st.integers(1, 20))
def test_table_equals_formula_from_m_at_least_p(p, m):
    validate(generate("zb-h2", p, m))
    e = evaluate("zb-h2", p, m)
    f, t = e.formula, e.table
    assert f is not None and f.valid == (m >= p)
    if f.valid:
        assert f.length == t.length == 3 * m + p - 1  # F = I = W = 1: the parallelogram, the least possible
        assert f.peak_activations == t.peak_activations == (min(m, 2 * p - 1),) * p


def test_peak_is_the_papers_2p_minus_1():
    """§2.2: ZB-H2 allows "a higher memory footprint than 1F1B, up to (2p−1)M_B"; at p = 4 that is 7
    activations per device against 1F1B's 4 on device 0 and ZB-H1's 4 on every device."""
    p, m = 4, 12
    assert evaluate("zb-h2", p, m).table.peak_activations == (7, 7, 7, 7)
    assert max(evaluate("1f1b", p, m).table.peak_activations) == 4
    assert evaluate("zb-h1", p, m).table.peak_activations == (4, 4, 4, 4)


# p = 4, m = 8, F = I = W = 1, one-slot messages (c): each length is the critical path of its table.
# ZB-H1, 14 + 2 + 4 + 5 + 2 + 6 + 7 + 1 = 41:
#   microbatch 0 down and up, 4 F + 4 I + 6 c = 14 (I0 on device 0 ends at 14); device 0 then runs W0
#   and F4 (2); F4 goes to device 2, c F c F (4); device 2 runs I3 right after F4, and I3 goes up to
#   device 0, I c I c I (5: ends at 25); device 0 runs W3 and F7 (2); F7 goes down to device 3, c F c F
#   c F (6); I7 comes back up to device 0, I c I c I c I (7: ends at 40); W7 on device 0 (1).
# ZB-H2, 7 + 3 + 6 + 1 + 6 + 8 = 31:
#   microbatch 0's forwards down to device 3, 4 F + 3 c = 7; device 3 runs I0, F1, I1 (3); I1 goes up
#   to device 0, c I c I c I (6: ends at 16); device 0 runs F7 right after I1 (1); F7 goes down to
#   device 3, c F c F c F (6: ends at 23); device 3 then runs I7 and its W1..W7 (8).
@pytest.mark.parametrize("comm, h1, h2", [(0, 27, 27), (1, 14 + 2 + 4 + 5 + 2 + 6 + 7 + 1, 7 + 3 + 6 + 1 + 6 + 8)])
def test_extra_warm_up_hides_communication(comm, h1, h2):
    """p = 4, m = 8: with no delay both meet the bound 3m + p - 1 = 27 slots; with one slot of delay
    per transfer ZB-H1's I chain waits (41) while ZB-H2's extra in-flight forwards keep devices busy
    (31; both critical paths are written out above). Hand check of the lower bound with delay: device 3
    starts at 3 + 3·1 (three transfers) = 6 and has 24 slots of work, so no schedule is under 30."""
    units = UnitCosts(comm=comm)
    assert evaluate("zb-h1", 4, 8, units).table.length == h1
    assert evaluate("zb-h2", 4, 8, units).table.length == h2
    assert h2 >= 3 * 8 + 3 + 3 * comm


@pytest.mark.parametrize("forward, grad", [(1, 0.5), (1, 1), (1, 1.25), (1, 1.5), (1, 2), (2, 3), (1, 3)])
def test_forms_hold_exactly_where_device_0_can_stay_busy(forward, grad):
    """With I = W = ``grad`` the forms need m >= p + (p-1)(I-F)/F and I <= 2F (module docs, "Range":
    device 0's first I starts no earlier than pF + (p-1)I, and it can fill that wait only with its
    min(m, 2p - 1) forwards). Outside that range ppopt's table is longer than the forms (the
    condition is necessary); inside it the table meets them (the construction reaches them).
    E.g. I = 1.5, p = 4: m >= 4 + 3·0.5 = 5.5, so m = 5 is n/a and m = 6 holds."""
    units = UnitCosts(forward=forward, backward=2 * grad)
    for p in range(2, 7):
        for m in range(p, 3 * p + 1):
            closed = evaluate("zb-h2", p, m, units).formula
            table = evaluate("zb-h2", p, m, units).table
            assert closed is not None
            reachable = grad <= 2 * forward and m >= p + (p - 1) * (grad - forward) / forward
            assert closed.valid == reachable, (p, m, closed.outside)
            if reachable:
                assert closed.length == table.length == m * (forward + 2 * grad) + (p - 1) * forward
            else:
                assert table.length > closed.length


def test_out_of_reach_forms_name_the_least_m():
    e = evaluate("zb-h2", 4, 5, UnitCosts(backward=3))
    assert e.formula is not None and e.formula.outside == "m < 5.5"
    assert evaluate("zb-h2", 4, 8, UnitCosts(backward=6)).formula.outside == "needs I <= 2F"


@pytest.mark.parametrize("scale, backward", [(1, 3), (0.3, 0.9), (0.7, 2.1), (0.1, 0.3)])
def test_the_range_reads_durations_as_the_decimals_given(scale, backward):
    """F = 0.3, B = 0.9 is F = 1, B = 3 in other units: I = W = 1.5F, so at p = 3 the forms need
    m >= 3 + 2·0.5 = 4 exactly and hold at m = 4, the table 18 forwards long. Read as binary floats,
    (I - F)/F came out just above 1/2 and the forms were called out of range ("n/a (m < 4)")."""
    units = UnitCosts(forward=scale, backward=backward)  # as typed: 3 * 0.1 is not the float 0.3
    e = evaluate("zb-h2", 3, 4, units)
    assert e.formula is not None and e.formula.valid, e.formula.outside
    assert e.formula.length == pytest.approx(18 * scale) and e.table.length == pytest.approx(18 * scale)
    assert evaluate("zb-h2", 5, 7, units).formula.valid
    assert evaluate("zb-h2", 3, 3, units).formula.outside == "m < 4"


def assert_list_scheduled(schedule, units, pick, extra_deps=lambda op: ()):
    """The schedule's unit-slot table is the list schedule its module describes: in every slot every
    device runs ``pick(device, ready ops, ops it ran before)``, or idles when that is None, where an op is
    ready once its dependencies (``ppopt.ir.dependencies`` and ``extra_deps``) ended by that slot. Every
    op must last as long as every other (``units``; a slot of the list schedule is that long). Checks the
    generator's rule, not its code."""
    table = build_table(schedule, units)
    (length,) = set(table.used_durations.values())
    start, end = table.start, table.ends
    for device, order in enumerate(schedule.orders):
        at = {start[op]: op for op in order}
        for slot in (k * length for k in range(round(table.length / length))):
            ran = [op for op in order if start[op] < slot]
            ready = [op for op in order if start[op] >= slot
                     and all(end[dep] <= slot for dep in (*dependencies(op, schedule.stages, schedule.split_backward), *extra_deps(op)))]
            assert at.get(slot) == pick(device, ready, ran), (device, slot)


@settings(max_examples=30, deadline=None)
@given(p=st.integers(1, 6), m=st.integers(1, 14))
def test_order_is_the_list_schedule_of_the_module(p, m):
    """Each slot, each device runs its lowest ready I; else its lowest ready F while it holds fewer than
    min(m, 2p - 1) activations (F to W); else its lowest ready W; else it idles."""
    cap = min(m, 2 * p - 1)

    def pick(device, ready, ran):
        live = sum(op.kind is Kind.F for op in ran) - sum(op.kind is Kind.W for op in ran)
        for kind in (Kind.I, Kind.F, Kind.W):
            of_kind = [op for op in ready if op.kind is kind]
            if of_kind and (kind is not Kind.F or live < cap):
                return min(of_kind, key=lambda op: op.microbatch)
        return None

    assert_list_scheduled(generate("zb-h2", p, m), UnitCosts(), pick)
