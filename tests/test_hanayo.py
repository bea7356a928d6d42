"""Hanayo (Liu et al., SC'23): zig-zag placement, list-scheduled order, formula vs table."""

from __future__ import annotations

from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ppopt.errors import ScheduleError
from ppopt.formula import formula
from ppopt.generators import generate
from ppopt.generators.hanayo import hanayo, hanayo_formula, zigzag_placement
from ppopt.ir import Kind, Op
from ppopt.table import build_table
from ppopt.units import UnitCosts
from ppopt.validation import validate
from tests.test_zb_h2 import assert_list_scheduled

F_EQUALS_B = UnitCosts(backward=1)


@settings(max_examples=25, deadline=None)
@given(p=st.integers(1, 8), waves=st.sampled_from([1, 2]))
def test_validate_at_m_equals_p(p, waves):
    schedule = validate(hanayo(p, p, waves))
    assert schedule.stages == 2 * waves * p
    assert schedule.replicas == 1
    assert schedule.options == {"waves": waves}


@settings(max_examples=15, deadline=None)
@given(p=st.integers(1, 6), m=st.integers(1, 14), waves=st.sampled_from([1, 2]))
def test_validate_for_any_m(p, m, waves):
    """The construction is defined (valid, no deadlock) for any m >= 1, not only m = p."""
    schedule = validate(hanayo(p, m, waves))
    assert schedule.stages == 2 * waves * p
    assert sum(len(order) for order in schedule.orders) == 2 * schedule.stages * m


@pytest.mark.parametrize("p,waves", [(1, 1), (2, 1), (4, 2), (5, 3)])
def test_zigzag_placement(p, waves):
    schedule = hanayo(p, p, waves)
    assert schedule.placement == zigzag_placement(p, waves)
    for k in range(2 * waves):
        for j in range(p):
            assert schedule.placement[k * p + j] == ((j,) if k % 2 == 0 else (p - 1 - j,))
    for r in range(p):  # 2W chunks per rank; microbatches enter and leave at rank 0
        assert len(schedule.stages_on(r)) == 2 * waves
    assert schedule.placement[0] == schedule.placement[-1] == (0,)


@pytest.mark.parametrize("waves", [1, 2])
@pytest.mark.parametrize("p", [2, 3, 4, 6, 8])
def test_formula_equals_table_at_m_equals_p_with_unit_backward(p, waves):
    table = build_table(hanayo(p, p, waves), F_EQUALS_B)
    f = formula("hanayo", p, p, F_EQUALS_B, waves=waves)
    assert f.bubble_ratio == pytest.approx((p - 1) / (2 * waves * p + p - 1))
    # 2(2Wp + p - 1) chunk-op slots, each 1/(2W) of a slot (2W chunks per device).
    assert table.length == f.length == pytest.approx(2 * (2 * waves * p + p - 1) / (2 * waves), rel=1e-15)
    assert table.bubble_ratio == pytest.approx(f.bubble_ratio)
    assert f.weight_copies == (1,) * p


# Peak live chunk activations: the construction's peaks have no closed form (see hanayo_formula); what is
# derived is the in-flight bound for every case, and the exact peaks of a few small cases by hand. A rank's
# count moves only at its own ops (+1 at an F, -1 at a B), so its peak is the largest count of F minus B
# over the prefixes of its order; the orders below follow the list schedule of the module docs (F = B = 1,
# every microbatch in flight from slot 0 as m <= p; chunk kp + j on rank j for even k, p-1-j for odd k).
HAND_PEAKS = {  # (p, m, waves): per rank
    # p = 2, W = 1: chunks 0 and 3 on rank 0, 1 and 2 on rank 1. Rank 1 runs F1 of microbatch 0 (slot 1),
    # F2 of 0 (2, before F1 of 1: lower microbatch), F1 and F2 of 1 (3, 4): 4 before its first B (B2 of 0
    # at 5). Rank 0 runs F0 of 0 and 1 (0, 1), F3 of 0 (3), B3 of 0 (4, a backward first), F3 of 1 (5):
    # 1, 2, 3, 2, 3.
    (2, 2, 1): (3, 4),
    # p = 4, W = 1, m = 2: microbatch 0's forwards at slots 0..7 (it comes first); microbatch 1's reach rank
    # 3 (chunks 3, 4) at 5 and 6, after F3 and F4 of 0 (3, 4), then rank 2 (chunk 5) at 7 and rank 1 (chunk 6)
    # at 8, and no backward reaches ranks 1-3 before B6 of 0 (9, after B7 of 0 at 8): ranks 1-3 hold both
    # chunks of both microbatches, 4, the bound. Rank 0 runs F7 of 0 (7), then B7 of 0 (8) before F7 of 1
    # (9): 1, 2, 3, 2, 3.
    (4, 2, 1): (3, 4, 4, 4),
    # p = 2, W = 2: chunks 0, 3, 4, 7 on rank 0 and 1, 2, 5, 6 on rank 1. Microbatch 0's forwards at slots
    # 0..7; microbatch 1's at 1 (F0), 3 and 4 (F1, F2: rank 1 runs F2 of 0 at 2), 5 and 6 (F3, F4), 7 and 8
    # (F5, F6). Rank 1 holds its 8 before B6 of 0 (9, after B7 of 0 at 8). Rank 0 holds 7 (F0, F3, F4 of
    # both, F7 of 0) when it runs B7 of 0 (8), then F7 of 1 (9): 7 again.
    (2, 2, 2): (7, 8),
}
PEAK_CASES = [*HAND_PEAKS, (3, 3, 1), (4, 4, 1), (3, 3, 2), (4, 8, 1), (4, 12, 2), (3, 7, 1)]


