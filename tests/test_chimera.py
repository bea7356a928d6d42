"""Chimera (Li & Hoefler, SC'21): construction, reference grid, formula vs table."""

from __future__ import annotations

import math
import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ppopt.errors import ScheduleError
from ppopt.generators import generate
from ppopt.generators.chimera import (
    chimera,
    chimera_asym,
    chimera_asym_formula,
    chimera_formula,
    device_of,
    unit_slots,
)
from ppopt.ir import Kind, Op, Schedule
from ppopt.table import build_table, peak_live
from ppopt.units import UnitCosts
from ppopt.validation import validate

# The four-stage, four-microbatch Chimera schedule of S. Li and T. Hoefler, "Chimera: Efficiently Training
# Large-Scale Neural Networks with Bidirectional Pipelines", SC'21, Section 3.1 (unit slots), written literally.
# Cell = F/B, microbatch, d(own)/u(p) direction, stage; "." is idle.
REFERENCE = """
F0d0 .    F1d0 F2u3 B2u3 F3u3 B3u3 B0d0 .    B1d0
.    F0d1 F2u2 F1d1 F3u2 B2u2 B0d1 B3u2 B1d1 .
.    F2u1 F0d2 F3u1 F1d2 B0d2 B2u1 B1d2 B3u1 .
F2u0 .    F3u0 F0d3 B0d3 F1d3 B1d3 B2u0 .    B3u0
"""
_CELL = re.compile(r"^([FB])(\d+)([du])(\d+)$")


def reference_grid() -> list[list[tuple[Op, str] | None]]:
    """The grid as rows of (op, direction) or None."""
    rows = []
    for line in REFERENCE.strip().splitlines():
        row = []
        for cell in line.split():
            match = _CELL.match(cell)
            if match is None:
                row.append(None)
                continue
            kind, mb, direction, stage = match.groups()
            row.append((Op(int(stage), Kind(kind), int(mb)), direction))
        rows.append(row)
    return rows


def reference_starts() -> dict[Op, int]:
    return {cell[0]: t for row in reference_grid() for t, cell in enumerate(row) if cell}


def test_reference_grid_is_a_valid_timing_of_the_schedule():
    schedule = chimera(4, 4)
    start = reference_starts()
    assert set(start) == set(schedule.ops())
    for d, row in enumerate(reference_grid()):
        for cell in row:
            if cell:
                op, direction = cell
                assert schedule.device_of(op) == d
                assert schedule.replica_of[op.microbatch] == (0 if direction == "d" else 1)
    for op, t in start.items():  # F(s) after F(s-1); B(s) after F(s) and B(s+1)
        if op.kind is Kind.F and op.stage > 0:
            assert start[Op(op.stage - 1, Kind.F, op.microbatch)] < t
        if op.kind is Kind.B:
            assert start[Op(op.stage, Kind.F, op.microbatch)] < t
            if op.stage < 3:
                assert start[Op(op.stage + 1, Kind.B, op.microbatch)] < t


def test_per_device_order_equals_the_reference_grid():
    schedule = chimera(4, 4)
    for d, row in enumerate(reference_grid()):
        assert list(schedule.orders[d]) == [cell[0] for cell in row if cell]


def test_table_against_the_reference_grid():
    """The ASAP table moves exactly two forwards one slot earlier; every metric is unchanged.

    Rank 0's F1d0 (0F1) and rank 3's F3u0 (0F3) sit at slot 2 in the reference although slot 1 is
    free and they have no dependency (stage 0); the table layer starts them at slot 1. All other
    cells coincide, so length 10, bubble 0.2 and the per-device peaks (3, 4, 4, 3) are the same.
    """
    schedule = chimera(4, 4)
    table = build_table(schedule, UnitCosts(backward=1))
    ref = reference_starts()
    moved = {op: (ref[op], table.start[op]) for op in ref if ref[op] != table.start[op]}
    assert moved == {Op(0, Kind.F, 1): (2, 1), Op(0, Kind.F, 3): (2, 1)}

    ref_length = max(t + 1 for t in ref.values())
    ref_bubble = 1 - len(ref) / (4 * ref_length)
    ref_peaks = peak_live(schedule, ref, {op: t + 1 for op, t in ref.items()})
    assert (ref_length, ref_bubble, ref_peaks) == (10, pytest.approx(0.2), (3, 4, 4, 3))
    assert table.length == ref_length
    assert table.bubble_ratio == pytest.approx(ref_bubble)
    assert table.peak_activations == ref_peaks
    formula = chimera_formula(4, 4, backward=1)
    assert (formula.length, formula.bubble_ratio, formula.peak_activations) == (10, pytest.approx(0.2), ref_peaks)


