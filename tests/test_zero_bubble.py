"""Zero-bubble ZB-H1 and ZB-V: validity, table vs formula, derived and pinned table values, rules."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ppopt.errors import ScheduleError
from ppopt.evaluate import table_of
from ppopt.formula import formula
from ppopt.generators import generate
from ppopt.generators.linear import one_f_one_b
from ppopt.generators.zero_bubble import zb_h1, zb_v
from ppopt.ir import Kind
from ppopt.table import build_table
from ppopt.units import UnitCosts
from ppopt.validation import validate


@settings(max_examples=40, deadline=None)
@given(p=st.integers(1, 6), extra=st.integers(0, 12))
def test_zb_h1_valid(p, extra):
    schedule = validate(zb_h1(p, p + extra))
    assert schedule.split_backward
    assert not any(op.kind is Kind.B for op in schedule.ops())


@settings(max_examples=40, deadline=None)
@given(p=st.integers(1, 6), extra=st.integers(0, 12))
def test_zb_v_valid(p, extra):
    schedule = validate(zb_v(p, p + extra))
    assert schedule.stages == 2 * p
    assert all(schedule.stages_on(r) == (r, 2 * p - 1 - r) for r in range(p))


ZB_H1_CASES = [(1, 1), (1, 4), (2, 2), (2, 5), (3, 3), (3, 7), (4, 4), (4, 8), (4, 13), (6, 6), (6, 15)]


@pytest.mark.parametrize(("p", "m"), ZB_H1_CASES)
@pytest.mark.parametrize("backward", [1, 2])
def test_zb_h1_table_equals_formula(p, m, backward):
    # Slots of F = 1, B = I + W = backward, I = W: length m(F + B) + (p-1)(F + I - W).
    units = UnitCosts(backward=backward)
    table = build_table(zb_h1(p, m), units)
    closed = formula("zb-h1", p, m, units)
    assert table.length == closed.length == m * (1 + backward) + p - 1
    assert table.bubble_ratio == pytest.approx(closed.bubble_ratio) == pytest.approx((p - 1) / (m * (1 + backward) + p - 1))
    # Every device holds p activations: the same peak as 1F1B's device 0 (not 1F1B's p - r per device).
    assert table.peak_activations == closed.peak_activations == (p,) * p
    assert max(table.peak_activations) == max(build_table(one_f_one_b(p, m), units).peak_activations)


def test_zb_h1_idle_per_device():
    table = build_table(zb_h1(4, 6))
    for row in table.cells():
        assert sum(cell is None for cell in row) == 3  # (p-1)(F + I - W) = p - 1
    # device 3 holds back 3 W's: W0 comes after I3.
    order = [str(op) for op in zb_h1(4, 6).orders[3]]
    assert order[:9] == ["3F0", "3I0", "3F1", "3I1", "3F2", "3I2", "3F3", "3I3", "3W0"]


# ZB-V in chunk-op slots (F = I = W = 1 per chunk, half a slot of the default units, which hold two
# chunks per device); steps 1-8 are those of the order in ppopt.generators.zero_bubble's docs.
# - Peaks, derived: a device's live count moves only at its own ops, so its peak is the largest count of
#   F minus W over the prefixes of its order. Device r starts with 2p - r - 1 forwards of chunk 0, of which
#   min(m, 2p - r - 1) are real, and r of chunk 1 (steps 1-2): a count L = min(m, 2p - r - 1) + r. Step 3's
#   first F1 (microbatch r < p <= m, real) takes it to L + 1; every later forward comes right after a W
#   (step 3's triples F1 I1 W1, then steps 4-5 alternate F and W), so the count never passes L + 1. The
#   peak min(m, 2p - r - 1) + r + 1 is min(m + 1 + r, 2p), and 2m >= m + 1 + r as r < p <= m.
# - Length from m = 2p - 1 on, derived: no device idles between its first and last op (Qi et al.'s zero
#   bubble, checked cell by cell below), and device r's first op, F of stage r of microbatch 0, starts at
#   slot r; so device r ends at r + 6m, and the last device at 6m + p - 1.
# - Length at m = p, derived: the critical path reaches device p-1 (stages p-1 and p) with microbatch 0's 2p
#   forwards and its I of stages 2p-1..p+1, at slot 3p - 1; device p-1 then runs back to back I and W of
#   stage p of microbatch 0, then I(p-1, j), W(p-1, j), I(p, j+1), W(p, j+1) for j = 0..p-2, then
#   I(p-1, p-1): 2 + 4(p-1) + 1 ops, to slot 7p - 2; then I of stages p-2..0 and W of stage 0: 8p - 2.
# - Length for p < m < 2p - 1: 6m + max(p - 1, 2(2p - 1 - m)) is the module docs' fit of the measured
#   tables (p 1..10), not derived: pinned here ((3, 4) and (4, 6)).
ZB_V_CASES = [(2, 2), (2, 4), (3, 3), (3, 4), (3, 5), (4, 4), (4, 6), (4, 7), (4, 8), (6, 11)]


@pytest.mark.parametrize(("p", "m"), ZB_V_CASES)
def test_zb_v_table_and_formula(p, m):
    table = build_table(zb_v(p, m))
    assert table.peak_activations == tuple(min(2 * m, m + 1 + r, 2 * p) for r in range(p))
    if m >= 2 * p - 1:
        assert 2 * table.length == 6 * m + p - 1
    if m == p:
        assert 2 * table.length == 8 * p - 2
    assert 2 * table.length == 6 * m + max(p - 1, 2 * (2 * p - 1 - m))  # the measured fit (pinned between)
    closed = formula("zb-v", p, m)
    assert 2 * closed.length == 6 * m + p - 1
    assert closed.peak_activations == (2 * p,) * p
    if m >= 3 * p // 2:
        assert table.length == closed.length
        assert table.bubble_ratio == pytest.approx(closed.bubble_ratio)
    else:
        assert table.length > closed.length
    if m >= 2 * p - 1:
        assert table.peak_activations == closed.peak_activations


@pytest.mark.parametrize(("p", "m"), [(2, 3), (3, 5), (4, 7), (4, 10), (5, 9)])
def test_zb_v_no_internal_idle_from_2p_minus_1(p, m):
    # The paper's "zero bubble": no idle slot between a device's first and last op.
    for row in build_table(zb_v(p, m)).cells():
        busy = [t for t, cell in enumerate(row) if cell is not None]
        assert len(busy) == busy[-1] - busy[0] + 1 == 6 * m


@pytest.mark.parametrize(("p", "m"), [(2, 2), (3, 4), (4, 4), (4, 6), (5, 7)])
def test_zb_v_internal_idle_below_2p_minus_1(p, m):
    """Below m = 2p - 1 device 0 idles inside: its first 2p - 1 steps are forwards of stage 0 (step 1),
    of which only m are real (back to back from slot 0), and its next op, F of stage 2p - 1 of
    microbatch 0, waits for the end of that microbatch's forward chain (F of stage s at slot s)."""
    row = build_table(zb_v(p, m)).cells()[0]
    assert [cell is not None for cell in row[:2 * p]] == [True] * m + [False] * (2 * p - 1 - m) + [True]