@pytest.mark.parametrize("key", sorted(PEAK_CASES))
def test_peak_within_the_in_flight_bound(key):
    p, m, waves = key
    peaks = build_table(hanayo(p, m, waves)).peak_activations
    if key in HAND_PEAKS:
        assert peaks == HAND_PEAKS[key]
    # Derived bound: at most p microbatches in flight, each with at most one activation per chunk
    # of a rank (2W chunks), and at most m microbatches at all.
    assert max(peaks) <= 2 * waves * min(p, m)
    if m >= p:
        # hanayo_formula reports this construction's count, (2W-1)p + 1 + r, and says so in its source:
        # a check that the report follows the table, not a derivation (HAND_PEAKS's m = p cases agree)
        assert hanayo_formula(p, m, 1, waves).peak_activations == peaks
        assert "no closed form" in hanayo_formula(p, m, 1, waves).source


@pytest.mark.parametrize("p,m,waves", [(2, 4, 1), (2, 6, 2), (3, 6, 1), (4, 8, 1), (4, 12, 2)])
def test_formula_equals_table_at_multiples_of_p(p, m, waves):
    table = build_table(hanayo(p, m, waves), F_EQUALS_B)
    f = formula("hanayo", p, m, F_EQUALS_B, waves=waves)
    assert table.length == f.length
    assert table.peak_activations == build_table(hanayo(p, p, waves)).peak_activations  # in-flight cap: independent of m


# Where the table and the formula part: B = 2 (the order is built for F = B), m < p (one
# microbatch's critical path 2W·p(1+b) exceeds the formula's length), m not a multiple of p.
# Lengths in chunk-op slots (F = 1, B = b per chunk):
# - m < p, F = B = 1: every microbatch is in flight from the start. Microbatch 0 comes first everywhere and
#   reaches rank p-1 at slot p-1; rank p-1 holds the consecutive chunks p-1 and p (the first turn of the
#   zig-zag) and runs both forwards of microbatches 0..m-1, lowest first, back to back: the last ends at
#   p - 1 + 2m. Microbatch m-1 then runs its other 2Wp - p - 1 forwards and its 2Wp backwards without
#   waiting: 4Wp + 2m - 2 (test_fewer_microbatches_than_devices_queue_at_the_first_turn checks it widely).
# - m = p + 1, F = B = 1: microbatch 0's round trip, 2·2Wp ops back to back (it comes first everywhere);
#   microbatch p enters when it ends (at most p in flight: F of chunk 0 waits for B of chunk 0 of
#   microbatch 0) and runs its own 2·2Wp without waiting: 8Wp.
# - p = 4, m = 12, W = 1, B = 2 (F = B's order laid out with B = 2): microbatch 0's 8 forwards and its
#   backwards down to chunk 1, 8 + 7·2 = 22; rank 1 then runs B of chunk 6 of microbatch 3, whose backwards
#   go down to chunk 0, 7·2: 36. Rank 0 then runs F of chunk 0 of microbatch 7 (it enters once B of chunk 0
#   of microbatch 3 is done) and F of chunk 7 of microbatch 4, 1 + 1, whose backwards go down to chunk 1,
#   7·2, where rank 1 takes microbatch 7's B of chunk 6 down to chunk 0, 7·2: 30 per round of 4 microbatches,
#   twice more: 36 + 2·30 = 96.
PINNED = {  # (p, m, waves, backward): table length in chunk-op slots (1/(2W) slot); the formula's in the comment
    (4, 4, 1, 2): 36,  # formula 33 = 3(2·4+3); table 6Wm + 4(p-1)
    (8, 8, 1, 2): 76,  # formula 69
    (4, 4, 2, 2): 60,  # formula 57
    (8, 8, 2, 2): 124,  # formula 117
    (4, 12, 1, 2): 8 + 7 * 2 + 7 * 2 + 2 * (1 + 1 + 7 * 2 + 7 * 2),  # 96, formula 81
    (8, 4, 1, 1): 4 * 1 * 8 + 2 * 4 - 2,  # 38, formula 30 (m < p)
    (4, 2, 2, 1): 4 * 2 * 4 + 2 * 2 - 2,  # 34, formula 22 (m < p)
    (4, 5, 1, 1): 8 * 1 * 4,  # 32, formula 26 (m not a multiple of p)
}