@pytest.mark.parametrize("p", range(2, 17, 2))
def test_unit_construction_is_conflict_free_and_respects_dependencies(p):
    slots = unit_slots(p)
    taken = [(device_of(p, direction, s), t) for (direction, _, _, s), t in slots.items()]
    assert len(taken) == len(set(taken)) == 2 * p * p
    for (direction, kind, j, s), t in slots.items():
        if kind is Kind.F and s > 0:
            assert slots[(direction, Kind.F, j, s - 1)] < t
        if kind is Kind.B:
            assert slots[(direction, Kind.F, j, s)] < t
            if s < p - 1:
                assert slots[(direction, Kind.B, j, s + 1)] < t
    assert max(slots.values()) + 1 == 3 * p - 2 == chimera_formula(p, p).length
    assert build_table(chimera(p, p), UnitCosts(backward=1)).length == 3 * p - 2


@pytest.mark.parametrize("p,m", [(2, 2), (4, 4), (4, 8), (6, 6), (8, 8), (8, 64), (16, 32)])
def test_formula_bubble(p, m):
    f = chimera_formula(p, m, backward=1)
    assert f.bubble_ratio == pytest.approx((p - 2) / (2 * m + p - 2))
    assert f.length == pytest.approx(m * (1 + 1) / (1 - f.bubble_ratio))  # busy m(1+b) over 1 - bubble
    assert chimera_formula(p, m, backward=2).length == pytest.approx(3 * (m + (p - 2) / 2))
    assert f.weight_copies == (2,) * p


