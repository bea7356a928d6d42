"""Table layer: closed forms of GPipe and 1F1B hold exactly, for every p and m tried."""

from fractions import Fraction

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ppopt.errors import ScheduleError
from ppopt.evaluate import table_of
from ppopt.formula import formula
from ppopt.table import unit_durations

sizes = st.tuples(st.integers(1, 12), st.integers(1, 40))


@settings(max_examples=80, deadline=None)
@given(sizes, st.sampled_from(["gpipe", "1f1b"]), st.sampled_from([1, 2]))
def test_linear_bubble_is_exact(size, name, backward):
    p, m = size
    table = table_of(name, p, m, backward)
    assert table.length == (m + p - 1) * (1 + backward)
    idle = p * table.length - p * m * (1 + backward)
    assert Fraction(idle, p * table.length) == Fraction(p - 1, m + p - 1)
    assert table.bubble_ratio == pytest.approx((p - 1) / (m + p - 1), abs=1e-12)


@settings(max_examples=60, deadline=None)
@given(sizes, st.sampled_from([1, 2]))
def test_peak_activations(size, backward):
    p, m = size
    assert table_of("gpipe", p, m, backward).peak_activations == (m,) * p
    assert table_of("1f1b", p, m, backward).peak_activations == tuple(min(m, p - r) for r in range(p))


@settings(max_examples=40, deadline=None)
@given(sizes, st.sampled_from(["gpipe", "1f1b"]), st.sampled_from([1, 2]))
def test_formula_and_table_agree_for_linear_schedules(size, name, backward):
    p, m = size
    table = table_of(name, p, m, backward)
    closed = formula(name, p, m, backward)
    assert closed.length == table.length
    assert closed.bubble_ratio == pytest.approx(table.bubble_ratio, abs=1e-12)
    assert closed.peak_activations == table.peak_activations


def test_cells_hold_every_op_for_its_duration():
    table = table_of("1f1b", 3, 4, backward=2)
    cells = table.cells()
    busy = sum(cell is not None for row in cells for cell in row)
    assert busy == 3 * 4 * 3
    assert all(len(row) == table.length for row in cells)


def test_backward_slot_length_must_be_1_or_2():
    with pytest.raises(ScheduleError, match="--backward"):
        unit_durations(3)
