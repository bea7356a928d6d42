"""Megatron interleaved 1F1B: validity, table vs formula, and v = 1 as plain 1F1B."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ppopt.errors import ScheduleError
from ppopt.formula import formula
from ppopt.generators import generate
from ppopt.generators.interleaved import interleaved_1f1b, warmup_count
from ppopt.generators.linear import one_f_one_b
from ppopt.ir import Kind, Op
from ppopt.table import build_table
from ppopt.units import UnitCosts
from ppopt.validation import validate


@settings(max_examples=40, deadline=None)
@given(p=st.integers(1, 6), v=st.integers(1, 3), groups=st.integers(1, 3))
def test_valid_for_ranges(p, v, groups):
    schedule = validate(interleaved_1f1b(p, groups * p, chunks=v))
    assert schedule.stages == v * p
    assert schedule.options == {"chunks": v}
    assert all(schedule.placement[c * p + r] == (r,) for c in range(v) for r in range(p))


CASES = [(p, v, k * p) for p in (1, 2, 3, 4, 5) for v in (1, 2, 3) for k in (1, 2, 3)]


@pytest.mark.parametrize("backward", [1, 2])
@pytest.mark.parametrize(("p", "v", "m"), CASES)
def test_table_equals_formula(p, v, m, backward):
    units = UnitCosts(backward=backward)
    table = build_table(interleaved_1f1b(p, m, chunks=v), units)
    closed = formula("interleaved-1f1b", p, m, units, chunks=v)
    # (1 + B)(v m + p - 1) chunk-op slots, each 1/v of a slot.
    assert table.length == closed.length == pytest.approx((1 + backward) * (v * m + p - 1) / v, rel=1e-15)
    assert table.bubble_ratio == pytest.approx(closed.bubble_ratio)
    assert table.peak_activations == closed.peak_activations


def test_peak_per_device_pinned():
    # p = 4, v = 2, m = 8: warm-up (v-1)p + 2(p-1-r) = 10, 8, 6, 4; peak = warm-up + 1.
    table = build_table(interleaved_1f1b(4, 8, chunks=2))
    assert table.peak_activations == (11, 9, 7, 5)
    assert [warmup_count(4, 8, 2, r) for r in range(4)] == [10, 8, 6, 4]
    # m = p caps the warm-up at v*m on the first devices: 8, 8, 6, 4 -> peaks 8, 8, 7, 5.
    assert build_table(interleaved_1f1b(4, 4, chunks=2)).peak_activations == (8, 8, 7, 5)


def test_megatron_order_p2_v2_m4():
    # Device 0 (stages 0, 2): warm-up 2 + 2 = 4 forwards over chunk 0 then chunk 1 in groups of p = 2.
    order = [str(op) for op in interleaved_1f1b(2, 4, chunks=2).orders[0]]
    assert order == [
        "0F0", "0F1", "2F0", "2F1",
        "0F2", "2B0", "0F3", "2B1", "2F2", "0B0", "2F3", "0B1",
        "2B2", "2B3", "0B2", "0B3",
    ]


@pytest.mark.parametrize(("p", "m"), [(1, 3), (2, 4), (3, 6), (4, 4), (4, 12), (5, 10)])
@pytest.mark.parametrize("backward", [1, 2])
def test_v1_is_1f1b(p, m, backward):
    interleaved = interleaved_1f1b(p, m, chunks=1)
    assert interleaved.orders == one_f_one_b(p, m).orders
    units = UnitCosts(backward=backward)
    a, b = build_table(interleaved, units), build_table(one_f_one_b(p, m), units)
    assert (a.length, a.bubble_ratio, a.peak_activations) == (b.length, b.bubble_ratio, b.peak_activations)


def test_v1_allows_any_m():
    from ppopt.generators.linear import one_f_one_b

    schedule = validate(interleaved_1f1b(3, 5, chunks=1))
    assert schedule.orders == one_f_one_b(3, 5).orders  # v = 1 is plain 1F1B, for m not a multiple of p too


@pytest.mark.parametrize("chunks", [0, -1, 1.5, "2"])
def test_rejects_bad_chunks(chunks):
    with pytest.raises(ScheduleError, match="must be an integer >= 1") as error:
        interleaved_1f1b(2, 4, chunks=chunks)
    assert error.value.field == "chunks"


def test_rejects_m_not_multiple_of_p():
    with pytest.raises(ScheduleError, match="multiple of devices"):
        interleaved_1f1b(4, 6, chunks=2)


def test_registry_and_default_chunks():
    schedule = generate("interleaved-1f1b", 2, 4)
    assert schedule.stages == 4
    assert Op(3, Kind.B, 3) in schedule.orders[1]