@pytest.mark.parametrize("p", [2, 4, 6, 8])
def test_table_at_m_equals_p(p):
    peaks = tuple(p // 2 + 1 + min(r, p - 1 - r) for r in range(p))
    schedule = chimera(p, p)
    one = build_table(schedule, UnitCosts(backward=1))
    assert one.peak_activations == peaks == chimera_formula(p, p).peak_activations
    # F = B: the table is exactly the formula.
    assert one.length == chimera_formula(p, p, backward=1).length
    assert one.bubble_ratio == pytest.approx(chimera_formula(p, p, backward=1).bubble_ratio)
    # B = 2: the order follows the F = B construction; the backward wave, twice as slow, stretches
    # the table to 5p - 4 slots (bubble (2p-4)/(5p-4)) instead of the formula's 3(p + (p-2)/2).
    two = build_table(schedule, UnitCosts(backward=2))
    assert two.length == 5 * p - 4
    assert two.bubble_ratio == pytest.approx((2 * p - 4) / (5 * p - 4))
    assert two.length >= chimera_formula(p, p, backward=2).length  # equal only at p = 2
    assert two.peak_activations == peaks


# Direct concatenation (m > p): each device runs all of unit k before any op of unit k+1, so unit
# k+1 cannot start on rank 0 (or p-1) before unit k's last backward there, at slot 3p-3 of the
# unit; the inner ranks wait for those forwards. The units do not overlap at all: the length is
# (m/p) times the unit's (3p-2 at B = 1, 5p-4 at B = 2) and the bubble stays at its m = p value,
# whereas the closed form (p-2)/(2m+p-2) assumes perfect interleaving and falls with m. That gap
# between the formula and the table layer is one of the study's points.
CONCATENATED = {  # (p, m, backward): (length, bubble)
    (4, 8, 1): (20, 2 / 10),
    (4, 16, 1): (40, 2 / 10),
    (6, 12, 1): (32, 4 / 16),
    (8, 16, 1): (44, 6 / 22),
    (8, 32, 1): (88, 6 / 22),
    (4, 8, 2): (32, 4 / 16),
    (6, 18, 2): (78, 8 / 26),
    (8, 32, 2): (144, 12 / 36),
}


@pytest.mark.parametrize("key", sorted(CONCATENATED))
def test_direct_concatenation_table_is_worse_than_the_formula(key):
    p, m, b = key
    length, bubble = CONCATENATED[key]
    table = build_table(chimera(p, m), UnitCosts(backward=b))
    assert table.length == length == (m // p) * (3 * p - 2 if b == 1 else 5 * p - 4)
    assert table.bubble_ratio == pytest.approx(bubble)
    formula = chimera_formula(p, m, backward=b)
    assert table.length > formula.length
    assert table.bubble_ratio > formula.bubble_ratio
    assert table.peak_activations == formula.peak_activations


def _interleaved(p: int, m: int) -> Schedule:
    """Not a generator: unit k's slots shifted by 2pk and merged per device (perfect interleaving)."""
    timed: list[list[tuple[int, Op]]] = [[] for _ in range(p)]
    for k in range(m // p):
        for (direction, kind, j, s), t in unit_slots(p).items():
            timed[device_of(p, direction, s)].append((t + 2 * p * k, Op(s, kind, k * p + direction * p // 2 + j)))
    base = chimera(p, m)
    orders = tuple(tuple(op for _, op in sorted(row)) for row in timed)
    return Schedule("chimera-interleaved", p, m, base.placement, orders, base.replica_of)


@pytest.mark.parametrize("p,m", [(4, 8), (4, 16), (6, 18), (8, 32)])
def test_perfect_interleaving_is_what_the_formula_assumes(p, m):
    """Shifting unit k by 2p slots is collision-free; that table meets the formula at B = 1."""
    table = build_table(validate(_interleaved(p, m)), UnitCosts(backward=1))
    formula = chimera_formula(p, m, backward=1)
    assert table.length == formula.length
    assert table.bubble_ratio == pytest.approx(formula.bubble_ratio)


@settings(max_examples=20, deadline=None)
@given(p=st.sampled_from([2, 4, 6, 8]), units=st.integers(1, 4))
def test_validate_passes(p, units):
    schedule = validate(chimera(p, units * p))
    assert schedule.placement == tuple((s, p - 1 - s) for s in range(p))
    assert schedule.replica_of == tuple(0 if mb % p < p // 2 else 1 for mb in range(units * p))
    assert not schedule.split_backward


@pytest.mark.parametrize("p,m,rule", [(1, 1, "even number of devices"), (3, 3, "even number of devices"), (5, 10, "even number of devices"),
                                      (4, 6, "multiple of devices"), (4, 2, "multiple of devices")])
def test_bad_shapes(p, m, rule):
    with pytest.raises(ScheduleError, match=rule):
        chimera(p, m)
    with pytest.raises(ScheduleError, match=rule):
        chimera_asym(p, m)


def test_asym_weights():
    schedule = chimera_asym(8, 16)
    w = schedule.stage_weights
    assert schedule.name == "chimera-asym" and schedule.options == {"split": "1:2"}
    assert math.isclose(sum(w), 1)
    assert all(math.isclose(x, w[0]) for x in w[:4]) and all(math.isclose(x, w[4]) for x in w[4:])
    assert math.isclose(w[4] / w[0], 2)
    assert schedule.orders == chimera(8, 16).orders
    other = generate("chimera-asym", 4, 4, split="3:1").stage_weights
    assert math.isclose(sum(other), 1) and math.isclose(other[0] / other[3], 3)
    assert chimera_asym_formula(4, 8, 2).bubble_ratio == chimera_formula(4, 8, 2).bubble_ratio


@pytest.mark.parametrize("split", [(0, 1), (1, -2), (1,), (1, 2, 3), "a:b", "1-2", (True, 2), 3, (1, float("inf"))])
def test_asym_bad_split(split):
    with pytest.raises(ScheduleError, match="must be two positive numbers A:B") as error:
        chimera_asym(4, 4, split=split)
    assert error.value.field == "split"