@pytest.mark.parametrize("name", ["zb-h1", "zb-v"])
def test_rejects_fewer_microbatches_than_devices(name):
    with pytest.raises(ScheduleError, match=r"m >= p"):
        generate(name, 4, 3)


def test_zb_h1_and_1f1b_lengths_in_the_same_units():
    # Default units F = 1, B = I + W = 2: 1F1B takes (m + p - 1)(F + B) = 45 slots at p = m = 8, ZB-H1
    # m(F + B) + (p - 1)(F + I - W) = 31: the zero-bubble schedule is shorter, as in Qi et al. 2024.
    assert build_table(one_f_one_b(8, 8)).length == 45
    assert build_table(zb_h1(8, 8)).length == 31
    # With B = 1 the split backward is I = W = 1/2 slot, and both tables shrink accordingly.
    units = UnitCosts(backward=1)
    assert build_table(one_f_one_b(8, 8), units).length == 30
    assert build_table(zb_h1(8, 8), units).length == 23


@pytest.mark.parametrize("name, durations", [("zb-h1", "F = I = W"), ("zb-h2", "I = W"), ("zb-v", "F = I = W")])
def test_the_closed_forms_are_only_stated_for_the_durations_they_hold_at(name, durations):
    """Qi et al. 2024 state the zero-bubble forms at I = W = F. With I != W (--weight) ppopt's tables
    differ from them (ZB-H1 at p = 4, m = 12, B = 3, W = 1: 54 slots, the form's 51), and ZB-H1's and
    ZB-V's also with I = W != F: there the forms are n/a, never a wrong number; inside, they equal the table.
    The 54 (F = 1, I = 2, W = 1) is ZB-H1's critical path: microbatch 0 down and up, 4F + 4I = 12; device 0
    then runs W0, F4 and seven times I, W, F (I1 W1 F5 ... I7 W7 F11) back to back, 1 + 1 + 7·4 = 30;
    microbatch 11 then goes down and up and W11 ends it, 3F + 4I + W = 12: 12 + 30 + 12 = 54, which is
    m(F + I + W) + (p-1)(F + I - W) = 48 + 6, the module docs' (p-1)(F + I - W) idle slots per device."""
    cases = [(UnitCosts(1.0, 3.0, 1.0), "needs " + durations), (UnitCosts(1.0, 2.0, 0.5), "needs " + durations),
             (UnitCosts(1.0, 3.0), None if durations == "I = W" else "needs F = I = W"), (UnitCosts(2.0, 4.0), None)]
    for units, outside in cases:
        closed = formula(name, 4, 12, units)
        assert closed is not None and closed.outside == outside, (units, closed)
        if outside is None:
            assert closed.length == table_of(name, 4, 12, units).length
    assert table_of("zb-h1", 4, 12, UnitCosts(1.0, 3.0, 1.0)).length == (4 + 4 * 2) + (1 + 1 + 7 * 4) + (3 + 4 * 2 + 1)