@pytest.mark.parametrize("key", sorted(PINNED))
def test_table_is_longer_than_the_formula_elsewhere(key):
    p, m, waves, b = key
    table = build_table(hanayo(p, m, waves), UnitCosts(backward=b))
    assert 2 * waves * table.length == PINNED[key]
    f = hanayo_formula(p, m, backward=b, waves=waves)
    assert 2 * waves * table.length > f.length
    assert table.bubble_ratio > f.bubble_ratio
    if m == p:
        assert 2 * waves * table.length == 3 * 2 * waves * m + 4 * (p - 1)


@pytest.mark.parametrize("waves", [1, 2])
@pytest.mark.parametrize("p", [1, 2, 3, 5, 8])
def test_fewer_microbatches_than_devices_queue_at_the_first_turn(p, waves):
    """F = B = 1, chunk-op slots: 4Wp + 2m - 2 for m < p, 8Wp for m = p + 1 (derived above PINNED)."""
    for m in range(1, p):
        assert 2 * waves * build_table(hanayo(p, m, waves), F_EQUALS_B).length == 4 * waves * p + 2 * m - 2
    assert 2 * waves * build_table(hanayo(p, p + 1, waves), F_EQUALS_B).length == 8 * waves * p


def test_registered():
    assert generate("hanayo", 4, 4, waves=2) == hanayo(4, 4, 2)
    chunk_slots = hanayo_formula(4, 4, 1, waves=2)
    assert formula("hanayo", 4, 4, F_EQUALS_B, waves=2) == replace(chunk_slots, length=chunk_slots.length / 4)


@pytest.mark.parametrize("waves", [0, -1, 1.5, "2", True, None])
def test_bad_waves(waves):
    with pytest.raises(ScheduleError, match="^waves: must be an integer >= 1") as raised:
        hanayo(4, 4, waves)
    assert raised.value.field == "waves"
    with pytest.raises(ScheduleError, match="^waves: "):
        hanayo_formula(4, 4, 1, waves)


@settings(max_examples=25, deadline=None)
@given(p=st.integers(1, 5), m=st.integers(1, 12), waves=st.sampled_from([1, 2]))
def test_order_is_the_list_schedule_of_the_module(p, m, waves):
    """Each slot, each device runs its ready op of highest priority: a backward before any forward, B by
    lowest microbatch then latest chunk, F by lowest microbatch then earliest chunk; microbatch i >= p
    enters chunk 0 only once B of chunk 0 of microbatch i - p is done (at most p in flight)."""
    def key(op):
        return (0, op.microbatch, -op.stage) if op.kind is Kind.B else (1, op.microbatch, op.stage)

    def in_flight(op):
        return (Op(0, Kind.B, op.microbatch - p),) if op.kind is Kind.F and op.stage == 0 and op.microbatch >= p else ()

    assert_list_scheduled(hanayo(p, m, waves), F_EQUALS_B, lambda device, ready, ran: min(ready, key=key, default=None),
                          in_flight)


def test_a_remainder_of_microbatches_is_cautioned_where_it_costs_a_round_trip():
    """p = 4: m = 5 takes 26.5 slots at B = 2F, more than 1F1B's 24 and than m = 4's 18 plus one
    microbatch's 3 per device: the fifth enters only when the first is back from its zig-zag. The
    family is defined there, so `table` and `evaluate` say so in a note; at multiples of p and below
    p there is nothing to say."""
    from click.testing import CliRunner

    from ppopt.cli import main
    from ppopt.evaluate import table_of
    from ppopt.generators.hanayo import remainder_caution

    assert table_of("hanayo", 4, 5).length == 26.5 > table_of("1f1b", 4, 5).length == 24
    assert remainder_caution(4, 8) is None and remainder_caution(8, 5) is None
    said = CliRunner().invoke(main, ["table", "-s", "hanayo", "-p", "4", "-m", "5"])
    assert said.exit_code == 0 and said.stderr == f"note: {remainder_caution(4, 5)}\n"
    assert "the last 1 enter only once earlier ones are back" in said.stderr
    assert CliRunner().invoke(main, ["evaluate", "-s", "hanayo", "-p", "4", "-m", "8"]).stderr == ""
